"""The embedded default store: a process-local dict with TTL and compare-and-set.

It stores the same encoded bytes a Redis value holds, so the codec is exercised
exactly as in production, and runs the same conformance suite as every backend. It
cannot be unreachable, but a value can still fail to decode (``put_raw``): that
degrades exactly as on Redis (empty state, one warning per incident, counted, the
value discarded so the next save replaces it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

from convmem.errors import CorruptState, VersionConflict
from convmem.state import SessionState, decode_state, stored_version
from convmem.stores.base import check_count, check_expected_version, tenant_key_head, thread_of_key
from convmem.stores.core import StoreCore


class InMemorySessionStateStore(StoreCore):
    """Dict-backed ``SessionStateStore``; ``ttl`` seconds, refreshed by every save."""

    def __init__(
        self,
        *,
        ttl: float = 3600.0,
        prefix: str = "convmem",
        strict: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("in-memory session-state store", ttl=ttl, prefix=prefix, strict=strict)
        self._clock = clock
        self._values: dict[str, tuple[bytes, float]] = {}
        self._lock = threading.Lock()

    def _live(self, key: str) -> bytes | None:
        entry = self._values.get(key)
        if entry is None:
            return None
        raw, expires = entry
        if self._clock() >= expires:
            del self._values[key]
            return None
        return raw

    def raw(self, tenant: str, thread_id: str) -> bytes | None:
        """The stored bytes (tests and tools; not part of the protocol)."""
        with self._lock:
            return self._live(self._key(tenant, thread_id))

    def put_raw(self, tenant: str, thread_id: str, raw: bytes) -> None:
        """Store arbitrary bytes under a thread's key (corruption tests)."""
        with self._lock:
            self._values[self._key(tenant, thread_id)] = (raw, self._clock() + self.ttl)

    def remaining_ttl(self, tenant: str, thread_id: str) -> float | None:
        """Seconds until the thread's value expires, or None (like Redis ``PTTL``)."""
        key = self._key(tenant, thread_id)
        with self._lock:
            if self._live(key) is None:
                return None
            return self._values[key][1] - self._clock()

    def expire(self, tenant: str, thread_id: str, seconds: float) -> None:
        """Set the remaining lifetime of a stored value (tests; like Redis ``PEXPIRE``)."""
        key = self._key(tenant, thread_id)
        with self._lock:
            raw = self._live(key)
            if raw is not None:
                self._values[key] = (raw, self._clock() + seconds)

    def load(self, tenant: str, thread_id: str) -> SessionState | None:
        key = self._key(tenant, thread_id)
        with self._lock:
            raw = self._live(key)
        if raw is None:
            self._incidents.succeeded()
            return None
        try:
            state = decode_state(raw)
        except CorruptState as exc:
            self._incidents.failed("load", key, exc)  # raises when strict
            with self._lock:  # discard it (if unchanged) so the next save can replace it
                if self._live(key) is raw:
                    del self._values[key]
            return None
        self._incidents.succeeded()
        return state

    async def aload(self, tenant: str, thread_id: str) -> SessionState | None:
        return self.load(tenant, thread_id)

    def save(
        self, tenant: str, thread_id: str, state: SessionState, *, expected_version: int
    ) -> int:
        key = self._key(tenant, thread_id)
        new_version = check_expected_version(expected_version) + 1
        payload = self._encoded(key, state.evolve(version=new_version))
        if payload is None:
            return new_version
        with self._lock:
            raw = self._live(key)
            current = stored_version(raw)
            if current != expected_version:
                self.stats.conflicts += 1
                raise VersionConflict(key, expected_version, current)
            self._values[key] = (payload, self._clock() + self.ttl)
        self._incidents.succeeded()
        return new_version

    async def asave(
        self, tenant: str, thread_id: str, state: SessionState, *, expected_version: int
    ) -> int:
        return self.save(tenant, thread_id, state, expected_version=expected_version)

    def delete(self, tenant: str, thread_id: str) -> None:
        with self._lock:
            self._values.pop(self._key(tenant, thread_id), None)

    async def adelete(self, tenant: str, thread_id: str) -> None:
        self.delete(tenant, thread_id)

    def iter_threads(self, tenant: str, *, count: int = 500) -> Iterator[str]:
        """Thread ids with live state for ``tenant``, like the Redis stores' (``count``,
        their SCAN page size, is accepted for the same signature; there are no pages)."""
        check_count(count)
        head = tenant_key_head(tenant, self.prefix)
        with self._lock:
            keys = [k for k in list(self._values) if k.startswith(head) and self._live(k) is not None]
        for key in keys:
            yield thread_of_key(key, head)

    async def aiter_threads(self, tenant: str, *, count: int = 500) -> AsyncIterator[str]:
        for thread_id in self.iter_threads(tenant, count=count):
            yield thread_id

