"""Test configuration: the convmem plugin provides servers, prefixes and blockbuster;
``tests.offline_http`` the network guard and the hand-written provider cassettes;
``pytester`` runs the plugin's own checks in a child pytest. ``transcript`` is the
record the adapter tests write into, on each SQL backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import TranscriptStore

pytest_plugins = ["convmem.testing.pytest_plugin", "tests.offline_http", "pytester"]

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
