"""Fixtures for the core tests: a memory over the CRM domain (``crm`` is
``tests/conftest.py``'s), the dev sets' folder and the labelled sessions' date."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from convmem import Domain, SessionMemory

DATA = Path(__file__).resolve().parent.parent / "data"
TODAY = date(2026, 11, 30)


@pytest.fixture
def memory(crm: Domain) -> SessionMemory:
    return SessionMemory(crm, tenant="t1")
