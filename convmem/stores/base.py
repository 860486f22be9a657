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

import math
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from convmem.errors import ConfigError
from convmem.identity import check_tenant, check_thread_id
from convmem.state import SessionState

#: Version of the key layout; v1 keys (``{<tenant>:<thread_id>}`` unescaped, so
#: ``acme`` + ``eu:42`` and ``acme:eu`` + ``42`` collided) are no longer read and
#: expire with their TTL.
KEY_FORMAT_VERSION = "v2"

# spec §5 stored layout: inside the hash tag, ``%``, ``:``, ``{`` and ``}`` of a tenant
# or thread id are percent-escaped. No escaped part holds a ``:`` (so the first one
# separates tenant from thread) nor a brace (so the tag ends where the pair ends), and
# escaping ``%`` makes the map reversible, hence injective.
_ESCAPE = str.maketrans({"%": "%25", ":": "%3A", "{": "%7B", "}": "%7D"})
_UNESCAPE = re.compile("%(25|3A|7B|7D)")
_UNESCAPED = {"25": "%", "3A": ":", "7B": "{", "7D": "}"}


def key_part(value: str) -> str:
    """A tenant or thread id as it appears in a key (unchanged unless it holds ``%:{}``)."""
    if "%" in value or ":" in value or "{" in value or "}" in value:
        return value.translate(_ESCAPE)
    return value


def unkey_part(part: str) -> str:
    """The inverse of ``key_part``."""
    if "%" not in part:
        return part
    return _UNESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], part)


def state_key(tenant: str, thread_id: str, prefix: str = "convmem") -> str:
    """``<prefix>:v2:state:{<tenant>:<thread_id>}``, tenant and thread id escaped
    (``key_part``): one key per (tenant, thread) pair and exactly one hash tag.

    Every store builds its keys here, so this is where both are checked against the
    shared identifier rule (``convmem.identity``: ``ConfigError`` naming the field).
    The hash tag spans tenant and thread together, so a Redis Cluster spreads one
    tenant's threads over every slot instead of making the tenant one hot slot.
    """
    tenant_part = key_part(check_tenant(tenant))
    thread_part = key_part(check_thread_id(thread_id))
    return f"{prefix}:{KEY_FORMAT_VERSION}:state:{{{tenant_part}:{thread_part}}}"


def tenant_key_head(tenant: str, prefix: str = "convmem") -> str:
    """What every key of ``tenant``'s threads starts with (listing threads)."""
    return f"{prefix}:{KEY_FORMAT_VERSION}:state:{{{key_part(check_tenant(tenant))}:"


def thread_of_key(key: str, head: str) -> str:
    """The thread id of a key that starts with ``head`` (``tenant_key_head``)."""
    return unkey_part(key[len(head):-1])


# Every store checks its options and arguments here, so the same misuse raises the same
# ``ConfigError`` (naming the option) on every backend, before any I/O.


def check_ttl(ttl: float) -> float:
    """A state's lifetime: positive, finite seconds."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not (
        math.isfinite(ttl) and ttl > 0
    ):
        raise ConfigError(f"ttl must be positive seconds, got {ttl!r}")
    return ttl


def check_prefix(prefix: str) -> str:
    """A key prefix: braces would break the hash tag every key carries."""
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}"):
        raise ConfigError(f"prefix must be non-empty and free of '{{' and '}}', got {prefix!r}")
    return prefix


def check_expected_version(expected_version: int) -> int:
    """A compare-and-set's expected version: 0 ("no value yet") or a version a load returned."""
    if isinstance(expected_version, bool) or not isinstance(expected_version, int) or (
        expected_version < 0
    ):
        raise ConfigError(
            f"expected_version must be a whole number, 0 or more (0: no value yet), "
            f"got {expected_version!r}"
        )
    return expected_version


def check_count(count: int) -> int:
    """How many keys a listing asks for per page: 1 or more."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"count must be a whole number, 1 or more, got {count!r}")
    return count


@dataclass(slots=True)
class StoreStats:
    """Counters a store keeps about itself."""

    degraded: int = 0
    conflicts: int = 0


@runtime_checkable
class SessionStateStore(Protocol):
    """Where session state lives between turns (a cache: losing it costs one repeated question).

    The sync methods may be called on a helper thread, while the caller's thread writes
    the record (``convmem.effects.together``), so they must not depend on the thread
    they run on."""

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
