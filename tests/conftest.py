"""Test configuration: the convmem plugin provides servers, prefixes and blockbuster;
``tests.offline_http`` the network guard and the hand-written provider cassettes;
``pytester`` runs the plugin's own checks in a child pytest. ``transcript`` is the
record the adapter tests write into, on each SQL backend.

Hypothesis profiles, chosen by ``HYPOTHESIS_PROFILE``: ``dev`` (the default), ``ci``
(``./dev test`` sets it; sized so the whole run stays within its budget on two cores)
and ``deep`` (outside CI, for a long search). A property that drives real servers per
example takes a hundredth of the profile's budget (``storage_examples``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

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

_MIGRATED: set[str] = set()


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def transcript(request: pytest.FixtureRequest) -> Iterator[TranscriptStore]:
    """A migrated ``TranscriptStore`` on SQLite (a fresh file) or on the run's PostgreSQL."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url"))
    store = TranscriptStore(url, retention=FOREVER)
    if url not in _MIGRATED:
        store.migrate()
        _MIGRATED.add(url)
    yield store
    asyncio.run(store.aclose())
