"""What LangSmith's untraced hook spans cost an async agent, with and without
``langchain_convmem.inline_untraced_spans()``.

``create_agent`` runs each middleware's ``awrap_model_call`` and ``awrap_tool_call``
inside LangSmith's ``traceable``, which starts and ends the span on a worker thread even
when nothing is traced. Two measurements, each alternating the two settings in one
process (the override installed, then restored), so the machine's drift hits both alike:

* **one span**: a ``@traceable`` coroutine awaited by 50 tasks, process CPU per call;
* **agent turns**: ``bench/_load_agent.py``'s agent with ``SessionMemoryMiddleware`` on
  in-memory stores (no I/O: the difference is the spans'), 100 concurrent sessions of
  5 turns per batch, process CPU per turn, and the calls handed to the loop's
  executor per turn (``run_in_executor``).

Each figure is the median over ``--batches`` batches per setting, in the order
default, inline, then inline, default, and so on.

    python bench/spans.py           # table
    python bench/spans.py --json    # machine-readable
    python bench/spans.py --smoke   # seconds (CI)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import langsmith
from _load_agent import DOMAIN, build_agent, question
from langchain_core.messages import HumanMessage

from convmem import SessionMemory
from langchain_convmem import SessionMemoryMiddleware, inline_untraced_spans

SETTINGS = ("default", "inline")


@langsmith.traceable
async def _step(x: int) -> int:
    return x + 1


class Executor:
    """Counts the loop's ``run_in_executor`` calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.calls = 0
        self._run = loop.run_in_executor

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return self._run(*args, **kwargs)

        loop.run_in_executor = counted  # type: ignore[method-assign]


async def spans(calls: int) -> dict[str, float]:
    """Process CPU per ``@traceable`` call, 50 tasks at once."""

    async def task() -> None:
        for i in range(calls // 50):
            await _step(i)

    cpu = time.process_time()
    await asyncio.gather(*(task() for _ in range(50)))
    return {"cpu_us": (time.process_time() - cpu) / calls * 1e6}


def turns(sessions: int, per_session: int) -> Callable[[int], Awaitable[dict[str, float]]]:
    """A batch of agent turns on fresh threads: process CPU and executor calls per turn."""
    memory = SessionMemory(DOMAIN, tenant="bench-spans")
    agent = build_agent(middleware=[SessionMemoryMiddleware(memory)])
    started = [0]

    async def batch(_: int) -> dict[str, float]:
        base = started[0]
        started[0] += sessions
        executor = Executor(asyncio.get_running_loop())

        async def session(k: int) -> None:
            for t in range(per_session):
                await agent.ainvoke({"messages": [HumanMessage(question(k, t))]},
                                    {"configurable": {"thread_id": f"s{k}"}})

        cpu = time.process_time()
        await asyncio.gather(*(session(k) for k in range(base, base + sessions)))
        n = sessions * per_session
        out = {"cpu_ms": (time.process_time() - cpu) / n * 1e3,
               "executor_calls": executor.calls / n}
        loop = asyncio.get_running_loop()
        loop.run_in_executor = executor._run  # type: ignore[method-assign]
        return out

    return batch


async def alternate(measure: Callable[[int], Awaitable[dict[str, float]]], batches: int,
                    size: int) -> dict[str, dict[str, float]]:
    """``measure`` under both settings, alternated; medians per setting."""
    await measure(size)  # warm-up, default setting
    seen: dict[str, list[dict[str, float]]] = {s: [] for s in SETTINGS}
    for i in range(batches):
        for setting in SETTINGS if i % 2 == 0 else SETTINGS[::-1]:
            restore = inline_untraced_spans() if setting == "inline" else None
            try:
                seen[setting].append(await measure(size))
            finally:
                if restore is not None:
                    restore()
    return {s: {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
            for s, rows in seen.items()}


async def main_async(batches: int, calls: int, sessions: int, per_session: int
                     ) -> dict[str, Any]:
    return {
        "span": await alternate(spans, batches, calls),
        "turn": await alternate(turns(sessions, per_session), batches, 0),
        "batches": batches, "span_calls": calls, "sessions": sessions,
        "turns_per_session": per_session,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="2 small batches (CI)")
    parser.add_argument("--batches", type=int, default=None, help="per setting (default 8)")
    args = parser.parse_args()
    batches = args.batches or (2 if args.smoke else 8)
    calls, sessions, per = (500, 10, 2) if args.smoke else (20_000, 100, 5)
    result = asyncio.run(main_async(batches, calls, sessions, per))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    span, turn = result["span"], result["turn"]
    print(f"one @traceable call, 50 tasks, {calls} calls a batch, medians of {batches}:")
    for s in SETTINGS:
        print(f"  {s:8} {span[s]['cpu_us']:8.1f} us CPU")
    print(f"agent turns with SessionMemoryMiddleware (in memory), {sessions} sessions x "
          f"{per} turns a batch, medians of {batches}:")
    for s in SETTINGS:
        print(f"  {s:8} {turn[s]['cpu_ms']:8.3f} ms CPU/turn  "
              f"{turn[s]['executor_calls']:5.2f} executor calls/turn")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
