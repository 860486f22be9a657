from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from convmem import Domain, SessionMemory, load_domain

DATA = Path(__file__).resolve().parent.parent / "data"
TODAY = date(2026, 11, 30)


@pytest.fixture(scope="session")
def crm() -> Domain:
    return load_domain(DATA / "domains" / "crm.json")


@pytest.fixture
def memory(crm: Domain) -> SessionMemory:
    return SessionMemory(crm, tenant="t1")
