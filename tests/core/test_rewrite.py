"""Rewrites substitute rather than append (spec §9): exact expected strings."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest

from convmem import Domain, RuleResolver
from convmem.state import SessionState, state_from_dict
from tests.core.conftest import DATA

CASES = [json.loads(line) for line in (DATA / "rewrite_cases.jsonl").read_text().splitlines() if line]


def test_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20


def state_from_case(case: dict[str, Any]) -> SessionState:
    return state_from_dict({"v": 1, "format": None, "pending": None, "version": 1, **case["state"]})


@pytest.mark.parametrize("case", CASES, ids=[c["question"] for c in CASES])
def test_rewrite(crm: Domain, case: dict[str, Any]) -> None:
    state = state_from_case(case)
    got = RuleResolver().resolve(case["question"], state, crm, date.fromisoformat(case["today"]))
    assert got.rewritten == case["rewritten"]
