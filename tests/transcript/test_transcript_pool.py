"""The transcript's connection pool: its bounds are the constructor's, checked, and a
call that cannot get a connection in ``pool_timeout`` fails as ``TranscriptUnavailable``
(the error a turn's commit point knows how to raise or degrade), not after SQLAlchemy's
default 30 seconds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from convmem import ConfigError, TranscriptUnavailable
from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import TranscriptStore


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"pool_size": -1}, "pool_size"),
        ({"max_overflow": 2.5}, "max_overflow"),
        ({"pool_timeout": 0}, "pool_timeout"),
        ({"pool_timeout": "5"}, "pool_timeout"),
    ],
)
def test_bad_pool_settings_are_refused(sqlite_url: str, options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        TranscriptStore(sqlite_url, retention=FOREVER, **options)


@pytest.mark.postgres
def test_a_full_pool_fails_the_call_after_pool_timeout(postgres_url: str) -> None:
    store = TranscriptStore(
        postgres_url, retention=FOREVER, pool_size=1, max_overflow=0, pool_timeout=0.3
    )
    store.migrate()
    try:
        with store.engine.connect():  # the only connection, held
            start = time.monotonic()
            with pytest.raises(TranscriptUnavailable):
                store.list_threads("t-pool")
            assert time.monotonic() - start < 5

        async def held_async() -> None:
            async with store.async_engine.connect():
                with pytest.raises(TranscriptUnavailable):
                    await store.alist_threads("t-pool")
            assert await store.alist_threads("t-pool") == []  # and it is free again
            await store.aclose()

        asyncio.run(held_async())
    finally:
        store.close()
