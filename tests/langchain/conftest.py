"""Fixtures for the LangChain adapter tests: the CRM domain, a memory, blockbuster.

Until the core's pytest plugin (``convmem.testing.pytest_plugin``) lands, the
autouse ``blockbuster`` fixture lives here: coroutine tests fail when async code
makes a blocking call.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
from blockbuster import blockbuster_ctx

from convmem.domain import Domain, load_domain
from convmem.session import SessionMemory
from convmem.tokens import encoding

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(autouse=True)
def _blockbuster(request: pytest.FixtureRequest) -> Iterator[None]:
    if not inspect.iscoroutinefunction(request.function):
        yield
        return
    # The tokenizer vocabulary is read from the package once per process (a file read);
    # an application does that at start-up, so the test does it before watching.
    encoding()
    with blockbuster_ctx():
        yield


@pytest.fixture(scope="session")
def crm() -> Domain:
    return load_domain(DATA / "domains" / "crm.json")


@pytest.fixture
def memory(crm: Domain) -> SessionMemory:
    return SessionMemory(crm)
