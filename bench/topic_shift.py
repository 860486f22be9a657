"""Topic-shift measure in the TopiOCQA format: follow-up drop % and shift carry %.

Reads a TopiOCQA-format file (a JSON array, or JSON lines, of turns with
``Conversation_no``, ``Turn_no``, ``Question`` and ``Topic``; lower-case keys work
too). For every turn after the first of its conversation the detector sees the
question and the last three questions of the conversation (answers are never
given). A turn whose ``Topic`` equals the previous turn's is a follow-up; the
detector *drops* it when it returns True. Any other turn is a topic shift; among
shifts asked without a pronoun (spec §9 reference words) the detector *carries*
one when it returns False. The bar: drop ≤ 15 % and carry ≤ 35 %, both at once.

Usage: ``python bench/topic_shift.py FILE [--split NAME] [--baseline] [--json]``.
``--split`` keeps turns whose optional ``split`` field equals NAME (the committed
``tests/data/topic_cases.jsonl`` has ``tune`` and ``holdout``); ``--baseline`` also
scores the seed's rule and the contract's §8–9 rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convmem.text import elliptical_opener, has_reference, overlap
from convmem.topic import topic_changed

Detector = Callable[[str, Sequence[str]], bool]


@dataclass(frozen=True)
class Case:
    """One scored turn: the question, its last three predecessors, and the label."""

    conversation: str
    turn: int
    question: str
    recent: tuple[str, ...]
    shift: bool


def _field(row: Mapping[str, Any], name: str) -> Any:
    for key in (name, name.lower()):
        if key in row:
            return row[key]
    raise KeyError(name)


def read_turns(path: Path) -> list[dict[str, Any]]:
    """Turns from a JSON array or JSON-lines file."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a list of turns")
    return [r for r in rows if isinstance(r, dict)]


def cases(rows: Iterable[Mapping[str, Any]], *, split: str | None = None) -> list[Case]:
    """Scored turns, conversation by conversation, in turn order."""
    convs: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if split is not None and row.get("split") != split:
            continue
        convs.setdefault(str(_field(row, "Conversation_no")), []).append(row)
    out: list[Case] = []
    for conv, turns in convs.items():
        turns.sort(key=lambda r: int(_field(r, "Turn_no")))
        questions = [str(_field(r, "Question")) for r in turns]
        topics = [str(_field(r, "Topic")) for r in turns]
        for i in range(1, len(turns)):
            out.append(Case(conv, i + 1, questions[i], tuple(questions[max(0, i - 3):i]),
                            topics[i] != topics[i - 1]))
    return out


def score(data: Sequence[Case], detector: Detector) -> dict[str, Any]:
    """Follow-up drop % and pronoun-free shift carry %, with counts."""
    follow = [c for c in data if not c.shift]
    shifts = [c for c in data if c.shift and not has_reference(c.question)]
    dropped = [c for c in follow if detector(c.question, c.recent)]
    carried = [c for c in shifts if not detector(c.question, c.recent)]
    drop = 100.0 * len(dropped) / len(follow) if follow else 0.0
    carry = 100.0 * len(carried) / len(shifts) if shifts else 0.0
    return {
        "followups": len(follow),
        "followups_dropped": len(dropped),
        "drop_pct": round(drop, 1),
        "shifts_without_pronoun": len(shifts),
        "shifts_carried": len(carried),
        "carry_pct": round(carry, 1),
        "meets_bar": drop <= 15.0 and carry <= 35.0,
    }


def seed_rule(question: str, recent: Sequence[str]) -> bool:
    """The seed chapter's rule: content-word overlap below 0.12."""
    return overlap(question, recent) < 0.12


def contract_rule(question: str, recent: Sequence[str]) -> bool:
    """Spec §8–9: a pronoun or elliptical opener keeps; otherwise overlap below 0.12."""
    if has_reference(question) or elliptical_opener(question) is not None:
        return False
    return seed_rule(question, recent)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("file", type=Path)
    parser.add_argument("--split", default=None)
    parser.add_argument("--baseline", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        data = cases(read_turns(args.file), split=args.split)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 2
    detectors: dict[str, Detector] = {"topic_changed": topic_changed}
    if args.baseline:
        detectors = {"seed overlap<0.12": seed_rule, "contract §8-9": contract_rule, **detectors}
    results = {name: score(data, det) for name, det in detectors.items()}
    if args.json:
        print(json.dumps({"file": str(args.file), "split": args.split, "results": results}))
        return 0
    print(f"{args.file} ({args.split or 'all'}): {len(data)} scored turns")
    print(f"{'detector':<20} {'drop %':>7} {'carry %':>8}  bar")
    for name, r in results.items():
        print(f"{name:<20} {r['drop_pct']:>7.1f} {r['carry_pct']:>8.1f}  "
              f"{'ok' if r['meets_bar'] else 'MISS'}  "
              f"({r['followups_dropped']}/{r['followups']} dropped, "
              f"{r['shifts_carried']}/{r['shifts_without_pronoun']} carried)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
