"""The in-memory store runs the full conformance suite, on a manual clock."""

from __future__ import annotations

from typing import Any

import pytest

from convmem.stores import InMemorySessionStateStore
from convmem.testing import SessionStateStoreSpec


class ManualClock:
    """A monotonic clock the test moves by hand, so TTL tests take no real time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestInMemoryStore(SessionStateStoreSpec):
    backend_id = "memory"

    @pytest.fixture
    def make_store(self) -> Any:
        self.clock = ManualClock()

        def make(*, ttl: float = 3600.0, strict: bool = False, prefix: str = "convmem"
                 ) -> InMemorySessionStateStore:
            return InMemorySessionStateStore(ttl=ttl, strict=strict, prefix=prefix,
                                             clock=self.clock)

        return make

    async def let_time_pass(self, store: Any, seconds: float) -> None:
        self.clock.now += seconds
