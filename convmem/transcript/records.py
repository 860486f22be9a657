"""Typed records of the durable conversation record, and their one JSON codec.

A message carries a list of typed *parts* (a ``kind`` tag, like pydantic-ai's
messages): text, a tool call, a tool result, a reference to a content-addressed
attachment. What the parts do not model (token usage, response metadata, a
framework's additional kwargs) goes into ``extra`` untouched. Records returned by
the store are frozen dataclasses; the inputs to ``append`` are ``NewMessage``.
Timestamps are timezone-aware UTC; the client's timestamp is kept for the
investigator and never used for order (the server ``seq`` is the order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Union

from convmem.errors import ConfigError
from convmem.transcript.errors import RecordCorrupt

Role = Literal["system", "user", "assistant", "tool"]
Visibility = Literal["conversation", "execution"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
VISIBILITIES: tuple[str, ...] = ("conversation", "execution")
JSONDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TextPart:
    """Plain text."""

    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ToolCallPart:
    """A model's request to call a tool."""

    call_id: str
    name: str
    arguments: JSONDict = field(default_factory=dict)
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class ToolResultPart:
    """What a tool returned for ``call_id``."""

    call_id: str
    content: str
    is_error: bool = False
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class AttachmentPart:
    """A reference to an attachment stored once per tenant under its sha256.

    On input, give ``data`` (the bytes); the store computes ``sha256`` and ``size``
    and keeps only the reference in the message. Read back, ``data`` is ``None``:
    fetch the bytes with ``get_attachment``.
    """

    media_type: str
    name: str = ""
    sha256: str = ""
    size: int = 0
    data: bytes | None = field(default=None, repr=False, compare=False)
    kind: Literal["attachment_ref"] = "attachment_ref"


Part = Union[TextPart, ToolCallPart, ToolResultPart, AttachmentPart]  # noqa: UP007 (3.10 alias)


def part_to_json(part: Part) -> JSONDict:
    """One part as a JSON object (attachment bytes never go into a message)."""
    if isinstance(part, TextPart):
        return {"kind": "text", "text": part.text}
    if isinstance(part, ToolCallPart):
        return {
            "kind": "tool_call",
            "call_id": part.call_id,
            "name": part.name,
            "arguments": dict(part.arguments),
        }
    if isinstance(part, ToolResultPart):
        return {
            "kind": "tool_result",
            "call_id": part.call_id,
            "content": part.content,
            "is_error": part.is_error,
        }
    return {
        "kind": "attachment_ref",
        "media_type": part.media_type,
        "name": part.name,
        "sha256": part.sha256,
        "size": part.size,
    }


def part_from_json(obj: Mapping[str, Any]) -> Part:
    """Decode one part; an unknown kind is a ``ConfigError`` naming it."""
    kind = obj.get("kind")
    if kind == "text":
        return TextPart(text=str(obj["text"]))
    if kind == "tool_call":
        return ToolCallPart(
            call_id=str(obj["call_id"]), name=str(obj["name"]), arguments=dict(obj["arguments"])
        )
    if kind == "tool_result":
        return ToolResultPart(
            call_id=str(obj["call_id"]),
            content=str(obj["content"]),
            is_error=bool(obj.get("is_error", False)),
        )
    if kind == "attachment_ref":
        return AttachmentPart(
            media_type=str(obj["media_type"]),
            name=str(obj.get("name", "")),
            sha256=str(obj.get("sha256", "")),
            size=int(obj.get("size", 0)),
        )
    raise ConfigError(f"message part: unknown kind {kind!r}")


def parts_to_json(parts: Sequence[Part]) -> list[JSONDict]:
    """All parts of a message, in order."""
    return [part_to_json(p) for p in parts]


def parts_from_json(objs: Sequence[Mapping[str, Any]]) -> tuple[Part, ...]:
    """Inverse of ``parts_to_json``."""
    return tuple(part_from_json(o) for o in objs)


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to append. ``content`` may be a string (one text part) or parts.

    ``visibility`` defaults to ``execution`` for system and tool messages and for
    messages carrying tool calls (the investigator sees them, the user does not).
    """

    role: Role
    content: str | Sequence[Part]
    author: str | None = None
    extra: JSONDict | None = None
    client_ts: datetime | None = None
    visibility: Visibility | None = None

    def parts(self) -> tuple[Part, ...]:
        """The content as parts."""
        if isinstance(self.content, str):
            return (TextPart(self.content),)
        return tuple(self.content)

    def resolved_visibility(self) -> Visibility:
        """Explicit visibility, else the role/part default."""
        if self.visibility is not None:
            return self.visibility
        if self.role in ("system", "tool"):
            return "execution"
        if any(isinstance(p, (ToolCallPart, ToolResultPart)) for p in self.parts()):
            return "execution"
        return "conversation"


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message: immutable except through ``redact``."""

    id: str
    thread_id: str
    parent_id: str | None
    seq: int
    role: Role
    parts: tuple[Part, ...]
    author: str | None
    extra: JSONDict
    received_at: datetime
    client_ts: datetime | None
    visibility: Visibility
    copy_of: str | None
    turn_id: str | None
    redacted: bool

    @property
    def text(self) -> str:
        """The text parts joined by newlines (what a chat view shows)."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))


#: The longest ``RetentionPolicy.max_age`` (10,000 years; longer is ``None``, forever).
#: The sweep compares ages, never computes a deadline, so no date arithmetic overflows
#: within it; import and the CLI refuse the same bound.
MAX_RETENTION_DAYS = 3_650_000
MAX_RETENTION_AGE = timedelta(days=MAX_RETENTION_DAYS)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long a thread is kept, and who decided it.

    ``max_age=None`` means forever, and must still be written out with an owner:
    a store refuses to start without a default policy, so "forever" is a decision.
    ``legal_hold`` exempts a thread from ``sweep`` whatever its age. ``max_age`` is
    from one second (stored in whole seconds) to ``MAX_RETENTION_AGE``.
    """

    max_age: timedelta | None
    owner: str
    legal_hold: bool = False

    def __post_init__(self) -> None:
        if not self.owner.strip():
            raise ConfigError("RetentionPolicy.owner: name who owns this retention decision")
        if self.max_age is None:
            return
        if not isinstance(self.max_age, timedelta):
            raise ConfigError(
                f"RetentionPolicy.max_age: must be a timedelta or None, got {self.max_age!r:.60}"
            )
        if not timedelta(seconds=1) <= self.max_age <= MAX_RETENTION_AGE:
            raise ConfigError(
                f"RetentionPolicy.max_age: {self.max_age} is outside 1 second to "
                f"{MAX_RETENTION_DAYS} days (10,000 years); None keeps a thread forever"
            )

    def to_json(self) -> JSONDict:
        """Stable JSON form (seconds as an integer or null)."""
        return {
            "legal_hold": self.legal_hold,
            "max_age_seconds": None if self.max_age is None else int(self.max_age.total_seconds()),
            "owner": self.owner,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RetentionPolicy:
        """Inverse of ``to_json``. A stored age past ``MAX_RETENTION_AGE`` (an older
        version wrote any) reads as that bound: a thread kept 10,000 years is not swept
        either, and it stays readable. Any other policy this version would not write (a
        hand edit: no owner, an age that is no number of seconds) is ``RecordCorrupt``
        naming it, never a raw ``OverflowError``."""
        try:
            secs = obj.get("max_age_seconds")
            longest = int(MAX_RETENTION_AGE.total_seconds())
            return cls(
                max_age=None if secs is None else timedelta(seconds=min(int(secs), longest)),
                owner=str(obj["owner"]),
                legal_hold=bool(obj.get("legal_hold", False)),
            )
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError, ConfigError) as exc:
            raise RecordCorrupt(
                f"stored retention policy {obj!r:.200} cannot be read ({exc}); "
                "give the thread a valid one with set_retention"
            ) from None


@dataclass(frozen=True, slots=True)
class Thread:
    """A conversation: a tree of messages plus the pointer to its active leaf."""

    id: str
    tenant: str
    key: str | None
    owner: str | None
    title: str | None
    metadata: JSONDict
    created_at: datetime
    updated_at: datetime
    retention: RetentionPolicy | None
    active_leaf: str | None
    archived_seq: int
    forked_from: str | None
    #: Fresh whenever the row is created (never exported): a turn binds to it, so a
    #: thread deleted and re-created under the same id or key is another thread to it.
    incarnation: str | None = None


@dataclass(frozen=True, slots=True)
class ModelInput:
    """What the model is about to receive on a turn (commit point 1).

    ``system_prompt`` is stored once per tenant under its sha256, so a template
    used by a million turns costs one row. ``quoted_message_ids`` links the record to
    the messages its block and snapshot quote, so redaction finds those copies by
    link; ``None`` (the default) means "not known" and redaction scans the record for
    every form of a redacted text instead.
    """

    rendered_block: str = ""
    state_snapshot: JSONDict = field(default_factory=dict)
    sent_message_ids: Sequence[str] = ()
    system_prompt: str | None = None
    tool_schemas: Sequence[JSONDict] = ()
    model: str | None = None
    model_params: JSONDict = field(default_factory=dict)
    quoted_message_ids: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """The handle returned by ``begin_turn_record``; pass ``turn_id`` to ``complete_turn``."""

    turn_id: str
    thread_id: str
    user_message: Message


@dataclass(frozen=True, slots=True)
class TurnBinding:
    """What a turn is bound to when it begins (``TranscriptStore.bind_turn``): the
    thread (its ``incarnation`` is what the turn's writes must find again) and the
    thread's last user messages as rows (``id``, ``parts``, ``extra``), newest first."""

    thread: Thread
    recent_user_messages: tuple[JSONDict, ...]


@dataclass(frozen=True, slots=True)
class ReconstructedInput:
    """A turn's model input, rebuilt from the record."""

    turn_id: str
    thread_id: str
    system_prompt: str | None
    rendered_block: str
    state_snapshot: JSONDict
    messages: tuple[Message, ...]
    user_message: Message
    tool_schemas: tuple[JSONDict, ...]
    model: str | None
    model_params: JSONDict
    created_at: datetime
    completed_at: datetime | None
    answer_message_id: str | None


@dataclass(frozen=True, slots=True)
class DerivedMemory:
    """A memory extracted from a thread, citing the messages it came from."""

    id: str
    thread_id: str
    kind: str
    content: str
    source_message_ids: tuple[str, ...]
    created_at: datetime
    tombstoned_at: datetime | None


@dataclass(frozen=True, slots=True)
class ThreadTree:
    """Every message of a thread (seq order) and the active path through it."""

    thread: Thread
    messages: tuple[Message, ...]
    active_path_ids: tuple[str, ...]

    def children(self, message_id: str | None) -> tuple[Message, ...]:
        """Children of ``message_id`` (``None``: the roots), in seq order."""
        return tuple(m for m in self.messages if m.parent_id == message_id)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One message matching a search: its indexed text, its role and when it was
    received; ``rank`` is the backend's (lower is better: FTS5 ``bm25``, PostgreSQL
    ``-ts_rank_cd``), ``None`` where the search is not ranked."""

    message_id: str
    thread_id: str
    seq: int
    text: str
    role: str
    received_at: datetime
    rank: float | None = None


@dataclass(frozen=True, slots=True)
class RedactionReceipt:
    """What a redaction touched (ids only, never the removed content)."""

    redaction_id: str
    message_ids: tuple[str, ...]
    turn_ids: tuple[str, ...]
    derived_ids: tuple[str, ...]
    attachments_removed: int
    #: The threads whose rows it rewrote: the one it was called on, and every fork
    #: holding a copy (their conversations' live state may quote the message too).
    thread_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeletionReceipt:
    """Row counts removed by ``delete_thread``."""

    thread_id: str
    messages: int
    turns: int
    derived: int
    attachments_removed: int


@dataclass(frozen=True, slots=True)
class SweepReport:
    """Threads past their retention (deleted unless ``dry_run``), and the threads
    whose stored policy could not be read (``skipped``: logged, left alone, the rest
    of the sweep goes on)."""

    expired: tuple[tuple[str, str], ...]  # (tenant, thread_id)
    held: int
    dry_run: bool
    skipped: tuple[tuple[str, str, str], ...] = ()  # (tenant, thread_id, why)


def utc(dt: datetime) -> datetime:
    """An aware UTC datetime; naive values are taken as UTC (how SQL returns them)."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def naive_utc(dt: datetime) -> datetime:
    """The naive UTC form stored in SQL columns (SQLite has no time zones)."""
    return utc(dt).replace(tzinfo=None)
