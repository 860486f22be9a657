"""Chat-store operations as flows: the one place the record view's decisions live.

Each operation is written once, as a flow (``convmem.effects``): a generator that
yields the store calls it needs as typed effects (``effects.call(store.x, store.ax,
...)``, checked by mypy in both forms) and is run by ``perform`` (the sync methods)
or ``aperform`` (their async twins), so sync and async share every decision and only
the I/O differs. ``RecordOps`` holds the record view's operations over one tenant of
a ``TranscriptStore`` (semantics: ``llamaindex_convmem.chat_store``); the session view
(``llamaindex_convmem.session_store``) builds on it for everything it records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Concatenate, ParamSpec, TypeVar

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store.base_db import MessageStatus

from convmem.effects import Flow, call, do
from convmem.errors import ConfigError
from convmem.identity import check_thread_id
from convmem.transcript import (
    DeletionReceipt,
    Message,
    NewMessage,
    TranscriptStore,
)
from convmem.transcript.framework_records import attachment_digests
from convmem.transcript.thread_ids import ThreadIds
from llamaindex_convmem._records import same_record, to_chat_message, to_new_message

T = TypeVar("T")
P = ParamSpec("P")


def masked_url(store: TranscriptStore) -> str:
    """The store's database URL without password or query (safe to serialize or log)."""
    return store.engine.url.set(query={}).render_as_string(hide_password=True)


class RecordOps:
    """Every chat-store operation as a flow over one tenant of a ``TranscriptStore``."""

    def __init__(self, store: TranscriptStore, tenant: str) -> None:
        if not isinstance(store, TranscriptStore):
            raise ConfigError(
                f"chat store: store must be a convmem TranscriptStore, got {type(store).__name__}"
            )
        if not isinstance(tenant, str) or not tenant:
            raise ConfigError("chat store: tenant must be a non-empty string")
        self.store = store
        self.tenant = tenant
        self._ids = ThreadIds()

    # ------------------------------------------------------------ plumbing

    def ask(
        self,
        sync: Callable[Concatenate[str, P], T],
        async_: Callable[Concatenate[str, P], Awaitable[T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Flow[T]:
        """``store.x(tenant, *args)`` or its twin ``store.ax``: one call of this tenant."""
        return (yield from do(call(sync, async_, self.tenant, *args, **kwargs)))

    def ask_on(
        self,
        key: str,
        sync: Callable[Concatenate[str, str, P], T],
        async_: Callable[Concatenate[str, str, P], Awaitable[T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Flow[T]:
        """``store.x(tenant, <key's thread>, *args)`` (a deleted thread is renewed)."""

        def body(tid: str) -> Flow[T]:
            return (yield from self.ask(sync, async_, tid, *args, **kwargs))

        return (yield from self.on_thread(key, body))

    def on_thread(self, key: str, body: Callable[[str], Flow[T]]) -> Flow[T]:
        """Run ``body(thread_id)`` for ``key``; a kept id whose thread was deleted is renewed."""
        check_thread_id(key, "chat store key")
        return (yield from self._ids.on_thread(self.store, self.tenant, key, body))

    def chats(self, records: Sequence[Message]) -> Flow[list[ChatMessage]]:
        blobs: dict[str, bytes] = {}
        for sha in attachment_digests(records):
            blobs[sha] = yield from self.ask(self.store.get_attachment, self.store.aget_attachment, sha)
        return [to_chat_message(rec, blobs) for rec in records]

    def path(self, tid: str, *, archived: bool = True) -> Flow[list[Message]]:
        s = self.store
        return (yield from self.ask(s.active_path, s.aactive_path, tid, include_archived=archived))

    def marked_path(self, tid: str) -> Flow[tuple[list[Message], int]]:
        """The active path and how many of its first messages are archived."""
        thread = yield from self.ask(self.store.get_thread, self.store.aget_thread, tid)
        path = yield from self.path(tid)
        return path, sum(1 for m in path if m.seq <= thread.archived_seq)

    def replace(
        self, tid: str, old: Sequence[Message], old_archived: int, new: Sequence[NewMessage],
        archived: int,
    ) -> Flow[list[Message]]:
        """Make the active path ``new`` (its first ``archived`` messages archived).

        ``rebase_path`` reuses the longest common prefix; if that prefix would bring
        along archived messages meant to be active, the path is emptied first so
        they come back as new, active rows.
        """
        common = 0
        while common < min(len(old), len(new)) and same_record(new[common], old[common]):
            common += 1
        s = self.store
        if min(common, old_archived) > archived:
            yield from self.ask(s.set_active_leaf, s.aset_active_leaf, tid, None)
        path = yield from self.ask(s.rebase_path, s.arebase_path, tid, list(new))
        if archived:
            yield from self.ask(s.archive_through, s.aarchive_through, tid, path[archived - 1].seq)
        return path

    def thread(self, key: str) -> Flow[str]:
        """The transcript thread holding ``key`` (created on first use)."""
        return (yield from self.on_thread(key, identity_flow))

    def delete_thread(self, key: str) -> Flow[DeletionReceipt]:
        """Erase the key's thread (``TranscriptStore.delete_thread``); the key then names a
        fresh thread."""
        receipt = yield from self.ask_on(key, self.store.delete_thread, self.store.adelete_thread)
        self.forget(key)
        return receipt

    def forget(self, key: str) -> None:
        """Drop the cached thread id of ``key`` (its thread was erased)."""
        self._ids.forget(self.tenant, key)

    def history(self, key: str) -> Flow[list[ChatMessage]]:
        """The key's active path: the conversation as recorded."""
        return (yield from self.get_messages(key))

    # ------------------------------------------------------------ reads

    def get_messages(
        self, key: str, status: MessageStatus | None = None,
        limit: int | None = None, offset: int | None = None,
    ) -> Flow[list[ChatMessage]]:
        def body(tid: str) -> Flow[list[ChatMessage]]:
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

    def count_messages(self, key: str, status: MessageStatus | None) -> Flow[int]:
        def body(tid: str) -> Flow[int]:
            if status == MessageStatus.ARCHIVED:
                _, n = yield from self.marked_path(tid)
                return n
            return len((yield from self.path(tid, archived=status is None)))

        return (yield from self.on_thread(key, body))

    def get_keys(self) -> Flow[list[str]]:
        threads = yield from self.ask(self.store.list_threads, self.store.alist_threads)
        live = [t for t in threads if t.key is not None and t.active_leaf is not None]
        live.sort(key=lambda t: (t.created_at, t.id))
        return [t.key for t in live if t.key is not None]

    # ------------------------------------------------------------ writes

    def add(
        self, key: str, messages: Sequence[ChatMessage], status: MessageStatus,
        idx: int | None = None,
    ) -> Flow[None]:
        """Append (one transaction), or insert at position ``idx`` of the active path."""
        new = [to_new_message(m) for m in messages]

        def body(tid: str) -> Flow[None]:
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
            s = self.store
            added = yield from self.ask(s.append, s.aappend, tid, new)
            if status == MessageStatus.ARCHIVED:
                yield from self.ask(s.archive_through, s.aarchive_through, tid, added[-1].seq)

        return (yield from self.on_thread(key, body))

    def set(self, key: str, messages: Sequence[ChatMessage], status: MessageStatus) -> Flow[None]:
        new = [to_new_message(m) for m in messages]

        def body(tid: str) -> Flow[None]:
            path, n = yield from self.marked_path(tid)
            archived = len(new) if status == MessageStatus.ARCHIVED else 0
            yield from self.replace(tid, path, n, new, archived)

        return (yield from self.on_thread(key, body))

    def clear(self, key: str) -> Flow[list[ChatMessage] | None]:
        """Empty the active path; the removed messages (``None`` if there were none)."""

        def body(tid: str) -> Flow[list[ChatMessage] | None]:
            path = yield from self.path(tid)
            if not path:
                return None
            chats = yield from self.chats(path)
            yield from self.ask(self.store.set_active_leaf, self.store.aset_active_leaf, tid, None)
            return chats

        return (yield from self.on_thread(key, body))

    def delete_status(self, key: str, status: MessageStatus) -> Flow[None]:
        """Remove only the archived prefix or only the active rest of the path."""

        def body(tid: str) -> Flow[None]:
            path, n = yield from self.marked_path(tid)
            if status == MessageStatus.ACTIVE:
                if n < len(path):
                    s, leaf = self.store, path[n - 1].id if n else None
                    yield from self.ask(s.set_active_leaf, s.aset_active_leaf, tid, leaf)
                return
            if n:
                rest = [again(m) for m in path[n:]]
                yield from self.replace(tid, path, n, rest, 0)

        return (yield from self.on_thread(key, body))

    def delete_at(self, key: str, idx: int) -> Flow[ChatMessage | None]:
        """Remove position ``idx`` of the active path (``None`` if out of range)."""

        def body(tid: str) -> Flow[ChatMessage | None]:
            path, n = yield from self.marked_path(tid)
            if not 0 <= idx < len(path):
                return None
            (gone,) = yield from self.chats(path[idx : idx + 1])
            keep = [again(m) for i, m in enumerate(path) if i != idx]
            yield from self.replace(tid, path, n, keep, n - 1 if idx < n else n)
            return gone

        return (yield from self.on_thread(key, body))

    def delete_last(self, key: str) -> Flow[ChatMessage | None]:
        """Step the active leaf back by one; the message it left (``None`` if empty)."""

        def body(tid: str) -> Flow[ChatMessage | None]:
            path = yield from self.path(tid)
            if not path:
                return None
            (last,) = yield from self.chats(path[-1:])
            s, leaf = self.store, path[-1].parent_id
            yield from self.ask(s.set_active_leaf, s.aset_active_leaf, tid, leaf)
            return last

        return (yield from self.on_thread(key, body))

    def delete_oldest(self, key: str, n: int) -> Flow[list[ChatMessage]]:
        """Remove the ``n`` oldest active messages from the path; returns them."""

        def body(tid: str) -> Flow[list[ChatMessage]]:
            path, archived = yield from self.marked_path(tid)
            gone = path[archived : archived + max(n, 0)]
            if not gone:
                return []
            keep = path[:archived] + path[archived + len(gone) :]
            yield from self.replace(tid, path, archived, [again(m) for m in keep], archived)
            return (yield from self.chats(gone))

        return (yield from self.on_thread(key, body))

    def archive_oldest(self, key: str, n: int) -> Flow[list[ChatMessage]]:
        """Move the watermark past the ``n`` oldest active messages; returns them."""

        def body(tid: str) -> Flow[list[ChatMessage]]:
            active = yield from self.path(tid, archived=False)
            target = active[: max(n, 0)]
            if not target:
                return []
            s = self.store
            yield from self.ask(s.archive_through, s.aarchive_through, tid, target[-1].seq)
            return (yield from self.chats(target))

        return (yield from self.on_thread(key, body))


def identity_flow(tid: str) -> Flow[str]:
    """The flow that asks for nothing and returns the thread id (``RecordOps.thread``)."""
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
