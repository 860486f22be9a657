"""``ConvMemChatMessageHistory``: a LangChain chat-message history backed by the transcript.

For code that already reads or writes a ``BaseChatMessageHistory`` — typically a
``RunnableWithMessageHistory`` (RWMH) factory — swapping the history class is the
one change. ``key`` is the application's session id (any string); it names one
stable transcript thread per tenant (``get_or_create_thread``), resolved on first
use and kept for the instance's life (no I/O in the constructor, so an RWMH
factory may build one per call, also inside ``ainvoke``).

Two views:

- ``view="record"`` (default): ``messages`` is the thread's active path, every
  message exactly as it was added (types, ids, names, tool calls, usage, metadata,
  multimodal blocks; see ``langchain_convmem._records``). This is *replay*: whoever
  reads it sends the model the whole conversation again.
- ``view="session"``: ``messages`` is ``[SystemMessage(block)]``, the convmem session
  block (``[]`` while the state is empty), so the model sees the compact state
  instead of the history. ``store`` must then be a ``convmem.SessionMemory`` whose
  ``transcript`` is a ``TranscriptStore``. Added messages are still recorded, and
  drive the session state (``_drive_session``). Inside RWMH the block is one turn
  stale: RWMH reads the history before it passes the new input on, so the block
  reflects the turns before the current question; the model still receives the
  question itself.

``clear()`` empties the active path (``set_active_leaf(None)``) and keeps the record:
an investigator can still read every message. Real erasure is ``delete_thread()``
(the store's ``delete_thread``). ``add_messages`` writes the whole batch in one
transaction. Assigning ``history.messages = [...]`` (LangChain code trims or rewrites a
history that way; ``replace_messages`` / ``areplace_messages`` are the method forms)
makes the active path equal the list in one transaction (``rebase_path``): the common
prefix is kept, the rest is recorded as a new branch, and the replaced messages stay in
the record, as after ``clear()``.

Equality is LangChain's ``InMemoryChatMessageHistory``'s: a pydantic model, equal to
another of the same class whose ``messages`` are equal. Here that is: the same class,
the same ``view`` and equal ``messages`` — what a model would be given — read from
both stores (``==`` does I/O). It is not "the same thread": two histories of different
threads (or stores, or tenants) holding equal messages are equal, as two in-memory
histories are; compare ``thread_id()`` and ``tenant`` for that. Another history class
is never equal (as pydantic's equality requires the same class), and a history is not
hashable: its value changes with every message. Every method has a natively async twin (``aget_messages``,
``aadd_messages``, ``aclear``, ``adelete_thread``) on the store's async methods —
no thread-pool wrappers. Sync and async share one flow per operation: generators
that yield the store or memory calls they need as typed effects
(``convmem.effects.call``), run by ``perform`` / ``aperform``.

Deprecation: langchain-core (1.6.4+) marks ``BaseChatMessageHistory`` deprecated
with a decorator whose warning fires only when the decorated class itself is
instantiated (``type(self) is BaseChatMessageHistory``), never for a subclass.
This class is a subclass and emits nothing on construction; we deliberately do
not silence warnings around ``super().__init__()``, so a future upstream change
that warns subclasses would show up (the construction test fails) rather than be
hidden. ``RunnableWithMessageHistory`` itself warns on every construction; that is
the application's own call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from convmem.effects import Flow, aperform, call, do, perform
from convmem.errors import ConfigError
from convmem.session import SessionMemory
from convmem.transcript import DeletionReceipt, Message, TranscriptStore
from convmem.transcript.framework_records import attachment_digests
from langchain_convmem._common import TenantMemories, question_text
from langchain_convmem._records import from_record, to_record
from langchain_convmem.tool_results import tool_result

View = Literal["record", "session"]
VIEWS: tuple[str, ...] = ("record", "session")
_WHO = "ConvMemChatMessageHistory"


class ConvMemChatMessageHistory(BaseChatMessageHistory):
    """A chat-message history that is a durable, branchable transcript thread.

    ``store``: a ``TranscriptStore``, or a ``SessionMemory`` whose ``transcript`` is
    one (required for ``view="session"``; in the record view only its transcript
    and tenant are used). ``tenant`` defaults to the memory's tenant, or
    ``"default"`` for a bare store; another tenant's history with the same ``key``
    is a different thread.
    """

    def __init__(
        self,
        store: TranscriptStore | SessionMemory,
        key: str,
        *,
        view: View = "record",
        tenant: str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{_WHO}: key must be a non-empty string, got {key!r}")
        if view not in VIEWS:
            raise ConfigError(f"{_WHO}: view must be 'record' or 'session', got {view!r}")
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise ConfigError(f"{_WHO}: tenant must be a non-empty string, got {tenant!r}")
        memory: SessionMemory | None = None
        if isinstance(store, SessionMemory):
            if not isinstance(store.transcript, TranscriptStore):
                raise ConfigError(
                    "ConvMemChatMessageHistory: the SessionMemory has no transcript; build it "
                    "with SessionMemory(domain, transcript=TranscriptStore(url, retention=...))"
                )
            tenant = tenant if tenant is not None else store.tenant
            # This history records the messages itself; the memory only drives the state
            # (a memory with a transcript would record every turn a second time).
            memory = TenantMemories(store).get(tenant).state_only()
            transcript = store.transcript
        elif isinstance(store, TranscriptStore):
            if view == "session":
                raise ConfigError(
                    "ConvMemChatMessageHistory: view='session' needs a convmem.SessionMemory "
                    "with a transcript (it renders the session block), not a bare TranscriptStore"
                )
            transcript = store
        else:
            raise ConfigError(
                "ConvMemChatMessageHistory: store must be a convmem.transcript.TranscriptStore "
                f"or a convmem.SessionMemory with a transcript, got {type(store).__name__}"
            )
        self.store: TranscriptStore = transcript
        self.memory = memory
        self.key = key
        self.view: View = view
        self.tenant: str = tenant if tenant is not None else "default"
        self._thread_id: str | None = None

    # ------------------------------------------------------------------ LangChain API

    # The base class declares ``messages`` as a plain attribute; a stored history reads
    # it through a property (as upstream's own example does); assigning replaces.
    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The record view: the active path. The session view: the session block."""
        return perform(self._read())

    @messages.setter
    def messages(self, messages: Sequence[BaseMessage]) -> None:
        perform(self._replace(messages))

    def replace_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Make the active path ``messages``; the replaced ones stay in the record."""
        perform(self._replace(messages))

    async def areplace_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async ``replace_messages``."""
        await aperform(self._replace(messages))

    def __eq__(self, other: object) -> bool:
        """Same class, same view, equal ``messages`` (read from both stores)."""
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, ConvMemChatMessageHistory)
        return other is self or (self.view == other.view and self.messages == other.messages)

    __hash__ = None  # type: ignore[assignment]

    async def aget_messages(self) -> list[BaseMessage]:
        """Async ``messages``."""
        return await aperform(self._read())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record the batch in one transaction (all checked before anything is written)."""
        perform(self._add(messages))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async ``add_messages``."""
        await aperform(self._add(messages))

    def clear(self) -> None:
        """Empty the active path; the record keeps every message (``delete_thread`` erases)."""
        perform(self._clear())

    async def aclear(self) -> None:
        """Async ``clear``."""
        await aperform(self._clear())

    # ------------------------------------------------------------------ beyond LangChain

    def delete_thread(self) -> DeletionReceipt:
        """Erase the thread and everything of it (the store's ``delete_thread``)."""
        return perform(self._delete())

    async def adelete_thread(self) -> DeletionReceipt:
        """Async ``delete_thread``."""
        return await aperform(self._delete())

    def thread_id(self) -> str:
        """The transcript thread ``key`` names for this tenant (created on first use)."""
        return perform(self._thread())

    async def athread_id(self) -> str:
        """Async ``thread_id``."""
        return await aperform(self._thread())

    # ------------------------------------------------------------------ flows (sync and async)

    def _thread(self) -> Flow[str]:
        if self._thread_id is None:
            s = self.store
            thread = yield from do(
                call(s.get_or_create_thread, s.aget_or_create_thread, self.tenant, self.key)
            )
            self._thread_id = thread.id
        return self._thread_id

    def _read(self) -> Flow[list[BaseMessage]]:
        if self.view == "session":
            assert self.memory is not None
            block = yield from do(call(self.memory.block, self.memory.ablock, self.key))
            return [SystemMessage(content=block)] if block else []
        thread_id = yield from self._thread()
        s = self.store
        path = yield from do(call(s.active_path, s.aactive_path, self.tenant, thread_id))
        blobs: dict[str, bytes] = {}
        for sha in attachment_digests(path):
            blobs[sha] = yield from do(call(s.get_attachment, s.aget_attachment, self.tenant, sha))
        return [from_record(record, blobs) for record in path]

    def _add(self, messages: Sequence[BaseMessage]) -> Flow[None]:
        batch = list(messages)
        records = [to_record(m) for m in batch]
        if not records:
            return
        thread_id = yield from self._thread()
        s = self.store
        stored = yield from do(call(s.append, s.aappend, self.tenant, thread_id, records))
        if self.view == "session":
            yield from self._drive_session(batch, stored)

    def _replace(self, messages: Sequence[BaseMessage]) -> Flow[None]:
        if self.view == "session":
            raise ConfigError(
                f"{_WHO}: messages cannot be assigned in view='session': there messages reads "
                "the session block, so a read-modify-write would record the block as a "
                "message; use clear() and add_messages(), or assign in view='record'"
            )
        records = [to_record(m) for m in messages]
        thread_id = yield from self._thread()
        s = self.store
        yield from do(call(s.rebase_path, s.arebase_path, self.tenant, thread_id, records))

    def _clear(self) -> Flow[None]:
        thread_id = yield from self._thread()
        s = self.store
        yield from do(call(s.set_active_leaf, s.aset_active_leaf, self.tenant, thread_id, None))
        if self.view == "session":
            yield from self._reset_session()

    def _delete(self) -> Flow[DeletionReceipt]:
        thread_id = yield from self._thread()
        s = self.store
        receipt = yield from do(call(s.delete_thread, s.adelete_thread, self.tenant, thread_id))
        self._thread_id = None
        if self.memory is not None:
            yield from self._reset_session()
        return receipt

    # ------------------------------------------------------------------ session-view glue
    # Everything that touches the SessionMemory's turn state is here. ``self.memory`` is
    # the memory's ``state_only()`` view: the messages are recorded by this history.

    def _drive_session(
        self, messages: Sequence[BaseMessage], stored: Sequence[Message]
    ) -> Flow[None]:
        """Replay the recorded batch into the session state, in order.

        A ``HumanMessage`` begins a turn (``begin_turn(key, text, message_id=<its
        transcript id>)``); a ``ToolMessage`` answering a tool call of an earlier
        ``AIMessage`` in the same batch applies the domain's tool rule
        (``record_tool``); an ``AIMessage`` without tool calls ends the turn
        (``end_turn(key, answer=text)``). The messages are already recorded: the
        memory is not asked to write them again.
        """
        memory = self.memory
        assert memory is not None
        calls: dict[str, tuple[str, dict[str, Any]]] = {}
        for message, record in zip(messages, stored, strict=True):
            if isinstance(message, HumanMessage):
                question = question_text(message)
                yield from do(call(
                    memory.begin_turn, memory.abegin_turn, self.key, question, message_id=record.id
                ))
            elif isinstance(message, AIMessage):
                for tool_call in message.tool_calls:
                    if tool_call.get("id"):
                        calls[str(tool_call["id"])] = (tool_call["name"], dict(tool_call["args"]))
                if not message.tool_calls:
                    answer = message.text or None
                    yield from do(call(memory.end_turn, memory.aend_turn, self.key, answer=answer))
            elif isinstance(message, ToolMessage) and message.tool_call_id in calls:
                name, args = calls[message.tool_call_id]
                outcome = tool_result(message)
                yield from do(call(
                    memory.record_tool, memory.arecord_tool, self.key, name, args, outcome
                ))

    def _reset_session(self) -> Flow[None]:
        """``clear()`` in the session view and ``delete_thread()``: the state starts over."""
        assert self.memory is not None
        yield from do(call(self.memory.reset, self.memory.areset, self.key))
