"""The recall evaluation (``tests/data/recall_followups.jsonl``, ``bench/recall.py``): every
labelled answer-referring follow-up, replayed into a ``SessionMemory`` with a transcript
on SQLite and on PostgreSQL, must find its labelled answer among recall's first three
hits in at least 90 % of the cases. The labelled file itself is checked too: each
follow-up shares a content word with its target answer, and another answer of the same
conversation shares one as well (a distractor), so the set cannot be passed by any
word overlap at all."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from convmem import SessionMemory
from convmem.domain import Domain
from convmem.transcript import TranscriptStore

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "tests" / "data" / "recall_followups.jsonl"
# The words a follow-up is "about": everything but function words and recall's verbs.
_STOP = (
    "a an the and or of to in on for at by with from is are was were be been it its this "
    "that these those you your i me my we our us they them their he she his her what which "
    "who whom why how when where did do does say said says gave give again remind tell told "
    "according one ones there here so not any all as if about up"
)
STOP = frozenset(_STOP.split())


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_recall", ROOT / "bench" / "recall.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_recall"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


recall_bench = _bench()


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower())
            if w not in STOP and (len(w) > 2 or w.isdigit())}


def test_the_labelled_file_is_honest() -> None:
    cases = [json.loads(line) for line in FILE.read_text("utf-8").splitlines()]
    assert len(cases) >= 40 and len({c["id"] for c in cases}) == len(cases)
    for case in cases:
        answers = [t["assistant"] for t in case["turns"]]
        target = case["target_turn"] - 1
        asked = _words(case["followup"])
        assert asked & _words(answers[target]), f"{case['id']}: nothing shared with its target"
        others = [a for i, a in enumerate(answers) if i != target]
        assert any(asked & _words(a) for a in others), f"{case['id']}: no distractor answer"


def test_the_builder_writes_the_committed_file(tmp_path: Path) -> None:
    builder = ROOT / "tests" / "data" / "labels" / "build_recall_followups.py"
    code = (f"import runpy, pathlib; ns = runpy.run_path({str(builder)!r}); "
            "import json; print(''.join(json.dumps(c, ensure_ascii=False) + '\\n' "
            "for c in ns['CASES']), end='')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == FILE.read_text("utf-8")


@pytest.mark.slow
def test_recall_finds_the_labelled_answer_in_the_top_three(
    transcript_url: str,
    migrated_store: Callable[[str], TranscriptStore],
    crm: Domain,
    tenant: str,
) -> None:
    store = migrated_store(transcript_url)
    try:
        memory = SessionMemory(crm, transcript=store, tenant=tenant)
        outcomes = recall_bench.score(memory, recall_bench.load_cases(FILE))
    finally:
        store.engine.dispose()
    assert len(outcomes) >= 40
    misses = [(o.case.id, o.rank) for o in outcomes if o.rank is None or o.rank >= 3]
    top3 = recall_bench.hit_rate(outcomes, 3)
    assert top3 >= 0.9, f"top-3 {top3:.1%}; missed (id, rank): {misses}"
