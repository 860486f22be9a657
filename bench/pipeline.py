"""Per-turn cost of resolve + policy + render as the catalog grows (100 / 10k / 100k).

The catalog answers from indexes (exact names, symmetric-delete typo candidates), so a
turn should cost about the same whatever the catalog size: target p50 at 100,000
entities at most 2x p50 at 10,000. Every turn runs the real façade over the in-memory
store (codec included); questions name entities, mistype some, refer back, and set
filters and formats. Timings are per turn, p50 and p99 over the session.

    python bench/pipeline.py [--json] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from datetime import date
from typing import Any

from convmem import Domain, Entity, PeriodFilter, SessionMemory, VocabFilter

SYL = ["ka", "lo", "mer", "tan", "vi", "sol", "dra", "ne", "quo", "bel", "ri", "zan", "po", "ul", "tes"]
TODAY = date(2026, 11, 30)


def make_domain(n: int, seed: int = 0) -> Domain:
    rng = random.Random(seed)
    entities = []
    for i in range(n):
        label = " ".join("".join(rng.choice(SYL) for _ in range(3)).capitalize() for _ in range(2))
        entities.append(Entity("item", f"I-{i}", label, aliases=(label.split()[0],)))
    return Domain(
        name=f"synthetic-{n}",
        entities=tuple(entities),
        filters={"period": PeriodFilter(), "phase": VocabFilter({"alpha": ("alpha",), "beta": ("beta",)})},
    )


def questions(domain: Domain, count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        e = rng.choice(domain.entities)
        label = e.label
        if i % 5 == 1:  # a one-letter typo inside the first word
            w = list(label)
            w[2] = "x" if w[2] != "x" else "y"
            label = "".join(w)
        out.append(rng.choice([
            f"How is {label} doing this quarter?",
            "What about their numbers last month, briefly?",
            f"Compare {label} with the beta ones in a table.",
            "And for Q2?",
            "Unrelated: how do I export a report?",
        ]))
    return out


def run(n: int, turns: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    domain = make_domain(n)
    _ = domain.catalog  # build the indexes
    build = time.perf_counter() - t0
    mem = SessionMemory(domain, tenant="bench")
    times = []
    for q in questions(domain, turns):
        start = time.perf_counter()
        mem.begin_turn("bench", q, today=TODAY)
        mem.end_turn("bench")
        times.append(time.perf_counter() - start)
    times.sort()
    return {"entities": n, "build_s": round(build, 3),
            "p50_ms": round(statistics.median(times) * 1000, 4),
            "p99_ms": round(times[int(len(times) * 0.99) - 1] * 1000, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    sizes = (100, 1_000) if args.smoke else (100, 10_000, 100_000)
    turns = 50 if args.smoke else 400
    rows = [run(n, turns) for n in sizes]
    ratio = rows[-1]["p50_ms"] / rows[-2]["p50_ms"]
    summary = {"p50_largest_over_previous": round(ratio, 3), "target_met": ratio <= 2.0}
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return
    print(f"{'entities':>9} {'index build s':>14} {'p50 ms/turn':>12} {'p99 ms/turn':>12}")
    for r in rows:
        print(f"{r['entities']:>9,} {r['build_s']:>14} {r['p50_ms']:>12} {r['p99_ms']:>12}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
