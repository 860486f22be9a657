"""LlamaIndex chat stores over the durable record: ``ConvMemChatStore`` and ``ConvMemDBChatStore``.

LlamaIndex has two store contracts: ``BaseChatStore`` (sync-first, behind
``ChatMemoryBuffer`` and agents' default memory) and ``AsyncDBChatStore`` (async,
with an active/archived status, behind ``Memory``). Both classes here keep a key's
messages as the *active path* of one transcript thread — ``get_or_create_thread``
maps the application's key to one stable thread per tenant — so the prompt is
whatever the buffer or ``Memory`` builds, unchanged, and the record behind it is
append-only and branchable:

* replacing or deleting messages (``set_messages``, ``delete_message(s)``,
  ``delete_last_message``, ``delete_oldest_messages``) never deletes a row: it
  moves the active path (``rebase_path`` / ``set_active_leaf``); the old messages
  stay in the tree for an investigator. Real erasure is
  ``TranscriptStore.delete_thread`` (or ``redact``);
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

Each operation is written once, as a generator of store calls (``_Call``), and
driven by ``_drive`` (the sync methods) or ``_adrive`` (the ``a``-prefixed twins),
so the sync and async methods share every decision and only the I/O differs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.storage.chat_store.base import BaseChatStore
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus

from convmem.errors import ConfigError
from convmem.transcript import Message, NewMessage, Thread, ThreadNotFound, TranscriptStore
from llamaindex_convmem._component import pickled_by_reference, traced
from llamaindex_convmem._records import (
    attachment_digests,
    same_record,
    to_chat_message,
    to_new_message,
)

T = TypeVar("T")
_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class _Call:
    """One ``TranscriptStore`` call: ``name`` (sync) / ``"a" + name`` (async)."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


_Plan = Generator[_Call, Any, T]


def _drive(store: TranscriptStore, plan: _Plan[T]) -> T:
    """Run a plan with the store's sync methods (their exceptions go back into it)."""
    try:
        call = next(plan)
        while True:
            try:
                result = getattr(store, call.name)(*call.args, **call.kwargs)
            except Exception as exc:  # handed to the plan, which may retry or re-raise
                call = plan.throw(exc)
            else:
                call = plan.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()


async def _adrive(store: TranscriptStore, plan: _Plan[T]) -> T:
    """Run a plan with the store's async twins."""
    try:
        call = next(plan)
        while True:
            try:
                result = await getattr(store, "a" + call.name)(*call.args, **call.kwargs)
            except Exception as exc:
                call = plan.throw(exc)
            else:
                call = plan.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()


def masked_url(store: TranscriptStore) -> str:
    """The store's database URL without password or query (safe to serialize or log)."""
    return store.engine.url.set(query={}).render_as_string(hide_password=True)


class _Ops:
    """Every chat-store operation as a plan over one tenant of a ``TranscriptStore``."""

    def __init__(self, store: TranscriptStore, tenant: str) -> None:
        if not isinstance(store, TranscriptStore):
            raise ConfigError(
                f"chat store: store must be a convmem TranscriptStore, got {type(store).__name__}"
            )
        if not isinstance(tenant, str) or not tenant:
            raise ConfigError("chat store: tenant must be a non-empty string")
        self.store = store
        self.tenant = tenant
        self._ids: dict[str, str] = {}

    # ------------------------------------------------------------ plumbing

    def _call(self, name: str, *args: Any, **kwargs: Any) -> _Call:
        return _Call(name, (self.tenant, *args), kwargs)

    def on_thread(self, key: str, body: Callable[[str], _Plan[T]]) -> _Plan[T]:
        """Run ``body(thread_id)`` for ``key``; a cached id whose thread was deleted is renewed."""
        if not isinstance(key, str) or not key:
            raise ConfigError("chat store: key must be a non-empty string")
        cached = self._ids.get(key)
        tid = cached
        if tid is None:
            tid = yield from self._resolve(key)
        try:
            return (yield from body(tid))
        except ThreadNotFound:
            if cached is None:
                raise
            self._ids.pop(key, None)
            tid = yield from self._resolve(key)
            return (yield from body(tid))

    def _resolve(self, key: str) -> _Plan[str]:
        thread: Thread = yield self._call("get_or_create_thread", key)
        if len(self._ids) >= _CACHE_LIMIT:
            self._ids.clear()
        self._ids[key] = thread.id
        return thread.id

    def _chats(self, records: Sequence[Message]) -> _Plan[list[ChatMessage]]:
        blobs: dict[str, bytes] = {}
        for rec in records:
            for sha in attachment_digests(rec):
                if sha not in blobs:
                    blobs[sha] = yield self._call("get_attachment", sha)
        return [to_chat_message(rec, blobs) for rec in records]

    def _path(self, tid: str, *, archived: bool = True) -> _Plan[list[Message]]:
        path: list[Message] = yield self._call("active_path", tid, include_archived=archived)
        return path

    def _marked_path(self, tid: str) -> _Plan[tuple[list[Message], int]]:
        """The active path and how many of its first messages are archived."""
        thread: Thread = yield self._call("get_thread", tid)
        path = yield from self._path(tid)
        return path, sum(1 for m in path if m.seq <= thread.archived_seq)

    def _replace(
        self, tid: str, old: Sequence[Message], old_archived: int, new: Sequence[NewMessage],
        archived: int,
    ) -> _Plan[list[Message]]:
        """Make the active path ``new`` (its first ``archived`` messages archived).

        ``rebase_path`` reuses the longest common prefix; if that prefix would bring
        along archived messages meant to be active, the path is emptied first so
        they come back as new, active rows.
        """
        common = 0
        while common < min(len(old), len(new)) and same_record(new[common], old[common]):
            common += 1
        if min(common, old_archived) > archived:
            yield self._call("set_active_leaf", tid, None)
        path: list[Message] = yield self._call("rebase_path", tid, list(new))
        if archived:
            yield self._call("archive_through", tid, path[archived - 1].seq)
        return path

    # ------------------------------------------------------------ reads

    def get_messages(
        self, key: str, status: MessageStatus | None = None,
        limit: int | None = None, offset: int | None = None,
    ) -> _Plan[list[ChatMessage]]:
        def body(tid: str) -> _Plan[list[ChatMessage]]:
            if status == MessageStatus.ARCHIVED:
                path, n = yield from self._marked_path(tid)
                records = path[:n]
            else:
                records = yield from self._path(tid, archived=status is None)
            records = records[offset or 0 :]
            if limit is not None:
                records = records[:limit]
            return (yield from self._chats(records))

        return (yield from self.on_thread(key, body))

    def count_messages(self, key: str, status: MessageStatus | None) -> _Plan[int]:
        def body(tid: str) -> _Plan[int]:
            if status == MessageStatus.ARCHIVED:
                _, n = yield from self._marked_path(tid)
                return n
            return len((yield from self._path(tid, archived=status is None)))

        return (yield from self.on_thread(key, body))

    def get_keys(self) -> _Plan[list[str]]:
        threads: list[Thread] = yield self._call("list_threads")
        live = [t for t in threads if t.key is not None and t.active_leaf is not None]
        live.sort(key=lambda t: (t.created_at, t.id))
        return [t.key for t in live if t.key is not None]

    # ------------------------------------------------------------ writes

    def add(
        self, key: str, messages: Sequence[ChatMessage], status: MessageStatus,
        idx: int | None = None,
    ) -> _Plan[None]:
        """Append (one transaction), or insert at position ``idx`` of the active path."""
        new = [to_new_message(m) for m in messages]

        def body(tid: str) -> _Plan[None]:
            if not new:
                return
            if idx is not None:
                path, n = yield from self._marked_path(tid)
                if not 0 <= idx <= len(path):
                    raise IndexError(f"add_message: idx {idx} outside 0..{len(path)}")
                keep = [_again(m) for m in path]
                yield from self._replace(
                    tid, path, n, keep[:idx] + new + keep[idx:], n + (len(new) if idx < n else 0)
                )
                return
            if status == MessageStatus.ARCHIVED:
                active = yield from self._path(tid, archived=False)
                if active:
                    raise ConfigError(
                        "add_message(status=ARCHIVED): the key has active messages; the "
                        "archive is the path's prefix, so archived messages cannot follow them"
                    )
            added: list[Message] = yield self._call("append", tid, new)
            if status == MessageStatus.ARCHIVED:
                yield self._call("archive_through", tid, added[-1].seq)

        return (yield from self.on_thread(key, body))

    def set(self, key: str, messages: Sequence[ChatMessage], status: MessageStatus) -> _Plan[None]:
        new = [to_new_message(m) for m in messages]

        def body(tid: str) -> _Plan[None]:
            path, n = yield from self._marked_path(tid)
            archived = len(new) if status == MessageStatus.ARCHIVED else 0
            yield from self._replace(tid, path, n, new, archived)

        return (yield from self.on_thread(key, body))

    def clear(self, key: str) -> _Plan[list[ChatMessage] | None]:
        """Empty the active path; the removed messages (``None`` if there were none)."""

        def body(tid: str) -> _Plan[list[ChatMessage] | None]:
            path = yield from self._path(tid)
            if not path:
                return None
            chats = yield from self._chats(path)
            yield self._call("set_active_leaf", tid, None)
            return chats

        return (yield from self.on_thread(key, body))

    def delete_status(self, key: str, status: MessageStatus) -> _Plan[None]:
        """Remove only the archived prefix or only the active rest of the path."""

        def body(tid: str) -> _Plan[None]:
            path, n = yield from self._marked_path(tid)
            if status == MessageStatus.ACTIVE:
                if n < len(path):
                    yield self._call("set_active_leaf", tid, path[n - 1].id if n else None)
                return
            if n:
                rest = [_again(m) for m in path[n:]]
                yield from self._replace(tid, path, n, rest, 0)

        return (yield from self.on_thread(key, body))

    def delete_at(self, key: str, idx: int) -> _Plan[ChatMessage | None]:
        """Remove position ``idx`` of the active path (``None`` if out of range)."""

        def body(tid: str) -> _Plan[ChatMessage | None]:
            path, n = yield from self._marked_path(tid)
            if not 0 <= idx < len(path):
                return None
            (gone,) = yield from self._chats(path[idx : idx + 1])
            keep = [_again(m) for i, m in enumerate(path) if i != idx]
            yield from self._replace(tid, path, n, keep, n - 1 if idx < n else n)
            return gone

        return (yield from self.on_thread(key, body))

    def delete_last(self, key: str) -> _Plan[ChatMessage | None]:
        """Step the active leaf back by one; the message it left (``None`` if empty)."""

        def body(tid: str) -> _Plan[ChatMessage | None]:
            path = yield from self._path(tid)
            if not path:
                return None
            (last,) = yield from self._chats(path[-1:])
            yield self._call("set_active_leaf", tid, path[-1].parent_id)
            return last

        return (yield from self.on_thread(key, body))

    def delete_oldest(self, key: str, n: int) -> _Plan[list[ChatMessage]]:
        """Remove the ``n`` oldest active messages from the path; returns them."""

        def body(tid: str) -> _Plan[list[ChatMessage]]:
            path, archived = yield from self._marked_path(tid)
            gone = path[archived : archived + max(n, 0)]
            if not gone:
                return []
            keep = path[:archived] + path[archived + len(gone) :]
            yield from self._replace(tid, path, archived, [_again(m) for m in keep], archived)
            return (yield from self._chats(gone))

        return (yield from self.on_thread(key, body))

    def archive_oldest(self, key: str, n: int) -> _Plan[list[ChatMessage]]:
        """Move the watermark past the ``n`` oldest active messages; returns them."""

        def body(tid: str) -> _Plan[list[ChatMessage]]:
            active = yield from self._path(tid, archived=False)
            target = active[: max(n, 0)]
            if not target:
                return []
            yield self._call("archive_through", tid, target[-1].seq)
            return (yield from self._chats(target))

        return (yield from self.on_thread(key, body))


_ALL = MessageStatus.ACTIVE  # BaseChatStore has no status: every write is active


@traced
@pickled_by_reference
class ConvMemChatStore(BaseChatStore):
    """A ``BaseChatStore`` whose keys are transcript threads (see the module docstring).

    ``ConvMemChatStore(store, tenant="default")``; behind
    ``ChatMemoryBuffer.from_defaults(chat_store=...)`` the prompt is unchanged and the
    history becomes a durable, branchable record. Every method is natively sync and
    natively async (``aget_messages``, ``async_add_message``, ...).
    """

    tenant: str = "default"
    database: str = ""
    _ops: _Ops = PrivateAttr()

    def __init__(
        self, store: TranscriptStore | None = None, *, tenant: str = "default", **data: Any
    ) -> None:
        if store is None:
            raise ConfigError(
                f"{type(self).__name__}: give the TranscriptStore (serialized stores "
                "omit credentials: from_dict(data, store=store))"
            )
        ops = _Ops(store, tenant)
        data.pop("database", None)  # always recomputed from the store (password masked)
        fields: dict[str, Any] = {**data, "tenant": tenant, "database": masked_url(store)}
        super().__init__(**fields)
        self._ops = ops

    @classmethod
    def class_name(cls) -> str:
        return "ConvMemChatStore"

    @property
    def transcript(self) -> TranscriptStore:
        """The record behind this store (for export, redaction, erasure, branches)."""
        return self._ops.store

    def thread_id(self, key: str) -> str:
        """The transcript thread holding ``key`` (created on first use)."""
        return _drive(self._ops.store, self._ops.on_thread(key, _identity))

    async def athread_id(self, key: str) -> str:
        """Async ``thread_id``."""
        return await _adrive(self._ops.store, self._ops.on_thread(key, _identity))

    def _run(self, plan: _Plan[T]) -> T:
        return _drive(self._ops.store, plan)

    async def _arun(self, plan: _Plan[T]) -> T:
        return await _adrive(self._ops.store, plan)

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Make ``messages`` the active path (shared prefix reused, the rest a new branch)."""
        self._run(self._ops.set(key, messages, _ALL))

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await self._arun(self._ops.set(key, messages, _ALL))

    def get_messages(self, key: str) -> list[ChatMessage]:
        """The active path (a new list each call)."""
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
class ConvMemDBChatStore(AsyncDBChatStore):
    """An ``AsyncDBChatStore`` for ``Memory.from_defaults(chat_store=...)`` (see module doc).

    ``ConvMemDBChatStore(store, tenant="default")``. ``Memory``'s sync ``put``/``get``
    run these coroutines on a fresh event loop in another thread when a loop is
    already running; the transcript gives each loop its own engine, so that is safe.
    """

    tenant: str = "default"
    database: str = ""
    _ops: _Ops = PrivateAttr()

    def __init__(
        self, store: TranscriptStore | None = None, *, tenant: str = "default", **data: Any
    ) -> None:
        if store is None:
            raise ConfigError(
                f"{type(self).__name__}: give the TranscriptStore (serialized stores "
                "omit credentials: model_validate is not enough, pass store=)"
            )
        ops = _Ops(store, tenant)
        data.pop("database", None)
        data.pop("class_name", None)
        fields: dict[str, Any] = {**data, "tenant": tenant, "database": masked_url(store)}
        super().__init__(**fields)
        self._ops = ops

    @classmethod
    def class_name(cls) -> str:
        return "ConvMemDBChatStore"

    def to_dict(self) -> dict[str, Any]:
        """Configuration only (tenant, masked database URL, class name); never a password."""
        return {**self.model_dump(), "class_name": self.class_name()}

    @property
    def transcript(self) -> TranscriptStore:
        """The record behind this store."""
        return self._ops.store

    async def athread_id(self, key: str) -> str:
        """The transcript thread holding ``key`` (created on first use)."""
        return await _adrive(self._ops.store, self._ops.on_thread(key, _identity))

    async def _arun(self, plan: _Plan[T]) -> T:
        return await _adrive(self._ops.store, plan)

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        """Active (default), archived, or all (``None``) messages of the path, in order."""
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
        """All in one transaction; an empty list is a no-op."""
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


def _identity(tid: str) -> _Plan[str]:
    yield from ()
    return tid


def _again(record: Message) -> NewMessage:
    """A stored message as input to ``rebase_path`` (attachments by digest: no bytes moved)."""
    return NewMessage(
        role=record.role,
        content=record.parts,
        author=record.author,
        extra=record.extra,
        visibility=record.visibility,
    )
