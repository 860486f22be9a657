"""The thread export document, declared once: typed records, their checks, their JSON, their rows.

Each section of a ``convmem.thread`` document is a frozen dataclass (``ThreadDoc``,
``MessageDoc``, ``AttachmentDoc``, ``ModelInputDoc``, ``DerivedDoc``,
``RedactionDoc``) whose fields carry a ``Spec``: how the value is checked when a
document is read (type, range, length, format), how it is written, which table
column holds it and whose ids it names. Export builds records from rows
(``record_from_row``) and writes them with ``record_json``; import reads records with
``parse_record`` and turns them into rows with ``record_row`` (ids mapped when the
import asks for fresh ones). All four walk the same fields, so export and import
cannot drift apart.

Every refusal is one ``ImportRefused`` naming the path, e.g.
``$.messages[0].parent_id``. The bytes are read incrementally by
``convmem.transcript.reader``; checks that need more than one record (unique ids,
references, the parent graph) are the import operation's
(``convmem.transcript.ops.portability``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Annotated, Any, ClassVar, TypeVar, get_origin, get_type_hints

from convmem.identity import MAX_THREAD_ID_CHARS
from convmem.transcript.errors import ImportRefused
from convmem.transcript.export import FORMAT, VERSION, b64, ts_to_str
from convmem.transcript.records import MAX_RETENTION_DAYS, ROLES, VISIBILITIES

#: Longest record id (message, thread, turn, ...): the id columns' width.
MAX_ID_CHARS = 64
#: PostgreSQL ``integer``: sequence numbers and sizes must fit.
MAX_INT = 2**31 - 1
#: The highest ``seq`` / ``next_seq`` an import takes, on every backend: half the
#: integer column, so the imported thread keeps room for 2**30 appends (``next_seq``
#: higher would make every later append overflow the column on PostgreSQL).
MAX_IMPORTED_SEQ = 2**30
#: The longest ``max_age_seconds`` of a retention policy (``MAX_RETENTION_AGE``).
MAX_RETENTION_SECONDS = MAX_RETENTION_DAYS * 86_400

_TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")
_SHA = re.compile(r"[0-9a-f]{64}\Z")
_BAD_ID = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class ImportLimits:
    """Size caps of an import (each refusal names the limit it hit).

    A *record* is one item of a section (a message, a model input, ...) or one
    top-level field (``thread``): the reader builds one at a time, so its two caps
    bound the memory of an import whatever the document holds. They are enforced
    while the bytes stream in, before the record exists as Python objects; an
    attachment's record may exceed ``max_record_bytes`` by its base64 data.
    """

    max_string_chars: int = 16 * 1024 * 1024  # one text, prompt, block, content
    max_attachment_bytes: int = 32 * 1024 * 1024  # one attachment's bytes
    max_items: int = 5_000_000  # entries of one section (messages, model inputs, ...)
    max_depth: int = 64  # JSON nesting, from the document's top
    max_document_bytes: int = 16 * 1024**3
    max_record_bytes: int = 4 * 1024 * 1024  # one record's JSON (an attachment: + its data)
    max_record_values: int = 100_000  # JSON values and object keys in one record

    @property
    def max_raw_string(self) -> int:
        """The longest string the reader lets through (attachment data is base64)."""
        return max(self.max_string_chars, base64_chars(self.max_attachment_bytes))

    @property
    def max_attachment_record_bytes(self) -> int:
        """An attachment's record: its base64 data plus an ordinary record's bound."""
        return base64_chars(self.max_attachment_bytes) + self.max_record_bytes


def base64_chars(n: int) -> int:
    """Length of the base64 text of ``n`` bytes."""
    return -(-n // 3) * 4


# ---------------------------------------------------------------- specs


Check = Callable[[Any, str, ImportLimits], Any]


@dataclass(frozen=True, slots=True)
class Spec:
    """How one field is read (``check``: value, JSON path, limits → value), written,
    and stored."""

    check: Check
    dump: Callable[[Any], Any] = lambda v: v
    optional: bool = False  # may be absent (written only when not None)
    column: str = ""  # the table column, when it is not the field's name
    stored: bool = True  # False: not a column of the section's table (joined on export)
    ids: str | None = None  # the section whose ids it holds (mapped by a fresh-id import)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def refuse_type(what: str, value: Any, path: str) -> ImportRefused:
    return ImportRefused(path, f"must be {what}, got {_describe(value)}")


def nullable(check: Check) -> Check:
    """``check``, or ``None``."""

    def run(v: Any, path: str, lim: ImportLimits) -> Any:
        return None if v is None else check(v, path, lim)

    return run


def ident(v: Any, path: str, lim: ImportLimits, max_chars: int = MAX_ID_CHARS) -> str:
    """An identifier: a non-blank string within the id width, no control characters."""
    if not isinstance(v, str):
        raise refuse_type("an id (a string)", v, path)
    if not v.strip():
        raise ImportRefused(path, "must be a non-empty id")
    if len(v) > max_chars:
        raise ImportRefused(path, f"is {len(v)} characters; the limit is {max_chars}")
    bad = _BAD_ID.search(v)
    if bad is not None:
        raise ImportRefused(
            path, f"contains U+{ord(bad.group()):04X} at position {bad.start()} (not allowed in ids)"
        )
    return v


def thread_key(v: Any, path: str, lim: ImportLimits) -> str:
    """The application's key for the thread (the identity rule for thread ids)."""
    return ident(v, path, lim, MAX_THREAD_ID_CHARS)


def label(max_chars: int, *, blank: bool = True) -> Check:
    """A short string (a column of ``max_chars``)."""

    def run(v: Any, path: str, lim: ImportLimits) -> str:
        if not isinstance(v, str):
            raise refuse_type("a string", v, path)
        if len(v) > max_chars:
            raise ImportRefused(path, f"is {len(v)} characters; the limit is {max_chars}")
        if not blank and not v.strip():
            raise ImportRefused(path, "must not be blank")
        return v

    return run


def text(v: Any, path: str, lim: ImportLimits) -> str:
    """Free text of any length up to the string cap."""
    if not isinstance(v, str):
        raise refuse_type("a string", v, path)
    if len(v) > lim.max_string_chars:
        raise ImportRefused(
            path, f"is {len(v)} characters; the limit is {lim.max_string_chars} (ImportLimits)"
        )
    return v


def integer(lo: int, hi: int = MAX_INT) -> Check:
    """An integer (not a boolean, not ``1.0``) in ``[lo, hi]``."""

    def run(v: Any, path: str, lim: ImportLimits) -> int:
        if type(v) is not int:
            raise refuse_type("an integer", v, path)
        if not lo <= v <= hi:
            raise ImportRefused(path, f"is {v}; must be between {lo} and {hi}")
        return v

    return run


def seq_number(v: Any, path: str, lim: ImportLimits) -> int:
    """``seq`` or ``next_seq``: an integer from 1 to ``MAX_IMPORTED_SEQ``."""
    if type(v) is not int:
        raise refuse_type("an integer", v, path)
    if v < 1:
        raise ImportRefused(path, f"is {v}; must be between 1 and {MAX_IMPORTED_SEQ}")
    if v > MAX_IMPORTED_SEQ:
        raise ImportRefused(
            path, f"is {v}; must be at most {MAX_IMPORTED_SEQ} (2**30), which leaves the "
            "thread room for appends in its integer column"
        )
    return v


def boolean(v: Any, path: str, lim: ImportLimits) -> bool:
    """``true`` or ``false``."""
    if type(v) is not bool:
        raise refuse_type("true or false", v, path)
    return v


def timestamp(v: Any, path: str, lim: ImportLimits) -> datetime:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC), as the naive UTC value stored."""
    if not isinstance(v, str) or _TS.match(v) is None:
        raise ImportRefused(path, f"must be a UTC timestamp YYYY-MM-DDTHH:MM:SS.ffffffZ, got {v!r:.60}")
    try:
        return datetime.fromisoformat(v[:-1])  # naive UTC, as stored
    except ValueError as exc:
        raise ImportRefused(path, f"is not a real time: {exc}") from None


def choice(options: tuple[str, ...]) -> Check:
    """One of ``options``."""

    def run(v: Any, path: str, lim: ImportLimits) -> str:
        if v not in options or not isinstance(v, str):
            raise ImportRefused(path, f"must be one of {', '.join(options)}; got {v!r:.60}")
        return v

    return run


def sha256_hex(v: Any, path: str, lim: ImportLimits) -> str:
    """64 lowercase hex digits."""
    if not isinstance(v, str) or _SHA.match(v) is None:
        raise ImportRefused(path, f"must be a sha256 (64 lowercase hex digits), got {v!r:.80}")
    return v


def json_object(v: Any, path: str, lim: ImportLimits) -> dict[str, Any]:
    """A JSON object (its strings and depth were checked while reading)."""
    if not isinstance(v, dict):
        raise refuse_type("an object", v, path)
    return v


def list_of(check: Check) -> Check:
    """A list whose items pass ``check``."""

    def run(v: Any, path: str, lim: ImportLimits) -> list[Any]:
        if not isinstance(v, list):
            raise refuse_type("a list", v, path)
        return [check(item, f"{path}[{i}]", lim) for i, item in enumerate(v)]

    return run


def exact_keys(obj: Any, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """``obj`` is an object with all of ``required``, some of ``optional``, nothing else."""
    if not isinstance(obj, dict):
        raise refuse_type("an object", obj, path)
    for key in required:
        if key not in obj:
            raise ImportRefused(f"{path}.{key}", "is missing")
    for key in obj:
        if key not in required and key not in optional:
            raise ImportRefused(f"{path}.{key}", "is not a field of this record")


def retention(v: Any, path: str, lim: ImportLimits) -> dict[str, Any]:
    """A retention policy as ``RetentionPolicy.to_json`` writes it."""
    exact_keys(v, path, ("legal_hold", "max_age_seconds", "owner"))
    boolean(v["legal_hold"], f"{path}.legal_hold", lim)
    nullable(integer(1, MAX_RETENTION_SECONDS))(v["max_age_seconds"], f"{path}.max_age_seconds", lim)
    label(200, blank=False)(v["owner"], f"{path}.owner", lim)
    return dict(v)


# One part of a message, by kind: (required keys, checks).
_PART_FIELDS: dict[str, dict[str, Check]] = {
    "text": {"text": text},
    "tool_call": {"call_id": label(2000), "name": label(2000), "arguments": json_object},
    "tool_result": {"call_id": label(2000), "content": text, "is_error": boolean},
    "attachment_ref": {
        "media_type": label(200),
        "name": text,
        "sha256": lambda v, p, lim: v if v == "" else sha256_hex(v, p, lim),
        "size": integer(0),
    },
}


def part(v: Any, path: str, lim: ImportLimits) -> dict[str, Any]:
    """A typed message part (``records.part_to_json``)."""
    if not isinstance(v, dict):
        raise refuse_type("an object", v, path)
    kind = v.get("kind")
    checks = _PART_FIELDS.get(kind) if isinstance(kind, str) else None
    if checks is None:
        raise ImportRefused(
            f"{path}.kind", f"must be one of {', '.join(_PART_FIELDS)}; got {kind!r:.60}"
        )
    exact_keys(v, path, ("kind", *checks))
    for key, check in checks.items():
        check(v[key], f"{path}.{key}", lim)
    return v


def affected(v: Any, path: str, lim: ImportLimits) -> dict[str, Any]:
    """The ids a redaction touched: a log, never followed (forks may be elsewhere)."""
    exact_keys(v, path, ("derived", "messages", "turns"))
    for key in ("derived", "messages", "turns"):
        list_of(ident)(v[key], f"{path}.{key}", lim)
    return dict(v)


def base64_data(v: Any, path: str, lim: ImportLimits) -> bytes:
    """Strict standard base64, within the attachment cap."""
    if not isinstance(v, str):
        raise refuse_type("base64 text", v, path)
    if len(v) > base64_chars(lim.max_attachment_bytes):
        raise ImportRefused(
            path, f"holds more than {lim.max_attachment_bytes} bytes (ImportLimits.max_attachment_bytes)"
        )
    try:
        return base64.b64decode(v.encode("ascii"), validate=True)
    except (ValueError, binascii.Error):
        raise ImportRefused(path, "is not valid base64") from None


#: The timestamp fields' specs.
TS = Spec(timestamp, dump=ts_to_str)
TS_OR_NULL = Spec(nullable(timestamp), dump=ts_to_str)


# ---------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class ThreadDoc:
    """``$.thread``."""

    id: Annotated[str, Spec(ident, ids="thread")]
    key: Annotated[str | None, Spec(nullable(thread_key))]
    owner: Annotated[str | None, Spec(nullable(label(200)))]
    title: Annotated[str | None, Spec(nullable(text))]
    metadata: Annotated[dict[str, Any], Spec(json_object)]
    created_at: Annotated[datetime, TS]
    updated_at: Annotated[datetime, TS]
    retention: Annotated[dict[str, Any] | None, Spec(nullable(retention))]
    active_leaf: Annotated[str | None, Spec(nullable(ident), ids="messages")]
    next_seq: Annotated[int, Spec(seq_number)]
    archived_seq: Annotated[int, Spec(integer(0))]
    forked_from: Annotated[str | None, Spec(nullable(ident))]

    section: ClassVar[str] = "thread"


@dataclass(frozen=True, slots=True)
class MessageDoc:
    """``$.messages[i]``: one node of the tree."""

    id: Annotated[str, Spec(ident, ids="messages")]
    parent_id: Annotated[str | None, Spec(nullable(ident), ids="messages")]
    seq: Annotated[int, Spec(seq_number)]
    role: Annotated[str, Spec(choice(ROLES))]
    author: Annotated[str | None, Spec(nullable(label(200)))]
    parts: Annotated[list[dict[str, Any]], Spec(list_of(part))]
    extra: Annotated[dict[str, Any], Spec(json_object)]
    received_at: Annotated[datetime, TS]
    client_ts: Annotated[datetime | None, TS_OR_NULL]
    visibility: Annotated[str, Spec(choice(VISIBILITIES))]
    copy_of: Annotated[str | None, Spec(nullable(ident))]
    turn_id: Annotated[str | None, Spec(nullable(ident), ids="model_inputs")]
    redacted_at: Annotated[datetime | None, TS_OR_NULL]

    section: ClassVar[str] = "messages"


@dataclass(frozen=True, slots=True)
class AttachmentDoc:
    """``$.attachments[i]``: bytes of an attachment some message references."""

    sha256: Annotated[str, Spec(sha256_hex)]
    media_type: Annotated[str, Spec(label(200))]
    size: Annotated[int, Spec(integer(0))]
    data_base64: Annotated[bytes, Spec(base64_data, dump=b64, column="data")]

    section: ClassVar[str] = "attachments"


@dataclass(frozen=True, slots=True)
class ModelInputDoc:
    """``$.model_inputs[i]``: what the model received on one turn."""

    id: Annotated[str, Spec(ident, ids="model_inputs")]
    user_message_id: Annotated[str, Spec(ident, ids="messages")]
    rendered_block: Annotated[str, Spec(text)]
    state_snapshot: Annotated[dict[str, Any], Spec(json_object)]
    sent_message_ids: Annotated[list[str], Spec(list_of(ident), ids="messages")]
    system_prompt: Annotated[str | None, Spec(nullable(text), stored=False)]
    system_prompt_sha256: Annotated[
        str | None, Spec(nullable(sha256_hex), column="template_sha256")
    ]
    tool_schemas: Annotated[list[dict[str, Any]], Spec(list_of(json_object))]
    model: Annotated[str | None, Spec(nullable(label(200)))]
    model_params: Annotated[dict[str, Any], Spec(json_object)]
    created_at: Annotated[datetime, TS]
    completed_at: Annotated[datetime | None, TS_OR_NULL]
    answer_message_id: Annotated[str | None, Spec(nullable(ident), ids="messages")]
    # The messages its block and snapshot quote (absent: not known; see ``models``).
    quoted_message_ids: Annotated[
        list[str] | None, Spec(nullable(list_of(ident)), optional=True, ids="messages")
    ]

    section: ClassVar[str] = "model_inputs"


@dataclass(frozen=True, slots=True)
class DerivedDoc:
    """``$.derived[i]``: a memory citing the messages it came from."""

    id: Annotated[str, Spec(ident, ids="derived")]
    kind: Annotated[str, Spec(label(100, blank=False))]
    content: Annotated[str, Spec(text)]
    source_message_ids: Annotated[list[str], Spec(list_of(ident), ids="messages")]
    created_at: Annotated[datetime, TS]
    tombstoned_at: Annotated[datetime | None, TS_OR_NULL]

    section: ClassVar[str] = "derived"


@dataclass(frozen=True, slots=True)
class RedactionDoc:
    """``$.redactions[i]``: who redacted which message, when and why."""

    id: Annotated[str, Spec(ident, ids="redactions")]
    message_id: Annotated[str, Spec(ident, ids="messages")]
    actor: Annotated[str, Spec(label(200, blank=False))]
    reason: Annotated[str, Spec(text)]
    at: Annotated[datetime, TS]
    affected: Annotated[dict[str, Any], Spec(affected)]

    section: ClassVar[str] = "redactions"


Record = ThreadDoc | MessageDoc | AttachmentDoc | ModelInputDoc | DerivedDoc | RedactionDoc
R = TypeVar("R", ThreadDoc, MessageDoc, AttachmentDoc, ModelInputDoc, DerivedDoc, RedactionDoc)

#: The list sections, in the canonical (sorted) order, and their record types.
SECTIONS: dict[str, type[Any]] = {
    "attachments": AttachmentDoc,
    "derived": DerivedDoc,
    "messages": MessageDoc,
    "model_inputs": ModelInputDoc,
    "redactions": RedactionDoc,
}
#: Every top-level field of the document, in canonical order.
TOP_LEVEL: tuple[str, ...] = tuple(sorted([*SECTIONS, "format", "thread", "version"]))


def _specs(cls: type[Any]) -> list[tuple[str, Spec]]:
    hints = get_type_hints(cls, include_extras=True)
    return [(f.name, hints[f.name].__metadata__[0]) for f in fields(cls)]


def _null_as(cls: type[Any]) -> dict[str, type[Any]]:
    """The fields a NULL column reads as empty: lists and objects that are never null."""
    hints = get_type_hints(cls, include_extras=True)
    return {
        f.name: origin
        for f in fields(cls)
        if (origin := get_origin(hints[f.name].__origin__)) in (dict, list)
    }


_RECORD_TYPES: tuple[type[Any], ...] = (ThreadDoc, *SECTIONS.values())
_SPECS: dict[type[Any], list[tuple[str, Spec]]] = {cls: _specs(cls) for cls in _RECORD_TYPES}
_NULL_AS: dict[type[Any], dict[str, type[Any]]] = {cls: _null_as(cls) for cls in _RECORD_TYPES}


def parse_record(cls: type[R], obj: Any, path: str, limits: ImportLimits) -> R:
    """``obj`` as a checked ``cls`` record, or ``ImportRefused`` naming the bad field."""
    specs = _SPECS[cls]
    exact_keys(
        obj, path,
        tuple(n for n, s in specs if not s.optional),
        tuple(n for n, s in specs if s.optional),
    )
    return cls(**{n: s.check(obj.get(n), f"{path}.{n}", limits) for n, s in specs})


def record_json(rec: Record) -> dict[str, Any]:
    """The record as the document's JSON object (optional fields only when set)."""
    out: dict[str, Any] = {}
    for name, s in _SPECS[type(rec)]:
        value = getattr(rec, name)
        if s.optional and value is None:
            continue
        out[name] = s.dump(value)
    return out


def record_from_row(cls: type[R], row: Mapping[str, Any]) -> R:
    """The record of a table row (export): each field from its column, NULL lists and
    objects as empty ones, stored bytes as ``bytes``."""
    null_as = _NULL_AS[cls]
    values: dict[str, Any] = {}
    for name, s in _SPECS[cls]:
        value = row[s.column or name]
        if value is None and name in null_as:
            value = null_as[name]()
        elif isinstance(value, memoryview):
            value = bytes(value)
        values[name] = value
    return cls(**values)


IdMap = Callable[[str, str | None], str | None]


def record_row(rec: Record, ids: IdMap) -> dict[str, Any]:
    """The record as its table's columns (import): stored fields only, every id passed
    through ``ids(section, id)`` (the identity, or a fresh-id import's mapping)."""
    out: dict[str, Any] = {}
    for name, s in _SPECS[type(rec)]:
        if not s.stored:
            continue
        value = getattr(rec, name)
        if s.ids is not None:
            section = s.ids
            if isinstance(value, list):
                value = [ids(section, v) for v in value]
            else:
                value = ids(section, value)
        out[s.column or name] = value
    return out


def check_header(fmt: Any, version: Any) -> None:
    """``format`` and ``version`` of a thread document (``1`` exactly: not ``true``,
    ``"1"`` or ``1.0``)."""
    if fmt != FORMAT or not isinstance(fmt, str):
        raise ImportRefused("$.format", f"must be {FORMAT!r}; got {fmt!r:.60}")
    if type(version) is not int or version != VERSION:
        raise ImportRefused(
            "$.version", f"must be the integer {VERSION} (this convmem reads version {VERSION}); "
            f"got {version!r:.60}"
        )


def system_prompt_matches(rec: ModelInputDoc, path: str) -> None:
    """A model input's prompt and its digest go together and agree."""
    if (rec.system_prompt is None) != (rec.system_prompt_sha256 is None):
        raise ImportRefused(
            f"{path}.system_prompt_sha256", "and system_prompt must both be given or both be null"
        )
    if rec.system_prompt is not None:
        digest = hashlib.sha256(rec.system_prompt.encode("utf-8")).hexdigest()
        if digest != rec.system_prompt_sha256:
            raise ImportRefused(
                f"{path}.system_prompt_sha256", f"does not match the prompt's sha256 ({digest})"
            )


__all__ = [
    "SECTIONS",
    "AttachmentDoc",
    "DerivedDoc",
    "ImportLimits",
    "MessageDoc",
    "ModelInputDoc",
    "RedactionDoc",
    "ThreadDoc",
    "check_header",
    "parse_record",
    "record_from_row",
    "record_json",
    "record_row",
]

