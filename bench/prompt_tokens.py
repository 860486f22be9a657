"""Prompt tokens per turn on the reference session: raw history replay vs convmem.

The reference session (``convmem.reference``): a fixed 4,000-token system prompt plus
retrieved context per turn, questions of 17–27 tokens, scripted 2,000-token answers,
50 turns, seed 0. Targets: memory-added tokens (prompt minus system/context minus the
current question) at most 160 at every turn, and prompt(50)/prompt(1) at most 1.05.

    python bench/prompt_tokens.py [--json] [--smoke]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from convmem import Clarification, SessionMemory, count_message_tokens
from convmem.reference import TODAY, reference_domain, reference_session

MARKS = (1, 3, 6, 10, 20, 50)


def measure(turns: int) -> list[dict[str, Any]]:
    memory = SessionMemory(reference_domain(), tenant="bench")
    history: list[tuple[str, str]] = []
    rows = []
    for t in reference_session(turns=turns):
        started = memory.begin_turn("reference", t.question, today=TODAY)
        assert not isinstance(started, Clarification), "the reference session never clarifies"
        if t.tool is not None:
            memory.record_tool("reference", *t.tool)
        memory.end_turn("reference", answer=t.answer)
        system = f"{t.system}\n\n{started.block}" if started.block else t.system
        baseline = count_message_tokens([("system", t.system), ("user", t.question)])
        convmem = count_message_tokens([("system", system), ("user", started.rewritten)])
        replay = count_message_tokens([("system", t.system), *history, ("user", t.question)])
        rows.append({"turn": t.turn, "replay": replay, "convmem": convmem,
                     "memory_tokens": convmem - baseline})
        history += [("user", t.question), ("assistant", t.answer)]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="6 turns, for CI")
    args = parser.parse_args()
    rows = measure(6 if args.smoke else 50)
    last, first = rows[-1], rows[0]
    summary = {
        "turns": len(rows),
        "memory_tokens_max": max(r["memory_tokens"] for r in rows),
        "convmem_last_over_first": round(last["convmem"] / first["convmem"], 4),
        "replay_last_over_first": round(last["replay"] / first["replay"], 4),
        "replay_total": sum(r["replay"] for r in rows),
        "convmem_total": sum(r["convmem"] for r in rows),
        "targets_met": max(r["memory_tokens"] for r in rows) <= 160
        and last["convmem"] / first["convmem"] <= 1.05,
    }
    if args.json:
        print(json.dumps({"summary": summary, "per_turn": rows}, indent=2))
        return
    print(f"{'turn':>5} {'replay':>10} {'convmem':>9} {'memory-added':>13}")
    for r in rows:
        if r["turn"] in MARKS or r is last:
            print(f"{r['turn']:>5} {r['replay']:>10,} {r['convmem']:>9,} {r['memory_tokens']:>13}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
