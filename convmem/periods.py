"""Time expressions normalised to absolute periods against the session's clock.

Spec §1 and §8: ``2026``, ``2026-Q3``, ``2026-11``, ``2026-11-30`` and
``2026-11-23..2026-11-29`` (weeks run Monday to Sunday). "Q2" alone and a month name
alone mean the current year's, even if they lie ahead; when a question states several
periods, the last one stated wins (``find_periods`` returns them in text order).

Spec §10 (the readings that generalise): a year qualifier binds to the unit it is
attached to ("last year's Q4", "Q4 of last year", "November 2025" are one period,
``2025-Q4``), explicit ranges are one ``a..b`` period ("between November 2 and
November 8", "Nov 2-8", "from September to November"), halves are date ranges,
"last November" is the nearest November before this month, "two months ago" counts
back from this month. Patterns are tried longest first and claim their span.
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


_MONTH_ABBR = {"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
               "oct": 10, "nov": 11, "dec": 12}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
            "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_ORDINAL = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4}

_MONTH_NAME = ("january|february|march|april|may|june|july|august|september|sept|october"
               "|november|december")
#: A month inside a date ("Nov 2", "2 November"): full names and abbreviations.
_MONTH_ANY = (r"(?:january|february|march|april|may|june|july|august|september|october"
              r"|november|december|sept|jan|feb|mar|apr|jun|jul|aug|sep|oct|nov|dec)\.?")
_DAY = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?"
_NUM = r"(?:\d{1,3}|" + "|".join(_NUMBERS) + ")"
#: A calendar date: ISO, "November 2[, 2026]", "2[nd] [of] November[ 2026]".
_DATE = (rf"(?:{_YEAR}-\d{{2}}-\d{{2}}|{_MONTH_ANY}\s+{_DAY}(?![\d:])(?:,?\s+{_YEAR})?"
         rf"|(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH_ANY}(?:,?\s+{_YEAR})?)")
_TO = r"\s*(?:-|–|—|\bto\b|\bthrough\b|\bthru\b|\buntil\b|\btill\b|\band\b)\s*"
#: A year qualifier before a unit ("last year's", "2025's") or after it ("of last year").
_YEAR_REL = r"(?:last|this|next|previous|prior|the\s+previous)\s+year|the\s+year\s+before\s+last"
_PRE = rf"(?:(?P<pre>{_YEAR_REL}|{_YEAR})['’]s?\s+)"
_POST = rf"(?:,?\s+(?:of\s+|in\s+|for\s+)?(?P<post>{_YEAR_REL}|{_YEAR}))"
#: A quarter, a half or a month.
_UNIT = (rf"(?:q(?P<q>[1-4])|(?P<qord>first|second|third|fourth|1st|2nd|3rd|4th)\s+quarter"
         rf"|h(?P<h>[12])|(?P<hord>first|second|1st|2nd)\s+half|(?P<month>{_MONTH_NAME}))")

#: The period phrases, tried in this order (a span goes to the first that matches it):
#: (pattern, kind), matched ignoring case but for the month abbreviations ("Mar", not "mar").
_PHRASES: list[tuple[str, str]] = [
    # explicit ranges first: they contain dates, months and quarters
    (rf"\b(?:between\s+|from\s+)?(?P<a>{_DATE}){_TO}(?P<b>{_DATE})", "range"),
    (rf"\b(?:between\s+|from\s+)?(?P<m>{_MONTH_ANY})\s+(?P<d1>{_DAY}){_TO}(?:the\s+)?(?P<d2>{_DAY})"
     rf"(?![\d:])(?:,?\s+(?P<y>{_YEAR}))?", "mdd"),
    (rf"\b(?:between\s+(?:the\s+)?|from\s+(?:the\s+)?)?(?P<d1>{_DAY}){_TO}(?:the\s+)?"
     rf"(?P<d2>{_DAY})\s+(?:of\s+)?(?P<m>{_MONTH_ANY})(?:,?\s+(?P<y>{_YEAR}))?", "ddm"),
    (rf"\b(?:between|from)\s+(?P<m1>{_MONTH_NAME}){_TO}(?P<m2>{_MONTH_NAME})"
     rf"(?:,?\s+(?P<y>{_YEAR}))?\b", "months"),
    (rf"\bweek\s+of\s+(?P<a>{_DATE})", "weekof"),
    (rf"\b(?P<rel>last|this|next)\s+(?P<what>q[1-4]|{_MONTH_NAME})\b", "relunit"),
    (rf"(?<![\w-])(?P<a>{_DATE})(?![\w-])", "date"),
    (rf"\b({_YEAR})[\s-]?q([1-4])\b", "yearquarter"),
    (rf"\b{_PRE}?{_UNIT}{_POST}?\b", "unit"),
    (rf"\b(?P<n>{_NUM})\s+(?P<u>day|week|month|quarter|year)s?\s+ago\b", "ago"),
    (r"\bthe\s+(?P<u>year|quarter|month|week)\s+before\s+last\b", "beforelast"),
    (r"\b(?:this|current|the current)\s+(year|quarter|month|week)"
     r"(?:\s+(?:so\s+far|to\s+date))?\b", "this"),
    (r"\b(?:last|previous|prior|past)\s+(year|quarter|month|week)\b", "last"),
    (r"\bnext\s+(year|quarter|month|week)\b", "next"),
    (r"\b(?:year[\s-]to[\s-]date|ytd)\b", "ytd"),
    (rf"\b(?:last|past)\s+({_NUM})\s+(day|week|month)s?\b", "lastn"),
    (r"\b(?P<abbr>(?-i:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec))\b\.?"
     rf"(?:\s+(?P<y>{_YEAR}))?", "abbr"),
    (r"\b(?:today|yesterday|tomorrow)\b", "day"),
    (rf"(?<![\w-])({_YEAR})(?![\w-])", "year"),
]

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(pattern, re.I), kind) for pattern, kind in _PHRASES
]


#: What every pattern above needs in its match: a digit (days, years, Q1, H2, "3 weeks"),
#: a month's first three letters (names and abbreviations), or a unit or relative word.
_NEEDED = re.compile(
    r"[0-9]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
    r"|quarter|half|week|month|year|ytd|ago|before|day|tomorrow",
    re.IGNORECASE | re.ASCII,
)


def _may_name_a_period(text: str) -> bool:
    """False only when no pattern can match: an ASCII text with none of ``_NEEDED``
    (there, case-insensitive matching is ASCII case folding). Most questions name no
    period, and one literal scan is far cheaper than every pattern's."""
    return not text.isascii() or _NEEDED.search(text) is not None


def find_periods(text: str, today: date) -> list[PeriodMention]:
    """Every period phrase in ``text``, in order, without overlaps (longest first)."""
    if not _may_name_a_period(text):
        return []
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


def _number(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.lower()]


def _month_number(word: str) -> int | None:
    w = word.lower().rstrip(".")
    return _MONTHS.get(w) or _MONTH_ABBR.get(w)


def _is_modal_may(word: str, text: str, pos: int) -> bool:
    """"may" is a modal verb far more often than a month: only a capitalised "May" that
    does not start a sentence is the month."""
    return word.lower() == "may" and (word != "May" or _sentence_start(text, pos))


def _year_of(qualifier: str | None, today: date) -> int | None:
    if qualifier is None:
        return today.year
    q = " ".join(qualifier.lower().split())
    if q.isdigit():
        return int(q)
    if q == "the year before last":
        return today.year - 2
    first = q.split()[0] if not q.startswith("the previous") else "last"
    return today.year + {"last": -1, "previous": -1, "prior": -1, "this": 0, "next": 1}[first]


def _day(year: int, month: int, day: str) -> date | None:
    try:
        return date(year, month, int(re.sub(r"\D", "", day)))
    except ValueError:
        return None


_DATE_PARTS = re.compile(
    rf"^(?:(?P<iso>{_YEAR}-\d{{2}}-\d{{2}})|(?P<m1>{_MONTH_ANY})\s+(?P<d1>{_DAY})(?:,?\s+(?P<y1>{_YEAR}))?"
    rf"|(?:the\s+)?(?P<d2>{_DAY})\s+(?:of\s+)?(?P<m2>{_MONTH_ANY})(?:,?\s+(?P<y2>{_YEAR}))?)$",
    re.I,
)


def _date(text: str, today: date, full: str, pos: int) -> date | None:
    """A calendar date in ``text`` (one ``_DATE``); a date without a year is this year's."""
    m = _DATE_PARTS.match(" ".join(text.split()))
    if m is None:
        return None
    if m["iso"]:
        try:
            return date.fromisoformat(m["iso"])
        except ValueError:
            return None
    word, day, year = (m["m1"], m["d1"], m["y1"]) if m["m1"] else (m["m2"], m["d2"], m["y2"])
    if _is_modal_may(word.rstrip("."), full, pos) and word.lower() == "may":
        return None
    month = _month_number(word)
    if month is None:
        return None
    return _day(int(year) if year else today.year, month, day)


def _span(a: date, b: date) -> str | None:
    return f"{a.isoformat()}..{b.isoformat()}" if a <= b else None


def _month_last_day(year: int, month: int) -> date:
    y, m = _shift_month(year, month, 1)
    return date(y, m, 1) - timedelta(days=1)


def _unit_value(m: re.Match[str], today: date) -> str | None:
    """A quarter, half or month with an optional year qualifier before or after it."""
    if m["pre"] and m["post"]:
        return None
    year = _year_of(m["pre"] or m["post"], today)
    if year is None:
        return None
    if m["q"] or m["qord"]:
        return f"{year}-Q{m['q'] or _ORDINAL[m['qord'].lower()]}"
    if m["h"] or m["hord"]:
        half = int(m["h"] or _ORDINAL[m["hord"].lower()])
        start = date(year, 1 if half == 1 else 7, 1)
        end = date(year, 6, 30) if half == 1 else date(year, 12, 31)
        return _span(start, end)
    return f"{year}-{_MONTHS[m['month'].lower()]:02d}"


def _normalise(kind: str, m: re.Match[str], text: str, today: date) -> str | None:
    if kind == "range":
        a = _date(m["a"], today, text, m.start("a"))
        b = _date(m["b"], today, text, m.start("b"))
        if a is None or b is None:
            return None
        if b < a and b.year == a.year and not re.search(_YEAR, m["b"]):
            b = b.replace(year=b.year + 1)  # "December 28 to January 3"
        return _span(a, b)
    if kind in ("mdd", "ddm"):
        if _is_modal_may(m["m"].rstrip("."), text, m.start("m")):
            return None
        month = _month_number(m["m"])
        year = int(m["y"]) if m["y"] else today.year
        if month is None:
            return None
        a, b = _day(year, month, m["d1"]), _day(year, month, m["d2"])
        return _span(a, b) if a and b else None
    if kind == "months":
        year = int(m["y"]) if m["y"] else today.year
        first, last = _MONTHS[m["m1"].lower()], _MONTHS[m["m2"].lower()]
        if _is_modal_may(m["m1"], text, m.start("m1")) or _is_modal_may(m["m2"], text, m.start("m2")):
            return None
        end_year = year + 1 if last < first else year
        return _span(date(year, first, 1), _month_last_day(end_year, last))
    if kind == "weekof":
        d = _date(m["a"], today, text, m.start("a"))
        return None if d is None else _week(d, 0)
    if kind == "unit":
        if m["month"] and _is_modal_may(m["month"], text, m.start("month")):
            return None
        return _unit_value(m, today)
    if kind == "relunit":
        return _relative_unit(m["rel"].lower(), m["what"], text, m.start("what"), today)
    if kind == "ago":
        n = _number(m["n"])
        unit = m["u"].lower()
        if unit == "day":
            return (today - timedelta(days=n)).isoformat()
        return _relative(unit, -n, today)
    if kind == "beforelast":
        return _relative(m["u"].lower(), -2, today)
    if kind in ("this", "last", "next"):
        delta = {"this": 0, "last": -1, "next": 1}[kind]
        return _relative(m.group(1).lower(), delta, today)
    if kind == "ytd":
        return f"{today.year}-01-01..{today.isoformat()}"
    if kind == "lastn":
        n = _number(m.group(1))
        if n <= 0:
            return None
        days = {"day": 1, "week": 7, "month": 30}[m.group(2).lower()] * n
        return f"{(today - timedelta(days=days)).isoformat()}..{(today - timedelta(days=1)).isoformat()}"
    if kind == "yearquarter":
        return f"{m.group(1)}-Q{m.group(2)}"
    if kind == "date":
        d = _date(m["a"], today, text, m.start("a"))
        return None if d is None else d.isoformat()
    if kind == "abbr":
        month = _month_number(m["abbr"])
        return None if month is None else f"{m['y'] or today.year}-{month:02d}"
    if kind == "day":
        word = m.group(0).lower()
        return (today + timedelta(days={"today": 0, "yesterday": -1, "tomorrow": 1}[word])).isoformat()
    return m.group(1)


def _relative_unit(rel: str, what: str, text: str, pos: int, today: date) -> str | None:
    """"last November" / "next Q1": the nearest such month or quarter before (after) the
    current one; "this November" is this year's."""
    if what.lower().startswith("q") and what[1:].isdigit():
        q = int(what[1:])
        _y, current = quarter_of(today)
        if rel == "this":
            return f"{today.year}-Q{q}"
        if rel == "last":
            return f"{today.year if q < current else today.year - 1}-Q{q}"
        return f"{today.year if q > current else today.year + 1}-Q{q}"
    if _is_modal_may(what, text, pos):
        return None
    month = _MONTHS[what.lower()]
    if rel == "this":
        return f"{today.year}-{month:02d}"
    if rel == "last":
        return f"{today.year if month < today.month else today.year - 1}-{month:02d}"
    return f"{today.year if month > today.month else today.year + 1}-{month:02d}"


def _sentence_start(text: str, pos: int) -> bool:
    before = text[:pos].rstrip()
    return not before or before[-1] in ".!?"
