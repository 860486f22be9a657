"""Benchmark of the durable record: append cost as a thread grows, active-path reads.

    python bench/transcript.py --json            # full run (SQLite + PostgreSQL + peers)
    python bench/transcript.py --smoke           # seconds, for CI

Append cost is the median of the 50 appends around each mark (10, 1,000 and
10,000 messages in the thread); ``append_10000_over_10`` should stay near 1 (an
append is an indexed lock + insert whatever the thread length). On PostgreSQL the
floor is one INSERT plus one SELECT in one transaction on the same server;
``append_over_floor`` is our append divided by it. Active-path reads fetch a
50-message path from a 100-message and from a 10,000-message tree with 100
branches; ``path_10000_over_100`` should stay near 1 (cost follows depth).

Peers on the same PostgreSQL, when installed (``pip install convmem[bench]``):
langchain-postgres ``PostgresChatMessageHistory`` to 10,000 messages, and
llama-index ``PostgresChatStore`` to 2,000 only (it rewrites its whole row on every
append; the 10,000 figure is extrapolated linearly and printed as such).
PostgreSQL comes from ``DATABASE_URL`` (default the local server); the benchmark
creates its own database and drops it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from convmem.transcript import NewMessage, RetentionPolicy, TranscriptStore

POLICY = RetentionPolicy(max_age=None, owner="bench")


def _ms(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def append_curve(store: TranscriptStore, marks: list[int], window: int) -> dict[str, float]:
    """Median append time (ms) around each mark of thread length."""
    th = store.create_thread("bench")
    timings: list[float] = []
    total = max(marks) + window // 2
    for i in range(total):
        msg = NewMessage(role="user" if i % 2 == 0 else "assistant", content=f"message {i}")
        timings.append(_ms(lambda m=msg: store.append("bench", th.id, m)))
    out = {}
    for mark in marks:
        lo = max(0, mark - window // 2)
        out[f"append_{mark}_ms"] = statistics.median(timings[lo : lo + window])
    return out


def path_read(store: TranscriptStore, size: int, branches: int, depth: int, reads: int) -> float:
    """Median active-path read (ms) of a ``depth`` path in a ``size``-message tree."""
    th = store.create_thread("bench")
    main = store.append(
        "bench", th.id, [NewMessage(role="user", content=f"m{i}") for i in range(depth)]
    )
    rest = size - depth
    side = max(1, min(branches - 1, rest))
    per, extra = divmod(rest, side)
    for b in range(side):
        n = per + (1 if b < extra else 0)
        if n == 0:
            continue
        at = main[(b * 7) % (depth - 1)].id
        batch = [NewMessage(role="assistant", content=f"b{b}.{j}") for j in range(n)]
        for k in range(0, n, 500):
            (last, *_) = reversed(
                store.append("bench", th.id, batch[k : k + 500], parent_id=at, activate=False)
            )
            at = last.id
    store.set_active_leaf("bench", th.id, main[-1].id)
    assert len(store.active_path("bench", th.id)) == depth
    return statistics.median(_ms(lambda: store.active_path("bench", th.id)) for _ in range(reads))


def pg_floor(url: str, n: int) -> float:
    """Median ms of INSERT + SELECT in one transaction (the cheapest possible append)."""
    eng = sa.create_engine(url)
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE bench_floor (id serial primary key, k text, body text)")
    times = []
    for i in range(n):

        def once(i: int = i) -> None:
            with eng.begin() as conn:
                conn.exec_driver_sql(
                    "INSERT INTO bench_floor (k, body) VALUES ('t', %(b)s)", {"b": f"m{i}"}
                )
                conn.exec_driver_sql("SELECT id FROM bench_floor WHERE id = lastval()").all()

        times.append(_ms(once))
    eng.dispose()
    return statistics.median(times)


@contextmanager
def scratch_postgres() -> Iterator[str]:
    """A database created for this run on ``DATABASE_URL``, dropped afterwards."""
    base = sa.make_url(
        os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    ).set(drivername="postgresql+psycopg")
    name = f"convmem_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


def peer_langchain(url: str, marks: list[int], window: int) -> dict[str, Any]:
    """langchain-postgres PostgresChatMessageHistory, same marks."""
    try:
        import psycopg
        from langchain_core.messages import HumanMessage
        from langchain_postgres import PostgresChatMessageHistory
    except ImportError:
        return {"skipped": "langchain-postgres not installed (pip install convmem[bench])"}
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(dsn)
    PostgresChatMessageHistory.create_tables(conn, "lc_bench")
    hist = PostgresChatMessageHistory("lc_bench", str(uuid.uuid4()), sync_connection=conn)
    timings = []
    for i in range(max(marks) + window // 2):
        timings.append(_ms(lambda i=i: hist.add_messages([HumanMessage(content=f"m{i}")])))
    conn.close()
    return {
        f"append_{m}_ms": statistics.median(timings[max(0, m - window // 2) :][:window])
        for m in marks
    }


def peer_llamaindex(url: str, limit: int, window: int) -> dict[str, Any]:
    """llama-index PostgresChatStore up to ``limit`` messages, extrapolated to 10,000."""
    try:
        from llama_index.core.llms import ChatMessage
        from llama_index.storage.chat_store.postgres import PostgresChatStore
    except ImportError:
        return {"skipped": "llama-index-storage-chat-store-postgres not installed"}
    store = PostgresChatStore.from_uri(
        uri=sa.make_url(url).set(drivername="postgresql+psycopg2").render_as_string(False),
        table_name="li_bench",
    )
    key = str(uuid.uuid4())
    timings = []
    for i in range(limit):
        timings.append(_ms(lambda i=i: store.add_message(key, ChatMessage(content=f"m{i}"))))
    last = statistics.median(timings[-window:])
    first = statistics.median(timings[:window])
    slope = (last - first) / max(1, limit - window)
    return {
        "append_10_ms": first,
        f"append_{limit}_ms": last,
        "append_10000_ms_extrapolated": last + slope * (10_000 - limit),
        "note": f"measured to {limit}; the 10,000 figure is a linear extrapolation",
    }


def run(smoke: bool, with_pg: bool) -> dict[str, Any]:
    marks = [10, 100] if smoke else [10, 1_000, 10_000]
    window = 10 if smoke else 50
    sizes = (100, 400) if smoke else (100, 10_000)
    reads = 10 if smoke else 50
    result: dict[str, Any] = {"smoke": smoke, "marks": marks}
    backends: list[tuple[str, Any]] = []
    tmp = tempfile.TemporaryDirectory()
    backends.append(("sqlite", lambda: f"sqlite:///{tmp.name}/bench.db"))
    pg_ctx = scratch_postgres() if with_pg else None
    pg_url = pg_ctx.__enter__() if pg_ctx is not None else None
    if pg_url is not None:
        backends.append(("postgresql", lambda: pg_url))
    try:
        for name, url in backends:
            store = TranscriptStore(url(), retention=POLICY)
            store.migrate()
            r: dict[str, Any] = append_curve(store, marks, window)
            r[f"append_{marks[-1]}_over_{marks[0]}"] = (
                r[f"append_{marks[-1]}_ms"] / r[f"append_{marks[0]}_ms"]
            )
            for size in sizes:
                r[f"path50_in_{size}_ms"] = path_read(store, size, 100, 50, reads)
            r[f"path_{sizes[1]}_over_{sizes[0]}"] = (
                r[f"path50_in_{sizes[1]}_ms"] / r[f"path50_in_{sizes[0]}_ms"]
            )
            store.close()
            result[name] = r
        if pg_url is not None:
            floor = pg_floor(pg_url, 50 if not smoke else 10)
            result["postgresql_insert_select_floor_ms"] = floor
            for name in ("sqlite", "postgresql"):
                result[name]["append_over_floor"] = result[name][f"append_{marks[-1]}_ms"] / floor
            result["peers"] = {
                "langchain_postgres": peer_langchain(pg_url, marks, window),
                "llamaindex_postgres": peer_llamaindex(pg_url, 200 if smoke else 2_000, window),
            }
    finally:
        if pg_ctx is not None:
            pg_ctx.__exit__(None, None, None)
        tmp.cleanup()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args()
    result = run(args.smoke, not args.no_postgres)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    for section, values in result.items():
        if isinstance(values, dict):
            print(f"[{section}]")
            for k, v in values.items():
                print(f"  {k}: {v:.3f}" if isinstance(v, float) else f"  {k}: {v}")
        else:
            print(f"{section}: {values}")
    peers = result.get("peers", {})
    for peer, values in peers.items():
        if "skipped" in values:
            print(f"NOTE: peer {peer} skipped: {values['skipped']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
