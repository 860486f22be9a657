"""Chat-store operations as plans: the one place the record view's decisions live.

Each operation is written once, as a generator of calls (``Call``: a target, a
method name and arguments), and driven by ``drive`` (the sync methods) or ``adrive``
(the ``a``-prefixed twins), so sync and async share every decision and only the I/O
differs. ``RecordOps`` holds the record view's operations over one tenant of a
``TranscriptStore`` (semantics: ``llamaindex_convmem.chat_store``); the session view
(``llamaindex_convmem.session_store``) builds on it for everything it records.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store.base_db import MessageStatus

from convmem.errors import ConfigError
from convmem.identity import check_thread_id
from convmem.transcript import (
    DeletionReceipt,
    Message,
    NewMessage,
    Thread,
    ThreadNotFound,
    TranscriptStore,
)
from convmem.transcript.framework_records import attachment_digests
from llamaindex_convmem._records import same_record, to_chat_message, to_new_message

T = TypeVar("T")
_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class Call:
    """One call a plan needs: ``target.name(*args)`` (sync) / ``target.aname`` (async).

    The target is the ``TranscriptStore`` (record operations) or, in the session view,
    the ``SessionMemory`` whose state the writes drive."""

    target: Any
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


Plan = Generator[Call, Any, T]


def drive(plan: Plan[T]) -> T:
    """Run a plan with the sync methods (their exceptions go back into it)."""
    try:
        call = next(plan)
        while True:
            try:
                result = getattr(call.target, call.name)(*call.args, **call.kwargs)
            except Exception as exc:  # handed to the plan, which may retry or re-raise
                call = plan.throw(exc)
            else:
                call = plan.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()


async def adrive(plan: Plan[T]) -> T:
    """Run a plan with the async twins."""
    try:
        call = next(plan)
        while True:
            try:
                result = await getattr(call.target, "a" + call.name)(*call.args, **call.kwargs)
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


class RecordOps:
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

    def call(self, name: str, *args: Any, **kwargs: Any) -> Call:
        return Call(self.store, name, (self.tenant, *args), kwargs)

    def call_on(self, key: str, name: str, *args: Any, **kwargs: Any) -> Plan[Any]:
        """``store.<name>(tenant, <key's thread>, *args)`` (a deleted thread is renewed)."""

        def body(tid: str) -> Plan[Any]:
            return (yield self.call(name, tid, *args, **kwargs))

        return self.on_thread(key, body)

    def on_thread(self, key: str, body: Callable[[str], Plan[T]]) -> Plan[T]:
        """Run ``body(thread_id)`` for ``key``; a cached id whose thread was deleted is renewed."""
        check_thread_id(key, "chat store key")
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

    def _resolve(self, key: str) -> Plan[str]:
        thread: Thread = yield self.call("get_or_create_thread", key)
        if len(self._ids) >= _CACHE_LIMIT:
            self._ids.clear()
        self._ids[key] = thread.id
        return thread.id

    def chats(self, records: Sequence[Message]) -> Plan[list[ChatMessage]]:
        blobs: dict[str, bytes] = {}
        for sha in attachment_digests(records):
            blobs[sha] = yield self.call("get_attachment", sha)
        return [to_chat_message(rec, blobs) for rec in records]

    def path(self, tid: str, *, archived: bool = True) -> Plan[list[Message]]:
        path: list[Message] = yield self.call("active_path", tid, include_archived=archived)
        return path

    def marked_path(self, tid: str) -> Plan[tuple[list[Message], int]]:
        """The active path and how many of its first messages are archived."""
        thread: Thread = yield self.call("get_thread", tid)
        path = yield from self.path(tid)
        return path, sum(1 for m in path if m.seq <= thread.archived_seq)

    def replace(
        self, tid: str, old: Sequence[Message], old_archived: int, new: Sequence[NewMessage],
        archived: int,
    ) -> Plan[list[Message]]:
        """Make the active path ``new`` (its first ``archived`` messages archived).

        ``rebase_path`` reuses the longest common prefix; if that prefix would bring
        along archived messages meant to be active, the path is emptied first so
        they come back as new, active rows.
        """
        common = 0
        while common < min(len(old), len(new)) and same_record(new[common], old[common]):
            common += 1
        if min(common, old_archived) > archived:
            yield self.call("set_active_leaf", tid, None)
        path: list[Message] = yield self.call("rebase_path", tid, list(new))
        if archived:
            yield self.call("archive_through", tid, path[archived - 1].seq)
        return path

    def thread(self, key: str) -> Plan[str]:
        """The transcript thread holding ``key`` (created on first use)."""
        return (yield from self.on_thread(key, identity_plan))

    def delete_thread(self, key: str) -> Plan[DeletionReceipt]:
        """Erase the key's thread (``TranscriptStore.delete_thread``); the key then names a
        fresh thread."""
        receipt: DeletionReceipt = yield from self.call_on(key, "delete_thread")
        self.forget(key)
        return receipt

    def forget(self, key: str) -> None:
        """Drop the cached thread id of ``key`` (its thread was erased)."""
        self._ids.pop(key, None)

    def history(self, key: str) -> Plan[list[ChatMessage]]:
        """The key's active path: the conversation as recorded."""
        return (yield from self.get_messages(key))

    # ------------------------------------------------------------ reads

    def get_messages(
        self, key: str, status: MessageStatus | None = None,
        limit: int | None = None, offset: int | None = None,
    ) -> Plan[list[ChatMessage]]:
        def body(tid: str) -> Plan[list[ChatMessage]]:
            if status == MessageStatus.ARCHIVED:
                path, n = yield from self.marked_path(tid)
                records = path[:n]
            else:
                records = yield from self.path(tid, archived=status is None)
            records = records[offset or 0 :]
            if limit is not None:
                records = records[:limit]
            return (yield from self.chats(records))

        return (yield from self.on_thread(key, body))

    def count_messages(self, key: str, status: MessageStatus | None) -> Plan[int]:
        def body(tid: str) -> Plan[int]:
            if status == MessageStatus.ARCHIVED:
                _, n = yield from self.marked_path(tid)
                return n
            return len((yield from self.path(tid, archived=status is None)))

        return (yield from self.on_thread(key, body))

    def get_keys(self) -> Plan[list[str]]:
        threads: list[Thread] = yield self.call("list_threads")
        live = [t for t in threads if t.key is not None and t.active_leaf is not None]
        live.sort(key=lambda t: (t.created_at, t.id))
        return [t.key for t in live if t.key is not None]

    # ------------------------------------------------------------ writes

    def add(
        self, key: str, messages: Sequence[ChatMessage], status: MessageStatus,
        idx: int | None = None,
    ) -> Plan[None]:
        """Append (one transaction), or insert at position ``idx`` of the active path."""
        new = [to_new_message(m) for m in messages]

        def body(tid: str) -> Plan[None]:
            if not new:
                return
            if idx is not None:
                path, n = yield from self.marked_path(tid)
                if not 0 <= idx <= len(path):
                    raise IndexError(f"add_message: idx {idx} outside 0..{len(path)}")
                keep = [again(m) for m in path]
                yield from self.replace(
                    tid, path, n, keep[:idx] + new + keep[idx:], n + (len(new) if idx < n else 0)
                )
                return
            if status == MessageStatus.ARCHIVED:
                active = yield from self.path(tid, archived=False)
                if active:
                    raise ConfigError(
                        "add_message(status=ARCHIVED): the key has active messages; the "
                        "archive is the path's prefix, so archived messages cannot follow them"
                    )
            added: list[Message] = yield self.call("append", tid, new)
            if status == MessageStatus.ARCHIVED:
                yield self.call("archive_through", tid, added[-1].seq)

        return (yield from self.on_thread(key, body))

    def set(self, key: str, messages: Sequence[ChatMessage], status: MessageStatus) -> Plan[None]:
        new = [to_new_message(m) for m in messages]

        def body(tid: str) -> Plan[None]:
            path, n = yield from self.marked_path(tid)
            archived = len(new) if status == MessageStatus.ARCHIVED else 0
            yield from self.replace(tid, path, n, new, archived)

        return (yield from self.on_thread(key, body))

    def clear(self, key: str) -> Plan[list[ChatMessage] | None]:
        """Empty the active path; the removed messages (``None`` if there were none)."""

        def body(tid: str) -> Plan[list[ChatMessage] | None]:
            path = yield from self.path(tid)
            if not path:
                return None
            chats = yield from self.chats(path)
            yield self.call("set_active_leaf", tid, None)
            return chats

        return (yield from self.on_thread(key, body))

    def delete_status(self, key: str, status: MessageStatus) -> Plan[None]:
        """Remove only the archived prefix or only the active rest of the path."""

        def body(tid: str) -> Plan[None]:
            path, n = yield from self.marked_path(tid)
            if status == MessageStatus.ACTIVE:
                if n < len(path):
                    yield self.call("set_active_leaf", tid, path[n - 1].id if n else None)
                return
            if n:
                rest = [again(m) for m in path[n:]]
                yield from self.replace(tid, path, n, rest, 0)

        return (yield from self.on_thread(key, body))

    def delete_at(self, key: str, idx: int) -> Plan[ChatMessage | None]:
        """Remove position ``idx`` of the active path (``None`` if out of range)."""

        def body(tid: str) -> Plan[ChatMessage | None]:
            path, n = yield from self.marked_path(tid)
            if not 0 <= idx < len(path):
                return None
            (gone,) = yield from self.chats(path[idx : idx + 1])
            keep = [again(m) for i, m in enumerate(path) if i != idx]
            yield from self.replace(tid, path, n, keep, n - 1 if idx < n else n)
            return gone

        return (yield from self.on_thread(key, body))

    def delete_last(self, key: str) -> Plan[ChatMessage | None]:
        """Step the active leaf back by one; the message it left (``None`` if empty)."""

        def body(tid: str) -> Plan[ChatMessage | None]:
            path = yield from self.path(tid)
            if not path:
                return None
            (last,) = yield from self.chats(path[-1:])
            yield self.call("set_active_leaf", tid, path[-1].parent_id)
            return last

        return (yield from self.on_thread(key, body))

    def delete_oldest(self, key: str, n: int) -> Plan[list[ChatMessage]]:
        """Remove the ``n`` oldest active messages from the path; returns them."""

        def body(tid: str) -> Plan[list[ChatMessage]]:
            path, archived = yield from self.marked_path(tid)
            gone = path[archived : archived + max(n, 0)]
            if not gone:
                return []
            keep = path[:archived] + path[archived + len(gone) :]
            yield from self.replace(tid, path, archived, [again(m) for m in keep], archived)
            return (yield from self.chats(gone))

        return (yield from self.on_thread(key, body))

    def archive_oldest(self, key: str, n: int) -> Plan[list[ChatMessage]]:
        """Move the watermark past the ``n`` oldest active messages; returns them."""

        def body(tid: str) -> Plan[list[ChatMessage]]:
            active = yield from self.path(tid, archived=False)
            target = active[: max(n, 0)]
            if not target:
                return []
            yield self.call("archive_through", tid, target[-1].seq)
            return (yield from self.chats(target))

        return (yield from self.on_thread(key, body))


def identity_plan(tid: str) -> Plan[str]:
    yield from ()
    return tid


def again(record: Message) -> NewMessage:
    """A stored message as input to ``rebase_path`` (attachments by digest: no bytes moved)."""
    return NewMessage(
        role=record.role,
        content=record.parts,
        author=record.author,
        extra=record.extra,
        visibility=record.visibility,
    )
