"""Test configuration: the convmem plugin provides servers, prefixes and blockbuster;
``tests.offline_http`` the network guard and the hand-written provider cassettes;
``pytester`` runs the plugin's own checks in a child pytest. ``transcript`` is the
record the adapter tests write into, on each SQL backend."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import TranscriptStore

pytest_plugins = ["convmem.testing.pytest_plugin", "tests.offline_http", "pytester"]

_MIGRATED: set[str] = set()

# Hypothesis profiles (HYPOTHESIS_PROFILE): "ci" sized so the whole suite stays within
# its budget on two cores, "deep" for a long run outside CI, "dev" the default. Tests
# that hit a database scale their own example counts by the profile's name.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("deep", max_examples=2000, deadline=None, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


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
