"""Period normalisation against the session clock (spec §1, §8, §9)."""

from __future__ import annotations

from datetime import date

import pytest

from convmem.periods import find_periods, is_period_value

NOV30 = date(2026, 11, 30)


@pytest.mark.parametrize(
    ("text", "today", "value"),
    [
        ("last quarter", NOV30, "2026-Q3"),
        ("this quarter", NOV30, "2026-Q4"),
        ("last quarter", date(2026, 2, 10), "2025-Q4"),
        ("last quarter", date(2027, 1, 5), "2026-Q4"),
        ("this month", NOV30, "2026-11"),
        ("this month so far", date(2026, 2, 10), "2026-02"),
        ("last month", date(2026, 2, 10), "2026-01"),
        ("Q2", NOV30, "2026-Q2"),
        ("in q1 2025", NOV30, "2025-Q1"),
        ("in October", NOV30, "2026-10"),
        ("in December", NOV30, "2026-12"),  # a month ahead is still this year's
        ("last week", NOV30, "2026-11-23..2026-11-29"),
        ("this week", NOV30, "2026-11-30..2026-12-06"),
        ("this year", NOV30, "2026"),
        ("all of last year", date(2027, 1, 5), "2026"),
        ("in 2024", NOV30, "2024"),
        ("year to date", NOV30, "2026-01-01..2026-11-30"),
        ("since May", NOV30, "2026-05"),
        # issue 13: a year qualifier binds to its unit; explicit ranges are one period
        ("last year's Q4", NOV30, "2025-Q4"),
        ("Q4 of last year", NOV30, "2025-Q4"),
        ("Q4 last year", NOV30, "2025-Q4"),
        ("this year's Q1", NOV30, "2026-Q1"),
        ("Q1 next year", NOV30, "2027-Q1"),
        ("2025's Q3", NOV30, "2025-Q3"),
        ("2025 Q4", NOV30, "2025-Q4"),
        ("the fourth quarter of 2024", NOV30, "2024-Q4"),
        ("last year's fourth quarter", NOV30, "2025-Q4"),
        ("November last year", NOV30, "2025-11"),
        ("last year's November", NOV30, "2025-11"),
        ("last November", NOV30, "2025-11"),  # the nearest November before this month
        ("last October", NOV30, "2026-10"),
        ("next March", NOV30, "2027-03"),
        ("last Q4", NOV30, "2025-Q4"),
        ("between November 2 and November 8", NOV30, "2026-11-02..2026-11-08"),
        ("from Nov 2 to Nov 8", NOV30, "2026-11-02..2026-11-08"),
        ("Nov 2-8", NOV30, "2026-11-02..2026-11-08"),
        ("November 2nd through the 8th", NOV30, "2026-11-02..2026-11-08"),
        ("2–8 November", NOV30, "2026-11-02..2026-11-08"),
        ("between the 2nd and the 8th of November", NOV30, "2026-11-02..2026-11-08"),
        ("2026-11-02 to 2026-11-08", NOV30, "2026-11-02..2026-11-08"),
        ("Dec 28 to Jan 3", NOV30, "2026-12-28..2027-01-03"),
        ("from September to November", NOV30, "2026-09-01..2026-11-30"),
        ("between March and May 2025", NOV30, "2025-03-01..2025-05-31"),
        ("on November 2", NOV30, "2026-11-02"),
        ("November 2, 2025", NOV30, "2025-11-02"),
        ("the week of November 9", NOV30, "2026-11-09..2026-11-15"),
        ("two months ago", NOV30, "2026-09"),
        ("the quarter before last", NOV30, "2026-Q2"),
        ("H1", NOV30, "2026-01-01..2026-06-30"),
        ("first half of last year", NOV30, "2025-01-01..2025-06-30"),
        ("in the past two weeks", NOV30, "2026-11-16..2026-11-29"),
        ("in Oct", NOV30, "2026-10"),
        ("tomorrow", NOV30, "2026-12-01"),
    ],
)
def test_normalise(text: str, today: date, value: str) -> None:
    assert [p.value for p in find_periods(text, today)][-1] == value


def test_several_periods_last_one_wins_in_text_order() -> None:
    assert [p.value for p in find_periods("Q2 versus last quarter", NOV30)] == ["2026-Q2", "2026-Q3"]


@pytest.mark.parametrize("text", ["May I ask something?", "order O-2025", "account 61342", "right now",
                                  "May 5th works?", "we may 2 of them", "the first one", "oct-2"])
def test_not_periods(text: str) -> None:
    assert find_periods(text, NOV30) == []


@pytest.mark.parametrize("value", ["2026", "2026-Q3", "2026-11", "2026-11-30", "2026-11-02..2026-11-08"])
def test_valid_values(value: str) -> None:
    assert is_period_value(value)


@pytest.mark.parametrize("value", ["last quarter", "2026-Q5", "2026-13", "2026-02-30", "Q3", ""])
def test_invalid_values(value: str) -> None:
    assert not is_period_value(value)
