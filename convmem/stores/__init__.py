"""Session-state stores: the protocol, the embedded in-memory default, and (with the
``redis`` extra) the Redis and Redis Cluster backends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convmem.stores.base import SessionStateStore, StoreStats, state_key
from convmem.stores.memory import InMemorySessionStateStore

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = [
    "InMemorySessionStateStore",
    "SessionStateStore",
    "StoreStats",
    "state_key",
]


def __getattr__(name: str) -> Any:
    # Redis backends import redis-py lazily so ``import convmem`` needs no extra.
    if name in ("RedisSessionStateStore", "RedisClusterSessionStateStore"):
        from convmem.stores import redis as _redis

        return getattr(_redis, name)
    raise AttributeError(f"module 'convmem.stores' has no attribute {name!r}")
