"""Benchmark of ``search_index="inline"`` against ``"deferred"``: what a long answer's
append costs in each, and what the first search after many appends pays to index them.

    python bench/search_index.py                 # PostgreSQL and SQLite, 3 runs of 250
    python bench/search_index.py --runs 1 --appends 20 --json

Each run makes a fresh database (PostgreSQL: a scratch database on ``DATABASE_URL``,
dropped afterwards; SQLite: a temporary file), one store per mode and one thread
each, then appends a ~10 KB assistant answer (distinct text each time, ~1,600 words
from a 2,000-word vocabulary) to the two threads in turn, so load from other
processes hits both modes alike. ``append_ms`` is the median append of a run; the
figure reported is the median over the runs. ``first_search_ms`` is one search of
the thread right after its appends (deferred: it indexes them all first),
``next_search_ms`` the same search again.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.transcript import POLICY, scratch_postgres
from convmem.transcript import NewMessage, TranscriptStore

MODES = ("inline", "deferred")


def answers(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct ~10 KB answers over one vocabulary (as a model's answers share words)."""
    rng = random.Random(seed)
    vocab = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        for _ in range(2000)
    ]
    out = []
    for _ in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < 10_000:
            words.append(rng.choice(vocab))
        out.append(" ".join(words))
    return out


def one_run(url: str, appends: int) -> dict[str, dict[str, float]]:
    """Median append and the searches, per mode, on a migrated database at ``url``."""
    stores = {m: TranscriptStore(url, retention=POLICY, search_index=m) for m in MODES}
    stores["inline"].migrate()
    threads = {m: s.create_thread("bench").id for m, s in stores.items()}
    texts = answers(appends)
    probe = texts[0].split()[0]
    times: dict[str, list[float]] = {m: [] for m in MODES}
    try:
        for i, text in enumerate(texts):
            order = MODES if i % 2 == 0 else MODES[::-1]
            for m in order:
                msg = NewMessage(role="assistant", content=text)
                t0 = time.perf_counter()
                stores[m].append("bench", threads[m], msg)
                times[m].append((time.perf_counter() - t0) * 1000)
        out: dict[str, dict[str, float]] = {}
        for m, s in stores.items():
            searches = []
            for _ in range(2):
                t0 = time.perf_counter()
                hits = s.search("bench", probe, thread_id=threads[m], limit=5)
                searches.append((time.perf_counter() - t0) * 1000)
                assert hits
            out[m] = {
                "append_ms": statistics.median(times[m]),
                "first_search_ms": searches[0],
                "next_search_ms": searches[1],
            }
        return out
    finally:
        for s in stores.values():
            s.engine.dispose()


def run(backend: str, runs: int, appends: int) -> dict[str, Any]:
    per_run = []
    for _ in range(runs):
        if backend == "postgresql":
            with scratch_postgres() as url:
                per_run.append(one_run(url, appends))
        else:
            with tempfile.TemporaryDirectory() as tmp:
                per_run.append(one_run(f"sqlite:///{tmp}/bench.db", appends))
    return {
        m: {
            k: round(statistics.median(r[m][k] for r in per_run), 3)
            for k in per_run[0][m]
        }
        | {"append_ms_per_run": [round(r[m]["append_ms"], 3) for r in per_run]}
        for m in MODES
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--appends", type=int, default=250)
    ap.add_argument("--backend", choices=("postgresql", "sqlite", "both"), default="both")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    backends = ("postgresql", "sqlite") if args.backend == "both" else (args.backend,)
    result = {b: run(b, args.runs, args.appends) for b in backends}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for b, modes in result.items():
        for m, figs in modes.items():
            print(f"{b:10} {m:8} append {figs['append_ms']:7.3f} ms "
                  f"(runs {figs['append_ms_per_run']})  first search "
                  f"{figs['first_search_ms']:8.3f} ms  next {figs['next_search_ms']:7.3f} ms")


if __name__ == "__main__":
    main()
