"""What every framework adapter needs to map its messages onto transcript records.

An adapter (LangChain, LlamaIndex) turns a framework message into a ``NewMessage``
whose typed parts hold what the record models and whose ``extra[<namespace>]``
holds the rest, and back. The decisions that do not depend on the framework live
here, once, so the adapters only translate:

- **Attachments**: a read fetches the bytes of live attachments only. A redacted
  attachment keeps its place with no digest (``TranscriptStore.redact`` empties
  ``sha256`` and puts the replacement text in ``name``); it reads back as that text
  (``attachment_bytes`` gives ``None``), never as a fetch that cannot succeed.
- **Stored form**: ``stored_parts`` gives the parts as the store will return them
  (bytes replaced by their sha256 and size, every part through the JSON codec), so
  an adapter can prove a round trip before writing and compare a new message with
  a stored one without a database.
- **One versioned namespace per framework**: ``FrameworkNamespace`` writes
  ``extra[key] = {"v": version, ...}`` and reads back only versions it knows; a
  record from another writer, or of a version this code does not read, is a plain
  record of its role.

This module is not ``records`` (the typed records and their codec, which every
store reads) because only the adapters need it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from convmem.errors import ConfigError
from convmem.transcript.ops.base import clean_json
from convmem.transcript.records import (
    AttachmentPart,
    JSONDict,
    Message,
    NewMessage,
    Part,
    part_from_json,
    part_to_json,
)

#: The key of the version inside a framework's namespace.
VERSION_KEY = "v"


@dataclass(frozen=True, slots=True)
class FrameworkNamespace:
    """``extra[key]``: where one framework keeps what the parts do not model.

    ``version`` is written with every payload; ``reads`` lists the versions this code
    reads back (``0``: a payload written before it carried a version).
    """

    key: str
    version: int
    reads: frozenset[int]

    def __post_init__(self) -> None:
        if self.version not in self.reads:
            raise ConfigError(f"namespace {self.key!r}: version {self.version} must be readable")

    def pack(self, payload: Mapping[str, Any]) -> JSONDict:
        """The ``extra`` of a record carrying ``payload`` (versioned)."""
        if VERSION_KEY in payload:
            raise ConfigError(f"namespace {self.key!r}: {VERSION_KEY!r} is reserved for the version")
        return {self.key: {VERSION_KEY: self.version, **payload}}

    def unpack(self, extra: Mapping[str, Any] | None) -> JSONDict | None:
        """The payload (without its version) when ``extra`` holds one this code reads."""
        found = (extra or {}).get(self.key)
        if not isinstance(found, Mapping):
            return None
        payload = dict(found)
        if payload.pop(VERSION_KEY, 0) not in self.reads:
            return None
        return payload


def attachment_digests(records: Iterable[Message]) -> list[str]:
    """The digests of the live attachments these records reference (each once, in order);
    a redacted attachment has none, and nothing to fetch."""
    seen: dict[str, None] = {}
    for record in records:
        for part in record.parts:
            if isinstance(part, AttachmentPart) and part.sha256:
                seen.setdefault(part.sha256)
    return list(seen)


def attachment_bytes(part: AttachmentPart, blobs: Mapping[str, bytes]) -> bytes | None:
    """The bytes of ``part`` (``blobs``: bytes by digest, as fetched for
    ``attachment_digests``); ``None`` when it was redacted, its ``name`` then holding the
    replacement text to show in its place."""
    if not part.sha256:
        return None
    return blobs[part.sha256]


def stored_parts(parts: Sequence[Part]) -> tuple[tuple[Part, ...], dict[str, bytes]]:
    """``parts`` as the store returns them, and the attachment bytes by digest.

    Attachment bytes become their sha256 and size (what a read fetches by), and every
    part goes through the JSON codec, so comparing with a stored message or rebuilding
    a framework message from this is what a later read would do.
    """
    out: list[Part] = []
    blobs: dict[str, bytes] = {}
    for part in parts:
        if isinstance(part, AttachmentPart) and part.data is not None:
            digest = hashlib.sha256(part.data).hexdigest()
            blobs[digest] = part.data
            part = AttachmentPart(part.media_type, part.name, sha256=digest, size=len(part.data))
        out.append(part_from_json(part_to_json(part)))
    return tuple(out), blobs


def stored_extra(extra: Mapping[str, Any] | None) -> JSONDict:
    """``extra`` as the database returns it (JSON, cleaned as the store writes it:
    ``clean_json``); ``ConfigError`` if it is not JSON."""
    try:
        loaded: JSONDict = json.loads(json.dumps(clean_json(dict(extra or {})), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"message extra cannot be recorded: the record keeps JSON only ({exc})") from exc
    return loaded


def same_record(new: NewMessage, old: Message) -> bool:
    """Whether ``TranscriptStore.rebase_path`` would reuse ``old`` for ``new``: the same
    role, stored parts and ``extra`` exactly (so a payload written before its namespace
    carried a version is not reused: the path gets a copy, the old row stays)."""
    return (
        new.role == old.role
        and stored_parts(new.parts())[0] == old.parts
        and stored_extra(new.extra) == old.extra
    )


__all__ = [
    "FrameworkNamespace",
    "attachment_bytes",
    "attachment_digests",
    "same_record",
    "stored_extra",
    "stored_parts",
]
