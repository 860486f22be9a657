"""UUIDv7 ids for messages, threads and turns.

Python 3.10/3.11 have no ``uuid.uuid7``; this is RFC 9562 §5.7: 48 bits of Unix
milliseconds, then random bits. Ids are opaque to readers: order comes from the
per-thread sequence, never from the id, so no monotonic counter is needed here.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid


def uuid7(unix_ms: int | None = None) -> uuid.UUID:
    """A version-7 UUID; ``unix_ms`` pins the time part (tests, imports)."""
    ms = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68  # 12 bits
    rand_b = rand & ((1 << 62) - 1)  # 62 bits
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return uuid.UUID(int=value)


def new_id() -> str:
    """A new opaque id as its canonical 36-character string."""
    return str(uuid7())


def remapped_id(salt: bytes, unix_ms: int, namespace: str, old: str) -> str:
    """A fresh id for ``old`` that is the same every time within one import (``salt``
    is random and ``unix_ms`` fixed per import): ``import_thread(..., new_id=True)``
    maps every reference without keeping a table of the mapping. Version 7 layout:
    the import's time, then 74 bits of ``sha256(salt, namespace, old)``."""
    digest = hashlib.sha256(salt + namespace.encode() + b"\0" + old.encode()).digest()
    rand = int.from_bytes(digest[:10], "big")
    ms = unix_ms
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76 | (rand >> 68) << 64 | 0b10 << 62 | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))
