"""``ConvMemMemory``: a LlamaIndex ``BaseMemory`` that hands the model the session block.

Engines and agents ask their memory for "the history" and send whatever comes back.
This memory answers with at most two messages instead of the buffer: a system message
holding the rendered session block (nothing when the state is empty) and the current
question, rewritten by the resolver when ``rewrite=True`` (the default, as in the
LangChain adapters) and on a turn that answers a clarification whatever ``rewrite``
says (``TurnContext.sent_question``). The tenant is the ``SessionMemory``'s: pass
``session_memory.for_tenant("acme")`` (``docs/tenancy.md``). The history itself is never
replayed, so the prompt stays flat however long the conversation runs.

Every engine drives memory in its own order, so the adapter keys everything on the user
message it has seen: ``put(user)`` (``SimpleChatEngine``, agents) or ``get(input=...)``
(``Context``/``CondensePlusContext`` engines, which call it before storing the message)
opens the turn; each ``get``/``aget`` calls the façade's ``begin_turn`` for that message,
which is idempotent (a fixed ``message_id`` per user message), so the state advances once
per message however many times an agent loop asks, and a focus set by a tool shows in the
next step's block. The question is included only once it has been ``put``: engines that
``get`` before ``put`` append the question themselves. ``put(assistant)`` without tool
calls closes the turn (``end_turn``). The ``a*`` methods await the façade's async twins;
the sync methods call its sync ones directly (no event loop), so they also work from
inside a running loop and from LlamaIndex's streaming writer thread.

A clarification cannot stop a plain engine from calling its model; the memory then
returns an instruction to ask it verbatim. To answer a clarification without any model
call, wrap the engine in ``ConvMemChatEngine``.

With a transcript on the ``SessionMemory``, the first ``get``/``aget`` of a turn — what
an engine or agent sends the model next — is recorded before the model call
(``record_model_input``, commit point 1): ``system_prompt`` (the engine's own system
prompt; ``ConvMemChatEngine`` fills it from the inner engine), the block or
clarification instruction this memory returns, the question as sent, the tool schemas
``wrap_tools`` registered and the model's name. The answer ``put`` closes the turn and
``end_turn`` records it with the tool calls (commit point 2). ``recall=True`` names the
``recall_conversation`` tool in the block and ``recall_tool()`` makes it (pass it
through ``wrap_tools`` with the agent's other tools to record its calls). Context a retrieving
engine adds to its own system message is not seen by the memory and not recorded.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.memory.types import BaseMemory

from convmem.errors import ConfigError
from convmem.session import Clarification, ModelCall, SessionMemory, TurnContext
from llamaindex_convmem._component import traced, unpicklable

if TYPE_CHECKING:
    from llama_index.core.tools import FunctionTool

#: Sent instead of the block when the turn must ask the user to choose.
CLARIFY_INSTRUCTION = "Reply to the user with exactly this question and nothing else:\n"


def message_text(message: ChatMessage | str) -> str:
    """The text of a message (its text blocks joined), or the string itself."""
    if isinstance(message, str):
        return message
    return "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock))


def has_tool_calls(message: ChatMessage) -> bool:
    """An assistant step that calls tools, not the turn's answer."""
    if message.additional_kwargs.get("tool_calls"):
        return True
    return any(isinstance(b, ToolCallBlock) for b in message.blocks)


def turn_messages(
    started: Clarification | TurnContext, question: str, *, include_question: bool, rewrite: bool
) -> list[ChatMessage]:
    """The messages the model sees for a begun turn: block (or clarification), question."""
    out: list[ChatMessage] = []
    if isinstance(started, Clarification):
        out.append(ChatMessage(role=MessageRole.SYSTEM, content=CLARIFY_INSTRUCTION + started.text))
    elif started.block:
        out.append(ChatMessage(role=MessageRole.SYSTEM, content=started.block))
    if include_question:
        shown = question
        if isinstance(started, TurnContext):
            shown = started.sent_question(rewrite) or question
        out.append(ChatMessage(role=MessageRole.USER, content=shown))
    return out


#: live_ref -> memory, for a workflow Context's snapshot (weak: it keeps nothing alive)
_LIVE: weakref.WeakValueDictionary[str, ConvMemMemory] = weakref.WeakValueDictionary()


@dataclass
class _Turn:
    """The user message being answered, as this memory has seen it."""

    question: str
    message_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    aliases: set[str] = field(default_factory=set)
    stored: bool = False  # the engine has put the user message

    def __post_init__(self) -> None:
        self.aliases.add(self.question)


@traced
@unpicklable("Build one per conversation: ConvMemMemory(session_memory, thread_id=...).")
class ConvMemMemory(BaseMemory):
    """Session block + current question in place of the chat buffer, for one thread."""

    thread_id: str
    rewrite: bool = True
    system_prompt: str | None = None  # what the engine sends ahead of us, for the record

    _facade: SessionMemory = PrivateAttr()
    _tool_schemas: tuple[dict[str, Any], ...] = PrivateAttr(default=())
    _model: str | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _turn: _Turn | None = PrivateAttr(default=None)
    _transcript: list[ChatMessage] = PrivateAttr(default_factory=list)
    _live_ref: str = PrivateAttr(default_factory=lambda: uuid.uuid4().hex)

    def __init__(
        self,
        memory: SessionMemory,
        *,
        thread_id: str,
        rewrite: bool = True,
        system_prompt: str | None = None,
        recall: bool = False,
    ) -> None:
        if not isinstance(memory, SessionMemory):
            raise ConfigError(
                "ConvMemMemory: memory must be a convmem.SessionMemory, "
                f"got {type(memory).__name__}"
            )
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise ConfigError(
                f"ConvMemMemory: thread_id must be a non-empty string, got {thread_id!r}"
            )
        super().__init__(  # type: ignore[call-arg]
            thread_id=thread_id, rewrite=rewrite, system_prompt=system_prompt
        )
        # recall=True: the block names recall_conversation (give the agent recall_tool())
        self._facade = memory.offering_recall() if recall else memory
        _LIVE[self._live_ref] = self

    @classmethod
    def class_name(cls) -> str:
        return "ConvMemMemory"

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """Configuration, plus a reference to this live memory (``live_ref``).

        A workflow ``Context`` reused across ``agent.run(..., ctx=ctx)`` snapshots its
        state between runs, this memory included, and restores it on the next run:
        ``from_dict`` then gives back this same memory (its open turn intact) rather than
        a copy without its ``SessionMemory``. The snapshot stays this size whatever the
        length of the conversation (the history is in the session state and the record).
        """
        data = super().to_dict(**kwargs)
        data["live_ref"] = self._live_ref
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> ConvMemMemory:  # type: ignore[override]
        """The live memory ``data`` refers to (see ``to_dict``), in this process only."""
        ref = data.get("live_ref")
        found = _LIVE.get(ref) if isinstance(ref, str) else None
        if isinstance(found, cls):
            return found
        raise ConfigError(
            "ConvMemMemory.from_dict: this snapshot refers to a memory of another process "
            "(or one since garbage-collected); its SessionMemory does not travel in a "
            f"snapshot. Build it again: ConvMemMemory(session_memory, "
            f"thread_id={data.get('thread_id')!r}) and pass it as memory= to the agent's run"
        )

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        memory: SessionMemory | None = None,
        thread_id: str | None = None,
        rewrite: bool = True,
        **kwargs: Any,
    ) -> ConvMemMemory:
        """Engines call this only when no memory was passed; it needs the façade and a thread."""
        if memory is None or thread_id is None:
            raise ConfigError(
                "ConvMemMemory.from_defaults needs memory= (a SessionMemory) and thread_id=; "
                "pass memory=ConvMemMemory(session_memory, thread_id=...) to the engine instead"
            )
        return cls(memory, thread_id=thread_id, rewrite=rewrite)

    @property
    def session_memory(self) -> SessionMemory:
        """The façade this memory reports to (``wrap_tools`` reuses it)."""
        return self._facade

    def recall_tool(self) -> FunctionTool:
        """The ``recall_conversation`` tool for this thread (``llamaindex_convmem.recall``):
        give it to the agent beside its tools; build the memory with ``recall=True`` so
        the block tells the model it is there."""
        from llamaindex_convmem.recall import recall_tool

        return recall_tool(self._facade, thread_id=self.thread_id)

    def describe_model(
        self,
        *,
        tool_schemas: tuple[dict[str, Any], ...] | None = None,
        model: str | None = None,
    ) -> None:
        """Tell the record which tools and model the next model calls use
        (``wrap_tools`` and ``ConvMemChatEngine`` call this)."""
        if tool_schemas is not None:
            self._tool_schemas = tuple(tool_schemas)
        if model is not None:
            self._model = model

    def _model_call(
        self,
        started: Clarification | TurnContext,
        sent: list[ChatMessage],
        input: str | ChatMessage | None,
    ) -> ModelCall:
        """What the model receives next: our messages, after the engine's system prompt
        (the engine appends the question itself when it has not ``put`` it yet)."""
        block = next((message_text(m) for m in sent if m.role == MessageRole.SYSTEM), "")
        question = next((message_text(m) for m in sent if m.role == MessageRole.USER), None)
        if question is None and input is not None:
            question = message_text(input)
        return ModelCall(
            system_prompt=self.system_prompt,
            block=None if isinstance(started, TurnContext) else block,
            sent_question=question,
            tool_schemas=self._tool_schemas,
            model=self._model,
        )

    # ------------------------------------------------------------------ turn bookkeeping

    def _turn_for(self, input: str | ChatMessage | None) -> _Turn | None:
        """The turn a ``get`` refers to: the input's message, else the open one."""
        with self._lock:
            if input is not None:
                text = message_text(input)
                if self._turn is None or text not in self._turn.aliases:
                    self._turn = _Turn(text)
            return self._turn

    def _note_user(self, text: str) -> None:
        with self._lock:
            if self._turn is None or text not in self._turn.aliases:
                self._turn = _Turn(text)
            self._turn.stored = True

    def _close(self) -> _Turn | None:
        with self._lock:
            turn, self._turn = self._turn, None
            return turn

    def _started(self, turn: _Turn, started: Clarification | TurnContext) -> list[ChatMessage]:
        if isinstance(started, TurnContext) and started.rewritten:
            with self._lock:
                turn.aliases.add(started.rewritten)
        return turn_messages(
            started, turn.question, include_question=turn.stored, rewrite=self.rewrite
        )

    def _on_put(self, message: ChatMessage) -> _Turn | None:
        """Record a message; return the turn to end when it is the turn's answer."""
        with self._lock:
            self._transcript.append(message)
        if message.role == MessageRole.USER:
            self._note_user(message_text(message))
            return None
        if message.role == MessageRole.ASSISTANT and not has_tool_calls(message):
            return self._close()
        return None

    def start(self, input: str | ChatMessage) -> Clarification | TurnContext:
        """Begin the turn for a user message (``ConvMemChatEngine`` calls this first)."""
        turn = self._turn_for(input)
        assert turn is not None
        started = self._facade.begin_turn(self.thread_id, turn.question, message_id=turn.message_id)
        self._started(turn, started)
        return started

    async def astart(self, input: str | ChatMessage) -> Clarification | TurnContext:
        turn = self._turn_for(input)
        assert turn is not None
        started = await self._facade.abegin_turn(
            self.thread_id, turn.question, message_id=turn.message_id
        )
        self._started(turn, started)
        return started

    # ------------------------------------------------------------------ BaseMemory (sync)

    def get(  # type: ignore[override]
        self, input: str | ChatMessage | None = None, **kwargs: Any
    ) -> list[ChatMessage]:
        """Block + question for the current user message (kwargs such as
        ``initial_token_count`` are accepted and ignored: the result is small by design)."""
        turn = self._turn_for(input)
        if turn is None:
            block = self._facade.block(self.thread_id)
            return [ChatMessage(role=MessageRole.SYSTEM, content=block)] if block else []
        started = self._facade.begin_turn(self.thread_id, turn.question, message_id=turn.message_id)
        sent = self._started(turn, started)
        if self._facade.transcript is not None:
            self._facade.record_model_input(self.thread_id, self._model_call(started, sent, input))
        return sent

    def get_all(self) -> list[ChatMessage]:
        """Every message put in this process (the durable record is the transcript's job)."""
        with self._lock:
            return list(self._transcript)

    def put(self, message: ChatMessage) -> None:
        ended = self._on_put(message)
        if ended is not None:
            self._facade.end_turn(self.thread_id, answer=message_text(message))

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the local message list; the session state is not rebuilt from it."""
        with self._lock:
            self._transcript = list(messages)

    def reset(self) -> None:
        """Forget the messages and drop the thread's session state."""
        with self._lock:
            self._transcript = []
            self._turn = None
        self._facade.reset(self.thread_id)

    # ------------------------------------------------------------------ BaseMemory (async)

    async def aget(  # type: ignore[override]
        self, input: str | ChatMessage | None = None, **kwargs: Any
    ) -> list[ChatMessage]:
        turn = self._turn_for(input)
        if turn is None:
            block = await self._facade.ablock(self.thread_id)
            return [ChatMessage(role=MessageRole.SYSTEM, content=block)] if block else []
        started = await self._facade.abegin_turn(
            self.thread_id, turn.question, message_id=turn.message_id
        )
        sent = self._started(turn, started)
        if self._facade.transcript is not None:
            await self._facade.arecord_model_input(
                self.thread_id, self._model_call(started, sent, input)
            )
        return sent

    async def aget_all(self) -> list[ChatMessage]:
        return self.get_all()

    async def aput(self, message: ChatMessage) -> None:
        ended = self._on_put(message)
        if ended is not None:
            await self._facade.aend_turn(self.thread_id, answer=message_text(message))

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        for message in messages:
            await self.aput(message)

    async def aset(self, messages: list[ChatMessage]) -> None:
        self.set(messages)

    async def areset(self) -> None:
        with self._lock:
            self._transcript = []
            self._turn = None
        await self._facade.areset(self.thread_id)
