"""``RunnableWithSessionMemory``: the drop-in for ``RunnableWithMessageHistory``.

Same call convention as the deprecated wrapper (``configurable.session_id``, and the
``input_messages_key`` / ``history_messages_key`` / ``output_messages_key`` arguments
read the same way), but the history slot receives ``[SystemMessage(block)]`` (or
nothing when the block is empty) instead of every earlier message. It is a plain
``Runnable`` subclass, not a ``RunnableWithMessageHistory`` one, because that class
warns on every construction. Per call: ``begin_turn``; a clarification is returned
at once in the wrapped chain's own output shape (an ``AIMessage``, a ``str`` after a
``StrOutputParser``, or ``{output_messages_key: AIMessage}``) and the chain is not
called; otherwise the chain runs (with the rewrite as its input when ``rewrite=True``,
the default, and on a turn that answers a clarification whatever ``rewrite`` says:
``TurnContext.sent_question``) and its answer goes to ``end_turn``. Each call is one
run named ``RunnableWithSessionMemory`` in LangChain tracing (``_call_with_config``),
the chain's runs nested under it; a clarification is a run with no children. The
tenant is ``configurable["tenant_id"]``, else the memory's (``docs/tenancy.md``). A
chain that raises leaves the turn open, so asking again resumes it (the façade is
idempotent on the same question).
``batch``/``abatch`` come from ``Runnable`` and go through ``invoke``/``ainvoke``.

The wrapper cannot see inside the chain, so it listens: a callback handler
(``raise_error``, so a failed write stops the chain), inherited by every run in the
chain, hands each tool run's result to ``record_tool`` (``on_tool_end``: a
``ToolMessage``, a ``Command`` or the tool's return value, read under the contract of
``docs/tool-results.md``; ``on_tool_error``: a failure, which changes nothing). A tool
returning several candidates leaves a pending clarification: the chain's answer goes
out as it is (the model saw the candidates) and the user's reply picks one. With a
transcript on the ``SessionMemory`` the same handler catches the first
``on_chat_model_start`` of the turn — the exact messages the chat model receives —
and records them with ``record_model_input`` before the model runs (commit point 1): system messages other than the block become the system prompt,
the block message the block, the last user message the question as sent, bound tools
the tool schemas; any other message (few-shot examples) is kept in
``model_params["other_messages"]``. ``end_turn`` records the answer (commit point 2).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast
from uuid import UUID

from langchain_core.callbacks import (
    AsyncCallbackHandler,
    AsyncCallbackManagerForChainRun,
    BaseCallbackHandler,
    CallbackManagerForChainRun,
)
from langchain_core.callbacks.base import BaseCallbackManager
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.utils import ConfigurableFieldSpec, get_unique_config_specs

from convmem.effects import Effect, Flow, aperform, call, do, perform
from convmem.errors import ConfigError
from convmem.session import Clarification, ModelCall, SessionMemory, TurnContext
from convmem.tools import ToolResult
from langchain_convmem._common import (
    TenantMemories,
    full_text,
    last_human_index,
    plain,
    question_text,
    scope,
    tool_schemas,
    with_text,
)
from langchain_convmem.tool_results import output_result

OutputKind = Literal["message", "str", "dict"]


class RunnableWithSessionMemory(Runnable[Any, Any]):
    """Wrap a chain so it sees the session block instead of the replayed history.

    ``output_type`` says what a clarification looks like when the chain is not
    called; by default it is read from the chain: ``"dict"`` when
    ``output_messages_key`` is set, ``"str"`` when the chain's ``OutputType`` is
    ``str`` (it ends in a ``StrOutputParser``), else ``"message"`` (an ``AIMessage``;
    ``AIMessageChunk`` when streaming).
    """

    def __init__(
        self,
        runnable: Runnable[Any, Any],
        memory: SessionMemory,
        *,
        input_messages_key: str | None = None,
        history_messages_key: str | None = None,
        output_messages_key: str | None = None,
        rewrite: bool = True,
        output_type: OutputKind | None = None,
    ) -> None:
        if not isinstance(runnable, Runnable):
            raise ConfigError(
                f"RunnableWithSessionMemory wraps a Runnable, got {type(runnable).__name__}"
            )
        self.runnable = runnable
        self._memories = TenantMemories(memory)
        self.input_messages_key = input_messages_key
        self.history_messages_key = history_messages_key
        self.output_messages_key = output_messages_key
        self.rewrite = rewrite
        self.output_type: OutputKind = output_type or self._detect_output()

    @property
    def memory(self) -> SessionMemory:
        return self._memories.base

    # ------------------------------------------------------------------ Runnable surface

    @property
    def InputType(self) -> Any:
        return self.runnable.InputType

    @property
    def OutputType(self) -> Any:
        return self.runnable.OutputType

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """The chain's specs plus ``session_id`` (as ``RunnableWithMessageHistory``)."""
        return get_unique_config_specs([
            *self.runnable.config_specs,
            ConfigurableFieldSpec(
                id="session_id",
                annotation=str,
                name="Session ID",
                description="Unique identifier for a session.",
                default="",
                is_shared=True,
            ),
            ConfigurableFieldSpec(
                id="tenant_id",
                annotation=str,
                name="Tenant ID",
                description="Whose sessions these are; defaults to the memory's tenant.",
                default=self.memory.tenant,
                is_shared=True,
            ),
        ])

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """One turn, traced as a run named after this wrapper (the chain is its child)."""
        return self._call_with_config(self._invoke, input, config, run_type="chain", **kwargs)

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        return await self._acall_with_config(
            self._ainvoke, input, config, run_type="chain", **kwargs
        )

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None
    ) -> Iterator[Any]:
        yield from self._transform_stream_with_config(
            iter([input]), self._stream, config, run_type="chain", **kwargs
        )

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None
    ) -> AsyncIterator[Any]:
        async def one() -> AsyncIterator[Any]:
            yield input

        async for chunk in self._atransform_stream_with_config(
            one(), self._astream, config, run_type="chain", **kwargs
        ):
            yield chunk

    # ------------------------------------------------------------------ one turn, inside the run
    # ``config`` here is the run's child config: the chain's runs nest under ours.

    def _invoke(
        self,
        input: Any,
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
        **kwargs: Any,
    ) -> Any:
        memory, session, started = perform(self._begin(input, config))
        if isinstance(started, Clarification):
            return self._clarification(started.text, chunk=False)
        config = _listening(config, memory, session, started, asynchronous=False)
        output = self.runnable.invoke(self._chain_input(input, started), config, **kwargs)
        memory.end_turn(session, answer=self._answer(output))
        return output

    async def _ainvoke(
        self,
        input: Any,
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
        **kwargs: Any,
    ) -> Any:
        memory, session, started = await aperform(self._begin(input, config))
        if isinstance(started, Clarification):
            return self._clarification(started.text, chunk=False)
        config = _listening(config, memory, session, started, asynchronous=True)
        output = await self.runnable.ainvoke(self._chain_input(input, started), config, **kwargs)
        await memory.aend_turn(session, answer=self._answer(output))
        return output

    def _stream(
        self,
        inputs: Iterator[Any],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
        **kwargs: Any,
    ) -> Iterator[Any]:
        input = _single(list(inputs))
        memory, session, started = perform(self._begin(input, config))
        if isinstance(started, Clarification):
            yield self._clarification(started.text, chunk=True)
            return
        final: Any = None
        config = _listening(config, memory, session, started, asynchronous=False)
        for chunk in self.runnable.stream(self._chain_input(input, started), config, **kwargs):
            final = chunk if final is None else _accumulate(final, chunk)
            yield chunk
        memory.end_turn(session, answer=self._answer(final))

    async def _astream(
        self,
        inputs: AsyncIterator[Any],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        input = _single([item async for item in inputs])
        memory, session, started = await aperform(self._begin(input, config))
        if isinstance(started, Clarification):
            yield self._clarification(started.text, chunk=True)
            return
        final: Any = None
        chain_input = self._chain_input(input, started)
        config = _listening(config, memory, session, started, asynchronous=True)
        async for chunk in self.runnable.astream(chain_input, config, **kwargs):
            final = chunk if final is None else _accumulate(final, chunk)
            yield chunk
        await memory.aend_turn(session, answer=self._answer(final))

    def _begin(
        self, input: Any, config: RunnableConfig
    ) -> Flow[tuple[SessionMemory, str, TurnContext | Clarification]]:
        """Begin the turn ``input`` asks; a clarification ends it at once (the chain is
        not called: the caller returns the clarification instead)."""
        memory, session = self._scope(config)
        question, message_id, text = self._question(input)
        started = yield from do(
            call(memory.begin_turn, memory.abegin_turn, session, question,
                 message_id=message_id, full_text=text)
        )
        if isinstance(started, Clarification):
            yield from do(call(memory.end_turn, memory.aend_turn, session, answer=started.text))
        return memory, session, started

    # ------------------------------------------------------------------ translation

    def _scope(self, config: RunnableConfig) -> tuple[SessionMemory, str]:
        return scope(self._memories, cast("Mapping[str, Any]", config), "session_id",
                     "RunnableWithSessionMemory")

    def _messages_slot(self, value: Any) -> str | None:
        """Which key of a dict input holds the user's messages (RWMH's rule)."""
        if not isinstance(value, Mapping):
            return None
        if self.input_messages_key:
            return self.input_messages_key
        if len(value) == 1:
            return str(next(iter(value)))
        return "input"

    def _input_messages(self, value: Any) -> list[BaseMessage]:
        key = self._messages_slot(value)
        if key is not None:
            if key not in value:
                raise ConfigError(
                    f"RunnableWithSessionMemory: the input has no {key!r} key "
                    f"(input_messages_key={self.input_messages_key!r}); got {sorted(value)}"
                )
            value = value[key]
        if isinstance(value, str):
            return [HumanMessage(content=value)]
        if isinstance(value, BaseMessage):
            return [value]
        if isinstance(value, (list, tuple)):
            if value and isinstance(value[0], list):
                if len(value) != 1:
                    raise ConfigError("expected a single list of messages")
                value = value[0]
            return list(value)
        raise ConfigError(
            "RunnableWithSessionMemory: expected str, BaseMessage, a list of messages or a "
            f"dict holding one, got {type(value).__name__}"
        )

    def _question(self, value: Any) -> tuple[str, str | None, str | None]:
        messages = self._input_messages(value)
        if not messages:
            raise ConfigError("RunnableWithSessionMemory: the input holds no message")
        i = last_human_index(messages)
        user = messages[i if i is not None else -1]
        return question_text(user), user.id, full_text(user)

    def _chain_input(self, value: Any, started: TurnContext) -> Any:
        """The input with the block in the history slot and, if asked, the rewrite."""
        key = self._messages_slot(value)
        raw = value[key] if key is not None else value
        sent = started.sent_question(self.rewrite)
        if sent and sent != started.question:
            raw = _rewritten(raw, sent)
        history: list[BaseMessage] = [SystemMessage(content=started.block)] if started.block else []
        if self.history_messages_key:
            if not isinstance(value, Mapping):
                raise ConfigError(
                    "RunnableWithSessionMemory: history_messages_key needs a dict input, "
                    f"got {type(value).__name__}"
                )
            out = dict(value)
            if key is not None:
                out[key] = raw
            out[self.history_messages_key] = history
            return out
        # As RunnableWithMessageHistory without a history key: history + input messages.
        messages = history + self._input_messages(raw)
        if key is None:
            return messages
        out = dict(value)
        out[key] = messages
        return out

    def _detect_output(self) -> OutputKind:
        if self.output_messages_key:
            return "dict"
        try:
            kind = self.runnable.OutputType
        except TypeError:
            return "message"
        return "str" if kind is str else "message"

    def _clarification(self, text: str, *, chunk: bool) -> Any:
        if self.output_type == "str":
            return text
        message = AIMessageChunk(content=text) if chunk else AIMessage(content=text)
        if self.output_type == "dict":
            return {self.output_messages_key or "output": message}
        return message

    def _answer(self, output: Any) -> str | None:
        """The answer text of a chain output (str, message, messages or a dict of them)."""
        if isinstance(output, Mapping):
            key = self.output_messages_key or (
                next(iter(output)) if len(output) == 1 else "output"
            )
            output = output.get(key)
        if isinstance(output, str):
            return output
        if isinstance(output, BaseMessage):
            return output.text
        if isinstance(output, Sequence) and output and isinstance(output[-1], BaseMessage):
            return output[-1].text
        return None


def _single(inputs: list[Any]) -> Any:
    """The one input of a streamed turn (``stream``/``astream`` pass exactly one)."""
    if len(inputs) != 1:
        raise ConfigError(
            f"RunnableWithSessionMemory: one input per turn, got {len(inputs)} streamed inputs"
        )
    return inputs[0]


def _rewritten(raw: Any, text: str) -> Any:
    """The user's input carrying the rewrite (str, message, or the last user message)."""
    if isinstance(raw, str):
        return text
    if isinstance(raw, BaseMessage):
        return with_text(raw, text)
    if isinstance(raw, (list, tuple)):
        messages = list(raw)
        i = last_human_index(messages)
        if i is not None:
            messages[i] = with_text(messages[i], text)
        return messages
    return raw


def _accumulate(final: Any, chunk: Any) -> Any:
    """Streamed chunks added up (``AddableDict`` and message chunks add themselves)."""
    if isinstance(final, Mapping) and isinstance(chunk, Mapping) and not hasattr(final, "__add__"):
        merged = dict(final)
        for k, v in chunk.items():
            merged[k] = merged[k] + v if k in merged else v
        return merged
    return final + chunk


# ---------------------------------------------------------------------- the record


def _model_call(
    messages: Sequence[BaseMessage], started: TurnContext, kwargs: Mapping[str, Any]
) -> ModelCall:
    """The chat model's input in the core's terms (see the module docstring)."""
    block_at = next(
        (i for i, m in enumerate(messages)
         if started.block and isinstance(m, SystemMessage) and m.text == started.block),
        None,
    )
    human_at = last_human_index(messages)
    system = [m.text for i, m in enumerate(messages)
              if isinstance(m, SystemMessage) and i != block_at]
    others = [{"type": m.type, "text": m.text} for i, m in enumerate(messages)
              if not isinstance(m, SystemMessage) and i != human_at]
    params = kwargs.get("invocation_params") or {}
    settings: dict[str, Any] = {
        k: v for k, v in params.items()
        if k not in ("_type", "model", "model_name", "stop") and isinstance(
            v, (str, int, float, bool)
        )
    }
    if params.get("tool_choice") is not None:
        settings["tool_choice"] = plain(params["tool_choice"])
    if others:
        settings["other_messages"] = others
    metadata = kwargs.get("metadata") or {}
    model = (metadata.get("ls_model_name") or params.get("model") or params.get("model_name")
             or params.get("_type"))
    return ModelCall(
        system_prompt="\n\n".join(system) if system else None,
        block=None if block_at is not None else "",
        sent_question=messages[human_at].text if human_at is not None else None,
        tool_schemas=tool_schemas(params.get("tools") or ()),
        model=str(model) if model else None,
        model_params=settings,
    )


@dataclass(frozen=True)
class _ToolRun:
    name: str
    args: dict[str, Any]
    call_id: str | None


class _Ears:
    """What the turn hears inside the chain, as the façade call each event asks for:
    every tool run's result goes to ``record_tool`` (the domain's tool rules; a failure
    changes nothing), and with a transcript the first chat-model start writes commit
    point 1. The sync and async listeners differ only in how they run the call."""

    def __init__(self, memory: SessionMemory, session: str, started: TurnContext) -> None:
        self.memory, self.session, self.started = memory, session, started
        self.runs: dict[UUID, _ToolRun] = {}

    def model_input(
        self, messages: list[list[BaseMessage]], kwargs: Mapping[str, Any]
    ) -> Effect[Any] | None:
        if self.memory.transcript is None:
            return None
        model_call = _model_call(messages[0], self.started, kwargs)
        return call(self.memory.record_model_input, self.memory.arecord_model_input,
                    self.session, model_call)

    def tool_start(
        self, serialized: dict[str, Any] | None, input_str: str, run_id: UUID,
        kwargs: Mapping[str, Any],
    ) -> None:
        name = (serialized or {}).get("name") or kwargs.get("name") or "tool"
        inputs = kwargs.get("inputs")
        args = dict(inputs) if isinstance(inputs, Mapping) else {"input": input_str}
        call_id = kwargs.get("tool_call_id")
        self.runs[run_id] = _ToolRun(str(name), args, call_id if isinstance(call_id, str) else None)

    def tool_done(self, run_id: UUID, result: Callable[[], ToolResult]) -> Effect[Any] | None:
        """``record_tool`` for a run this turn saw start (``result`` read only then)."""
        run = self.runs.pop(run_id, None)
        if run is None:
            return None
        return call(self.memory.record_tool, self.memory.arecord_tool, self.session,
                    run.name, run.args, result(), call_id=run.call_id)


def _failed(error: BaseException) -> ToolResult:
    return ToolResult(False, None, f"{type(error).__name__}: {error}")


class _Listening:
    """What both listeners are: inline, raising, and hearing the turn through ``_Ears``."""

    raise_error = True
    run_inline = True

    def __init__(self, memory: SessionMemory, session: str, started: TurnContext) -> None:
        self.ears = _Ears(memory, session, started)


class _Listener(_Listening, BaseCallbackHandler):
    """The turn's ears (``_Ears``) inside a sync run."""

    @staticmethod
    def _run(effect: Effect[Any] | None) -> None:
        if effect is not None:
            effect.run()

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *,
        run_id: UUID, **kwargs: Any,
    ) -> Any:
        self._run(self.ears.model_input(messages, kwargs))

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> Any:
        self.ears.tool_start(serialized, input_str, run_id, kwargs)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> Any:
        self._run(self.ears.tool_done(run_id, lambda: output_result(output)))

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> Any:
        self._run(self.ears.tool_done(run_id, lambda: _failed(error)))


class _AsyncListener(_Listening, AsyncCallbackHandler):
    """The turn's ears (``_Ears``) inside an async run: awaits the façade's async twins."""

    @staticmethod
    async def _run(effect: Effect[Any] | None) -> None:
        if effect is not None:
            await effect.arun()

    async def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *,
        run_id: UUID, **kwargs: Any,
    ) -> Any:
        await self._run(self.ears.model_input(messages, kwargs))

    async def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> Any:
        self.ears.tool_start(serialized, input_str, run_id, kwargs)

    async def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> Any:
        await self._run(self.ears.tool_done(run_id, lambda: output_result(output)))

    async def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> Any:
        await self._run(self.ears.tool_done(run_id, lambda: _failed(error)))


def _listening(
    config: RunnableConfig,
    memory: SessionMemory,
    session: str,
    started: TurnContext,
    *,
    asynchronous: bool,
) -> RunnableConfig:
    """``config`` with the turn's listener among its (inherited) callbacks."""
    handler: BaseCallbackHandler = (
        _AsyncListener(memory, session, started) if asynchronous
        else _Listener(memory, session, started)
    )
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        return {**config, "callbacks": manager}
    return {**config, "callbacks": [*(callbacks or []), handler]}
