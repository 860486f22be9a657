"""What ``TranscriptStore``'s twins run on: engines, one transaction per operation, two drivers.

Every operation lives once in ``convmem.transcript.ops`` as a generator of statements;
``_run`` drives it on a sync connection, ``_arun`` on an async one (aiosqlite /
psycopg 3 async), each in one transaction, with ``convmem.effects.drive``/``adrive``
(``effects.start`` takes the first statement, which picks the transaction), so the
twins share every statement and decision and only the I/O differs. The public twins themselves are written once
(``convmem.transcript._async_store``, the sync half generated from it); this module
holds what genuinely differs between sync and async: connecting, the drivers, file
I/O off the event loop, and erasing residue after a redaction or deletion.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import tempfile
import weakref
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, BinaryIO, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.util import greenlet_spawn

from convmem.effects import Done, adrive, drive, start
from convmem.errors import ConfigError, TranscriptUnavailable
from convmem.tokens import encoding
from convmem.transcript import group_commit as _group_commit
from convmem.transcript import ops
from convmem.transcript.errors import ImportRefused
from convmem.transcript.group_commit import Call, GroupCommit
from convmem.transcript.models import CONTENT_TABLES
from convmem.transcript.pool import drop_hung_up_connections
from convmem.transcript.records import (
    Message,
    NewMessage,
    Part,
    RetentionPolicy,
)

T = TypeVar("T")
Progress = Callable[[int, int], None]
_UNAVAILABLE = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError)
Content = str | Sequence[Part]
_VERSION_TABLE = "convmem_alembic_version"  # convmem.transcript.migrate.VERSION_TABLE
#: ``TranscriptStore``'s ``search_index`` unless given (docs/transcript.md, "Search").
SEARCH_INDEX_DEFAULT = "deferred"
#: A relation's file and total size (with its TOAST table and indexes).
_PG_FILE = sa.text(
    "SELECT pg_relation_filenode(CAST(:t AS regclass)) AS node, "
    "pg_size_pretty(pg_total_relation_size(CAST(:t AS regclass))) AS size"
)


ImportSource = str | bytes | Mapping[str, Any] | BinaryIO | os.PathLike[str]


def _open_source(data: ImportSource) -> tuple[BinaryIO, bool]:
    """The document as a seekable binary stream, and whether it is ours to close."""
    if isinstance(data, Mapping):
        try:
            text = json.dumps(dict(data), ensure_ascii=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ImportRefused("$", f"is not JSON data: {exc}") from None
        return io.BytesIO(text.encode("ascii")), True
    if isinstance(data, str):
        return io.BytesIO(data.encode("utf-8", "surrogatepass")), True
    if isinstance(data, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(data)), True
    if isinstance(data, os.PathLike):
        try:
            return open(data, "rb"), True
        except OSError as exc:
            raise ConfigError(f"import_thread: cannot read {os.fspath(data)!r}: {exc}") from exc
    if hasattr(data, "read"):
        if data.seekable():
            return data, False
        spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the caller
        while chunk := data.read(1 << 20):
            spool.write(chunk)
        spool.seek(0)
        return spool, True  # type: ignore[return-value]
    raise ConfigError(
        "import_thread: data must be the document as text, bytes, a mapping, a binary "
        f"stream or a path; got {type(data).__name__}"
    )


def _needs_thread(data: ImportSource) -> bool:
    """Opening ``data`` touches the disk (a path, a stream to spool)."""
    return isinstance(data, os.PathLike) or (
        hasattr(data, "read") and not isinstance(data, io.BytesIO)
    )


def collided(exc: sa.exc.IntegrityError) -> ImportRefused:
    """A unique key taken by a writer between validation and writing."""
    return ImportRefused("$", f"collides with rows written meanwhile ({exc.orig})")


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _urls(url: sa.URL) -> tuple[sa.URL, sa.URL]:
    """(sync URL, async URL) for a user-given URL."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise ConfigError(
                "TranscriptStore: SQLite needs a file (sqlite:///path.db); an in-memory "
                "database is not shared between the sync and async engines"
            )
        return url.set(drivername="sqlite+pysqlite"), url.set(drivername="sqlite+aiosqlite")
    if backend in ("postgresql", "postgres"):
        pg = url.set(drivername="postgresql+psycopg")
        return pg, pg
    raise ConfigError(f"TranscriptStore: unsupported database {backend!r} (sqlite or postgresql)")


def _sqlite_setup(engine: sa.Engine) -> None:
    """WAL, secure_delete, foreign keys, busy timeout; explicit BEGIN (IMMEDIATE for writes)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
        cur = dbapi_conn.cursor()
        for pragma in (
            "PRAGMA journal_mode=WAL",
            "PRAGMA secure_delete=ON",
            "PRAGMA foreign_keys=ON",
            "PRAGMA busy_timeout=30000",
            "PRAGMA synchronous=NORMAL",
        ):
            cur.execute(pragma)
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("convmem_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


_FILE_IO = (ops.Read, ops.Rewind, ops.Write)


def _file_io(step: ops.Read | ops.Rewind | ops.Write) -> Any:
    """A document read or write an operation asked for (import / export)."""
    if isinstance(step, ops.Read):
        return step.source.read(step.size)
    if isinstance(step, ops.Rewind):
        step.source.seek(0)
        return None
    step.sink.write(step.data)
    return None


async def _afile_io(step: ops.Read | ops.Rewind | ops.Write) -> Any:
    """``_file_io`` off the event loop, unless the stream is in memory."""
    stream = step.sink if isinstance(step, ops.Write) else step.source
    if isinstance(stream, io.BytesIO):
        return _file_io(step)
    return await asyncio.to_thread(_file_io, step)


def _execute(execute: Callable[..., T], step: ops.Step) -> T:
    if isinstance(step, _FILE_IO):
        return _file_io(step)  # type: ignore[no-any-return]
    if isinstance(step, ops.Alone):
        return execute(step.statement, step.params)
    return execute(*step) if isinstance(step, tuple) else execute(step)


def _answer(execute: Callable[..., Any]) -> Callable[[ops.Step], Any]:
    """What ``effects.drive`` answers a step with: its file I/O, or ``execute(statement)``."""
    return lambda step: _execute(execute, step)


def _aanswer(execute: Callable[..., Awaitable[Any]]) -> Callable[[ops.Step], Awaitable[Any]]:
    """``_answer`` for ``effects.adrive``: file I/O off the event loop, statements awaited."""

    async def answer(step: ops.Step) -> Any:
        if isinstance(step, _FILE_IO):
            return await _afile_io(step)
        return await _execute(execute, step)

    return answer


def _only_once(answer: Callable[[ops.Step], T]) -> Callable[[ops.Step], T]:
    """``answer`` for an operation whose first step was ``Alone``: a second step is refused
    (thrown into the operation, which ends; nothing of it ran outside a transaction)."""
    answered = False

    def once(step: ops.Step) -> T:
        nonlocal answered
        if answered:
            raise RuntimeError("an operation yielded a statement after its Alone step")
        answered = True
        return answer(step)

    return once


#: How the store (sync and async) runs an operation that is one ``Alone`` statement on PostgreSQL
#: (the agent turn's three: bind, commit points 1 and 2): ``"psycopg"``, on psycopg's
#: own connection taken from under the pool, prepared (``_DriverAlone``);
#: ``"sqlalchemy"``, through SQLAlchemy's ``Connection`` like any other statement.
#: Same SQL, autocommit, pool and errors; the first spends markedly less client CPU
#: per statement (``bench/statements.py``). While anything listens to the engine's
#: cursor events, statements go through SQLAlchemy either way (``_cursor_listeners``).
AloneDriver = Literal["psycopg", "sqlalchemy"]


class Rows:
    """A driver's rows, read as the ops read a SQLAlchemy result (``first``, ``one``,
    ``scalar``, ``scalar_one``, ``all``, ``mappings()``)."""

    __slots__ = ("_keys", "_rows")

    def __init__(self, keys: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self._keys, self._rows = tuple(keys), [tuple(r) for r in rows]

    def first(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def one(self) -> tuple[Any, ...]:
        if not self._rows:
            raise sa.exc.NoResultFound("No row was found when one was required")
        if len(self._rows) > 1:
            raise sa.exc.MultipleResultsFound("Multiple rows were found when exactly one was required")
        return self._rows[0]

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def all(self) -> list[tuple[Any, ...]]:
        return list(self._rows)

    def mappings(self) -> RowMappings:
        return RowMappings([dict(zip(self._keys, r, strict=True)) for r in self._rows])


class RowMappings:
    """``Rows.mappings()``: each row as a dict of its columns."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = rows

    def all(self) -> list[dict[str, Any]]:
        return self._rows

    def first(self) -> dict[str, Any] | None:
        return self._rows[0] if self._rows else None


class DriverStatement:
    """A statement as the engine's dialect compiles it (the SQL SQLAlchemy would send),
    and its parameters as SQLAlchemy would bind them. Compiled once per statement: the
    ``Alone`` statements are module constants."""

    __slots__ = ("_compiled", "_processors", "sql")

    def __init__(self, statement: Any, dialect: sa.Dialect) -> None:
        self._compiled = statement.compile(dialect=dialect)
        self._processors: Mapping[str, Callable[[Any], Any]] = getattr(
            self._compiled, "_bind_processors", {})
        self.sql = str(self._compiled)

    def params(self, given: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = self._compiled.construct_params(dict(given), _check=False)
        for name, process in self._processors.items():
            if values.get(name) is not None:
                values[name] = process(values[name])
        return values


class _DriverAlone:
    """Runs an ``Alone`` statement on psycopg's connection itself (``Connection`` for the
    sync engine, ``AsyncConnection`` for the async one), checked out of the engine's
    pool (its hung-up check, size and timeout apply): autocommit for the statement, a
    prepared statement (``prepare=True``; one parse per connection, not per call), the
    rows as ``Rows``. A driver error is raised as the ``sqlalchemy.exc`` error
    SQLAlchemy would raise for it, so callers map it as before; a connection the error
    broke, or a call cancelled midway, is discarded, never pooled again. ``run`` and
    ``arun`` differ only in awaiting (``_on_driver``)."""

    def __init__(self, *, group_commit: bool = False) -> None:
        import psycopg  # the postgres extra: only a PostgreSQL store gets here

        self._error: type[Exception] = psycopg.Error
        self._idle = psycopg.pq.TransactionStatus.IDLE
        self._statements: dict[int, tuple[Any, DriverStatement]] = {}
        self._group_commit = group_commit
        self._group: tuple[asyncio.AbstractEventLoop, GroupCommit] | None = None

    def _prepared(self, engine: sa.Engine, step: ops.Step) -> tuple[DriverStatement, dict[str, Any], bool | None]:
        """The compiled statement, its parameters, and psycopg's ``prepare``: prepared
        once per pooled connection; an unpooled one (another loop's) is used once, so
        it keeps psycopg's default (prepare after a few runs)."""
        assert isinstance(step, ops.Alone)
        found = self._statements.get(id(step.statement))
        if found is None or found[0] is not step.statement:
            if len(self._statements) >= 64:  # not module constants after all: stay small
                self._statements.clear()
            found = self._statements[id(step.statement)] = (
                step.statement, DriverStatement(step.statement, engine.dialect))
        stmt = found[1]
        return stmt, stmt.params(step.params), None if isinstance(engine.pool, NullPool) else True

    def _connect_failed(self, exc: Exception) -> sa.exc.StatementError:
        """Connecting failed: the error ``engine.connect()`` raises for it."""
        return sa.exc.DBAPIError.instance(None, None, exc, self._error)

    def _failed(self, stmt: DriverStatement, params: Any, exc: Exception,
                pooled: bool) -> sa.exc.StatementError:
        """The statement failed: the error SQLAlchemy raises for it (invalidated, unless
        the connection went back to the pool)."""
        return sa.exc.DBAPIError.instance(stmt.sql, params, exc, self._error,
                                          connection_invalidated=not pooled)

    def _on_driver(self, conn: Any, stmt: DriverStatement, params: Any,
                   prepare: bool | None) -> Generator[Any, Any, Rows]:
        """The statement on psycopg's connection, autocommitted, written once: each
        driver call is yielded, its value sent back (``run``) or awaited (``arun``). A
        driver error is raised as SQLAlchemy's, invalidated unless the connection is
        left out of autocommit and fit for the pool."""
        try:
            yield conn.set_autocommit(True)
            cur = yield conn.execute(stmt.sql, params, prepare=prepare)
            described = cur.description  # built anew on each read: once
            rows = (yield cur.fetchall()) if described else []
            yield conn.set_autocommit(False)
        except self._error as exc:
            fit = not (conn.closed or conn.broken)
            if fit:
                yield conn.set_autocommit(False)
            raise self._failed(stmt, params, exc, pooled=fit) from exc
        return Rows([c.name for c in described or ()], rows)

    def run(self, engine: sa.Engine, step: ops.Step) -> Rows:
        stmt, params, prepare = self._prepared(engine, step)
        try:
            fairy = engine.raw_connection()
        except self._error as exc:
            raise self._connect_failed(exc) from exc
        pooled = False
        try:
            rows = drive(self._on_driver(fairy.driver_connection, stmt, params, prepare),
                         _as_is)
            pooled = True
            return rows
        except sa.exc.DBAPIError as exc:
            pooled = not exc.connection_invalidated
            raise
        finally:
            (fairy.close if pooled else fairy.invalidate)()

    async def arun(self, engine: AsyncEngine, step: ops.Step) -> Rows:
        stmt, params, prepare = self._prepared(engine.sync_engine, step)
        if self._group_commit and prepare:  # a pooled engine: batched with the loop turn's
            return await self._group_for(engine).run(stmt, params)
        return await self._arun_statement(engine, stmt, params, prepare)

    def _group_for(self, engine: AsyncEngine) -> GroupCommit:
        """The running loop's batches (a pooled engine serves one loop at a time)."""
        loop = asyncio.get_running_loop()
        if self._group is None or self._group[0] is not loop:
            self._group = loop, GroupCommit(
                lambda stmt, params: self._arun_statement(engine, stmt, params, True),
                lambda calls: self._acommit_together(engine, calls))
        return self._group[1]

    async def _arun_statement(self, engine: AsyncEngine, stmt: DriverStatement, params: Any,
                              prepare: bool | None) -> Rows:
        try:
            fairy = await engine.raw_connection()
        except self._error as exc:
            raise self._connect_failed(exc) from exc
        pooled = False  # and so a call cancelled midway is discarded
        try:
            rows = await adrive(self._on_driver(fairy.driver_connection, stmt, params,
                                                prepare), _awaited)
            pooled = True
            return rows
        except sa.exc.DBAPIError as exc:
            pooled = not exc.connection_invalidated
            raise
        finally:
            await greenlet_spawn(fairy.close if pooled else fairy.invalidate)

    async def _acommit_together(self, engine: AsyncEngine, calls: Sequence[Call]
                                ) -> list[Rows | Exception] | None:
        """``calls`` in one pipeline, one explicit transaction, one Sync (``group_commit``).
        Per statement its rows once committed, or, when the connection broke, the error it
        would raise alone; ``None`` when nothing of the batch was written (a statement
        failed, on the server or while psycopg dumped its parameters: the transaction is
        rolled back, never left to commit what was sent before the failure)."""
        try:
            fairy = await engine.raw_connection()
        except self._error as exc:
            return [self._connect_failed(exc) for _ in calls]
        conn: Any = fairy.driver_connection
        pooled = False
        try:
            failure: Exception | None = None
            try:
                await conn.set_autocommit(True)
                async with conn.pipeline():
                    await conn.execute("BEGIN")
                    await conn.execute(_BOUND_LOCK_WAIT, (_group_commit.LOCK_WAIT,))
                    cursors = [await conn.execute(stmt.sql, params, prepare=True)
                               for stmt, params in calls]
                    await conn.execute("COMMIT")
            except self._error as exc:
                failure = exc
            if conn.closed or conn.broken:  # committed or not: unknown, as alone
                lost = failure or self._error("the connection broke during a group commit")
                return [self._failed(stmt, params, lost, pooled=False) for stmt, params in calls]
            if failure is not None or conn.info.transaction_status != self._idle:
                pooled = await self._rolled_back(conn)
                return None
            results: list[Rows | Exception] = []
            for cur in cursors:  # read already: no I/O here
                described = cur.description
                rows = await cur.fetchall() if described else []
                results.append(Rows([c.name for c in described or ()], rows))
            pooled = await self._autocommit_off(conn)
            return results
        finally:
            await greenlet_spawn(fairy.close if pooled else fairy.invalidate)

    async def _rolled_back(self, conn: Any) -> bool:
        """Roll back what a failed batch left open (nothing of it commits either way: a
        connection that fails here takes its transaction with it); fit for the pool?"""
        try:
            if conn.info.transaction_status != self._idle:
                await conn.execute("ROLLBACK")
        except self._error:
            return False
        return await self._autocommit_off(conn)

    async def _autocommit_off(self, conn: Any) -> bool:
        """Leave autocommit as the pool expects it; whether ``conn`` is fit for the pool."""
        try:
            await conn.set_autocommit(False)
        except self._error:
            return False
        return True


#: Set first in a batch: how long its statements wait for a row lock (this transaction).
_BOUND_LOCK_WAIT = "SELECT set_config('lock_timeout', %s, true)"


def _as_is(value: T) -> T:
    return value


async def _awaited(call: Awaitable[T]) -> T:
    return await call


def _cursor_listeners(engine: sa.Engine) -> bool:
    """Whether something watches the engine's cursor events (a test, OpenTelemetry's
    SQLAlchemy instrumentation): then every statement goes through SQLAlchemy, so it
    sees them all."""
    dispatch = engine.dispatch
    return bool(dispatch.before_cursor_execute) or bool(dispatch.after_cursor_execute)


class StoreEngine:
    """The engines and transactions of a ``TranscriptStore`` (see the module docstring)."""

    def __init__(
        self,
        url_or_engine: str | sa.URL | sa.Engine | AsyncEngine,
        *,
        retention: RetentionPolicy,
        clock: Callable[[], datetime] = _utcnow,
        pool_size: int = 5,
        max_overflow: int = 20,
        pool_timeout: float = 30.0,
        search_index: str = SEARCH_INDEX_DEFAULT,
        alone_driver: AloneDriver = "psycopg",
        group_commit: bool = True,
    ) -> None:
        if not isinstance(retention, RetentionPolicy):
            raise ConfigError("TranscriptStore: retention must be a RetentionPolicy")
        if not isinstance(search_index, str) or search_index not in ops.SEARCH_INDEX_MODES:
            raise ConfigError("TranscriptStore: search_index must be 'inline' or 'deferred', "
                              f"got {search_index!r}")
        for name, value in (("pool_size", pool_size), ("max_overflow", max_overflow)):
            if type(value) is not int or value < 0:
                raise ConfigError(f"TranscriptStore: {name} must be a non-negative integer, "
                                  f"got {value!r}")
        if not isinstance(pool_timeout, int | float) or not pool_timeout > 0:
            raise ConfigError(f"TranscriptStore: pool_timeout must be positive seconds, "
                              f"got {pool_timeout!r}")
        if not isinstance(group_commit, bool):
            raise ConfigError(f"TranscriptStore: group_commit must be True or False, "
                              f"got {group_commit!r}")
        if alone_driver not in ("psycopg", "sqlalchemy"):
            raise ConfigError(f"TranscriptStore: alone_driver must be 'psycopg' or 'sqlalchemy', "
                              f"got {alone_driver!r}")
        given_sync = url_or_engine if isinstance(url_or_engine, sa.Engine) else None
        given_async = url_or_engine if isinstance(url_or_engine, AsyncEngine) else None
        url: sa.URL
        if given_sync is not None:
            url = given_sync.url
        elif given_async is not None:
            url = given_async.url
        else:
            url = sa.make_url(url_or_engine)  # type: ignore[arg-type]
        sync_url, async_url = _urls(url)
        pool = {"pool_size": pool_size, "max_overflow": max_overflow,
                "pool_timeout": pool_timeout, "pool_pre_ping": False}
        self.engine: sa.Engine = given_sync or sa.create_engine(sync_url, **pool)
        self.async_engine: AsyncEngine = given_async or create_async_engine(async_url, **pool)
        self.dialect = self.engine.dialect.name
        if self.dialect == "sqlite":
            _sqlite_setup(self.engine)
            _sqlite_setup(self.async_engine.sync_engine)
        else:  # a restarted server: replace dead pooled connections, no ping per call
            drop_hung_up_connections(self.engine)
            drop_hung_up_connections(self.async_engine.sync_engine)
        self.retention = retention
        self.search_index = search_index
        self._ctx = ops.Ctx(
            dialect=self.dialect, clock=clock, retention=retention, search_index=search_index
        )
        # every loop but the pool's own shares one unpooled engine (see ``_aengine``)
        self._unpooled: AsyncEngine = create_async_engine(self.async_engine.url, poolclass=NullPool)
        if self.dialect == "sqlite":
            _sqlite_setup(self._unpooled.sync_engine)
        self._pool_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        # PostgreSQL over psycopg only (SQLite, or an engine given on another driver,
        # keeps SQLAlchemy's connection); one per engine, each caching its compilations
        self._driver_alone, self._adriver_alone = (
            _DriverAlone(group_commit=batched)
            if alone_driver == "psycopg" and self.dialect == "postgresql"
            and engine.dialect.driver == "psycopg" else None
            for engine, batched in ((self.engine, False), (self.async_engine, group_commit))
        )

    # ------------------------------------------------------------ plumbing

    def _alone(self, step: ops.Step) -> bool:
        """Run this first step without BEGIN/COMMIT (PostgreSQL; SQLite keeps its lock)."""
        return isinstance(step, ops.Alone) and self.dialect == "postgresql"

    def _run(self, op: ops.Op[T], *, write: bool = False, snapshot: bool = False) -> T:
        """Run ``op`` in one transaction (``snapshot``: every read of it sees one moment,
        REPEATABLE READ on PostgreSQL; SQLite's read transactions always do)."""
        first = start(op)
        if isinstance(first, Done):
            return first.value
        try:
            if self._driver_alone is not None and self._alone(first.request) \
                    and not _cursor_listeners(self.engine):
                run = self._driver_alone.run
                return drive(op, _only_once(lambda step: run(self.engine, step)), started=first)
            with self.engine.connect() as conn:
                answer = _answer(conn.execute)
                if self._alone(first.request):
                    conn.execution_options(isolation_level="AUTOCOMMIT")
                    return drive(op, _only_once(answer), started=first)
                if write:
                    conn.execution_options(convmem_write=True)
                if snapshot and self.dialect == "postgresql":
                    conn.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    return drive(op, answer, started=first)
        except _UNAVAILABLE as exc:
            raise TranscriptUnavailable(f"transcript database unavailable: {exc}") from exc
        finally:
            op.close()  # also when connecting failed before ``drive`` took it

    async def _aengine(self) -> AsyncEngine:
        """The async engine for the running event loop.

        A pooled async engine belongs to one event loop (its pool's queue binds to
        the loop that first waits on it), yet callers such as LlamaIndex's sync
        wrappers run each call on a fresh loop in another thread. So the pool serves
        one loop at a time: the first loop to ask, or the next one after that loop
        has closed (the pool is then disposed and rebuilt, its idle connections
        closed). Any other loop uses an unpooled engine, which keeps no connection
        and no loop-bound state between calls.
        """
        loop = asyncio.get_running_loop()
        owner = self._pool_loop() if self._pool_loop is not None else None
        if owner is loop:
            return self.async_engine
        if owner is None or owner.is_closed():
            first = self._pool_loop is None
            self._pool_loop = weakref.ref(loop)
            if not first:
                # swap in a fresh pool before awaiting anything, so every coroutine of
                # this loop gets it; then close the old pool's idle connections
                sync_engine = self.async_engine.sync_engine
                old = sync_engine.pool
                sync_engine.pool = old.recreate()
                await greenlet_spawn(old.dispose)
            return self.async_engine
        return self._unpooled

    async def _arun(self, op: ops.Op[T], *, write: bool = False, snapshot: bool = False) -> T:
        first = start(op)
        if isinstance(first, Done):
            return first.value
        try:
            engine = await self._aengine()
            if self._adriver_alone is not None and self._alone(first.request) \
                    and not _cursor_listeners(engine.sync_engine):
                arun = self._adriver_alone.arun
                return await adrive(op, _only_once(lambda step: arun(engine, step)), started=first)
            async with engine.connect() as conn:
                answer = _aanswer(conn.execute)
                if self._alone(first.request):
                    await conn.execution_options(isolation_level="AUTOCOMMIT")
                    return await adrive(op, _only_once(answer), started=first)
                if write:
                    await conn.execution_options(convmem_write=True)
                if snapshot and self.dialect == "postgresql":
                    await conn.execution_options(isolation_level="REPEATABLE READ")
                async with conn.begin():
                    return await adrive(op, answer, started=first)
        except _UNAVAILABLE as exc:
            raise TranscriptUnavailable(f"transcript database unavailable: {exc}") from exc
        finally:
            op.close()

    def _erase_residue(self) -> None:
        """After content left: checkpoint SQLite's WAL / vacuum PostgreSQL's tables."""
        if self.dialect == "sqlite":
            raw = self.engine.raw_connection()
            try:
                cur = raw.cursor()
                cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                cur.close()
            finally:
                raw.close()
        else:
            with self.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.exec_driver_sql("VACUUM " + ", ".join(CONTENT_TABLES))

    async def _aerase_residue(self) -> None:
        if self.dialect == "sqlite":
            async with (await self._aengine()).connect() as conn:
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                assert driver is not None
                await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            async with (await self._aengine()).connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.exec_driver_sql("VACUUM " + ", ".join(CONTENT_TABLES))

    # ------------------------------------------------------------ schema

    def migrate(self, revision: str = "head") -> None:
        """Create or upgrade the schema with the shipped Alembic revisions.

        Alembic is imported here, not with the store: only migrations need it.
        """
        from convmem.transcript import migrate as _migrate

        try:
            _migrate.upgrade(self.engine, revision)
        except _UNAVAILABLE as exc:
            raise TranscriptUnavailable(f"transcript database unavailable: {exc}") from exc

    def has_schema(self) -> bool:
        """Whether the database was ever migrated (a cheap check, no Alembic)."""
        try:
            with self.engine.connect() as conn:
                return sa.inspect(conn).has_table(_VERSION_TABLE)
        except _UNAVAILABLE as exc:
            raise TranscriptUnavailable(f"transcript database unavailable: {exc}") from exc

    # ------------------------------------------------------------ physical erasure

    def purge_physical(self) -> list[str]:
        """Rewrite the record's files so that what redactions and deletions took out
        leaves the disk as well, not only the rows; one line per step, done or skipped.

        Deletion and redaction leave old row versions, dead index entries (PostgreSQL's
        GIN index never drops a word) and sampled statistics behind until the files are
        rewritten (docs/transcript.md, "Physical erasure"). PostgreSQL: ``VACUUM (FULL,
        ANALYZE)`` of each content table (a new file for the table, its TOAST table and
        every index; fresh statistics), then ``VACUUM (FULL)`` of ``pg_statistic`` and a
        ``CHECKPOINT`` where the role may (a superuser). Each table is locked while it is
        rewritten. SQLite: the search index merged, ``VACUUM``, the WAL truncated. The
        WAL, archives, replicas and backups are out of reach of both.
        """
        try:
            if self.dialect == "sqlite":
                return self._purge_sqlite()
            return self._purge_postgres()
        except _UNAVAILABLE as exc:
            raise TranscriptUnavailable(f"transcript database unavailable: {exc}") from exc

    def _purge_postgres(self) -> list[str]:
        done: list[str] = []
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")

            def rewrite(table: str, statement: str) -> None:
                """``statement`` on ``table``: rewritten iff its file changed (VACUUM
                only warns, and skips, a table the role may not rewrite)."""
                before = conn.execute(_PG_FILE, {"t": table}).one()
                conn.exec_driver_sql(f"{statement} {table}")
                after = conn.execute(_PG_FILE, {"t": table}).one()
                if after.node == before.node:
                    done.append(f"skipped {statement} {table}: not rewritten (only its owner "
                                "or a superuser may)")
                else:
                    done.append(f"{statement} {table}: {before.size} -> {after.size}")

            for table in CONTENT_TABLES:
                rewrite(table, "VACUUM (FULL, ANALYZE)")
            rewrite("pg_catalog.pg_statistic", "VACUUM (FULL)")  # the old statistics
            try:
                conn.exec_driver_sql("CHECKPOINT")
                done.append("CHECKPOINT: done (the old files are unlinked)")
            except sa.exc.DBAPIError as exc:
                if getattr(exc.orig, "sqlstate", None) != "42501":  # insufficient privilege
                    raise
                done.append("skipped CHECKPOINT: not permitted (a superuser, or pg_checkpoint "
                            "on PostgreSQL 15+); the old files go at the next checkpoint")
        done.append("not reached: the WAL, its archives, replicas and backups")
        return done

    def _purge_sqlite(self) -> list[str]:
        self._run(ops.optimize_search(), write=True)
        done = ["search index: segments merged (deleted words dropped)"]
        raw = self.engine.raw_connection()
        try:
            cur = raw.cursor()
            size = "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
            before = cur.execute(size).fetchone()[0]
            cur.execute("VACUUM")
            after = cur.execute(size).fetchone()[0]
            done.append(f"VACUUM: {before} -> {after} bytes (the file rewritten)")
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            done.append("WAL: checkpointed and truncated")
            if cur.execute("PRAGMA secure_delete").fetchone()[0]:
                done.append("secure_delete: on (the store's connections zero what they free)")
            else:
                done.append("secure_delete: OFF on this connection; freed pages keep their bytes")
            cur.close()
        finally:
            raw.close()
        done.append("not reached: copies of the file (backups, snapshots)")
        return done

    def close(self) -> None:
        """Dispose of the sync pool (``aclose`` for the async one)."""
        self.engine.dispose()

    async def aclose(self) -> None:
        """Dispose of both pools."""
        await self.async_engine.dispose()
        await self._unpooled.dispose()
        self.engine.dispose()

    # ------------------------------------------------------------ what the twins call

    def _load_tokenizer(self) -> None:
        """The renderer's tokenizer, read before a redaction needs it."""
        encoding()

    async def _aload_tokenizer(self) -> None:
        await asyncio.to_thread(encoding)  # read off the loop, once

    def _open_document(self, data: ImportSource) -> tuple[BinaryIO, bool]:
        """An import document as a seekable binary stream, and whether it is ours to close."""
        return _open_source(data)

    async def _aopen_document(self, data: ImportSource) -> tuple[BinaryIO, bool]:
        if _needs_thread(data):
            return await asyncio.to_thread(_open_source, data)
        return _open_source(data)

    def _close_document(self, source: BinaryIO, owned: bool) -> None:
        if owned:
            source.close()

    async def _aclose_document(self, source: BinaryIO, owned: bool) -> None:
        if owned:
            if isinstance(source, io.BytesIO):
                source.close()
            else:
                await asyncio.to_thread(source.close)

    @staticmethod
    def _editor(content: Content, author: str | None) -> Callable[[Message], NewMessage]:
        def make(old: Message) -> NewMessage:
            return NewMessage(
                role=old.role,
                content=content,
                author=author if author is not None else old.author,
                visibility=old.visibility,
            )

        return make

    @staticmethod
    def _regenerator(answer: NewMessage | Content) -> Callable[[Message], NewMessage]:
        def make(old: Message) -> NewMessage:
            if isinstance(answer, NewMessage):
                return answer
            return NewMessage(role="assistant", content=answer, author=old.author)

        return make
