"""Fixtures for the LangChain adapter tests: the CRM domain and a memory.

Coroutine tests run under the ``blockbuster`` fixture of ``convmem.testing.pytest_plugin``
(loaded by ``tests/conftest.py``); the one-off loads below happen at import, before any
event loop runs, as an application does them at start-up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from convmem.domain import Domain, load_domain
from convmem.session import SessionMemory
from convmem.tokens import encoding

DATA = Path(__file__).resolve().parents[1] / "data"

encoding()  # the tokenizer vocabulary: read from the package once per process


@pytest.fixture(scope="session")
def crm() -> Domain:
    domain = load_domain(DATA / "domains" / "crm.json")
    # The catalog (and its stopword file) is built lazily on the first resolve; build it
    # here so no coroutine test does that file read on its loop.
    assert domain.catalog is not None
    return domain


@pytest.fixture
def memory(crm: Domain) -> SessionMemory:
    return SessionMemory(crm)
