"""The export format: versioned, canonical JSON of one whole thread.

Canonical means one byte sequence per thread: keys sorted, separators ``,`` and
``:``, no ASCII escaping, UTC timestamps as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``,
attachment bytes as standard base64, lists in a fixed order (messages by ``seq``,
everything else by time then id), one trailing newline. So export → import →
export is byte-identical on any backend, and two exports can be compared with
``cmp``. Version 1 (``"format": "convmem.thread"``) holds the thread, every
message of every branch including the execution log, the attachments, the
model-input records with their system prompts, the derived memories and the
redaction log. ``convmem.user_view`` is what the user saw: the active path,
conversation messages only.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from convmem.errors import ConfigError
from convmem.transcript.records import utc

FORMAT = "convmem.thread"
USER_VIEW_FORMAT = "convmem.user_view"
VERSION = 1
_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def ts_to_str(dt: datetime | None) -> str | None:
    """UTC ISO-8601 with microseconds and a ``Z``."""
    return None if dt is None else utc(dt).strftime(_TS_FORMAT)


def str_to_ts(value: Any) -> datetime | None:
    """Inverse of ``ts_to_str`` (aware UTC)."""
    if value is None:
        return None
    try:
        return datetime.strptime(str(value), _TS_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError as exc:
        raise ConfigError(f"export: bad timestamp {value!r} (want {_TS_FORMAT})") from exc


def canonical_dumps(obj: Any) -> str:
    """The one serialisation used for exports."""
    return (
        json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        + "\n"
    )


def b64(data: bytes) -> str:
    """Attachment bytes for JSON."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    """Inverse of ``b64``; refuses anything that is not strict base64."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except ValueError as exc:
        raise ConfigError("export: attachment data is not valid base64") from exc


def load_document(data: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """Parse and check the header of a thread export."""
    doc: Any = dict(data) if isinstance(data, Mapping) else json.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"import: not a {FORMAT} document (field 'format')")
    if doc.get("version") != VERSION:
        raise ConfigError(
            f"import: unsupported version {doc.get('version')!r} (field 'version'; "
            f"this convmem reads version {VERSION})"
        )
    for key in ("thread", "messages", "attachments", "model_inputs", "derived", "redactions"):
        if key not in doc:
            raise ConfigError(f"import: missing field {key!r}")
    return doc


def sort_by_time(items: Sequence[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """Fixed order for lists that have no sequence number."""
    return sorted(items, key=lambda d: (d[field] or "", d["id"]))
