"""The session-state store seam: one narrow interface, sync and async twins.

A store keeps one value per (tenant, thread): the encoded ``SessionState``. ``save``
is a compare-and-set on ``version``: it succeeds only when the stored version equals
``expected_version`` (0 = "no value yet") and returns the new version. Stores never
interpret the state beyond the codec in ``convmem.state``.

A non-strict store that cannot reach its server *degrades*: ``load`` returns
``None`` and ``save`` returns the version it would have written, after one WARNING
per incident on logger ``convmem.stores``; ``stats.degraded`` counts incidents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from convmem.state import SessionState

KEY_FORMAT_VERSION = "v1"


def state_key(tenant: str, thread_id: str, prefix: str = "convmem") -> str:
    """``convmem:v1:state:{<tenant>:<thread_id>}``.

    The hash tag spans tenant and thread together, so a Redis Cluster spreads one
    tenant's threads over every slot instead of making the tenant one hot slot.
    """
    return f"{prefix}:{KEY_FORMAT_VERSION}:state:{{{tenant}:{thread_id}}}"


@dataclass(slots=True)
class StoreStats:
    """Counters a store keeps about itself."""

    degraded: int = 0
    conflicts: int = 0


@runtime_checkable
class SessionStateStore(Protocol):
    """Where session state lives between turns (a cache: losing it costs one repeated question)."""

    def load(self, tenant: str, thread_id: str) -> SessionState | None: ...

    async def aload(self, tenant: str, thread_id: str) -> SessionState | None: ...

    def save(
        self, tenant: str, thread_id: str, state: SessionState, *, expected_version: int
    ) -> int: ...

    async def asave(
        self, tenant: str, thread_id: str, state: SessionState, *, expected_version: int
    ) -> int: ...

    def delete(self, tenant: str, thread_id: str) -> None: ...

    async def adelete(self, tenant: str, thread_id: str) -> None: ...
