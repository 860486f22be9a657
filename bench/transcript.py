"""Benchmark of the durable record: append cost as a thread grows, active-path reads.

    python bench/transcript.py --json            # full run (SQLite + PostgreSQL + peers)
    python bench/transcript.py --smoke           # seconds, for CI

Append cost is the median of the 50 appends around each mark (10, 1,000 and
10,000 messages in the thread); ``append_10000_over_10`` should stay near 1 (an
append is an indexed lock + insert whatever the thread length). One thread per
mark is filled (in batches) to 25 messages short of it, then the three threads
take one append each in turn, so a burst of load from other processes hits every
mark alike. The floor is the cheapest possible append on the same PostgreSQL
through the same driver (psycopg 3) and pool settings: one transaction holding one
INSERT and one SELECT (BEGIN, INSERT, SELECT, COMMIT), timed right after each
measured append; ``append_over_floor`` is our append at the last mark over the
floor timed beside it. Active-path reads fetch a 50-message path from a
100-message and from a 10,000-message tree with 100 branches, the two reads
alternating; ``path_10000_over_100`` should stay near 1 (cost follows depth).
Each figure is the median over ``--runs`` runs (fresh databases each run).

Peers on the same PostgreSQL, when installed (``pip install --group bench`` in a checkout),
measured the same way: langchain-postgres ``PostgresChatMessageHistory`` to 10,000
messages, and llama-index ``PostgresChatStore`` to 2,000 only (it rewrites its
whole row on every append; its 10,000 figure is the least-squares line through its
marks, extrapolated, and printed as such).
PostgreSQL comes from ``DATABASE_URL`` (default the local server); the benchmark
creates its own databases and drops them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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


class Floor:
    """INSERT + SELECT in one transaction on a pooled psycopg connection (the floor)."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url)
        with self.engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE bench_floor (id serial primary key, k text, body text)"
            )
        self.n = 0

    def once(self) -> float:
        """One floor transaction, in ms."""
        self.n += 1

        def txn() -> None:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(
                    "INSERT INTO bench_floor (k, body) VALUES ('t', %(b)s)", {"b": f"m{self.n}"}
                )
                conn.exec_driver_sql("SELECT id FROM bench_floor WHERE id = lastval()").all()

        return _ms(txn)

    def close(self) -> None:
        self.engine.dispose()


Appender = Callable[[int], object]


def interleaved_curve(
    make: Callable[[int], Appender], marks: list[int], window: int, floor: Floor | None
) -> dict[str, float]:
    """Median append time (ms) around each mark, marks taking turns, the floor beside each.

    ``make(n)`` returns an appender for a fresh thread already holding ``n`` messages.
    """
    appenders = {m: make(max(0, m - window // 2)) for m in marks}
    appends: dict[int, list[float]] = {m: [] for m in marks}
    floors: dict[int, list[float]] = {m: [] for m in marks}
    for i in range(window):
        for mark, append in appenders.items():
            appends[mark].append(_ms(lambda a=append, i=i: a(i)))
            if floor is not None:
                floors[mark].append(floor.once())
    out = {f"append_{m}_ms": statistics.median(appends[m]) for m in marks}
    if floor is not None:
        out.update({f"floor_{m}_ms": statistics.median(floors[m]) for m in marks})
    return out


def convmem_thread(store: TranscriptStore) -> Callable[[int], Appender]:
    """Threads of ``store`` pre-filled in batches; the appender adds one message."""

    def make(n: int) -> Appender:
        tid = store.create_thread("bench").id
        fill = [
            NewMessage(role="user" if i % 2 == 0 else "assistant", content=f"message {i}")
            for i in range(n)
        ]
        for k in range(0, n, 500):
            store.append("bench", tid, fill[k : k + 500])
        return lambda i: store.append(
            "bench", tid, NewMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
        )

    return make


def build_tree(store: TranscriptStore, size: int, branches: int, depth: int) -> str:
    """A thread of ``size`` messages: a ``depth`` active path plus side branches."""
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
    return th.id


def path_reads(
    store: TranscriptStore, sizes: tuple[int, ...], depth: int, reads: int
) -> dict[str, float]:
    """Median active-path read (ms) of a ``depth`` path in each tree, reads alternating."""
    trees = {size: build_tree(store, size, 100, depth) for size in sizes}
    times: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(reads):
        for size, tid in trees.items():
            times[size].append(_ms(lambda t=tid: store.active_path("bench", t)))
    return {f"path{depth}_in_{size}_ms": statistics.median(times[size]) for size in sizes}


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
    """langchain-postgres PostgresChatMessageHistory, same marks, same interleaving."""
    try:
        import psycopg
        from langchain_core.messages import HumanMessage
        from langchain_postgres import PostgresChatMessageHistory
    except ImportError:
        return {"skipped": "langchain-postgres not installed (pip install --group bench, in a checkout)"}
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(dsn)
    PostgresChatMessageHistory.create_tables(conn, "lc_bench")

    def make(n: int) -> Appender:
        hist = PostgresChatMessageHistory("lc_bench", str(uuid.uuid4()), sync_connection=conn)
        for k in range(0, n, 500):
            hist.add_messages([HumanMessage(content=f"m{i}") for i in range(k, min(n, k + 500))])
        return lambda i: hist.add_messages([HumanMessage(content=f"m{i}")])

    try:
        return interleaved_curve(make, marks, window, None)
    finally:
        conn.close()


def peer_llamaindex(url: str, marks: list[int], limit: int, window: int) -> dict[str, Any]:
    """llama-index PostgresChatStore at the marks up to ``limit``, extrapolated to the last."""
    try:
        from llama_index.core.llms import ChatMessage
        from llama_index.storage.chat_store.postgres import PostgresChatStore
    except ImportError:
        return {"skipped": "llama-index-storage-chat-store-postgres not installed"}
    store = PostgresChatStore.from_uri(
        uri=sa.make_url(url).set(drivername="postgresql+psycopg").render_as_string(False),
        table_name="li_bench",
    )

    def make(n: int) -> Appender:
        key = str(uuid.uuid4())
        store.set_messages(key, [ChatMessage(content=f"m{i}") for i in range(n)])
        return lambda i: store.add_message(key, ChatMessage(content=f"m{i}"))

    measured = sorted({*(m for m in marks if m < limit), limit})
    out: dict[str, Any] = interleaved_curve(make, measured, window, None)
    xs = [float(m) for m in measured]
    ys = [out[f"append_{m}_ms"] for m in measured]
    slope, intercept = statistics.linear_regression(xs, ys)
    out[f"append_{marks[-1]}_ms_extrapolated"] = intercept + slope * marks[-1]
    out["note"] = (
        f"* measured to {limit:,}; the {marks[-1]:,} figure extrapolates the line through "
        f"{', '.join(f'{m:,}' for m in measured)}"
    )
    return out


def measure(url: str, floor: Floor | None, smoke: bool) -> dict[str, float]:
    """One backend, one run: the append curve (floor interleaved) and path reads."""
    marks = [10, 100] if smoke else [10, 1_000, 10_000]
    sizes = (100, 400) if smoke else (100, 10_000)
    store = TranscriptStore(url, retention=POLICY)
    try:
        store.migrate()
        r = interleaved_curve(convmem_thread(store), marks, 10 if smoke else 50, floor)
        r.update(path_reads(store, sizes, 50, 10 if smoke else 50))
    finally:
        store.close()
    first, last = marks[0], marks[-1]
    r[f"append_{last}_over_{first}"] = r[f"append_{last}_ms"] / r[f"append_{first}_ms"]
    if floor is not None:
        r["append_over_floor"] = r[f"append_{last}_ms"] / r[f"floor_{last}_ms"]
    r[f"path_{sizes[1]}_over_{sizes[0]}"] = (
        r[f"path50_in_{sizes[1]}_ms"] / r[f"path50_in_{sizes[0]}_ms"]
    )
    return r


def _median_runs(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def run(smoke: bool, with_pg: bool, runs: int) -> dict[str, Any]:
    marks = [10, 100] if smoke else [10, 1_000, 10_000]
    per_backend: dict[str, list[dict[str, float]]] = {"sqlite": []}
    if with_pg:
        per_backend["postgresql"] = []
    for _ in range(runs):
        with (
            tempfile.TemporaryDirectory() as tmp,
            scratch_postgres() if with_pg else _no_postgres() as pg_url,
        ):
            floor = Floor(pg_url) if pg_url is not None else None
            try:
                per_backend["sqlite"].append(measure(f"sqlite:///{tmp}/bench.db", floor, smoke))
                if pg_url is not None:
                    per_backend["postgresql"].append(measure(pg_url, floor, smoke))
            finally:
                if floor is not None:
                    floor.close()
    result: dict[str, Any] = {"smoke": smoke, "marks": marks, "runs": runs}
    for name, figures in per_backend.items():
        result[name] = _median_runs(figures)
    if with_pg:
        result["postgresql_insert_select_floor_ms"] = result["postgresql"][f"floor_{marks[-1]}_ms"]
        with scratch_postgres() as pg_url:
            result["peers"] = {
                "langchain_postgres": peer_langchain(pg_url, marks, 10 if smoke else 50),
                "llamaindex_postgres": peer_llamaindex(
                    pg_url, marks, 50 if smoke else 2_000, 10 if smoke else 50
                ),
            }
    return result


@contextmanager
def _no_postgres() -> Iterator[None]:
    yield None


def table(result: dict[str, Any]) -> str:
    """Append cost (ms) by thread length, ours beside the peers and the floor."""
    marks: list[int] = result["marks"]
    rows: list[tuple[str, list[str], str]] = []

    def cell(values: dict[str, Any], m: int) -> str:
        for key in (f"append_{m}_ms", f"append_{m}_ms_extrapolated"):
            if key in values:
                star = "*" if key.endswith("extrapolated") else ""
                return f"{values[key]:.3f}{star}"
        return "-"

    for name in ("sqlite", "postgresql"):
        if name in result:
            r = result[name]
            ratio = r.get("append_over_floor")
            note = f"x floor {ratio:.2f}" if ratio is not None else ""
            rows.append((f"convmem {name}", [cell(r, m) for m in marks], note))
    if "postgresql" in result:
        r = result["postgresql"]
        rows.append(
            ("INSERT+SELECT floor (pg)", [f"{r.get(f'floor_{m}_ms', 0):.3f}" for m in marks], "")
        )
    for peer, values in result.get("peers", {}).items():
        if "skipped" in values:
            rows.append((peer, ["-" for _ in marks], "skipped: " + values["skipped"]))
        else:
            rows.append((peer, [cell(values, m) for m in marks], values.get("note", "")))
    width = max(len("append ms at"), *(len(r[0]) for r in rows))
    lines = ["  ".join(["append ms at".ljust(width)] + [f"{m:,}".rjust(9) for m in marks])]
    for label, cells, note in rows:
        lines.append(
            "  ".join([label.ljust(width)] + [c.rjust(9) for c in cells] + [note]).rstrip()
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--runs", type=int, default=None, help="runs to take medians of")
    args = parser.parse_args()
    # a plain `kill` still drops the scratch databases (finally blocks run on SystemExit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs = args.runs if args.runs is not None else (1 if args.smoke else 3)
    if runs < 1:
        parser.error("--runs: at least 1")
    result = run(args.smoke, not args.no_postgres, runs)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    for section in ("sqlite", "postgresql"):
        if section in result:
            print(f"[{section}] (median of {runs} runs)")
            for k, v in result[section].items():
                print(f"  {k}: {v:.3f}")
    print()
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
