"""``TranscriptStore``: the durable record on SQLite or PostgreSQL, sync and async.

One class, one implementation for both databases. Every operation lives once in
``convmem.transcript.ops`` as a generator of statements; ``_run`` drives it on a
sync connection, ``_arun`` on an async one (aiosqlite / psycopg 3 async), each in
one transaction, so the twins share every statement and decision and only the
I/O differs (the httpx/httpcore pattern). An operation that is one ``ops.Alone``
statement runs on PostgreSQL in autocommit mode instead (one statement is atomic;
BEGIN and COMMIT would be two more round trips). Write transactions on SQLite
start with ``BEGIN IMMEDIATE`` (its stand-in for a row lock); SQLite runs in WAL mode with
``secure_delete`` on, and after a redaction or deletion its WAL is checkpointed
(``TRUNCATE``) while PostgreSQL vacuums the touched tables. Old WAL archives and
backups are outside the store's reach. A database error that means "the record
cannot be written or read" (connection, lock timeout, pool exhaustion) surfaces as
``TranscriptUnavailable``; callers decide whether a turn may proceed without it.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import tempfile
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, BinaryIO, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.util import greenlet_spawn

from convmem.errors import ConfigError, TranscriptUnavailable
from convmem.tokens import encoding
from convmem.transcript import ops
from convmem.transcript.document import ImportLimits
from convmem.transcript.errors import ImportRefused
from convmem.transcript.export import canonical_dumps
from convmem.transcript.models import CONTENT_TABLES
from convmem.transcript.pool import drop_hung_up_connections
from convmem.transcript.records import (
    DeletionReceipt,
    DerivedMemory,
    Message,
    ModelInput,
    NewMessage,
    Part,
    ReconstructedInput,
    RedactionReceipt,
    RetentionPolicy,
    SearchHit,
    SweepReport,
    Thread,
    ThreadTree,
    TurnBinding,
    TurnRecord,
)

log = logging.getLogger("convmem.transcript")
T = TypeVar("T")
Progress = Callable[[int, int], None]
_UNAVAILABLE = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError)
_Content = str | Sequence[Part]
_VERSION_TABLE = "convmem_alembic_version"  # convmem.transcript.migrate.VERSION_TABLE


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


def _collided(exc: sa.exc.IntegrityError) -> ImportRefused:
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


def _after_alone(op: ops.Op[Any]) -> None:
    op.close()
    raise RuntimeError("an operation yielded a statement after its Alone step")


def _drive(execute: Callable[..., Any], op: ops.Op[T], step: ops.Step, alone: bool) -> T:
    """Run a statement generator, whose first step is ``step``, with a synchronous ``execute``."""
    try:
        while True:
            step = op.send(_execute(execute, step))
            if alone:
                _after_alone(op)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        op.close()


async def _adrive(
    execute: Callable[..., Coroutine[Any, Any, Any]], op: ops.Op[T], step: ops.Step, alone: bool
) -> T:
    """Run a statement generator, whose first step is ``step``, with an awaitable ``execute``."""
    try:
        while True:
            result = await _afile_io(step) if isinstance(step, _FILE_IO) else await _execute(
                execute, step
            )
            step = op.send(result)
            if alone:
                _after_alone(op)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        op.close()


class TranscriptStore:
    """The durable conversation record (see the module docstring).

    ``retention`` is required: there is no implicit "keep forever". Every method
    takes ``tenant`` first and refuses (``ThreadNotFound``) a thread of another
    tenant. Each ``x`` has a natively async twin ``ax``.

    Each engine (sync, async) pools ``pool_size`` connections and opens up to
    ``max_overflow`` more under load, closed again when returned to a full pool; a
    call waits at most ``pool_timeout`` seconds for a free one, then fails with
    ``TranscriptUnavailable``. A turn holds a connection for one transaction at a time
    (three per agent turn), so concurrent turns beyond the pool queue for it rather
    than opening connections (docs/scaling.md). An engine passed in keeps its own pool.
    """

    def __init__(
        self,
        url_or_engine: str | sa.URL | sa.Engine | AsyncEngine,
        *,
        retention: RetentionPolicy,
        clock: Callable[[], datetime] = _utcnow,
        pool_size: int = 5,
        max_overflow: int = 20,
        pool_timeout: float = 30.0,
    ) -> None:
        if not isinstance(retention, RetentionPolicy):
            raise ConfigError("TranscriptStore: retention must be a RetentionPolicy")
        for name, value in (("pool_size", pool_size), ("max_overflow", max_overflow)):
            if type(value) is not int or value < 0:
                raise ConfigError(f"TranscriptStore: {name} must be a non-negative integer, "
                                  f"got {value!r}")
        if not isinstance(pool_timeout, int | float) or not pool_timeout > 0:
            raise ConfigError(f"TranscriptStore: pool_timeout must be positive seconds, "
                              f"got {pool_timeout!r}")
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
        self._ctx = ops.Ctx(dialect=self.dialect, clock=clock, retention=retention)
        # every loop but the pool's own shares one unpooled engine (see ``_aengine``)
        self._unpooled: AsyncEngine = create_async_engine(self.async_engine.url, poolclass=NullPool)
        if self.dialect == "sqlite":
            _sqlite_setup(self._unpooled.sync_engine)
        self._pool_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    # ------------------------------------------------------------ plumbing

    def _alone(self, step: ops.Step) -> bool:
        """Run this first step without BEGIN/COMMIT (PostgreSQL; SQLite keeps its lock)."""
        return isinstance(step, ops.Alone) and self.dialect == "postgresql"

    def _run(self, op: ops.Op[T], *, write: bool = False, snapshot: bool = False) -> T:
        """Run ``op`` in one transaction (``snapshot``: every read of it sees one moment,
        REPEATABLE READ on PostgreSQL; SQLite's read transactions always do)."""
        try:
            step = next(op)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            with self.engine.connect() as conn:
                if self._alone(step):
                    conn.execution_options(isolation_level="AUTOCOMMIT")
                    return _drive(conn.execute, op, step, alone=True)
                if write:
                    conn.execution_options(convmem_write=True)
                if snapshot and self.dialect == "postgresql":
                    conn.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    return _drive(conn.execute, op, step, alone=False)
        except _UNAVAILABLE as exc:
            raise TranscriptUnavailable(f"transcript database unavailable: {exc}") from exc

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
        try:
            step = next(op)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            async with (await self._aengine()).connect() as conn:
                if self._alone(step):
                    await conn.execution_options(isolation_level="AUTOCOMMIT")
                    return await _adrive(conn.execute, op, step, alone=True)
                if write:
                    await conn.execution_options(convmem_write=True)
                if snapshot and self.dialect == "postgresql":
                    await conn.execution_options(isolation_level="REPEATABLE READ")
                async with conn.begin():
                    return await _adrive(conn.execute, op, step, alone=False)
        except _UNAVAILABLE as exc:
            raise TranscriptUnavailable(f"transcript database unavailable: {exc}") from exc

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

    def close(self) -> None:
        """Dispose of the sync pool (``aclose`` for the async one)."""
        self.engine.dispose()

    async def aclose(self) -> None:
        """Dispose of both pools."""
        await self.async_engine.dispose()
        await self._unpooled.dispose()
        self.engine.dispose()

    # ------------------------------------------------------------ threads

    def create_thread(
        self,
        tenant: str,
        *,
        key: str | None = None,
        owner: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        retention: RetentionPolicy | None = None,
        thread_id: str | None = None,
    ) -> Thread:
        """A new thread (``ThreadExists`` if the id or key is taken)."""
        return self._run(
            ops.create_thread(
                self._ctx,
                tenant,
                thread_id=thread_id,
                key=key,
                owner=owner,
                title=title,
                metadata=metadata,
                retention=retention,
            ),
            write=True,
        )

    async def acreate_thread(
        self,
        tenant: str,
        *,
        key: str | None = None,
        owner: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        retention: RetentionPolicy | None = None,
        thread_id: str | None = None,
    ) -> Thread:
        """Async ``create_thread``."""
        return await self._arun(
            ops.create_thread(
                self._ctx,
                tenant,
                thread_id=thread_id,
                key=key,
                owner=owner,
                title=title,
                metadata=metadata,
                retention=retention,
            ),
            write=True,
        )

    def get_or_create_thread(
        self,
        tenant: str,
        key: str,
        *,
        owner: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """The one thread of ``tenant`` for the application's ``key`` (any string):
        one read when it exists (the common case), an upsert when it does not."""
        found = self._run(ops.find_thread(tenant, key))
        if found is not None:
            return found
        return self._run(
            ops.get_or_create_thread(
                self._ctx, tenant, key, owner=owner, title=title, metadata=metadata
            ),
            write=True,
        )

    async def aget_or_create_thread(
        self,
        tenant: str,
        key: str,
        *,
        owner: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Async ``get_or_create_thread``."""
        found = await self._arun(ops.find_thread(tenant, key))
        if found is not None:
            return found
        return await self._arun(
            ops.get_or_create_thread(
                self._ctx, tenant, key, owner=owner, title=title, metadata=metadata
            ),
            write=True,
        )

    def bind_turn(self, tenant: str, key: str, *, recent: int = 12) -> TurnBinding:
        """What a turn binds to when it begins (``SessionMemory`` calls this once per
        turn): the key's thread, created if need be, whose ``incarnation`` the turn's
        writes must find again (``incarnation=`` on ``begin_turn_record``,
        ``complete_turn``, ``append``), and the ids, parts and ``extra`` of its last
        ``recent`` user messages (what the turn's block may quote). One read when the
        thread exists."""
        found = self._run(ops.bind_turn(tenant, key, recent))
        if found is None:
            return TurnBinding(self.get_or_create_thread(tenant, key), ())
        return TurnBinding(found[0], tuple(found[1]))

    async def abind_turn(self, tenant: str, key: str, *, recent: int = 12) -> TurnBinding:
        """Async ``bind_turn``."""
        found = await self._arun(ops.bind_turn(tenant, key, recent))
        if found is None:
            return TurnBinding(await self.aget_or_create_thread(tenant, key), ())
        return TurnBinding(found[0], tuple(found[1]))

    def get_thread(self, tenant: str, thread_id: str) -> Thread:
        """One thread."""
        return self._run(ops.get_thread(tenant, thread_id))

    async def aget_thread(self, tenant: str, thread_id: str) -> Thread:
        """Async ``get_thread``."""
        return await self._arun(ops.get_thread(tenant, thread_id))

    def list_threads(self, tenant: str, *, limit: int | None = None) -> list[Thread]:
        """The tenant's threads, most recently active first."""
        return self._run(ops.list_threads(tenant, limit))

    async def alist_threads(self, tenant: str, *, limit: int | None = None) -> list[Thread]:
        """Async ``list_threads``."""
        return await self._arun(ops.list_threads(tenant, limit))

    def set_retention(self, tenant: str, thread_id: str, policy: RetentionPolicy | None) -> None:
        """Per-thread retention override (``None``: the store default)."""
        self._run(ops.set_retention(tenant, thread_id, policy), write=True)

    async def aset_retention(
        self, tenant: str, thread_id: str, policy: RetentionPolicy | None
    ) -> None:
        """Async ``set_retention``."""
        await self._arun(ops.set_retention(tenant, thread_id, policy), write=True)

    def fork_thread(
        self,
        tenant: str,
        thread_id: str,
        at_message_id: str,
        *,
        key: str | None = None,
        title: str | None = None,
    ) -> Thread:
        """Split: a new thread with copies of the path up to ``at_message_id``.

        There is no merge: two histories cannot be interleaved without rewriting
        sequence numbers somebody may already have quoted.
        """
        return self._run(
            ops.fork_thread(self._ctx, tenant, thread_id, at_message_id, key, title), write=True
        )

    async def afork_thread(
        self,
        tenant: str,
        thread_id: str,
        at_message_id: str,
        *,
        key: str | None = None,
        title: str | None = None,
    ) -> Thread:
        """Async ``fork_thread``."""
        return await self._arun(
            ops.fork_thread(self._ctx, tenant, thread_id, at_message_id, key, title), write=True
        )

    # ------------------------------------------------------------ appends

    def append(
        self,
        tenant: str,
        thread_id: str,
        messages: NewMessage | Sequence[NewMessage],
        *,
        parent_id: str | ops._Active | None = ops.ACTIVE,
        activate: bool = True,
        incarnation: str | None = None,
    ) -> list[Message]:
        """Append after the active leaf (locked), or under ``parent_id`` as a branch.
        ``incarnation`` (a turn's binding): only into that incarnation of the thread,
        else ``ThreadDeleted`` and nothing written."""
        batch = [messages] if isinstance(messages, NewMessage) else list(messages)
        return self._run(
            ops.append(self._ctx, tenant, thread_id, batch, parent_id, activate, incarnation),
            write=True,
        )

    async def aappend(
        self,
        tenant: str,
        thread_id: str,
        messages: NewMessage | Sequence[NewMessage],
        *,
        parent_id: str | ops._Active | None = ops.ACTIVE,
        activate: bool = True,
        incarnation: str | None = None,
    ) -> list[Message]:
        """Async ``append``."""
        batch = [messages] if isinstance(messages, NewMessage) else list(messages)
        return await self._arun(
            ops.append(self._ctx, tenant, thread_id, batch, parent_id, activate, incarnation),
            write=True,
        )

    def begin_turn_record(
        self,
        tenant: str,
        thread_id: str,
        user_message: NewMessage,
        model_input: ModelInput,
        *,
        parent_id: str | ops._Active | None = ops.ACTIVE,
        incarnation: str | None = None,
    ) -> TurnRecord:
        """Commit point 1, before the model call (``TranscriptUnavailable`` if it fails;
        ``ThreadDeleted`` if ``incarnation`` is no longer the thread's)."""
        return self._run(
            ops.begin_turn_record(
                self._ctx, tenant, thread_id, user_message, model_input, parent_id, incarnation
            ),
            write=True,
        )

    async def abegin_turn_record(
        self,
        tenant: str,
        thread_id: str,
        user_message: NewMessage,
        model_input: ModelInput,
        *,
        parent_id: str | ops._Active | None = ops.ACTIVE,
        incarnation: str | None = None,
    ) -> TurnRecord:
        """Async ``begin_turn_record``."""
        return await self._arun(
            ops.begin_turn_record(
                self._ctx, tenant, thread_id, user_message, model_input, parent_id, incarnation
            ),
            write=True,
        )

    def complete_turn(
        self,
        tenant: str,
        thread_id: str,
        turn_id: str,
        messages: Sequence[NewMessage],
        *,
        incarnation: str | None = None,
    ) -> list[Message]:
        """Commit point 2: tool calls, results and answer in one transaction."""
        return self._run(
            ops.complete_turn(self._ctx, tenant, thread_id, turn_id, list(messages), incarnation),
            write=True,
        )

    async def acomplete_turn(
        self,
        tenant: str,
        thread_id: str,
        turn_id: str,
        messages: Sequence[NewMessage],
        *,
        incarnation: str | None = None,
    ) -> list[Message]:
        """Async ``complete_turn``."""
        return await self._arun(
            ops.complete_turn(self._ctx, tenant, thread_id, turn_id, list(messages), incarnation),
            write=True,
        )

    @staticmethod
    def _editor(content: _Content, author: str | None) -> Callable[[Message], NewMessage]:
        def make(old: Message) -> NewMessage:
            return NewMessage(
                role=old.role,
                content=content,
                author=author if author is not None else old.author,
                visibility=old.visibility,
            )

        return make

    @staticmethod
    def _regenerator(answer: NewMessage | _Content) -> Callable[[Message], NewMessage]:
        def make(old: Message) -> NewMessage:
            if isinstance(answer, NewMessage):
                return answer
            return NewMessage(role="assistant", content=answer, author=old.author)

        return make

    def edit(
        self,
        tenant: str,
        thread_id: str,
        message_id: str,
        content: _Content,
        *,
        author: str | None = None,
    ) -> Message:
        """A new sibling with the new content, made active; the old message stays."""
        return self._run(
            ops.sibling(
                self._ctx, tenant, thread_id, message_id, self._editor(content, author), None
            ),
            write=True,
        )

    async def aedit(
        self,
        tenant: str,
        thread_id: str,
        message_id: str,
        content: _Content,
        *,
        author: str | None = None,
    ) -> Message:
        """Async ``edit``."""
        return await self._arun(
            ops.sibling(
                self._ctx, tenant, thread_id, message_id, self._editor(content, author), None
            ),
            write=True,
        )

    def regenerate(
        self, tenant: str, thread_id: str, message_id: str, answer: NewMessage | _Content
    ) -> Message:
        """A new sibling answer to the same question, made active; the old answer stays.
        It keeps the old answer's ``turn_id``: the turn's model input produced both."""
        return self._run(
            ops.sibling(
                self._ctx, tenant, thread_id, message_id, self._regenerator(answer), "assistant",
                keep_turn=True,
            ),
            write=True,
        )

    async def aregenerate(
        self, tenant: str, thread_id: str, message_id: str, answer: NewMessage | _Content
    ) -> Message:
        """Async ``regenerate``."""
        return await self._arun(
            ops.sibling(
                self._ctx, tenant, thread_id, message_id, self._regenerator(answer), "assistant",
                keep_turn=True,
            ),
            write=True,
        )

    def branches(self, tenant: str, thread_id: str, message_id: str) -> list[Message]:
        """The alternatives at ``message_id``'s position (itself and its siblings)."""
        return self._run(ops.branches(tenant, thread_id, message_id))

    async def abranches(self, tenant: str, thread_id: str, message_id: str) -> list[Message]:
        """Async ``branches``."""
        return await self._arun(ops.branches(tenant, thread_id, message_id))

    def switch(self, tenant: str, thread_id: str, message_id: str) -> Message:
        """Activate the branch through ``message_id`` (to its newest leaf); returns the leaf."""
        return self._run(ops.switch(tenant, thread_id, message_id), write=True)

    async def aswitch(self, tenant: str, thread_id: str, message_id: str) -> Message:
        """Async ``switch``."""
        return await self._arun(ops.switch(tenant, thread_id, message_id), write=True)

    def set_active_leaf(self, tenant: str, thread_id: str, message_id: str | None) -> None:
        """Move the pointer; ``None`` = empty active path (a framework's ``clear()``)."""
        self._run(ops.set_active_leaf(tenant, thread_id, message_id), write=True)

    async def aset_active_leaf(self, tenant: str, thread_id: str, message_id: str | None) -> None:
        """Async ``set_active_leaf``."""
        await self._arun(ops.set_active_leaf(tenant, thread_id, message_id), write=True)

    def rebase_path(
        self, tenant: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[Message]:
        """Make the active path equal ``messages`` (prefix reused, rest as a branch)."""
        return self._run(ops.rebase_path(self._ctx, tenant, thread_id, list(messages)), write=True)

    async def arebase_path(
        self, tenant: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[Message]:
        """Async ``rebase_path``."""
        return await self._arun(
            ops.rebase_path(self._ctx, tenant, thread_id, list(messages)), write=True
        )

    def archive_through(self, tenant: str, thread_id: str, seq: int) -> int:
        """Raise the archive watermark to ``seq``; returns the watermark."""
        return self._run(ops.archive_through(tenant, thread_id, seq), write=True)

    async def aarchive_through(self, tenant: str, thread_id: str, seq: int) -> int:
        """Async ``archive_through``."""
        return await self._arun(ops.archive_through(tenant, thread_id, seq), write=True)

    # ------------------------------------------------------------ reads

    def active_path(
        self, tenant: str, thread_id: str, *, include_archived: bool = True
    ) -> list[Message]:
        """Root → active leaf, in one SELECT."""
        return self._run(ops.read_path(tenant, thread_id, include_archived=include_archived))

    async def aactive_path(
        self, tenant: str, thread_id: str, *, include_archived: bool = True
    ) -> list[Message]:
        """Async ``active_path``."""
        return await self._arun(ops.read_path(tenant, thread_id, include_archived=include_archived))

    def tree(self, tenant: str, thread_id: str) -> ThreadTree:
        """Every message of every branch and the active path."""
        return self._run(ops.tree(tenant, thread_id))

    async def atree(self, tenant: str, thread_id: str) -> ThreadTree:
        """Async ``tree``."""
        return await self._arun(ops.tree(tenant, thread_id))

    def get_messages(self, tenant: str, thread_id: str, ids: Sequence[str]) -> list[Message]:
        """Messages by id, in seq order."""
        return self._run(ops.get_messages(tenant, thread_id, list(ids)))

    async def aget_messages(self, tenant: str, thread_id: str, ids: Sequence[str]) -> list[Message]:
        """Async ``get_messages``."""
        return await self._arun(ops.get_messages(tenant, thread_id, list(ids)))

    def get_attachment(self, tenant: str, sha256: str) -> bytes:
        """Attachment bytes by digest."""
        return self._run(ops.get_attachment(tenant, sha256))

    async def aget_attachment(self, tenant: str, sha256: str) -> bytes:
        """Async ``get_attachment``."""
        return await self._arun(ops.get_attachment(tenant, sha256))

    def reconstruct_model_input(
        self, tenant: str, thread_id: str, turn_id: str
    ) -> ReconstructedInput:
        """What the model received on ``turn_id``, rebuilt from the record."""
        return self._run(ops.reconstruct_model_input(tenant, thread_id, turn_id))

    async def areconstruct_model_input(
        self, tenant: str, thread_id: str, turn_id: str
    ) -> ReconstructedInput:
        """Async ``reconstruct_model_input``."""
        return await self._arun(ops.reconstruct_model_input(tenant, thread_id, turn_id))

    def search(
        self, tenant: str, query: str, *, thread_id: str | None = None, limit: int = 20
    ) -> list[SearchHit]:
        """Full-text search over the tenant's messages."""
        return self._run(ops.search(self._ctx, tenant, query, thread_id, limit))

    async def asearch(
        self, tenant: str, query: str, *, thread_id: str | None = None, limit: int = 20
    ) -> list[SearchHit]:
        """Async ``search``."""
        return await self._arun(ops.search(self._ctx, tenant, query, thread_id, limit))

    # ------------------------------------------------------------ derived memories

    def add_derived(
        self,
        tenant: str,
        thread_id: str,
        kind: str,
        content: str,
        source_message_ids: Sequence[str],
    ) -> DerivedMemory:
        """Record a memory derived from the thread (redaction and deletion reach it)."""
        return self._run(
            ops.add_derived(self._ctx, tenant, thread_id, kind, content, list(source_message_ids)),
            write=True,
        )

    async def aadd_derived(
        self,
        tenant: str,
        thread_id: str,
        kind: str,
        content: str,
        source_message_ids: Sequence[str],
    ) -> DerivedMemory:
        """Async ``add_derived``."""
        return await self._arun(
            ops.add_derived(self._ctx, tenant, thread_id, kind, content, list(source_message_ids)),
            write=True,
        )

    def list_derived(self, tenant: str, thread_id: str) -> list[DerivedMemory]:
        """The thread's derived memories (tombstones included)."""
        return self._run(ops.list_derived(tenant, thread_id))

    async def alist_derived(self, tenant: str, thread_id: str) -> list[DerivedMemory]:
        """Async ``list_derived``."""
        return await self._arun(ops.list_derived(tenant, thread_id))

    # ------------------------------------------------------------ export / import

    def export_thread(self, tenant: str, thread_id: str) -> str:
        """The whole thread as canonical JSON (``convmem.thread`` v1); for big threads
        ``export_thread_to`` streams it instead."""
        out = io.BytesIO()
        self.export_thread_to(tenant, thread_id, out)
        return out.getvalue().decode("utf-8")

    async def aexport_thread(self, tenant: str, thread_id: str) -> str:
        """Async ``export_thread``."""
        out = io.BytesIO()
        await self.aexport_thread_to(tenant, thread_id, out)
        return out.getvalue().decode("utf-8")

    def export_thread_to(self, tenant: str, thread_id: str, sink: BinaryIO) -> None:
        """Write the canonical export to a binary stream, a page at a time: memory holds
        one page of the thread, never all of it (``convmem.transcript.exchange``)."""
        from convmem.transcript import exchange

        self._run(exchange.export_thread(self._ctx, tenant, thread_id, sink), snapshot=True)

    async def aexport_thread_to(self, tenant: str, thread_id: str, sink: BinaryIO) -> None:
        """Async ``export_thread_to`` (writes to a file happen off the event loop)."""
        from convmem.transcript import exchange

        await self._arun(exchange.export_thread(self._ctx, tenant, thread_id, sink), snapshot=True)

    def export_user_view(self, tenant: str, thread_id: str) -> str:
        """The user's view (active path, conversation only) as canonical JSON."""
        return canonical_dumps(self._run(ops.export_user_view(tenant, thread_id)))

    async def aexport_user_view(self, tenant: str, thread_id: str) -> str:
        """Async ``export_user_view``."""
        return canonical_dumps(await self._arun(ops.export_user_view(tenant, thread_id)))

    def import_thread(
        self,
        tenant: str,
        data: ImportSource,
        *,
        new_id: bool = False,
        limits: ImportLimits | None = None,
    ) -> Thread:
        """Load an export into ``tenant``: ``data`` is the document (text, bytes, a
        parsed mapping, a binary stream or a path). The whole document is validated
        before anything is written; a refusal is one ``ImportRefused`` naming the JSON
        path, and nothing is written. An id or key this tenant already has raises
        ``ThreadExists`` unless ``new_id=True`` (fresh ids, key dropped); ids are per
        tenant, so another tenant's ids are free. Memory stays bounded whatever the
        document's size (two passes over it; a stream that cannot seek is spooled to
        a temporary file first)."""
        from convmem.transcript import exchange

        source, owned = _open_source(data)
        try:
            return self._run(
                exchange.import_thread(self._ctx, tenant, source, new_id, limits or ImportLimits()),
                write=True,
            )
        except sa.exc.IntegrityError as exc:
            raise _collided(exc) from exc
        finally:
            if owned:
                source.close()

    async def aimport_thread(
        self,
        tenant: str,
        data: ImportSource,
        *,
        new_id: bool = False,
        limits: ImportLimits | None = None,
    ) -> Thread:
        """Async ``import_thread`` (file reads happen off the event loop)."""
        from convmem.transcript import exchange

        if _needs_thread(data):
            source, owned = await asyncio.to_thread(_open_source, data)
        else:
            source, owned = _open_source(data)
        try:
            return await self._arun(
                exchange.import_thread(self._ctx, tenant, source, new_id, limits or ImportLimits()),
                write=True,
            )
        except sa.exc.IntegrityError as exc:
            raise _collided(exc) from exc
        finally:
            if owned:
                if isinstance(source, io.BytesIO):
                    source.close()
                else:
                    await asyncio.to_thread(source.close)

    # ------------------------------------------------------------ redaction, deletion, retention

    def redact(
        self,
        tenant: str,
        thread_id: str,
        message_id: str,
        *,
        actor: str,
        reason: str,
        replacement: str = "[redacted]",
    ) -> RedactionReceipt:
        """Remove a message's content everywhere it reached (see ``ops.redact``)."""
        receipt = self._run(
            ops.redact(self._ctx, tenant, thread_id, message_id, actor, reason, replacement),
            write=True,
        )
        self._erase_residue()
        return receipt

    async def aredact(
        self,
        tenant: str,
        thread_id: str,
        message_id: str,
        *,
        actor: str,
        reason: str,
        replacement: str = "[redacted]",
    ) -> RedactionReceipt:
        """Async ``redact``."""
        await asyncio.to_thread(encoding)  # the renderer's tokenizer, read off the loop once
        receipt = await self._arun(
            ops.redact(self._ctx, tenant, thread_id, message_id, actor, reason, replacement),
            write=True,
        )
        await self._aerase_residue()
        return receipt

    def delete_thread(self, tenant: str, thread_id: str) -> DeletionReceipt:
        """Remove the thread and everything of it (the session-state key is the caller's)."""
        receipt = self._run(ops.delete_thread(self._ctx, tenant, thread_id), write=True)
        self._erase_residue()
        return receipt

    async def adelete_thread(self, tenant: str, thread_id: str) -> DeletionReceipt:
        """Async ``delete_thread``."""
        receipt = await self._arun(ops.delete_thread(self._ctx, tenant, thread_id), write=True)
        await self._aerase_residue()
        return receipt

    def sweep(
        self,
        tenant: str | None,
        *,
        dry_run: bool = True,
        now: datetime | None = None,
        progress: Progress | None = None,
    ) -> SweepReport:
        """Delete threads past their retention (``dry_run`` first: it is the default).

        ``tenant=None`` sweeps every tenant (an operator's job). Threads on legal
        hold are counted, never deleted.
        """
        at = now or self._ctx.clock()
        expired, held = self._run(ops.expired_threads(self._ctx, tenant, at))
        if not dry_run:
            for i, (ten, tid) in enumerate(expired, 1):
                self._run(ops.delete_thread(self._ctx, ten, tid), write=True)
                if progress is not None:
                    progress(i, len(expired))
            if expired:
                self._erase_residue()
        return SweepReport(expired=tuple(expired), held=held, dry_run=dry_run)

    async def asweep(
        self,
        tenant: str | None,
        *,
        dry_run: bool = True,
        now: datetime | None = None,
        progress: Progress | None = None,
    ) -> SweepReport:
        """Async ``sweep``."""
        at = now or self._ctx.clock()
        expired, held = await self._arun(ops.expired_threads(self._ctx, tenant, at))
        if not dry_run:
            for i, (ten, tid) in enumerate(expired, 1):
                await self._arun(ops.delete_thread(self._ctx, ten, tid), write=True)
                if progress is not None:
                    progress(i, len(expired))
            if expired:
                await self._aerase_residue()
        return SweepReport(expired=tuple(expired), held=held, dry_run=dry_run)
