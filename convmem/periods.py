"""Time expressions normalised to absolute periods against the session's clock.

Spec §1 and §8: ``2026``, ``2026-Q3``, ``2026-11``, ``2026-11-30`` and
``2026-11-23..2026-11-29`` (weeks run Monday to Sunday). "Q2" alone and a month name
alone mean the current year's, even if they lie ahead; when a question states several
periods, the last one stated wins (``find_periods`` returns them in text order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "sept": 9, "october": 10, "november": 11, "december": 12,
}
_YEAR = r"(?:19|20)\d{2}"

_VALUE = re.compile(
    rf"^(?:{_YEAR}|{_YEAR}-Q[1-4]|{_YEAR}-(?:0[1-9]|1[0-2])"
    rf"|{_YEAR}-\d{{2}}-\d{{2}}(?:\.\.{_YEAR}-\d{{2}}-\d{{2}})?)$"
)


@dataclass(frozen=True, slots=True)
class PeriodMention:
    """A period phrase found in text: its span and normalised value."""

    start: int
    end: int
    value: str


def is_period_value(value: str) -> bool:
    """True when ``value`` is already a normalised period (tool arguments must be)."""
    if not _VALUE.match(value):
        return False
    try:
        for part in value.split(".."):
            if len(part) == 10:
                date.fromisoformat(part)
    except ValueError:
        return False
    return True


def quarter_of(d: date) -> tuple[int, int]:
    return d.year, (d.month - 1) // 3 + 1


def _shift_quarter(year: int, q: int, delta: int) -> tuple[int, int]:
    index = year * 4 + (q - 1) + delta
    return index // 4, index % 4 + 1


def _shift_month(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _week(d: date, delta: int) -> str:
    monday = d - timedelta(days=d.weekday()) + timedelta(weeks=delta)
    return f"{monday.isoformat()}..{(monday + timedelta(days=6)).isoformat()}"


def _relative(unit: str, delta: int, today: date) -> str:
    if unit == "year":
        return str(today.year + delta)
    if unit == "quarter":
        y, q = _shift_quarter(*quarter_of(today), delta)
        return f"{y}-Q{q}"
    if unit == "month":
        y, m = _shift_month(today.year, today.month, delta)
        return f"{y}-{m:02d}"
    return _week(today, delta)


_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(?:this|current|the current)\s+(year|quarter|month|week)"
                r"(?:\s+(?:so\s+far|to\s+date))?\b", re.I), "this"),
    (re.compile(r"\b(?:last|previous|prior|past)\s+(year|quarter|month|week)\b", re.I), "last"),
    (re.compile(r"\bnext\s+(year|quarter|month|week)\b", re.I), "next"),
    (re.compile(r"\b(?:year[\s-]to[\s-]date|ytd)\b", re.I), "ytd"),
    (re.compile(r"\b(?:last|past)\s+(\d{1,3})\s+(day|week|month)s?\b", re.I), "lastn"),
    (re.compile(rf"\b(?:q([1-4])(?:\s+(?:of\s+)?({_YEAR}))?|({_YEAR})[\s-]?q([1-4]))\b", re.I), "quarter"),
    (re.compile(r"\b(january|february|march|april|may|june|july|august|september|sept|october"
                rf"|november|december)(?:\s+({_YEAR}))?\b", re.I), "month"),
    (re.compile(r"\b(?:today|yesterday)\b", re.I), "day"),
    (re.compile(rf"(?<![\w-])({_YEAR})(?![\w-])"), "year"),
]


def find_periods(text: str, today: date) -> list[PeriodMention]:
    """Every period phrase in ``text``, in order, without overlaps (longest first)."""
    found: list[PeriodMention] = []
    taken: list[tuple[int, int]] = []
    for pattern, kind in _PATTERNS:
        for m in pattern.finditer(text):
            if any(s < m.end() and m.start() < e for s, e in taken):
                continue
            value = _normalise(kind, m, text, today)
            if value is None:
                continue
            found.append(PeriodMention(m.start(), m.end(), value))
            taken.append((m.start(), m.end()))
    found.sort(key=lambda p: p.start)
    return found


def _normalise(kind: str, m: re.Match[str], text: str, today: date) -> str | None:
    if kind in ("this", "last", "next"):
        delta = {"this": 0, "last": -1, "next": 1}[kind]
        return _relative(m.group(1).lower(), delta, today)
    if kind == "ytd":
        return f"{today.year}-01-01..{today.isoformat()}"
    if kind == "lastn":
        n = int(m.group(1))
        if n <= 0:
            return None
        days = {"day": 1, "week": 7, "month": 30}[m.group(2).lower()] * n
        return f"{(today - timedelta(days=days)).isoformat()}..{(today - timedelta(days=1)).isoformat()}"
    if kind == "quarter":
        q = m.group(1) or m.group(4)
        year = m.group(2) or m.group(3) or str(today.year)
        return f"{year}-Q{q}"
    if kind == "month":
        word = m.group(1)
        # "may" is a modal verb far more often than a month: only "May" counts.
        if word.lower() == "may" and (word != "May" or _sentence_start(text, m.start())):
            return None
        year = m.group(2) or str(today.year)
        return f"{year}-{_MONTHS[word.lower()]:02d}"
    if kind == "day":
        d = today if m.group(0).lower() == "today" else today - timedelta(days=1)
        return d.isoformat()
    return m.group(1)


def _sentence_start(text: str, pos: int) -> bool:
    before = text[:pos].rstrip()
    return not before or before[-1] in ".!?"
