"""Session-state stores: the protocol, the embedded in-memory default, and (with the
``redis`` extra) the Redis and Redis Cluster backends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem._lazy import lazy_names
from convmem.stores.base import SessionStateStore, StoreStats, state_key
from convmem.stores.memory import InMemorySessionStateStore

if TYPE_CHECKING:
    from convmem.stores.redis import (
        RedisClusterSessionStateStore as RedisClusterSessionStateStore,
    )
    from convmem.stores.redis import RedisSessionStateStore as RedisSessionStateStore

__all__ = [
    "InMemorySessionStateStore",
    "SessionStateStore",
    "StoreStats",
    "state_key",
]

# Redis backends import redis-py on first use, so ``import convmem`` needs no extra;
# they are reached by name and stay out of ``__all__``.
__getattr__, __dir__ = lazy_names(
    __name__, {".redis": ("RedisSessionStateStore", "RedisClusterSessionStateStore")}, __all__
)
