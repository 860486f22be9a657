"""What every transcript operation is made of: its steps, its context, row decoding and the edge."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from math import isfinite
from typing import Any, BinaryIO, TypeVar, Union

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.base import Executable

from convmem.errors import ConfigError
from convmem.identity import check_id, check_tenant, check_thread_id, clean_text
from convmem.transcript.models import (
    MESSAGES,
    TEMPLATES,
    TURNS,
)
from convmem.transcript.records import (
    ROLES,
    VISIBILITIES,
    AttachmentPart,
    DerivedMemory,
    Message,
    NewMessage,
    Part,
    RetentionPolicy,
    TextPart,
    Thread,
    ToolCallPart,
    ToolResultPart,
    naive_utc,
    parts_from_json,
    utc,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Alone:
    """A step that is the whole operation: its first and only statement.

    One statement is atomic on its own, so the store may run it outside an explicit
    transaction (PostgreSQL autocommit: one round trip instead of BEGIN, statement,
    COMMIT). The store refuses an operation that yields anything after it.
    """

    statement: Executable
    params: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Read:
    """Not a statement: read up to ``size`` bytes of ``source`` (an import document).

    File I/O goes through the driver like a statement, so the async store reads on a
    worker thread and the operation stays sans-I/O (``convmem.transcript.ops.portability``).
    """

    source: BinaryIO
    size: int


@dataclass(frozen=True, slots=True)
class Rewind:
    """Not a statement: seek ``source`` back to its start (a second pass)."""

    source: BinaryIO


@dataclass(frozen=True, slots=True)
class Write:
    """Not a statement: write ``data`` to ``sink`` (an export, chunk by chunk)."""

    sink: BinaryIO
    data: bytes


# A step is a statement, or (statement, parameter rows) for a cached executemany, or
# an ``Alone`` statement, or file I/O (``Read``, ``Rewind``, ``Write``).
Step = Union[  # noqa: UP007
    Executable,
    tuple[Executable, Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]],  # noqa: UP007
    Alone,
    Read,
    Rewind,
    Write,
]
Op = Generator[Step, Any, T]

MSG_COLS: tuple[str, ...] = tuple(c.name for c in MESSAGES.columns)


class ActiveLeaf:
    """Sentinel: "append to the active leaf"."""


ACTIVE = ActiveLeaf()


#: Where a message's search text goes when it is written: into the full-text index
#: (``inline``), or into ``convmem_index_queue``, indexed by the next search of its
#: tenant or thread or by ``index_pending`` (``deferred``: the index's cost leaves the turn).
SEARCH_INDEX_MODES: tuple[str, ...] = ("inline", "deferred")


@dataclass(frozen=True, slots=True)
class Ctx:
    """What statement building depends on besides the arguments."""

    dialect: str  # "sqlite" | "postgresql"
    clock: Callable[[], datetime]
    retention: RetentionPolicy
    search_index: str = "deferred"  # one of SEARCH_INDEX_MODES

    def now(self) -> datetime:
        """The server time, naive UTC as stored."""
        return naive_utc(self.clock())

    def insert(self, table: sa.Table) -> Any:
        """A dialect insert (both have ``on_conflict_do_*``)."""
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)


def tenant_join(
    left: sa.FromClause, right: sa.FromClause, *on: Any, outer: bool = False
) -> sa.Join:
    """``left`` joined to ``right`` on ``on`` within one tenant: ids are per tenant, so
    every join matches ``tenant`` as well."""
    return left.join(right, sa.and_(right.c.tenant == left.c.tenant, *on), isouter=outer)


#: Turns with their system prompt's text (select ``SYSTEM_PROMPT``; NULL without one).
TURNS_WITH_PROMPT = tenant_join(
    TURNS, TEMPLATES, TEMPLATES.c.sha256 == TURNS.c.template_sha256, outer=True
)
SYSTEM_PROMPT = TEMPLATES.c.text.label("system_prompt")


# ---------------------------------------------------------------- row decoding


def as_stored(row: Mapping[str, Any], *names: str) -> dict[str, Any]:
    """The columns a record takes as they are, under the same names."""
    return {name: row[name] for name in names}


def utc_or_none(value: datetime | None) -> datetime | None:
    """A nullable timestamp column as an aware UTC datetime (``utc``)."""
    return None if value is None else utc(value)


def to_message(row: Mapping[str, Any]) -> Message:
    """A message row (any select of ``MSG_COLS``) as a record."""
    return Message(
        **as_stored(
            row, "id", "thread_id", "parent_id", "seq", "role", "author", "visibility",
            "copy_of", "turn_id",
        ),
        parts=parts_from_json(row["parts"] or []),
        extra=dict(row["extra"] or {}),
        received_at=utc(row["received_at"]),
        client_ts=utc_or_none(row["client_ts"]),
        redacted=row["redacted_at"] is not None,
    )


def to_thread(row: Mapping[str, Any]) -> Thread:
    """A thread row as a record."""
    ret = row["retention"]
    return Thread(
        **as_stored(
            row, "id", "tenant", "key", "owner", "title", "active_leaf", "archived_seq",
            "forked_from",
        ),
        metadata=dict(row["metadata"] or {}),
        created_at=utc(row["created_at"]),
        updated_at=utc(row["updated_at"]),
        retention=None if ret is None else RetentionPolicy.from_json(ret),
        incarnation=row.get("incarnation"),
    )


def to_derived(row: Mapping[str, Any]) -> DerivedMemory:
    """A derived-memory row as a record."""
    return DerivedMemory(
        **as_stored(row, "id", "thread_id", "kind", "content"),
        source_message_ids=tuple(row["source_message_ids"] or ()),
        created_at=utc(row["created_at"]),
        tombstoned_at=utc_or_none(row["tombstoned_at"]),
    )


def search_body(parts: Sequence[Mapping[str, Any]]) -> str:
    """What the search index holds for a message: its text and tool-result content."""
    out = [str(p["text"]) for p in parts if p.get("kind") == "text"]
    out += [str(p["content"]) for p in parts if p.get("kind") == "tool_result"]
    return "\n".join(s for s in out if s)


def content_key(
    role: str, parts: Sequence[Mapping[str, Any]], extra: Mapping[str, Any] | None
) -> str:
    """Equality key used by ``rebase_path`` (role, parts and ``extra``; not ids or times).

    ``extra`` counts: a framework's fields (tool-call ids, kwargs) are part of what
    a message says, so a list differing only there is a different list.
    """
    return json.dumps([role, list(parts), dict(extra or {})], sort_keys=True, separators=(",", ":"))


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

# ---------------------------------------------------------------- the edge

#: Longest record id (thread, message, turn, ...): the id columns' width.
ID_CHARS = 64


def edge(tenant: Any, *, key: Any = None, **ids: Any) -> None:
    """The identity rule at the store's edge (``convmem.identity``): the tenant, the
    application's ``key`` and record ids; ``None`` ids are skipped. A ``ConfigError``
    naming the field, before any statement, on every backend."""
    check_tenant(tenant)
    if key is not None:
        check_thread_id(key, "key")
    for name, value in ids.items():
        if value is not None:
            check_id(value, name, ID_CHARS)


def bounded(value: Any, name: str, max_chars: int, *, blank: bool = True) -> Any:
    """A short text column (author, owner, model, ...): cleaned, within its width."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, got {type(value).__name__}")
    value = clean_text(value)
    if len(value) > max_chars:
        raise ConfigError(f"{name} is {len(value)} characters; the limit is {max_chars}")
    if not blank and not value.strip():
        raise ConfigError(f"{name} must not be blank")
    return value


#: JSON integers the record keeps: what every JSON reader (and the import) reads back.
JSON_INT = 2**63 - 1


def clean_json(obj: Any) -> Any:
    """``obj`` with NUL and lone surrogates replaced in every string (keys included);
    plain JSON data comes back unchanged (a copy of its containers). A NaN or an
    infinity, which JSON has no number for, becomes its name (``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``), as a NUL becomes U+FFFD: PostgreSQL's ``json`` refused it and
    SQLite kept text no JSON reader takes. An integer beyond 64 bits is a
    ``ConfigError``: the export could not be imported again.

    Every model input passes here (state snapshot, tool schemas, settings), so exact
    dicts and lists are dispatched on first, before the ``Mapping`` check (an ABC's, and
    slow) that also admits other mappings."""
    if isinstance(obj, str):
        return clean_text(obj)
    kind = type(obj)
    if kind is dict:
        return {(clean_text(k) if isinstance(k, str) else k):
                (clean_text(v) if type(v) is str else clean_json(v)) for k, v in obj.items()}
    if kind is list:
        return [clean_text(v) if type(v) is str else clean_json(v) for v in obj]
    if obj is None or kind is bool:
        return obj
    if isinstance(obj, float):
        return float(obj) if isfinite(obj) else _number_name(obj)
    if isinstance(obj, int) and not isinstance(obj, bool) and not -JSON_INT <= obj <= JSON_INT:
        raise ConfigError(f"JSON integer {obj} is beyond 64 bits (±{JSON_INT}); store it as a string")
    if isinstance(obj, Mapping):
        return {(clean_text(k) if isinstance(k, str) else k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def _number_name(value: float) -> str:
    """What a NaN or an infinity is written as (JavaScript's and JSON5's names)."""
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def clean_part(part: Part) -> Part:
    """A part with its text cleaned (``clean_text``)."""
    if isinstance(part, TextPart):
        return part if clean_text(part.text) is part.text else TextPart(clean_text(part.text))
    if isinstance(part, ToolCallPart):
        return ToolCallPart(
            clean_text(part.call_id), clean_text(part.name), clean_json(dict(part.arguments))
        )
    if isinstance(part, ToolResultPart):
        return ToolResultPart(clean_text(part.call_id), clean_text(part.content), part.is_error)
    return AttachmentPart(
        media_type=bounded(part.media_type, "attachment media_type", 200),
        name=clean_text(part.name),
        sha256=part.sha256,
        size=part.size,
        data=part.data,
    )


def clean_message(msg: NewMessage) -> NewMessage:
    """A message as the record keeps it: role and visibility checked, text cleaned."""
    if msg.role not in ROLES:
        raise ConfigError(f"message role {msg.role!r}: want system, user, assistant or tool")
    if msg.visibility is not None and msg.visibility not in VISIBILITIES:
        raise ConfigError(f"message visibility {msg.visibility!r}: want conversation or execution")
    content: str | list[Part]
    if isinstance(msg.content, str):
        content = clean_text(msg.content)
    else:
        content = [clean_part(p) for p in msg.content]
    return NewMessage(
        role=msg.role,
        content=content,
        author=bounded(msg.author, "author", 200),
        extra=None if msg.extra is None else clean_json(dict(msg.extra)),
        client_ts=msg.client_ts,
        visibility=msg.visibility,
    )
