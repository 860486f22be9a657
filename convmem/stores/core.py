"""What every session-state store shares: its checked options, its keys and the size rule.

``InMemorySessionStateStore`` and the Redis stores build on ``StoreCore``, so the same
``ttl`` or ``prefix`` is refused the same way, every key is built by
``convmem.stores.base.state_key`` under the store's prefix, and a state too large to
load back is never written, on every backend.
"""

from __future__ import annotations

from convmem.errors import CorruptState
from convmem.state import MAX_STATE_BYTES, SessionState, encode_state
from convmem.stores.base import StoreStats, check_prefix, check_ttl, state_key
from convmem.stores.degradation import Incidents


class StoreCore:
    """A store's checked ``ttl`` and ``prefix``, its ``stats`` and its incidents."""

    def __init__(self, name: str, *, ttl: float, prefix: str, strict: bool) -> None:
        self.ttl = check_ttl(ttl)
        self.prefix = check_prefix(prefix)
        self.stats = StoreStats()
        self._incidents = Incidents(name, self.stats, strict=strict)

    def _key(self, tenant: str, thread_id: str) -> str:
        return state_key(tenant, thread_id, self.prefix)

    def _encoded(self, key: str, state: SessionState) -> bytes | None:
        """``state``'s bytes to save under ``key``; ``None`` (a failed save, degraded or
        raised when strict) when they are too many to load back: the stored value is
        kept rather than replaced by junk."""
        payload = encode_state(state)
        if len(payload) > MAX_STATE_BYTES:
            size = f"encoded state is {len(payload)} bytes, over the {MAX_STATE_BYTES} limit"
            self._incidents.failed("save", key, CorruptState(size))
            return None
        return payload
