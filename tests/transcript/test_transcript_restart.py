"""PostgreSQL restarted between two turns loses no acknowledged message.

The server is the test's own embedded PostgreSQL in every ``CONVMEM_TEST_SERVERS``
mode (``throwaway_postgres``: never the machine's server), stopped by its PID either
cleanly (``fast``) or like a crash (``immediate``: the next start replays the WAL)
and resumed on the same data directory. The same ``TranscriptStore`` object goes on:
the first call after the restart works on both engines (dead pooled connections are
replaced at checkout), a call during the outage fails with ``TranscriptUnavailable``
and writes nothing, and a turn whose commit point 2 was in flight when the server
went down leaves exactly commit point 1. The last test closes only the store's own
pooled connections (``pg_terminate_backend`` by their backend PIDs) on the run's
database, the same event without a restart.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa

from convmem.errors import TranscriptUnavailable
from convmem.testing.servers import EmbeddedPostgres, with_database
from convmem.testing.transcript_spec import FOREVER, Api, bot, user
from convmem.transcript import ModelInput, TranscriptStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(throwaway_postgres: EmbeddedPostgres) -> Iterator[TranscriptStore]:
    store = TranscriptStore(with_database(throwaway_postgres.admin_url, "postgres"), retention=FOREVER)
    store.migrate()
    yield store
    store.close()


def restart(server: EmbeddedPostgres, mode: Any) -> None:
    url, pid = server.admin_url, server.pid
    server.stop(mode)
    server.resume()
    assert server.pid not in (None, pid) and server.admin_url == url


class PauseInsidePointTwo:
    """Holds one thread's ``complete_turn`` inside it: right after its first message
    INSERT in a transaction, or, when point 2 is one autocommitted statement (PostgreSQL,
    the usual case), right before that statement goes out (after it, it is committed)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.owner: int | None = None
        self.reached = threading.Event()
        self.release = threading.Event()
        sa.event.listen(engine, "before_cursor_execute", self._before)
        sa.event.listen(engine, "after_cursor_execute", self._after)

    def _inserts(self, statement: str) -> bool:
        # a plain INSERT, or PostgreSQL's one locking-and-inserting statement (WITH ...)
        return threading.get_ident() == self.owner and "INSERT INTO convmem_messages" in statement

    @staticmethod
    def _alone(conn: sa.Connection) -> bool:
        return bool(conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT")

    def _pause(self) -> None:
        self.owner = None
        self.reached.set()
        assert self.release.wait(60)

    def _before(self, conn: sa.Connection, _cur: Any, statement: str, *_rest: Any) -> None:
        if self._inserts(statement) and self._alone(conn):
            self._pause()

    def _after(self, conn: sa.Connection, _cur: Any, statement: str, *_rest: Any) -> None:
        if self._inserts(statement) and not self._alone(conn):
            self._pause()

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._before)
        sa.event.remove(self.engine, "after_cursor_execute", self._after)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_restart_between_turns_loses_no_acknowledged_message(
    throwaway_postgres: EmbeddedPostgres, store: TranscriptStore, mode: str
) -> None:
    tenant = f"restart-{uuid.uuid4().hex[:8]}"
    aio = Api(store, "async")
    acknowledged: list[str] = []

    def turn(question: str, answer: str) -> str:
        tr = store.begin_turn_record(tenant, th.id, user(question), ModelInput(rendered_block=question))
        out = store.complete_turn(tenant, th.id, tr.turn_id, [bot(answer)])
        acknowledged.extend([tr.user_message.id, out[-1].id])
        return tr.turn_id

    try:
        th = store.create_thread(tenant, title="restart")
        turn("q1", "a1")
        acknowledged.extend(m.id for m in aio.append(tenant, th.id, [user("q2"), bot("a2")]))

        # 1. restarted between two turns: the next turn works at once, sync and async
        restart(throwaway_postgres, mode)
        turn("q3", "a3")
        acknowledged.extend(m.id for m in aio.append(tenant, th.id, [user("q4"), bot("a4")]))

        # 2. a call during the outage fails clearly and writes nothing
        throwaway_postgres.stop(mode)  # type: ignore[arg-type]
        with pytest.raises(TranscriptUnavailable):
            store.append(tenant, th.id, user("lost (sync)"))
        with pytest.raises(TranscriptUnavailable):
            aio.append(tenant, th.id, user("lost (async)"))
        throwaway_postgres.resume()
        turn("q5", "a5")

        # 3. commit point 2 in flight when the server goes down: nothing of it is kept
        tr = store.begin_turn_record(tenant, th.id, user("q6"), ModelInput(rendered_block="b6"))
        acknowledged.append(tr.user_message.id)
        pause = PauseInsidePointTwo(store.engine)
        pool = ThreadPoolExecutor(max_workers=1)
        try:

            def complete() -> Any:
                pause.owner = threading.get_ident()
                return store.complete_turn(tenant, th.id, tr.turn_id, [bot("half"), bot("a6")])

            in_flight = pool.submit(complete)
            assert pause.reached.wait(30)
            throwaway_postgres.stop(mode)  # type: ignore[arg-type]
            pause.release.set()
            with pytest.raises(TranscriptUnavailable):
                in_flight.result(timeout=30)
        finally:
            pause.release.set()
            pause.close()
            pool.shutdown(wait=True)
        throwaway_postgres.resume()

        path = store.active_path(tenant, th.id)
        assert [m.id for m in path] == acknowledged
        assert [m.seq for m in path] == list(range(1, len(acknowledged) + 1))
        assert [m.text for m in path][-1] == "q6"
        assert not any(m.text.startswith("lost") or m.text == "half" for m in path)
        assert len(store.tree(tenant, th.id).messages) == len(acknowledged)
        rec = store.reconstruct_model_input(tenant, th.id, tr.turn_id)
        assert rec.rendered_block == "b6" and rec.completed_at is None
        (answer,) = store.complete_turn(tenant, th.id, tr.turn_id, [bot("a6")])
        assert answer.seq == len(acknowledged) + 1
    finally:
        aio.close()


def test_a_pooled_connection_the_server_closed_is_replaced_at_checkout(postgres_url: str) -> None:
    """``pg_terminate_backend`` on the store's idle pooled connections: the next calls work."""
    import psycopg

    from convmem.testing.servers import libpq_url

    store = TranscriptStore(postgres_url, retention=FOREVER)
    store.migrate()
    aio = Api(store, "async")
    tenant = f"terminate-{uuid.uuid4().hex[:8]}"
    try:
        th = store.create_thread(tenant)
        aio.append(tenant, th.id, user("one"))
        with store.engine.connect() as conn:
            sync_pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()

        async def async_backend() -> int:
            async with store.async_engine.connect() as conn:
                return int((await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one())

        async_pid = aio.run(async_backend())
        with psycopg.connect(libpq_url(postgres_url), autocommit=True) as admin:
            for pid in (sync_pid, async_pid):
                assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
            for _ in range(500):  # until both backends have exited
                alive = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                    ([sync_pid, async_pid],),
                ).fetchone()
                if alive == (0,):
                    break
                time.sleep(0.01)
        store.append(tenant, th.id, user("two"))
        aio.append(tenant, th.id, user("three"))
        assert [m.text for m in store.active_path(tenant, th.id)] == ["one", "two", "three"]
        store.delete_thread(tenant, th.id)
    finally:
        aio.close()
