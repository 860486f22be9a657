"""Client CPU of the transcript's hot-path statements, by driver.

An agent turn runs three statements on the PostgreSQL transcript, each one ``ops.Alone``
statement: **bind** (``bind_turn``: the key's thread and its last questions), **begin**
(commit point 1, ``begin_turn_record``: the user message and the model input) and
**complete** (commit point 2, ``complete_turn_on_leaf``: a tool call, its result and a
~10 KB answer). Every row below drives those same operation generators
(``convmem.transcript.ops``) and answers their one ``Alone`` step through a different
driver, so the SQL and parameters are the ops' own (compiled once per statement by
SQLAlchemy's dialect for the raw drivers: no second copy of the SQL) and the ops' own
CPU (building parameters, reading the result) is in every row:

* ``ops only``: the step answered with a result captured earlier, no I/O (the floor);
* ``store``: the ``TranscriptStore`` call itself (``abind_turn``, ``abegin_turn_record``,
  ``acomplete_turn``): SQLAlchemy's async engine over psycopg 3, today's path;
* ``sa+psycopg``: the step run as ``_arun`` runs it (connect, autocommit, execute)
  on a SQLAlchemy async engine over psycopg;
* ``sa+asyncpg``: the same on a ``postgresql+asyncpg`` engine;
* ``psycopg/sa-pool``: psycopg's ``AsyncConnection`` taken from under SQLAlchemy's pool
  (``get_raw_connection().driver_connection``), ``execute(..., prepare=True)``;
* ``psycopg/pool``: psycopg directly from a ``psycopg_pool.AsyncConnectionPool``
  (autocommit), ``prepare=True``; ``psycopg/pipeline``: the same inside ``pipeline()``;
* ``asyncpg/sa-pool``: asyncpg's connection from under the ``postgresql+asyncpg``
  engine's pool (its prepared-statement cache);
* ``asyncpg/pool``: an ``asyncpg`` pool, prepared statements (its statement cache).

Per row and statement: process CPU (``time.process_time``) per statement with one
asyncio task running turns one after another, and with 50 tasks that start each
statement together (the phase's CPU over its statements), and the wall p50 of one
statement in each. Each row uses its own threads (same history length) and a pool of
``POOL`` connections; rows run one after another in a database created for the run and
dropped after it, on ``DATABASE_URL`` (default the local server). The raw drivers are in
the ``bench`` dependency group (asyncpg); a row that cannot run is reported, never a number.

    python bench/statements.py            # table
    python bench/statements.py --json     # machine-readable
    python bench/statements.py --smoke    # seconds: a few turns per row (CI)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import asyncpg as sa_asyncpg
from sqlalchemy.dialects.postgresql import psycopg as sa_psycopg
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from convmem.effects import Next, adrive, start
from convmem.testing.servers import create_database, drop_database
from convmem.transcript import (
    ModelInput,
    NewMessage,
    RetentionPolicy,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    TranscriptStore,
    ops,
)
from convmem.transcript.engine import DriverStatement, Rows

STATEMENTS = ("bind", "begin", "complete")
TENANT = "bench-statements"
POOL = 10
CONCURRENCY = 50
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
ANSWER = " ".join(f"Line {i}: the account is current, orders ship on schedule." for i in range(175))
BLOCK = "\n".join(f"- customer C{i:03d} (focus {i % 3}): open orders {i}, rep R{i % 7}"
                  for i in range(12))
SYSTEM = "You are a CRM assistant. Answer from the tools' records."
TOOL_SCHEMA = {"name": "lookup_customer", "description": "Look up one customer by name.",
               "parameters": {"type": "object", "properties": {"name": {"type": "string"}}}}


# ------------------------------------------------------------------ results read like SQLAlchemy's


_DIALECTS = {"psycopg": sa_psycopg.dialect(), "asyncpg": sa_asyncpg.dialect()}
_COMPILED: dict[tuple[str, int], DriverStatement] = {}


def compiled(step: ops.Alone, driver: str) -> DriverStatement:
    """``step``'s statement compiled once for ``driver`` by SQLAlchemy's own dialect
    (the store's ``DriverStatement``)."""
    key = (driver, id(step.statement))
    found = _COMPILED.get(key)
    if found is None:
        found = _COMPILED[key] = DriverStatement(step.statement, _DIALECTS[driver])
    return found


def positional(stmt: DriverStatement, given: Mapping[str, Any]) -> list[Any]:
    """asyncpg's ``$n`` parameters, in the compiled statement's order."""
    values = stmt.params(given)
    return [values[n] for n in stmt._compiled.positiontup]


# ------------------------------------------------------------------ one task's turns


@dataclass
class Session:
    """One task's thread and the turn it has open."""

    key: str
    n: int = 0
    thread_id: str = ""
    incarnation: str | None = None
    turn_id: str = ""

    def op(self, name: str, ctx: ops.Ctx) -> ops.Op[Any]:
        """The operation of statement ``name`` for this session's next turn."""
        if name == "bind":
            return ops.bind_turn(TENANT, self.key, 12)
        if name == "begin":
            user, model_input = turn_input(self.n)
            return ops.begin_turn_record(ctx, TENANT, self.thread_id, user, model_input,
                                         incarnation=self.incarnation)
        return ops.complete_turn_on_leaf(ctx, TENANT, self.thread_id, self.turn_id,
                                         turn_answer(self.n), self.incarnation)

    def took(self, name: str, value: Any) -> None:
        """Note what a statement returned (the ids the next statements need)."""
        if name == "bind":
            thread = value[0] if isinstance(value, tuple) else value.thread
            self.thread_id, self.incarnation = thread.id, thread.incarnation
        elif name == "begin":
            self.turn_id = value.turn_id
        else:
            if value is None:
                raise RuntimeError("commit point 2 found the turn off the active leaf")
            self.n += 1


def turn_input(n: int) -> tuple[NewMessage, ModelInput]:
    user = NewMessage(role="user", content=f"Look up customer C{n % 40:03d}, and their orders.")
    return user, ModelInput(
        rendered_block=BLOCK,
        state_snapshot={"focus": [f"C{n % 40:03d}"], "filters": {"region": "EMEA"}},
        sent_message_ids=[],
        system_prompt=SYSTEM,
        tool_schemas=[TOOL_SCHEMA],
        model="instant-fake",
        model_params={"temperature": 0},
        quoted_message_ids=[],
    )


def turn_answer(n: int) -> list[NewMessage]:
    call = f"call_{n}"
    return [
        NewMessage(role="assistant", content=[ToolCallPart(call, "lookup_customer",
                                                           {"name": f"C{n % 40:03d}"})]),
        NewMessage(role="tool", content=[ToolResultPart(
            call, json.dumps({"id": f"C{n % 40:03d}", "city": "Fresno"}))]),
        NewMessage(role="assistant", content=[TextPart(ANSWER)]),
    ]


# ------------------------------------------------------------------ drivers

Execute = Callable[[ops.Alone], Awaitable[Any]]


@dataclass
class Driver:
    """One row: how a statement of a session runs, and what to close afterwards."""

    run: Callable[[str, Session], Awaitable[Any]]
    close: Callable[[], Awaitable[None]]
    captured: dict[str, Any] = field(default_factory=dict)


def _by_op(ctx: ops.Ctx, execute: Execute) -> Callable[[str, Session], Awaitable[Any]]:
    """Run a session's statement as its op, its ``Alone`` step answered by ``execute``."""

    async def run(name: str, s: Session) -> Any:
        op = s.op(name, ctx)
        first = start(op)
        assert isinstance(first, Next) and isinstance(first.request, ops.Alone), name
        return await adrive(op, lambda step: execute(step), started=first)  # type: ignore[arg-type]

    return run


def _sa_execute(engine: AsyncEngine) -> Execute:
    async def execute(step: ops.Alone) -> Any:
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            return Rows(*_buffer(await conn.execute(step.statement, step.params)))

    return execute


def _buffer(result: Any) -> tuple[list[str], list[Any]]:
    return list(result.keys()), result.all()


async def _psycopg_fetch(conn: Any, step: ops.Alone, pipeline: bool = False) -> Rows:
    c = compiled(step, "psycopg")
    if pipeline:
        async with conn.pipeline():
            cur = await conn.execute(c.sql, c.params(step.params), prepare=True)
            rows = await cur.fetchall()
    else:
        cur = await conn.execute(c.sql, c.params(step.params), prepare=True)
        rows = await cur.fetchall()
    return Rows([d.name for d in cur.description], rows)


async def _asyncpg_fetch(conn: Any, step: ops.Alone) -> Rows:
    c = compiled(step, "asyncpg")
    records = await conn.fetch(c.sql, *positional(c, step.params))  # its statement cache
    return Rows(list(records[0].keys()) if records else [], records)


async def _asyncpg_json(conn: Any) -> None:
    """JSON columns decoded, as SQLAlchemy's asyncpg dialect does (psycopg does by default)."""
    await conn.set_type_codec("json", encoder=str, decoder=json.loads, schema="pg_catalog")


def _urls(url: sa.URL) -> dict[str, str]:
    return {
        "libpq": url.set(drivername="postgresql").render_as_string(hide_password=False),
        "psycopg": url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False),
        "asyncpg": url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False),
    }


async def make_driver(row: str, url: sa.URL, ctx: ops.Ctx, canned: dict[str, Any]) -> Driver:
    """The driver of ``row`` on ``url`` (its pool opened here)."""
    urls = _urls(url)
    pool = {"pool_size": POOL, "max_overflow": 0}
    if row == "ops only":
        async def canned_execute(step: ops.Alone) -> Any:
            return canned[_statement_name(step)]()

        async def nothing() -> None:
            return None

        return Driver(_by_op(ctx, canned_execute), nothing)
    if row in ("store", "store/psycopg"):
        alone = "psycopg" if row == "store/psycopg" else "sqlalchemy"
        store = TranscriptStore(urls["psycopg"], retention=POLICY, alone_driver=alone, **pool)

        async def store_run(name: str, s: Session) -> Any:
            if name == "bind":
                return await store.abind_turn(TENANT, s.key)
            if name == "begin":
                user, model_input = turn_input(s.n)
                return await store.abegin_turn_record(TENANT, s.thread_id, user, model_input,
                                                      incarnation=s.incarnation)
            return await store.acomplete_turn(TENANT, s.thread_id, s.turn_id, turn_answer(s.n),
                                              incarnation=s.incarnation)

        async def store_close() -> None:
            await store.aclose()
            store.close()

        return Driver(store_run, store_close)
    if row in ("sa+psycopg", "sa+asyncpg", "psycopg/sa-pool", "asyncpg/sa-pool"):
        engine = create_async_engine(urls["asyncpg" if "asyncpg" in row else "psycopg"], **pool)
        if row.startswith("sa+"):
            return Driver(_by_op(ctx, _sa_execute(engine)), engine.dispose)
        fetch = _asyncpg_fetch if row.startswith("asyncpg") else _psycopg_fetch

        async def raw_execute(step: ops.Alone) -> Any:
            async with engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                raw = (await conn.get_raw_connection()).driver_connection
                return await fetch(raw, step)

        return Driver(_by_op(ctx, raw_execute), engine.dispose)
    if row.startswith("psycopg/"):
        from psycopg_pool import AsyncConnectionPool

        ppool = AsyncConnectionPool(urls["libpq"], min_size=POOL, max_size=POOL, open=False,
                                    kwargs={"autocommit": True})
        await ppool.open(wait=True)
        pipeline = row == "psycopg/pipeline"

        async def pool_execute(step: ops.Alone) -> Any:
            async with ppool.connection() as conn:
                return await _psycopg_fetch(conn, step, pipeline)

        return Driver(_by_op(ctx, pool_execute), ppool.close)
    if row == "asyncpg/pool":
        import asyncpg

        apool = await asyncpg.create_pool(urls["libpq"], min_size=POOL, max_size=POOL,
                                          init=_asyncpg_json)

        async def asyncpg_execute(step: ops.Alone) -> Any:
            async with apool.acquire() as conn:
                return await _asyncpg_fetch(conn, step)

        return Driver(_by_op(ctx, asyncpg_execute), apool.close)
    raise SystemExit(f"unknown row {row!r}; choose from {ROWS}")


ROWS = ("ops only", "store", "store/psycopg", "sa+psycopg", "sa+asyncpg", "psycopg/sa-pool", "psycopg/pool",
        "psycopg/pipeline", "asyncpg/sa-pool", "asyncpg/pool")
POLICY = RetentionPolicy(max_age=None, owner="bench")


def _statement_name(step: ops.Alone) -> str:
    from convmem.transcript.ops import turns

    return {id(turns._BIND): "bind", id(turns._PG_BEGIN_TURN): "begin",
            id(turns._PG_COMPLETE_TURN): "complete"}[id(step.statement)]


# ------------------------------------------------------------------ measuring


@dataclass
class Phase:
    cpu_s: float = 0.0
    count: int = 0
    walls: list[float] = field(default_factory=list)


async def measure(driver: Driver, sessions: list[Session], rounds: int, warmup: int,
                  phases: dict[str, Phase]) -> None:
    """``rounds`` turns of every session, after ``warmup`` unmeasured ones; each
    statement of a turn starts in all sessions together (a phase), and the phase's
    process CPU is charged to its statements."""

    async def one(name: str, s: Session, phase: Phase | None) -> None:
        t0 = time.perf_counter()
        value = await driver.run(name, s)
        if phase is not None:
            phase.walls.append(time.perf_counter() - t0)
        s.took(name, value)

    for r in range(warmup + rounds):
        for name in STATEMENTS:
            phase = phases[name] if r >= warmup else None
            cpu0 = time.process_time()
            if len(sessions) == 1:
                await one(name, sessions[0], phase)
            else:
                await asyncio.gather(*(one(name, s, phase) for s in sessions))
            if phase is not None:
                phase.cpu_s += time.process_time() - cpu0
                phase.count += len(sessions)


@asynccontextmanager
async def scratch_database() -> AsyncIterator[sa.URL]:
    admin = sa.make_url(os.environ.get("DATABASE_URL") or DEFAULT_PG).set(drivername="postgresql")
    libpq = admin.render_as_string(hide_password=False)
    name = f"convmem_statements_{uuid.uuid4().hex[:8]}"
    create_database(libpq, name)
    try:
        yield admin.set(database=name)
    finally:
        drop_database(libpq, name)


async def capture_results(url: sa.URL, ctx: ops.Ctx) -> dict[str, Callable[[], Rows]]:
    """One real result per statement (psycopg), replayed by the ``ops only`` row."""
    from psycopg import AsyncConnection

    results: dict[str, Rows] = {}
    (session,) = await new_sessions(url, "capture", 1)
    async with await AsyncConnection.connect(_urls(url)["libpq"], autocommit=True) as conn:
        for name in STATEMENTS:

            async def keep(step: Any, name: str = name) -> Rows:
                results[name] = await _psycopg_fetch(conn, step)
                return results[name]

            session.took(name, await adrive(session.op(name, ctx), keep))
    # complete's result holds the turn's numbers only: any turn's read the same
    return {name: (lambda r=r: Rows(r._keys, r.all())) for name, r in results.items()}


async def new_sessions(url: sa.URL, row: str, n: int) -> list[Session]:
    """``n`` threads of their own for a row (created outside the measurement)."""
    store = TranscriptStore(_urls(url)["psycopg"], retention=POLICY)
    try:
        out = []
        for i in range(n):
            s = Session(key=f"{row}-{i}")
            await store.aget_or_create_thread(TENANT, s.key)
            out.append(s)
        return out
    finally:
        await store.aclose()
        store.close()


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every row, interleaved: ``--blocks`` times each row opens its pools, warms them
    (every connection prepares its statements), measures, and closes them, so a load
    that comes and goes on a shared machine falls on every row alike."""
    phases = {(row, t): {name: Phase() for name in STATEMENTS}
              for row in args.rows for t in (1, CONCURRENCY)}
    errors: dict[str, str] = {}
    async with scratch_database() as url:
        setup = TranscriptStore(_urls(url)["psycopg"], retention=POLICY)
        setup.migrate()
        setup.close()
        ctx = ops.Ctx(dialect="postgresql", clock=lambda: datetime.now(timezone.utc),
                      retention=POLICY)
        canned = await capture_results(url, ctx)
        sessions = {(row, t): await new_sessions(url, f"{row}-{t}", t)
                    for row in args.rows for t in (1, CONCURRENCY)}
        for block in range(args.blocks):
            for row in args.rows:
                if row in errors:
                    continue
                try:
                    for tasks, rounds in ((1, args.iterations), (CONCURRENCY, args.rounds)):
                        driver = await make_driver(row, url, ctx, canned)
                        try:
                            await measure(driver, sessions[row, tasks], rounds, args.warmup,
                                          phases[row, tasks])
                        finally:
                            await driver.close()
                except ImportError as exc:
                    errors[row] = f"skipped: {exc} (pip install --group bench, in a checkout)"
                except Exception as exc:  # a row that cannot run is reported, never a number
                    errors[row] = f"error: {type(exc).__name__}: {exc}"[:300]
            print(f"  block {block + 1}/{args.blocks} done", file=sys.stderr)
    results: list[dict[str, Any]] = []
    for row in args.rows:
        out: dict[str, Any] = {"row": row}
        if row in errors:
            results.append({**out, "error": errors[row]})
            continue
        for tasks in (1, CONCURRENCY):
            for name, p in phases[row, tasks].items():
                out[f"{name}_cpu_us_{tasks}"] = round(p.cpu_s * 1e6 / max(p.count, 1), 1)
                out[f"{name}_wall_p50_us_{tasks}"] = round(
                    statistics.median(p.walls or [0.0]) * 1e6, 1)
            out[f"turn_cpu_us_{tasks}"] = round(
                sum(out[f"{n}_cpu_us_{tasks}"] for n in STATEMENTS), 1)
        results.append(out)
    return results


def table(results: list[dict[str, Any]]) -> str:
    def block(title: str, key: str, turn: bool) -> list[str]:
        head = (f"{'driver':<18}" + "".join(f"{n:>10}" for n in STATEMENTS)
                + (f"{'turn':>8}" if turn else "") + "  |"
                + "".join(f"{n:>10}" for n in STATEMENTS) + (f"{'turn':>8}" if turn else ""))
        lines = [title, f"{'':<18}{'one task':^{len(head) // 2 - 9}}|"
                 f"{f'{CONCURRENCY} tasks':^{len(head) // 2}}", head, "-" * len(head)]
        for r in results:
            if "error" in r:
                lines.append(f"{r['row']:<18} {r['error']}")
                continue
            cells = []
            for t in (1, CONCURRENCY):
                cells.append("".join(f"{r[f'{n}_{key}_{t}']:>10}" for n in STATEMENTS)
                             + (f"{r[f'turn_cpu_us_{t}']:>8}" if turn else ""))
            lines.append(f"{r['row']:<18}" + "  |".join(cells))
        return lines

    return "\n".join([*block("client CPU, µs per statement (process_time)", "cpu_us", True), "",
                      *block("wall p50, µs per statement", "wall_p50_us", False)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--smoke", action="store_true", help="a few turns per row (CI)")
    parser.add_argument("--blocks", type=int, default=4, help="passes over the rows")
    parser.add_argument("--iterations", type=int, default=80,
                        help="turns of one task, per block")
    parser.add_argument("--rounds", type=int, default=3,
                        help=f"turns of each of {CONCURRENCY} tasks, per block")
    parser.add_argument("--warmup", type=int, default=2, help="turns before measuring, per block")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated of {ROWS}")
    args = parser.parse_args(argv)
    args.rows = [r for r in args.rows.split(",") if r]
    if args.smoke:
        args.blocks, args.iterations, args.rounds, args.warmup = 1, 3, 1, 1
    command = "python bench/statements.py " + " ".join(argv if argv is not None else sys.argv[1:])
    # a stopped run still drops its database (the finally blocks)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = asyncio.run(run(args))
    if args.json:
        print(json.dumps({"command": command, "results": results}, indent=2))
    else:
        print(f"$ {command}\n{table(results)}")
    return 1 if args.smoke and any(r.get("error", "skipped").startswith("error")
                                   for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
