"""Test configuration: the convmem plugin provides servers, prefixes and blockbuster;
``tests.offline_http`` the network guard and the hand-written provider cassettes;
``pytester`` runs the plugin's own checks in a child pytest.

Fixtures every folder shares: ``crm`` (the CRM example domain, its catalog built before
any event loop runs), ``tenant`` (a tenant no other test uses: the PostgreSQL database
is shared by the run), ``transcript_url`` (each SQL backend), ``migrated_store`` (a
``TranscriptStore`` on a URL, migrated once per run) and ``transcript`` (one on each
backend, closed after the test).

Hypothesis profiles, chosen by ``HYPOTHESIS_PROFILE``: ``dev`` (the default), ``ci``
(``./dev test`` sets it; sized so the whole run stays within its budget on two cores)
and ``deep`` (outside CI, for a long search). A property that drives real servers per
example takes a hundredth of the profile's budget (``storage_examples``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from convmem.domain import Domain, load_domain
from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import TranscriptStore

pytest_plugins = ["convmem.testing.pytest_plugin", "tests.offline_http", "pytester"]

_SLOW_OK = [HealthCheck.too_slow]
settings.register_profile("dev", max_examples=400, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("ci", max_examples=2500, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("deep", max_examples=20000, deadline=None,
                          suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def storage_examples() -> int:
    """Examples for a property that drives real stores on every example."""
    return max(10, settings.default.max_examples // 100)


DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def crm() -> Domain:
    domain = load_domain(DATA / "domains" / "crm.json")
    # The catalog (and its stopword file) is built lazily on the first resolve; build it
    # here so no coroutine test does that file read on its loop.
    assert domain.catalog is not None
    return domain


@pytest.fixture
def tenant() -> str:
    """A tenant no other test uses (the PostgreSQL database is shared by the run)."""
    return f"t-{uuid.uuid4().hex[:12]}"


_MIGRATED: set[str] = set()
_MIGRATING = threading.Lock()


def _migrated_store(url: str) -> TranscriptStore:
    store = TranscriptStore(url, retention=FOREVER)
    with _MIGRATING:
        if url not in _MIGRATED:
            store.migrate()
            _MIGRATED.add(url)
    return store


@pytest.fixture(scope="session")
def migrated_store() -> Callable[[str], TranscriptStore]:
    """``migrated_store(url)``: a ``TranscriptStore`` (retention forever) on ``url``,
    whose schema was migrated once per run. The caller closes it."""
    return _migrated_store


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def transcript_url(request: pytest.FixtureRequest) -> str:
    """The URL of a fresh SQLite file, or of the run's PostgreSQL."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url"))


@pytest.fixture
def transcript(transcript_url: str) -> Iterator[TranscriptStore]:
    """A migrated ``TranscriptStore`` on each SQL backend (``transcript_url``)."""
    store = _migrated_store(transcript_url)
    yield store
    asyncio.run(store.aclose())
