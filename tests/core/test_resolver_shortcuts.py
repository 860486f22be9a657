"""The resolver's shortcuts answer exactly what the full work would.

``find_periods`` returns early when a text has nothing any period pattern needs; the cue scan
skips a phrase whose longest word an ASCII text lacks; the catalog keeps each word's
candidate labels; ``tokenize`` keeps the last texts' tokens. Each is checked against
the work it stands in for, over every question in the eval data and generated text.
"""

from __future__ import annotations

import json
from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmem import periods
from convmem.domain import load_domain
from convmem.resolve import cues
from convmem.text import _tokenize, tokenize
from tests.core.conftest import DATA

TODAY = date(2026, 11, 30)
QUESTIONS = sorted({
    turn["user"]
    for path in DATA.glob("*.jsonl")
    for line in path.read_text("utf-8").splitlines() if line.strip()
    for turn in json.loads(line).get("turns", []) if isinstance(turn, dict) and "user" in turn
})
WORDS = sorted({w for q in QUESTIONS for w in q.split()} | {
    "Q3", "2025", "last", "year", "May", "Sept.", "3rd", "of", "to", "-", "YTD", "week", "ago",
    "two", "between", "from", "tomorrow", "Today", "H1", "half", "İ", "K", "ſ", "EMEA", "emea-north", "Csv", "table",
})
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)


def _every_period_pattern(text: str) -> bool:
    return any(p.search(text) for p, _kind in periods._PATTERNS)


def test_period_shortcut_on_the_eval_questions() -> None:
    assert len(QUESTIONS) > 300
    with_period = [q for q in QUESTIONS if _every_period_pattern(q)]
    skipped = [q for q in QUESTIONS if not periods._may_name_a_period(q)]
    assert with_period and len(skipped) > len(QUESTIONS) // 3  # the shortcut is taken
    for q in QUESTIONS:
        if _every_period_pattern(q):
            assert periods._may_name_a_period(q), q


@given(texts)
def test_period_shortcut_on_generated_text(text: str) -> None:
    if _every_period_pattern(text):
        assert periods._may_name_a_period(text)


@given(st.text(alphabet=st.sampled_from("0123456789 -–,.'’stndrhofQqHhWwMmYyDdAaJjFfSsOoNnTtLlBbEeUuKk"),
               max_size=30))
def test_period_shortcut_on_generated_characters(text: str) -> None:
    if _every_period_pattern(text):
        assert periods._may_name_a_period(text)


def _scan_without_shortcut(text: str, domain: object) -> cues.Cues:
    """``scan`` with every phrase's pattern run (the needle filter switched off)."""
    original = cues._present
    cues._present = lambda phrases, lowered: phrases  # type: ignore[assignment]
    try:
        return cues.scan(text, [], domain, TODAY)  # type: ignore[arg-type]
    finally:
        cues._present = original


def test_cue_shortcut_on_the_eval_questions() -> None:
    for name in ("crm", "crm_typed"):
        domain = load_domain(name)
        hits = 0
        for q in QUESTIONS:
            got = cues.scan(q, [], domain, TODAY)
            assert got == _scan_without_shortcut(q, domain), q
            hits += bool(got.cue_spans)
        assert hits > 20  # the phrases do occur: the comparison is not vacuous


@given(texts)
def test_cue_shortcut_on_generated_text(text: str) -> None:
    domain = load_domain("crm")
    assert cues.scan(text, [], domain, TODAY) == _scan_without_shortcut(text, domain)


def test_catalog_word_cache_matches_the_index() -> None:
    catalog = load_domain("crm").catalog
    assert catalog is not None
    for q in QUESTIONS[:200]:
        for tok in tokenize(q):
            first = catalog._candidate_labels(tok.norm)
            assert first == catalog._labels_near_word(tok.norm)
            assert catalog._candidate_labels(tok.norm) is first  # kept


def test_tokenize_hands_each_caller_its_own_list() -> None:
    one = tokenize("Who's their rep?")
    one.append(one[0])
    assert tokenize("Who's their rep?") == list(_tokenize("Who's their rep?"))
    long = "word " * 1200
    assert tokenize(long) == list(_tokenize(long))


@pytest.mark.parametrize("phrase", [
    "tomorrow", "today", "yesterday", "last quarter", "Q2", "H1", "first half", "3 weeks ago",
    "the year before last", "YTD", "Nov 2", "2 November", "2026-11-02", "between March and May",
    "week of Nov 2", "last 3 days", "Sept", "2025", "next month", "this week so far",
])
def test_period_shortcut_lets_every_kind_through(phrase: str) -> None:
    assert _every_period_pattern(phrase)
    assert periods._may_name_a_period(phrase)
    assert periods._may_name_a_period(f"And for {phrase.upper()}?")
