"""``SessionMemoryMiddleware``: the session block instead of the replayed history.

By default the agent keeps checkpointing every message as before; this middleware only changes
what the *model* is sent, through ``request.override``: the system prompt with the
rendered session block appended, then the current turn (the user's question, the
rewrite when ``rewrite=True`` (the default) or the turn answers a clarification
(``TurnContext.sent_question``), and this turn's AI tool calls and tool results). The
hooks map onto the façade's turn: ``wrap_model_call`` calls ``begin_turn`` on every
step of the tool loop (idempotent per user message, keyed by the message id) and, when
the turn is a clarification, answers with the clarifying ``AIMessage`` in place of the
model, which is never called (no tool calls in it: the agent ends there);
``wrap_tool_call`` feeds each tool result to ``record_tool`` (a tool returning several
candidates turns the turn into a clarification, which the next model step returns,
again without a model call); ``after_agent`` calls ``end_turn`` with the final answer.
There is no ``before_model`` hook: it would be a graph node of its own on every step.
Thread and tenant come from ``config["configurable"]`` (``thread_id``, ``tenant_id``; ``docs/tenancy.md``). Tool
results are read by ``langchain_convmem.tool_results`` (``docs/tool-results.md``).

With a transcript on the ``SessionMemory``, ``wrap_model_call`` records what the model
is about to receive (system prompt, block, the question as sent, tool schemas, model
and settings) through ``begin_turn(model_call=...)`` right before calling it — commit
point 1, once per turn (a failing model leaves it), in the same wait on I/O as the
state's save; each tool call and result goes to the record through ``record_tool``
(with the tool call id) and ``after_agent``'s ``end_turn`` writes them with the answer —
commit point 2, with the state's last save. A turn waits on I/O three times: the
state's load (with the record's binding when it is not kept from the thread's last
turn), the save with commit point 1, commit point 2 with the last save.

``checkpoint="bounded"`` (opt-in; the default ``"full"`` leaves the checkpoint alone)
makes ``after_agent``, once ``end_turn`` has recorded the turn, replace the checkpointed
``messages`` with the current turn's (``RemoveMessage(REMOVE_ALL_MESSAGES)`` then the
turn, as LangChain's ``SummarizationMiddleware`` does): the model never needed the older
turns, the record keeps them, and the checkpoint stops growing with the conversation.
Nothing is trimmed mid-turn, so a tool's ``interrupt()`` resumes with the turn intact
(``docs/agent-checkpoints.md``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, ToolMessage
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from convmem.effects import Flow, aperform, call, do, perform
from convmem.errors import ConfigError
from convmem.session import Clarification, ModelCall, SessionMemory, TurnContext
from convmem.session.recording import ModelCallFor
from langchain_convmem._common import (
    TenantMemories,
    answer_text,
    full_text,
    last_human_index,
    model_name,
    plain,
    question_text,
    scope,
    tool_schemas,
    with_block,
    with_text,
)
from langchain_convmem.recall import recall_tool
from langchain_convmem.tool_results import command_results

_ModelResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]

#: What ``checkpoint=`` accepts: keep every message (LangGraph's default) or the current turn.
CHECKPOINT_MODES = ("full", "bounded")


class SessionMemoryMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Give the model system prompt + session block + current turn; keep the checkpoint whole.

    ``rewrite=True`` (the default, as in the LlamaIndex adapters) sends the façade's
    self-contained rewrite of the question ("Who's Brightwater Farms's rep?") in place
    of the user's text; ``rewrite=False`` sends what the user typed. Either way the
    turn that answers a clarification sends the original question resolved to the
    chosen entity (``TurnContext.sent_question``), and the checkpointed
    ``HumanMessage`` keeps what the user typed.

    ``checkpoint="full"`` (the default) leaves the checkpointed ``messages`` whole;
    ``checkpoint="bounded"`` keeps only the last recorded turn in them (the record holds
    the rest), so a checkpointer's per-turn writes stay flat.

    ``recall=True`` offers the model ``recall_conversation`` (``recall_tool``: earlier
    answers looked up in the record, which the memory then needs) and its block says so.
    """

    def __init__(
        self,
        memory: SessionMemory,
        *,
        rewrite: bool = True,
        checkpoint: str = "full",
        recall: bool = False,
    ) -> None:
        super().__init__()
        if checkpoint not in CHECKPOINT_MODES:
            raise ConfigError(
                f"SessionMemoryMiddleware(checkpoint={checkpoint!r}): expected one of "
                + ", ".join(repr(m) for m in CHECKPOINT_MODES)
            )
        self._memories = TenantMemories(memory.offering_recall() if recall else memory)
        self.rewrite = rewrite
        self.checkpoint = checkpoint
        # recall=True: the model is offered recall_conversation (langchain_convmem.recall)
        # and the block says so; its calls are recorded through wrap_tool_call as any tool's.
        self.tools = [recall_tool(memory)] if recall else []

    @property
    def memory(self) -> SessionMemory:
        """The memory the application passed in (its tenant is the default tenant)."""
        return self._memories.base

    # ------------------------------------------------------------------ wrap_model_call

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> _ModelResult:
        """Send the compact request; the checkpointed messages are left as they are."""
        sent = perform(self._model_request(request))
        return sent if isinstance(sent, AIMessage) else handler(sent)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> _ModelResult:
        sent = await aperform(self._model_request(request))
        return sent if isinstance(sent, AIMessage) else await handler(sent)

    def _model_request(self, request: ModelRequest[Any]) -> Flow[ModelRequest[Any] | AIMessage]:
        """What goes to the model (the compact request, its input recorded in the same
        wait on I/O as the state's save), or the clarification answering instead of it."""
        turn = _turn(request.state["messages"])
        if turn is None:
            return request
        memory, thread = self._scope(get_config())
        made: list[ModelRequest[Any]] = []  # the request commit point 1 recorded, if it ran

        def model_call(started: TurnContext) -> ModelCall:
            made.append(self._compact(request, started))
            return _model_call(request, made[-1])

        recorded = model_call if memory.transcript is not None else None
        started = yield from _begin_turn(memory, thread, turn, recorded)
        if isinstance(started, Clarification):
            return AIMessage(content=started.text)
        return made[0] if made else self._compact(request, started)

    def _compact(self, request: ModelRequest[Any], started: TurnContext) -> ModelRequest[Any]:
        messages = list(request.messages)
        start = last_human_index(messages)
        if start is not None:
            messages = messages[start:]
            sent = started.sent_question(self.rewrite)
            if sent and sent != messages[0].text:
                messages[0] = with_text(messages[0], sent)
        return request.override(
            messages=messages,
            system_message=with_block(request.system_message, started.block),
        )

    # ------------------------------------------------------------------ wrap_tool_call

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool, then its domain rule (focus, filters, or a candidate list)."""
        result = handler(request)
        memory, thread = self._scope(_tool_config(request))
        call = request.tool_call
        for outcome in command_results(result, call.get("id")):
            memory.record_tool(
                thread, call["name"], call.get("args"), outcome, call_id=call.get("id")
            )
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        memory, thread = self._scope(_tool_config(request))
        call = request.tool_call
        for outcome in command_results(result, call.get("id")):
            await memory.arecord_tool(
                thread, call["name"], call.get("args"), outcome, call_id=call.get("id")
            )
        return result

    # ------------------------------------------------------------------ after_agent

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Close the turn with the final answer (a clarification's text included); in
        bounded mode, then cut the checkpointed messages down to this turn."""
        return perform(self._close(state))

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return await aperform(self._close(state))

    def _close(self, state: AgentState[Any]) -> Flow[dict[str, Any] | None]:
        messages = state["messages"]
        start = last_human_index(messages)
        if start is None:
            return None
        memory, thread = self._scope(get_config())
        answer = answer_text(messages, start)
        yield from do(call(memory.end_turn, memory.aend_turn, thread, answer=answer))
        return self._bound(messages, start)

    def _bound(self, messages: Sequence[BaseMessage], start: int) -> dict[str, Any] | None:
        """The state update that keeps only the turn starting at ``start`` (bounded mode,
        and only when older messages are there to drop)."""
        if self.checkpoint != "bounded" or start == 0:
            return None
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *messages[start:]]}

    # ------------------------------------------------------------------ helpers

    def _scope(self, config: Mapping[str, Any] | None) -> tuple[SessionMemory, str]:
        return scope(self._memories, config, "thread_id", "SessionMemoryMiddleware")


_Turn = tuple[str, str | None, str | None]


def _turn(messages: Sequence[BaseMessage]) -> _Turn | None:
    """(question, message id, full text if cut) of the user message being answered."""
    start = last_human_index(messages)
    if start is None:
        return None
    human = messages[start]
    return question_text(human), human.id, full_text(human)


def _begin_turn(
    memory: SessionMemory, thread: str, turn: _Turn, model_call: ModelCallFor | None
) -> Flow[Clarification | TurnContext]:
    """``begin_turn`` for the user message ``turn`` (idempotent per message id)."""
    question, message_id, text = turn
    return (yield from do(call(
        memory.begin_turn, memory.abegin_turn, thread, question,
        message_id=message_id, full_text=text, model_call=model_call,
    )))


def _model_call(request: ModelRequest[Any], compact: ModelRequest[Any]) -> ModelCall:
    """The compact request in the core's terms: the application's system prompt (the
    block is the turn's), the question as sent, tools, model and its settings."""
    system = request.system_message
    sent = compact.messages[0].text if compact.messages else None
    params = dict(request.model_settings)
    if request.tool_choice is not None:
        params["tool_choice"] = request.tool_choice
    return ModelCall(
        system_prompt=system.text if system is not None else None,
        sent_question=sent,
        tool_schemas=tool_schemas(request.tools),
        model=model_name(request.model),
        model_params=plain(params),
    )


def _tool_config(request: ToolCallRequest) -> Mapping[str, Any]:
    runtime = getattr(request, "runtime", None)
    config = getattr(runtime, "config", None)
    return config if config is not None else get_config()
