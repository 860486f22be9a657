"""Which transcript thread a conversation key names, as this process last found it.

The session façade and the LlamaIndex chat stores address a conversation by its key
(the application's thread id, the chat store's key); the record addresses threads by
id. Finding the id is one read (``get_or_create_thread``), so each keeps the answer in
a ``ThreadIds``: bounded (cleared when full: a miss costs one read again) and keyed by
tenant too, so the per-tenant views that share one stay apart. A kept id goes stale
when another process erases the thread (the key then names a new one); ``on_thread``
is the one rule for that, for both: a call that finds its kept thread gone looks the
key up once more and runs again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from convmem.effects import Flow, call, do
from convmem.transcript.errors import ThreadNotFound

if TYPE_CHECKING:  # the façade holds one before any transcript (SQL) is imported
    from convmem.transcript.store import TranscriptStore

T = TypeVar("T")

#: Ids kept before the cache starts over.
KEPT = 4096


class ThreadIds:
    """``(tenant, key) -> transcript thread id``, looked up on a miss."""

    def __init__(self, kept: int = KEPT) -> None:
        self._ids: dict[tuple[str, str], str] = {}
        self._kept = kept

    def remember(self, tenant: str, key: str, thread_id: str) -> None:
        """Keep ``thread_id`` for the key (a turn's binding read it)."""
        if len(self._ids) >= self._kept:
            self._ids.clear()
        self._ids[(tenant, key)] = thread_id

    def forget(self, tenant: str, key: str) -> None:
        """Drop the key's id (its thread was erased here)."""
        self._ids.pop((tenant, key), None)

    def lookup(self, store: TranscriptStore, tenant: str, key: str) -> Flow[str]:
        """The key's thread id: kept, or read (the thread created on first use)."""
        found = self._ids.get((tenant, key))
        if found is None:
            thread = yield from do(
                call(store.get_or_create_thread, store.aget_or_create_thread, tenant, key)
            )
            found = thread.id
            self.remember(tenant, key, found)
        return found

    def find(self, store: TranscriptStore, tenant: str, key: str) -> Flow[str | None]:
        """The key's thread id, kept or read; ``None`` when the key has no thread (a read
        that must not create one: an erased thread stays erased)."""
        found = self._ids.get((tenant, key))
        if found is None:
            thread = yield from do(call(store.find_thread, store.afind_thread, tenant, key))
            if thread is None:
                return None
            found = thread.id
            self.remember(tenant, key, found)
        return found

    def on_thread(
        self, store: TranscriptStore, tenant: str, key: str, body: Callable[[str], Flow[T]]
    ) -> Flow[T]:
        """Run ``body(thread id)`` for the key; when the id was kept and its thread is
        gone (erased by another process), look the key up once more and run it again."""
        kept = self._ids.get((tenant, key))
        thread_id = yield from self.lookup(store, tenant, key)
        try:
            return (yield from body(thread_id))
        except ThreadNotFound:
            if kept is None:
                raise
            if self._ids.get((tenant, key)) == kept:
                del self._ids[(tenant, key)]
            thread_id = yield from self.lookup(store, tenant, key)
            return (yield from body(thread_id))
