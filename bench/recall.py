"""Recall on demand: hit rate on answer-referring follow-ups, and latency as a thread grows.

    python bench/recall.py                              # SQLite (a temporary file)
    python bench/recall.py --database-url postgresql+psycopg://postgres@127.0.0.1/test
    python bench/recall.py --smoke                      # seconds, for CI
    python bench/recall.py --json

Each case of ``tests/data/recall_followups.jsonl`` (``tests/data/EVAL_README.md``) is
replayed into a ``SessionMemory`` with a transcript, on a thread of its own, as the
application would: ``begin_turn`` with the user's question, ``end_turn`` with the
scripted answer (commit points 1 and 2). Then ``recall(thread, follow-up)`` runs and
the case scores a hit at k when the labelled answer is among the first k hits
(top-1, top-3).

Latency is the median (p50) of the follow-ups' recalls on a thread of 10 messages
(a filler turn, then a case) and on one of 10,000 messages: a single thread filled
through ``TranscriptStore.append`` in batches with the cases' own questions and
answers, shuffled (so every follow-up matches hundreds of messages: the ranking has
work to do), then recalled with every follow-up. ``--smoke`` uses 8 cases and a
300-message thread. On PostgreSQL the tables are ANALYZEd after that fill, as
autovacuum would soon do: with the statistics of the empty tables the planner walks
the active path through the wrong index, quadratically (a finding left to the
recall code: see ``latency_at``).

On PostgreSQL (``--database-url``) the schema is migrated if needed and everything
runs under a fresh tenant whose threads are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from convmem import ModelCall, RecallHit, SessionMemory  # noqa: E402
from convmem.domain import Domain, load_domain  # noqa: E402
from convmem.transcript import NewMessage, RetentionPolicy, TranscriptStore  # noqa: E402
from convmem.transcript.models import MESSAGES, SEARCH, THREADS  # noqa: E402

CASES = ROOT / "tests" / "data" / "recall_followups.jsonl"
DOMAIN = ROOT / "tests" / "data" / "domains" / "crm.json"
TODAY = date(2026, 11, 30)
POLICY = RetentionPolicy(max_age=None, owner="bench")
FILLER = ("Anything else on my list today?", "Nothing else is pending for you today.")


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    turns: tuple[tuple[str, str], ...]
    followup: str
    target_turn: int  # 1-based: the turn whose answer the follow-up refers to


@dataclass(frozen=True)
class Outcome:
    case: Case
    rank: int | None  # 0-based rank of the labelled answer among the hits; None: missing
    hits: tuple[RecallHit, ...]
    ms: float


def load_cases(path: Path = CASES) -> list[Case]:
    cases = []
    for line in path.read_text("utf-8").splitlines():
        if line.strip():
            raw = json.loads(line)
            cases.append(Case(raw["id"], raw["kind"],
                              tuple((t["user"], t["assistant"]) for t in raw["turns"]),
                              raw["followup"], raw["target_turn"]))
    return cases


def replay(memory: SessionMemory, thread: str, turns: Sequence[tuple[str, str]]) -> list[str]:
    """Record the turns as an application would; the answers' transcript ids, in order."""
    assert memory.transcript is not None
    for question, answer in turns:
        memory.begin_turn(thread, question, today=TODAY, model_call=ModelCall())
        memory.end_turn(thread, answer=answer)
    path = memory.transcript.active_path(memory.tenant, memory.transcript_thread_id(thread))
    return [m.id for m in path if m.role == "assistant"]


def _recall(memory: SessionMemory, thread: str, query: str) -> tuple[list[RecallHit], float]:
    t0 = time.perf_counter()
    hits = memory.recall(thread, query, limit=5)
    return hits, (time.perf_counter() - t0) * 1000


def score(memory: SessionMemory, cases: Sequence[Case], prefix: str = "") -> list[Outcome]:
    """Replay each case on its own thread and recall its follow-up."""
    out = []
    for case in cases:
        thread = f"{prefix}{case.id}"
        answers = replay(memory, thread, case.turns)
        want = answers[case.target_turn - 1]
        hits, ms = _recall(memory, thread, case.followup)
        rank = next((i for i, h in enumerate(hits) if h.message_id == want), None)
        out.append(Outcome(case, rank, tuple(hits), ms))
    return out


def hit_rate(outcomes: Sequence[Outcome], k: int) -> float:
    return sum(o.rank is not None and o.rank < k for o in outcomes) / len(outcomes)


def latency_at_10(memory: SessionMemory, cases: Sequence[Case]) -> float:
    """p50 recall on threads of 10 messages: one filler turn, then a 4-turn case."""
    times = []
    for case in cases:
        thread = f"ten-{case.id}"
        replay(memory, thread, [FILLER, *case.turns[:4]])
        times.append(_recall(memory, thread, case.followup)[1])
    return statistics.median(times)


def latency_at(memory: SessionMemory, cases: Sequence[Case], size: int) -> float:
    """p50 recall on one thread of ``size`` messages made of the cases' own turns."""
    store = memory.transcript
    assert store is not None
    thread = f"big-{size}"
    tid = store.get_or_create_thread(memory.tenant, thread).id
    pool = [(q, a) for c in cases for q, a in c.turns]
    rng = random.Random(size)
    written = 0
    while written < size:
        batch: list[NewMessage] = []
        while len(batch) < min(500, size - written):
            q, a = rng.choice(pool)
            batch.append(NewMessage(role="user", content=q))
            if len(batch) < min(500, size - written):
                batch.append(NewMessage(role="assistant", content=a))
        store.append(memory.tenant, tid, batch)
        written += len(batch)
    assert len(store.active_path(memory.tenant, tid)) == size
    if store.engine.dialect.name == "postgresql":
        # What autovacuum does within a minute of such a fill. Without it the planner,
        # estimating one row per table, walks the active path through the wrong index:
        # quadratic (measured: 2,000 messages, p50 9.0 s before, 0.11 s after).
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"ANALYZE {', '.join(t.name for t in (THREADS, MESSAGES, SEARCH))}")
    _recall(memory, thread, cases[0].followup)  # warm the statement cache
    return statistics.median(_recall(memory, thread, c.followup)[1] for c in cases)


@contextmanager
def session(url: str | None, domain: Domain) -> Iterator[SessionMemory]:
    """A SessionMemory on ``url`` (default: a temporary SQLite file) under a fresh tenant;
    the tenant's threads are deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix="convmem-recall-") as tmp:
        store = TranscriptStore(url or f"sqlite:///{tmp}/recall.db", retention=POLICY)
        store.migrate()
        tenant = f"bench-recall-{uuid.uuid4().hex[:8]}"
        try:
            yield SessionMemory(domain, transcript=store, tenant=tenant)
        finally:
            for thread in store.list_threads(tenant):
                store.delete_thread(tenant, thread.id)
            store.engine.dispose()


def run(url: str | None, smoke: bool, size: int | None = None) -> dict[str, Any]:
    cases = load_cases()
    if smoke:
        cases = cases[:8]
    size = size or (300 if smoke else 10_000)
    with session(url, load_domain(DOMAIN)) as memory:
        outcomes = score(memory, cases)
        p50_10 = latency_at_10(memory, cases)
        p50_big = latency_at(memory, cases, size)
    misses = [
        {"id": o.case.id, "followup": o.case.followup, "rank": o.rank,
         "top": [f"{h.role} {h.turn}: {h.text[:60]}" for h in o.hits[:3]]}
        for o in outcomes if o.rank is None or o.rank >= 3
    ]
    return {
        "backend": "sqlite" if url is None else url.split(":", 1)[0],
        "cases": len(cases), "smoke": smoke,
        "top1": hit_rate(outcomes, 1), "top3": hit_rate(outcomes, 3),
        "p50_ms_10": p50_10, f"p50_ms_{size}": p50_big,
        "misses_top3": misses,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--database-url", default=None,
                        help="a TranscriptStore URL (PostgreSQL); default a temporary SQLite file")
    parser.add_argument("--smoke", action="store_true", help="8 cases, a 300-message thread (CI)")
    parser.add_argument("--messages", type=int, default=None,
                        help="the large thread's size (default 10,000; 300 with --smoke)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    size = args.messages or (300 if args.smoke else 10_000)
    result = run(args.database_url, args.smoke, size)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"recall on {result['cases']} follow-ups ({result['backend']})")
    print(f"  {'top-1 hit rate':28} {result['top1']:7.1%}")
    print(f"  {'top-3 hit rate':28} {result['top3']:7.1%}")
    print(f"  {'p50 recall, 10 messages':28} {result['p50_ms_10']:7.2f} ms")
    print(f"  {f'p50 recall, {size:,} messages':28} {result[f'p50_ms_{size}']:7.2f} ms")
    for miss in result["misses_top3"]:
        print(f"  miss {miss['id']} (rank {miss['rank']}): {miss['followup']}")
        for line in miss["top"]:
            print(f"      {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
