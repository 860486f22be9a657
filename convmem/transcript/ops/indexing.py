"""The deferred search index: queued search text moved into the full-text index.

With ``search_index="deferred"`` a message's search text is written to
``convmem_index_queue`` (a plain table) instead of ``convmem_search``, so the turn
does not pay for the full-text index (on PostgreSQL its GIN index costs ~1 ms per
long answer). Two ways move it into the index: ``index_queued``, the first step of
every search whatever the store's mode (the rows of the tenant or thread it
searches, in its transaction, so a search is never stale, even beside a store or a
``convmem threads`` command configured the other way), and ``index_batch``, one batch of the sweep
(``TranscriptStore.index_pending``). A row leaves the queue only by a DELETE that
hands it to the index in the same transaction (PostgreSQL: one statement, ``DELETE
... RETURNING`` feeding the ``INSERT``; SQLite: under its write lock), so two
indexers never index one row twice: a sweep skips rows another indexer holds
(``SKIP LOCKED``), a search waits for them (it must see them indexed).
"""

from __future__ import annotations

import sqlalchemy as sa

from convmem.transcript.models import INDEX_QUEUE, SEARCH
from convmem.transcript.ops.base import Alone, Ctx, Op

_COLS = ("body", "message_id", "tenant", "thread_id")
_MOVE = "INSERT INTO convmem_search (body, message_id, tenant, thread_id)\n" \
        "SELECT body, message_id, tenant, thread_id FROM moved"

# PostgreSQL, built once per shape: a search's drain (the tenant's rows, or one thread's).
_PG_QUEUED = {
    by_thread: sa.text(
        "WITH moved AS (\n    DELETE FROM convmem_index_queue WHERE tenant = :tenant"
        + (" AND thread_id = :thread_id" if by_thread else "")
        + "\n    RETURNING body, message_id, tenant, thread_id\n)\n" + _MOVE
    )
    for by_thread in (False, True)
}

# PostgreSQL: one batch of the sweep (any tenant's rows, or one tenant's); the count
# moved comes back.
_PG_BATCH = {
    scoped: sa.text(
        "WITH batch AS (\n    SELECT tenant, thread_id, message_id FROM convmem_index_queue"
        + (" WHERE tenant = :tenant" if scoped else "")
        + """
    LIMIT :n FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM convmem_index_queue AS q USING batch
    WHERE q.tenant = batch.tenant AND q.thread_id = batch.thread_id
        AND q.message_id = batch.message_id
    RETURNING q.body, q.message_id, q.tenant, q.thread_id
), indexed AS (
""" + _MOVE + "\n)\nSELECT count(*) FROM moved"
    )
    for scoped in (False, True)
}


def _sqlite_move(where: sa.ColumnElement[bool]) -> Op[int]:
    """Copy the queue rows ``where`` selects into the index, then delete them (the
    caller's write transaction keeps both statements on the same rows)."""
    q = INDEX_QUEUE
    yield sa.insert(SEARCH).from_select(list(_COLS), sa.select(*(q.c[c] for c in _COLS)).where(where))
    res = yield sa.delete(q).where(where)
    return int(res.rowcount)


def index_queued(ctx: Ctx, tenant: str, thread_id: str | None) -> Op[int]:
    """Index the queued rows of ``tenant`` (of ``thread_id`` only, when given): a
    search's first step. Returns how many moved. The caller checked the ids."""
    params = {"tenant": tenant, "thread_id": thread_id}
    if ctx.dialect == "postgresql":
        res = yield (_PG_QUEUED[thread_id is not None], params)
        return int(res.rowcount)
    q = INDEX_QUEUE
    where = q.c.tenant == tenant
    if thread_id is not None:
        where = sa.and_(where, q.c.thread_id == thread_id)
    return (yield from _sqlite_move(where))


def index_batch(ctx: Ctx, tenant: str | None, n: int) -> Op[int]:
    """Index up to ``n`` queued rows (``tenant``'s only, when given): one batch of
    ``index_pending``. Returns how many moved; fewer than ``n`` when the queue ran dry
    (or, on PostgreSQL, another indexer holds the rest)."""
    if ctx.dialect == "postgresql":
        res = yield Alone(_PG_BATCH[tenant is not None], {"tenant": tenant, "n": n})
        return int(res.scalar_one())
    q = INDEX_QUEUE
    rowid: sa.ColumnClause[int] = sa.literal_column("rowid")
    batch = sa.select(rowid).select_from(q).order_by(rowid).limit(n)
    if tenant is not None:
        batch = batch.where(q.c.tenant == tenant)
    return (yield from _sqlite_move(rowid.in_(batch)))
