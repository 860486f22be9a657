"""``TranscriptStore``: the durable record on SQLite or PostgreSQL, sync and async.

One class, one implementation for both databases. Every operation lives once in
``convmem.transcript.ops`` as a generator of statements; ``_run`` drives it on a
sync connection, ``_arun`` on an async one (aiosqlite / psycopg 3 async), each in
one transaction (``convmem.transcript.engine``), so the twins share every statement and decision and only the
I/O differs (the httpx/httpcore pattern). An operation that is one ``ops.Alone``
statement runs on PostgreSQL in autocommit mode instead (one statement is atomic;
BEGIN and COMMIT would be two more round trips). Write transactions on SQLite
start with ``BEGIN IMMEDIATE`` (its stand-in for a row lock); SQLite runs in WAL mode with
``secure_delete`` on, and after a redaction or deletion its WAL is checkpointed
(``TRUNCATE``) while PostgreSQL vacuums the touched tables; ``purge_physical``
rewrites the files (PostgreSQL's dead row versions, GIN entries and statistics stay
until then). Old WAL archives and backups are outside the store's reach. A database error that means "the record
cannot be written or read" (connection, lock timeout, pool exhaustion) surfaces as
``TranscriptUnavailable``; callers decide whether a turn may proceed without it.
"""

from __future__ import annotations

from convmem.transcript._async_store import AsyncTwins
from convmem.transcript._sync_store import SyncTwins
from convmem.transcript.engine import ImportSource, Progress


class TranscriptStore(SyncTwins, AsyncTwins):
    """The durable conversation record (see the module docstring).

    ``retention`` is required: there is no implicit "keep forever". Every method
    takes ``tenant`` first and refuses (``ThreadNotFound``) a thread of another
    tenant. Each ``x`` has a natively async twin ``ax``: the async ones are written
    by hand (``_async_store``), the sync ones generated from them (``_sync_store``,
    ``scripts/unasync.py``); engines and transactions are ``engine.StoreEngine``'s.

    Each engine (sync, async) pools ``pool_size`` connections and opens up to
    ``max_overflow`` more under load, closed again when returned to a full pool; a
    call waits at most ``pool_timeout`` seconds for a free one, then fails with
    ``TranscriptUnavailable``. A turn holds a connection for one transaction at a time
    (three per agent turn), so concurrent turns beyond the pool queue for it rather
    than opening connections (docs/scaling.md). An engine passed in keeps its own pool.

    On PostgreSQL both twins run an operation that is one statement (binding a turn,
    its two commit points, an append to the active leaf) on psycopg's connection
    itself, checked out of the same pool, as a prepared statement: the same SQL and
    errors at less client CPU. ``alone_driver="sqlalchemy"`` sends those through
    SQLAlchemy too (as happens anyway while something listens to the engine's cursor
    events, or when an engine passed in uses another driver). The async twins also
    commit such statements from concurrent sessions together, one pipeline and one
    transaction per loop turn, each statement rerun alone if the batch fails
    (``convmem.transcript.group_commit``); ``group_commit=False`` sends each alone.
    """


__all__ = ["ImportSource", "Progress", "TranscriptStore"]
