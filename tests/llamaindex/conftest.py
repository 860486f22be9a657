"""Fixtures for the LlamaIndex adapter tests.

The autouse ``blockbuster`` fixture is local until ``convmem.testing.pytest_plugin``
(which provides the same fixture project-wide) lands in this branch.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from blockbuster import blockbuster_ctx

from convmem.domain import Domain, load_domain
from convmem.session import SessionMemory

DATA = Path(__file__).resolve().parents[1] / "data"
TODAY = datetime(2026, 11, 30, 12, 0)


@pytest.fixture(autouse=True)
def _blockbuster(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail any coroutine test that blocks the event loop."""
    if inspect.iscoroutinefunction(request.function):
        with blockbuster_ctx() as bb:
            # Reading the bundled tokenizer files and pydantic's lazy imports are one-off,
            # not per-turn I/O.
            for name in ("io.BufferedReader.read", "os.stat"):
                bb.functions[name].can_block_in("importlib/_bootstrap_external.py", "get_data")
            yield
    else:
        yield


@pytest.fixture(scope="session")
def crm() -> Domain:
    return load_domain(DATA / "domains" / "crm.json")


@pytest.fixture
def session(crm: Domain) -> SessionMemory:
    return SessionMemory(crm, clock=lambda: TODAY)
