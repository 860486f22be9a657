"""The deferred search index: queued messages' search text moved into the full-text index.

With ``search_index="deferred"`` a message's key is written to ``convmem_index_queue``
(a plain table) instead of its text to ``convmem_search``, so the turn pays neither
for the full-text index (on PostgreSQL its GIN index costs ~1 ms per long answer) nor
for a second copy of the text. Two ways index it: ``index_queued``, the first step of
every search whatever the store's mode (the rows of the tenant or thread it
searches, in its transaction, so a search is never stale, even beside a store or a
``convmem threads`` command configured the other way), and ``index_batch``, one batch
of the sweep (``TranscriptStore.index_pending``). Both read the queued rows with their
messages' parts, locking the queue rows, write the text ``search_body`` makes of the
parts (as an inline write does), and delete those rows, in one transaction; so two
indexers never index one row twice: a sweep skips rows another indexer holds
(``SKIP LOCKED``), a search waits for them (it must see them indexed). A row whose
message is gone or redacted leaves the queue with nothing indexed.
"""

from __future__ import annotations

import sqlalchemy as sa

from convmem.transcript.models import INDEX_QUEUE, MESSAGES, SEARCH
from convmem.transcript.ops.base import Ctx, Op, search_body

_KEY = (INDEX_QUEUE.c.tenant, INDEX_QUEUE.c.thread_id, INDEX_QUEUE.c.message_id)

#: Queued rows with their messages' parts (none for a message no longer there).
_QUEUED = sa.select(*_KEY, MESSAGES.c.parts, MESSAGES.c.redacted_at).select_from(
    INDEX_QUEUE.outerjoin(MESSAGES, sa.and_(
        MESSAGES.c.tenant == INDEX_QUEUE.c.tenant,
        MESSAGES.c.id == INDEX_QUEUE.c.message_id,
        MESSAGES.c.thread_id == INDEX_QUEUE.c.thread_id,
    ))
)


def _move(ctx: Ctx, queued: sa.Select[tuple[object, ...]], *, skip_locked: bool) -> Op[int]:
    """Index the rows ``queued`` selects and take them off the queue. Returns how many."""
    if ctx.dialect == "postgresql":
        queued = queued.with_for_update(of=INDEX_QUEUE, skip_locked=skip_locked)
    rows = (yield queued).all()
    if not rows:
        return 0
    search = [
        {"body": body, "message_id": r.message_id, "tenant": r.tenant, "thread_id": r.thread_id}
        for r in rows
        if r.parts is not None and r.redacted_at is None and (body := search_body(r.parts))
    ]
    if search:
        yield (sa.insert(SEARCH), search[0] if len(search) == 1 else search)
    keys = [(r.tenant, r.thread_id, r.message_id) for r in rows]
    yield sa.delete(INDEX_QUEUE).where(sa.tuple_(*_KEY).in_(keys))
    return len(rows)


def index_queued(ctx: Ctx, tenant: str, thread_id: str | None) -> Op[int]:
    """Index the queued rows of ``tenant`` (of ``thread_id`` only, when given): a
    search's first step. Returns how many moved. The caller checked the ids."""
    queued = _QUEUED.where(INDEX_QUEUE.c.tenant == tenant)
    if thread_id is not None:
        queued = queued.where(INDEX_QUEUE.c.thread_id == thread_id)
    return (yield from _move(ctx, queued, skip_locked=False))


def index_batch(ctx: Ctx, tenant: str | None, n: int) -> Op[int]:
    """Index up to ``n`` queued rows (``tenant``'s only, when given): one batch of
    ``index_pending``. Returns how many moved; fewer than ``n`` when the queue ran dry
    (or, on PostgreSQL, another indexer holds the rest)."""
    queued = _QUEUED.limit(n)
    if tenant is not None:
        queued = queued.where(INDEX_QUEUE.c.tenant == tenant)
    return (yield from _move(ctx, queued, skip_locked=True))
