"""LlamaIndex chat stores over the durable record: ``ConvMemChatStore`` and ``ConvMemDBChatStore``.

LlamaIndex has two store contracts: ``BaseChatStore`` (sync-first, behind
``ChatMemoryBuffer`` and agents' default memory) and ``AsyncDBChatStore`` (async,
with an active/archived status, behind ``Memory``). Both classes here keep a key's
messages in one transcript thread — ``get_or_create_thread`` maps the application's
key to one stable thread per tenant — and offer two views of it:

``view="record"`` (``ConvMemChatStore(transcript, tenant=...)``, the default): a key's
messages are the thread's *active path*, so the prompt is whatever the buffer or
``Memory`` builds — replay — and the record behind it is append-only and branchable:

* replacing or deleting messages (``set_messages``, ``delete_message(s)``,
  ``delete_last_message``, ``delete_oldest_messages``) never deletes a row: it
  moves the active path (``rebase_path`` / ``set_active_leaf``); the old messages
  stay in the tree for an investigator. Real erasure is ``delete_thread(key)``
  (or ``TranscriptStore.redact``);
* ``idx`` is always a position in the active path (root first, archived
  messages included), never a row id;
* "archived" is the thread's watermark (``archive_through``): the archived
  messages are the path's prefix up to it, and archiving moves it in one update
  (no message row changes). ``archive_oldest_messages(n)`` reads the active
  messages and archives through the n-th of them. A message can be added as
  archived only while nothing is active (the archive is a prefix);
* a key's first use (even a read) creates its thread; ``get_keys`` lists keys
  whose active path is not empty, in creation order, from one query over the
  tenant's threads.

``view="session"`` (``ConvMemChatStore(memory, view="session")``, ``memory`` a
``SessionMemory`` with a transcript): reads return what the model should see — the
session block and the current turn — instead of the history, and writes drive the
session state as well as the record (``llamaindex_convmem.session_store``). The
tenant is the memory's.

The operations live in ``_record_ops`` / ``session_store`` as flows of typed effects
(``convmem.effects``), run by ``perform`` on the sync methods or by ``aperform`` on
their native async twins; these classes only pick the view.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import (
    BaseModel,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from llama_index.core.schema import BaseComponent
from llama_index.core.storage.chat_store.base import BaseChatStore
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus

from convmem.effects import Flow, aperform, perform
from convmem.errors import ConfigError
from convmem.session import SessionMemory
from convmem.transcript import DeletionReceipt, TranscriptStore
from llamaindex_convmem._component import pickled_by_reference, traced
from llamaindex_convmem._record_ops import RecordOps, masked_url
from llamaindex_convmem.session_store import SessionOps

T = TypeVar("T")
View = Literal["record", "session"]
VIEWS: tuple[str, ...] = ("record", "session")
#: Serialized only for the session view (the record view's dump is unchanged).
_SESSION_FIELDS = ("view", "rewrite", "system_prompt")
_ALL = MessageStatus.ACTIVE  # BaseChatStore has no status: every write is active


def _configure(
    who: str,
    reads_back: bool,
    store: TranscriptStore | SessionMemory | None,
    tenant: str | None,
    view: str,
    rewrite: bool | None,
    system_prompt: str | None,
) -> tuple[RecordOps | SessionOps, dict[str, Any]]:
    """The operations for the chosen view and the store's serialized fields."""
    if view not in VIEWS:
        raise ConfigError(f"{who}: view must be 'record' or 'session', got {view!r}")
    if view == "record":
        if store is None:
            raise ConfigError(
                f"{who}: give the TranscriptStore (serialized stores omit credentials: "
                "from_dict(data, store=store))"
            )
        if isinstance(store, SessionMemory):
            raise ConfigError(
                f"{who}: a SessionMemory is for view='session' (the model sees the session "
                f"block); for the record view, which replays the history, pass its transcript: "
                f"{who}(memory.transcript, tenant=memory.tenant)"
            )
        if rewrite is not None or system_prompt is not None:
            raise ConfigError(f"{who}: rewrite= and system_prompt= belong to view='session'")
        tenant = "default" if tenant is None else tenant
        record = RecordOps(store, tenant)
        return record, {"tenant": tenant, "database": masked_url(store), "view": "record"}
    if store is None:
        raise ConfigError(
            f"{who}(view='session'): give the SessionMemory (serialized stores omit it: "
            "from_dict(data, store=memory))"
        )
    if not isinstance(store, SessionMemory):
        raise ConfigError(
            f"{who}: view='session' needs a convmem.SessionMemory with a transcript (it "
            f"renders the session block), not a {type(store).__name__}"
        )
    if tenant is not None and tenant != store.tenant:
        raise ConfigError(
            f"{who}(view='session'): the tenant is the SessionMemory's ({store.tenant!r}), "
            f"got tenant={tenant!r}; build SessionMemory(..., tenant={tenant!r})"
        )
    session = SessionOps(
        store,
        rewrite=True if rewrite is None else rewrite,
        system_prompt=system_prompt,
        reads_back=reads_back,
    )
    return session, {
        "tenant": store.tenant,
        "database": masked_url(session.store),
        "view": "session",
        "rewrite": session.rewrite,
        "system_prompt": system_prompt,
    }


@traced
class _ThreadPerKey(BaseModel):
    """What both stores share: the view's fields, built by ``_configure``, and the
    transcript thread behind each key."""

    #: Whether reads return what the model saw (``SessionOps``): the DB store's ``Memory``.
    reads_back: ClassVar[bool] = False

    tenant: str = "default"
    database: str = ""
    view: View = "record"
    rewrite: bool = True
    system_prompt: str | None = None
    _ops: RecordOps | SessionOps = PrivateAttr()

    def __init__(
        self,
        store: TranscriptStore | SessionMemory | None = None,
        *,
        tenant: str | None = None,
        view: View = "record",
        rewrite: bool | None = None,
        system_prompt: str | None = None,
        **data: Any,
    ) -> None:
        ops, fields = _configure(
            type(self).__name__, self.reads_back, store, tenant, view, rewrite, system_prompt
        )
        for name in ("database", "class_name"):
            data.pop(name, None)  # recomputed from the store (password masked)
        super().__init__(**{**data, **fields})
        self._ops = ops

    @model_serializer(mode="wrap")
    def custom_model_dump(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        """The fields (the session view's options only for that view), and the
        ``class_name`` that every ``BaseComponent``'s dump carries (``ConvMemChatStore``;
        this replaces ``BaseComponent.custom_model_dump``)."""
        data: dict[str, Any] = handler(self)
        if data.get("view") == "record":
            for name in _SESSION_FIELDS:
                data.pop(name, None)
        if isinstance(self, BaseComponent):
            data["class_name"] = self.class_name()
        return data

    @property
    def transcript(self) -> TranscriptStore:
        """The record behind this store (for export, redaction, erasure, branches)."""
        return self._ops.store

    async def _arun(self, flow: Flow[T]) -> T:
        return await aperform(flow)

    def thread_id(self, key: str) -> str:
        """The transcript thread holding ``key`` (created on first use)."""
        return perform(self._ops.thread(key))

    async def athread_id(self, key: str) -> str:
        """Async ``thread_id``."""
        return await self._arun(self._ops.thread(key))

    def delete_thread(self, key: str) -> DeletionReceipt | None:
        """Erase ``key``'s thread (rows, attachments, search index; the session view also
        the session state); the key then names a fresh thread."""
        return perform(self._ops.delete_thread(key))

    async def adelete_thread(self, key: str) -> DeletionReceipt | None:
        return await self._arun(self._ops.delete_thread(key))

    async def ahistory(self, key: str) -> list[ChatMessage]:
        """The conversation as recorded (the active path), in both views: what a UI shows."""
        return await self._arun(self._ops.history(key))


@traced
@pickled_by_reference
class ConvMemChatStore(_ThreadPerKey, BaseChatStore):
    """A ``BaseChatStore`` whose keys are transcript threads (see the module docstring).

    ``ConvMemChatStore(transcript, tenant="default")``: behind
    ``ChatMemoryBuffer.from_defaults(chat_store=...)`` the prompt is unchanged and the
    history becomes a durable, branchable record. ``ConvMemChatStore(memory,
    view="session", rewrite=True, system_prompt=None)``: the buffer hands the model the
    session block and the current turn instead (``system_prompt`` is the engine's, for
    the record). Every method is natively sync and natively async (``aget_messages``,
    ``async_add_message``, ...).
    """

    @classmethod
    def class_name(cls) -> str:
        return "ConvMemChatStore"

    def _run(self, flow: Flow[T]) -> T:
        return perform(flow)

    def history(self, key: str) -> list[ChatMessage]:
        """The conversation as recorded (the active path), in both views: what a UI shows."""
        return self._run(self._ops.history(key))


    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Make ``messages`` the active path (shared prefix reused, the rest a new branch)."""
        self._run(self._ops.set(key, messages, _ALL))

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await self._arun(self._ops.set(key, messages, _ALL))

    def get_messages(self, key: str) -> list[ChatMessage]:
        """The record view: the active path. The session view: block + current turn."""
        return self._run(self._ops.get_messages(key))

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        return await self._arun(self._ops.get_messages(key))

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append, or insert at position ``idx`` (as ``SimpleChatStore`` allows)."""
        self._run(self._ops.add(key, [message], _ALL, idx))

    async def async_add_message(
        self, key: str, message: ChatMessage, idx: int | None = None
    ) -> None:
        await self._arun(self._ops.add(key, [message], _ALL, idx))

    def add_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Append several messages in one transaction (not part of ``BaseChatStore``)."""
        self._run(self._ops.add(key, messages, _ALL))

    async def aadd_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await self._arun(self._ops.add(key, messages, _ALL))

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Empty the active path (the record keeps them); the removed messages."""
        return self._run(self._ops.clear(key))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        return await self._arun(self._ops.clear(key))

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Drop position ``idx`` of the active path; ``None`` when out of range."""
        return self._run(self._ops.delete_at(key, idx))

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        return await self._arun(self._ops.delete_at(key, idx))

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Step back one message; ``None`` when the path is empty."""
        return self._run(self._ops.delete_last(key))

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        return await self._arun(self._ops.delete_last(key))

    def get_keys(self) -> list[str]:
        """Keys of the tenant with a non-empty active path, oldest first."""
        return self._run(self._ops.get_keys())

    async def aget_keys(self) -> list[str]:
        return await self._arun(self._ops.get_keys())


@traced
@pickled_by_reference
class ConvMemDBChatStore(_ThreadPerKey, AsyncDBChatStore):
    """An ``AsyncDBChatStore`` for ``Memory.from_defaults(chat_store=...)`` (see module doc).

    ``ConvMemDBChatStore(transcript, tenant="default")`` or ``ConvMemDBChatStore(memory,
    view="session")``. ``Memory``'s sync ``put``/``get`` run these coroutines on a fresh
    event loop in another thread when a loop is already running; the transcript gives
    each loop its own engine, so that is safe.
    """

    reads_back = True

    @classmethod
    def class_name(cls) -> str:
        return "ConvMemDBChatStore"

    def to_dict(self) -> dict[str, Any]:
        """Configuration only (tenant, masked database URL, class name; the session view
        also its options); never a password."""
        return {**self.model_dump(), "class_name": self.class_name()}

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        """Active (default), archived, or all (``None``) messages, in order: of the path
        (record view), of block + current turn (session view)."""
        return await self._arun(self._ops.get_messages(key, status, limit, offset))

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        return await self._arun(self._ops.count_messages(key, status))

    async def add_message(
        self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        await self._arun(self._ops.add(key, [message], status))

    async def add_messages(
        self, key: str, messages: list[ChatMessage], status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """All in one transaction (record view); an empty list is a no-op."""
        await self._arun(self._ops.add(key, messages, status))

    async def set_messages(
        self, key: str, messages: list[ChatMessage], status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        await self._arun(self._ops.set(key, messages, status))

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Drop position ``idx`` of the active path (archived ones count); ``None`` if out of range."""
        return await self._arun(self._ops.delete_at(key, idx))

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        if status is None:
            await self._arun(self._ops.clear(key))
        else:
            await self._arun(self._ops.delete_status(key, status))

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        return await self._arun(self._ops.delete_oldest(key, n))

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        return await self._arun(self._ops.archive_oldest(key, n))

    async def get_keys(self) -> list[str]:
        return await self._arun(self._ops.get_keys())
