"""The thread export document, declared once: typed records, their checks, their JSON.

Each section of a ``convmem.thread`` document is a frozen dataclass (``ThreadDoc``,
``MessageDoc``, ``AttachmentDoc``, ``ModelInputDoc``, ``DerivedDoc``,
``RedactionDoc``) whose fields carry a ``Spec``: how the value is checked when a
document is read (type, range, length, format) and how it is written. Export builds
records from rows and writes them with ``record_json``; import reads records with
``parse_record``; both walk the same fields, so the two cannot drift apart.

Reading is incremental and bounded: ``DocumentReader`` is fed the bytes chunk by
chunk (ijson's push parser, no prefixes kept) and hands out one top-level value or
one section item at a time, built by an iterative builder that refuses, with the
JSON path, what no convmem export holds: nesting deeper than ``max_depth``, a key
given twice, a string longer than the cap, a NUL or a lone surrogate anywhere (every
write path replaces them with U+FFFD, so a document carrying one was not written by
convmem), non-finite numbers. Every refusal is one ``ImportRefused`` naming the
path, e.g. ``$.messages[0].parent_id``. Checks that need more than one record
(unique ids, references, the parent graph) are the import operation's
(``convmem.transcript.exchange``).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Annotated, Any, ClassVar, TypeVar, get_type_hints

import ijson

from convmem.identity import MAX_THREAD_ID_CHARS
from convmem.transcript.errors import ImportRefused
from convmem.transcript.export import FORMAT, VERSION, ts_to_str
from convmem.transcript.records import ROLES, VISIBILITIES

#: Longest record id (message, thread, turn, ...): the id columns' width.
MAX_ID_CHARS = 64
#: PostgreSQL ``integer``: sequence numbers and sizes must fit.
MAX_INT = 2**31 - 1

_TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")
_SHA = re.compile(r"[0-9a-f]{64}\Z")
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
_BAD_ID = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class ImportLimits:
    """Size caps of an import (each refusal names the limit it hit)."""

    max_string_chars: int = 16 * 1024 * 1024  # one text, prompt, block, content
    max_attachment_bytes: int = 32 * 1024 * 1024  # one attachment's bytes
    max_items: int = 5_000_000  # entries of one section (messages, model inputs, ...)
    max_depth: int = 64  # JSON nesting, from the document's top
    max_document_bytes: int = 16 * 1024**3

    @property
    def max_raw_string(self) -> int:
        """The longest string the reader lets through (attachment data is base64)."""
        return max(self.max_string_chars, -(-self.max_attachment_bytes // 3) * 4)


# ---------------------------------------------------------------- specs


Check = Callable[[Any, str, ImportLimits], Any]


@dataclass(frozen=True, slots=True)
class Spec:
    """How one field is read (``check``: value, JSON path, limits → value) and written."""

    check: Check
    dump: Callable[[Any], Any] = lambda v: v
    optional: bool = False  # may be absent (written only when not None)


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


def _want(what: str, value: Any, path: str) -> ImportRefused:
    return ImportRefused(path, f"must be {what}, got {_describe(value)}")


def nullable(check: Check) -> Check:
    """``check``, or ``None``."""

    def run(v: Any, path: str, lim: ImportLimits) -> Any:
        return None if v is None else check(v, path, lim)

    return run


def ident(v: Any, path: str, lim: ImportLimits, max_chars: int = MAX_ID_CHARS) -> str:
    """An identifier: a non-blank string within the id width, no control characters."""
    if not isinstance(v, str):
        raise _want("an id (a string)", v, path)
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
            raise _want("a string", v, path)
        if len(v) > max_chars:
            raise ImportRefused(path, f"is {len(v)} characters; the limit is {max_chars}")
        if not blank and not v.strip():
            raise ImportRefused(path, "must not be blank")
        return v

    return run


def text(v: Any, path: str, lim: ImportLimits) -> str:
    """Free text of any length up to the string cap."""
    if not isinstance(v, str):
        raise _want("a string", v, path)
    if len(v) > lim.max_string_chars:
        raise ImportRefused(
            path, f"is {len(v)} characters; the limit is {lim.max_string_chars} (ImportLimits)"
        )
    return v


def integer(lo: int, hi: int = MAX_INT) -> Check:
    """An integer (not a boolean, not ``1.0``) in ``[lo, hi]``."""

    def run(v: Any, path: str, lim: ImportLimits) -> int:
        if type(v) is not int:
            raise _want("an integer", v, path)
        if not lo <= v <= hi:
            raise ImportRefused(path, f"is {v}; must be between {lo} and {hi}")
        return v

    return run


def boolean(v: Any, path: str, lim: ImportLimits) -> bool:
    """``true`` or ``false``."""
    if type(v) is not bool:
        raise _want("true or false", v, path)
    return v


def timestamp(v: Any, path: str, lim: ImportLimits) -> datetime:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC), as the naive UTC value stored."""
    if not isinstance(v, str) or _TS.match(v) is None:
        raise ImportRefused(path, f"must be a UTC timestamp YYYY-MM-DDTHH:MM:SS.ffffffZ, got {v!r:.60}")
    try:
        return datetime.fromisoformat(v[:-1])  # naive UTC, as stored
    except ValueError as exc:
        raise ImportRefused(path, f"is not a real time: {exc}") from None


def _ts_dump(v: datetime | None) -> str | None:
    return ts_to_str(v)


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
        raise _want("an object", v, path)
    return v


def list_of(check: Check) -> Check:
    """A list whose items pass ``check``."""

    def run(v: Any, path: str, lim: ImportLimits) -> list[Any]:
        if not isinstance(v, list):
            raise _want("a list", v, path)
        return [check(item, f"{path}[{i}]", lim) for i, item in enumerate(v)]

    return run


def exact_keys(obj: Any, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """``obj`` is an object with all of ``required``, some of ``optional``, nothing else."""
    if not isinstance(obj, dict):
        raise _want("an object", obj, path)
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
    nullable(integer(1, 2**62))(v["max_age_seconds"], f"{path}.max_age_seconds", lim)
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
        raise _want("an object", v, path)
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
        raise _want("base64 text", v, path)
    if len(v) > -(-lim.max_attachment_bytes // 3) * 4:
        raise ImportRefused(
            path, f"holds more than {lim.max_attachment_bytes} bytes (ImportLimits.max_attachment_bytes)"
        )
    try:
        return base64.b64decode(v.encode("ascii"), validate=True)
    except (ValueError, binascii.Error):
        raise ImportRefused(path, "is not valid base64") from None


def _b64_dump(v: bytes) -> str:
    return base64.b64encode(v).decode("ascii")


#: The timestamp fields' specs.
TS = Spec(timestamp, dump=_ts_dump)
TS_OR_NULL = Spec(nullable(timestamp), dump=_ts_dump)


# ---------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class ThreadDoc:
    """``$.thread``."""

    id: Annotated[str, Spec(ident)]
    key: Annotated[str | None, Spec(nullable(thread_key))]
    owner: Annotated[str | None, Spec(nullable(label(200)))]
    title: Annotated[str | None, Spec(nullable(text))]
    metadata: Annotated[dict[str, Any], Spec(json_object)]
    created_at: Annotated[datetime, TS]
    updated_at: Annotated[datetime, TS]
    retention: Annotated[dict[str, Any] | None, Spec(nullable(retention))]
    active_leaf: Annotated[str | None, Spec(nullable(ident))]
    next_seq: Annotated[int, Spec(integer(1))]
    archived_seq: Annotated[int, Spec(integer(0))]
    forked_from: Annotated[str | None, Spec(nullable(ident))]

    section: ClassVar[str] = "thread"


@dataclass(frozen=True, slots=True)
class MessageDoc:
    """``$.messages[i]``: one node of the tree."""

    id: Annotated[str, Spec(ident)]
    parent_id: Annotated[str | None, Spec(nullable(ident))]
    seq: Annotated[int, Spec(integer(1))]
    role: Annotated[str, Spec(choice(ROLES))]
    author: Annotated[str | None, Spec(nullable(label(200)))]
    parts: Annotated[list[dict[str, Any]], Spec(list_of(part))]
    extra: Annotated[dict[str, Any], Spec(json_object)]
    received_at: Annotated[datetime, TS]
    client_ts: Annotated[datetime | None, TS_OR_NULL]
    visibility: Annotated[str, Spec(choice(VISIBILITIES))]
    copy_of: Annotated[str | None, Spec(nullable(ident))]
    turn_id: Annotated[str | None, Spec(nullable(ident))]
    redacted_at: Annotated[datetime | None, TS_OR_NULL]

    section: ClassVar[str] = "messages"


@dataclass(frozen=True, slots=True)
class AttachmentDoc:
    """``$.attachments[i]``: bytes of an attachment some message references."""

    sha256: Annotated[str, Spec(sha256_hex)]
    media_type: Annotated[str, Spec(label(200))]
    size: Annotated[int, Spec(integer(0))]
    data_base64: Annotated[bytes, Spec(base64_data, dump=_b64_dump)]

    section: ClassVar[str] = "attachments"


@dataclass(frozen=True, slots=True)
class ModelInputDoc:
    """``$.model_inputs[i]``: what the model received on one turn."""

    id: Annotated[str, Spec(ident)]
    user_message_id: Annotated[str, Spec(ident)]
    rendered_block: Annotated[str, Spec(text)]
    state_snapshot: Annotated[dict[str, Any], Spec(json_object)]
    sent_message_ids: Annotated[list[str], Spec(list_of(ident))]
    system_prompt: Annotated[str | None, Spec(nullable(text))]
    system_prompt_sha256: Annotated[str | None, Spec(nullable(sha256_hex))]
    tool_schemas: Annotated[list[dict[str, Any]], Spec(list_of(json_object))]
    model: Annotated[str | None, Spec(nullable(label(200)))]
    model_params: Annotated[dict[str, Any], Spec(json_object)]
    created_at: Annotated[datetime, TS]
    completed_at: Annotated[datetime | None, TS_OR_NULL]
    answer_message_id: Annotated[str | None, Spec(nullable(ident))]
    # The messages its block and snapshot quote (absent: not known; see ``models``).
    quoted_message_ids: Annotated[list[str] | None, Spec(nullable(list_of(ident)), optional=True)]

    section: ClassVar[str] = "model_inputs"


@dataclass(frozen=True, slots=True)
class DerivedDoc:
    """``$.derived[i]``: a memory citing the messages it came from."""

    id: Annotated[str, Spec(ident)]
    kind: Annotated[str, Spec(label(100, blank=False))]
    content: Annotated[str, Spec(text)]
    source_message_ids: Annotated[list[str], Spec(list_of(ident))]
    created_at: Annotated[datetime, TS]
    tombstoned_at: Annotated[datetime | None, TS_OR_NULL]

    section: ClassVar[str] = "derived"


@dataclass(frozen=True, slots=True)
class RedactionDoc:
    """``$.redactions[i]``: who redacted which message, when and why."""

    id: Annotated[str, Spec(ident)]
    message_id: Annotated[str, Spec(ident)]
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


_RECORD_TYPES: tuple[type[Any], ...] = (ThreadDoc, *SECTIONS.values())
_SPECS: dict[type[Any], list[tuple[str, Spec]]] = {cls: _specs(cls) for cls in _RECORD_TYPES}


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


# ---------------------------------------------------------------- incremental reading


_RUN = re.compile(rb"\\+")
_HEX4 = re.compile(rb"[0-9a-fA-F]{4}")


class _Escapes:
    """Finds the escapes no convmem export holds, in raw JSON bytes fed chunk by chunk:
    ``\\u0000`` (NUL can only enter JSON text this way) and a surrogate escape not in
    a proper pair (yajl would silently turn it into another character).

    Backslashes only occur in strings, so a maximal run of them escapes the character
    after it iff its length is odd; runs too close to a chunk's end wait for the next.
    """

    LOOKAHEAD = 11  # "u" + 4 hex + a following "\\uXXXX"

    def __init__(self) -> None:
        self.carry = b""
        self.skip_to = -1  # a low surrogate already matched with its high one

    def feed(self, chunk: bytes, final: bool) -> tuple[int, str] | None:
        """(offset in ``chunk``, what) of the first bad escape (the offset may be < 0:
        it was in the previous chunk's tail), else ``None``."""
        buf = self.carry + chunk
        base = len(self.carry)
        if b"\\" not in buf:
            self.carry = b""
            return None
        done = len(buf)
        for m in _RUN.finditer(buf):
            if not final and m.end() + self.LOOKAHEAD > len(buf):
                done = m.start()
                break
            if (m.end() - m.start()) % 2 == 0 or buf[m.end() : m.end() + 1] != b"u":
                continue
            start = m.end() - 1  # the escaping backslash
            if start < self.skip_to:
                continue
            code = _code(buf, m.end() + 1)
            if code == 0:
                return start - base, "NUL"
            if code is None or not 0xD800 <= code <= 0xDFFF:
                continue
            low = _code(buf, m.end() + 7) if buf[m.end() + 5 : m.end() + 7] == b"\\u" else None
            if code <= 0xDBFF and low is not None and 0xDC00 <= low <= 0xDFFF:
                self.skip_to = m.end() + 11
                continue
            return start - base, f"a lone surrogate (U+{code:04X})"
        self.skip_to -= done
        self.carry = buf[done:]
        return None


def _code(buf: bytes, at: int) -> int | None:
    m = _HEX4.match(buf, at)
    return None if m is None else int(m.group(), 16)


class DocumentReader:
    """Push bytes in (``feed``), take values out (``pop``): the top level one field at
    a time, list sections one item at a time. Memory holds one item, never a section.

    ``pop`` yields ``(section, index, value)``: ``(name, None, value)`` for a top-level
    field that is not a list section, ``(section, i, item)`` for a section's items, and
    ``(section, None, None)`` when a list section ends.

    The builder is one tight loop over ijson's events (``_build``): containers are
    attached to their parent when they open, and JSON paths are worked out from the
    stack only when something is refused.
    """

    def __init__(self, limits: ImportLimits) -> None:
        self.limits = limits
        self._events = ijson.sendable_list()
        self._parser = ijson.basic_parse_coro(self._events, use_float=True)
        # the open containers (the document's top object first) and their pending keys
        self._values: list[Any] = []
        self._keys: list[Any] = []
        self._out: list[tuple[str, int | None, Any]] = []
        self._top_seen: set[str] = set()
        self._top_key: str | None = None
        self._section_index = -1
        self._in_section = False
        self._started = False
        self._done = False
        self._escapes = _Escapes()
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._lines = 0  # newlines in the chunks parsed so far
        self.bytes_read = 0

    # -- input

    def feed(self, chunk: bytes) -> None:
        """Parse ``chunk`` (``b""``: the end of the document)."""
        self.bytes_read += len(chunk)
        if self.bytes_read > self.limits.max_document_bytes:
            raise ImportRefused(
                "$", f"is over {self.limits.max_document_bytes} bytes (ImportLimits.max_document_bytes)"
            )
        try:
            self._utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            offset = self.bytes_read - len(chunk) + exc.start
            if exc.start > 0:  # read up to it, for its path; the bad byte is the news
                with contextlib.suppress(ImportRefused):
                    self._parse(chunk[: exc.start])
            raise ImportRefused(
                self._where(), f"is not UTF-8 text (byte {offset}); is this an export?"
            ) from None
        bad = self._escapes.feed(chunk, final=not chunk)
        if bad is not None:
            if bad[0] > 0:  # read up to it, for its path
                self._parse(chunk[: bad[0]])
            raise ImportRefused(
                self._where(), f"contains {bad[1]} (as an escape); a convmem export never does "
                "(every write replaces NUL and lone surrogates with U+FFFD)"
            )
        if not chunk and not self._started:
            raise ImportRefused("$", "is empty; expected the JSON of `convmem threads export`")
        self._parse(chunk)
        self._lines += chunk.count(b"\n")
        if not chunk and not self._done:
            raise ImportRefused(
                self._where(), f"is not valid JSON at line {self._lines + 1}: the document "
                "ends early (the file ends early: truncated?)"
            )

    def _parse(self, chunk: bytes) -> None:
        """Push bytes into the parser (``b""``: the end), then build what they complete."""
        failure: BaseException | None = None
        try:
            if chunk:
                self._parser.send(chunk)
            else:
                self._parser.close()
        except (ijson.JSONError, UnicodeDecodeError, ValueError) as exc:
            failure = exc
        try:
            self._build(self._events)  # also the events before a parse error: its path
        finally:
            del self._events[:]
        if failure is not None:
            hint = "" if chunk else " (the file ends early: truncated?)"
            raise ImportRefused(
                self._where(),
                f"is not valid JSON at line {self._lines + 1}: {_first_line(failure)}{hint}",
            )

    def pop(self) -> Iterator[tuple[str, int | None, Any]]:
        """Values completed so far, in document order."""
        out, self._out = self._out, []
        yield from out

    # -- paths (only when refusing)

    def _where(self) -> str:
        """The JSON path of the value being read."""
        path = "$"
        for level, (value, key) in enumerate(zip(self._values, self._keys, strict=True)):
            if level == 0:
                if self._top_key is not None:
                    path = f"$.{self._top_key}"
                if self._in_section:
                    path += f"[{self._section_index + 1}]"
                continue
            if isinstance(value, dict):
                path += "" if key is None else f".{key}"
            else:
                path += f"[{max(len(value) - (1 if level + 1 < len(self._values) else 0), 0)}]"
        return path

    # -- building

    def _build(self, events: list[tuple[str, Any]]) -> None:
        values, keys = self._values, self._keys
        max_raw, max_depth = self.limits.max_raw_string, self.limits.max_depth
        for event, value in events:
            n = len(values)
            if n < 2 and not (n == 1 and self._in_section and event in _INNER):
                self._top_event(event, value)
                continue
            if event == "map_key":
                if len(value) > max_raw:
                    raise self._too_long(value)
                if value in values[-1]:
                    keys[-1] = value
                    raise ImportRefused(self._where(), "is given twice")
                keys[-1] = value
            elif event == "start_map" or event == "start_array":
                if n + self._in_section >= max_depth:
                    raise ImportRefused(
                        self._where(),
                        f"is nested too deeply (more than {max_depth} levels, ImportLimits.max_depth)",
                    )
                new: Any = {} if event == "start_map" else []
                if n > 1:
                    parent = values[-1]
                    if keys[-1] is not None:
                        parent[keys[-1]] = new
                    else:
                        parent.append(new)
                values.append(new)
                keys.append(None)
            elif event == "end_map" or event == "end_array":
                done = values.pop()
                keys.pop()
                if n == 2:
                    self._complete(done)
                elif keys[-1] is not None:
                    keys[-1] = None
            else:
                if event == "string" and len(value) > max_raw:
                    raise self._too_long(value)
                if n == 1:  # a scalar item straight in a section's list
                    self._complete(value)
                    continue
                parent = values[-1]
                if keys[-1] is not None:
                    parent[keys[-1]] = value
                    keys[-1] = None
                else:
                    parent.append(value)

    def _too_long(self, value: str) -> ImportRefused:
        return ImportRefused(
            self._where(), f"is {len(value)} characters; the limit is {self.limits.max_raw_string} "
            "(ImportLimits.max_string_chars)"
        )

    def _complete(self, value: Any) -> None:
        """A top-level field's value or a section's item is whole."""
        assert self._top_key is not None
        if self._in_section:
            self._section_index += 1
            if self._section_index >= self.limits.max_items:
                raise ImportRefused(
                    f"$.{self._top_key}",
                    f"has more than {self.limits.max_items} entries (ImportLimits.max_items)",
                )
            self._out.append((self._top_key, self._section_index, value))
            return
        if self._top_key in SECTIONS:
            raise _want("a list", value, f"$.{self._top_key}")
        self._out.append((self._top_key, None, value))

    def _top_event(self, event: str, value: Any) -> None:
        """Events of the document's top object itself (and of values straight in it)."""
        values, keys = self._values, self._keys
        if self._done:
            raise ImportRefused("$", "has content after the document")
        self._started = True
        if not values:
            if event != "start_map":
                got = _JSON_TYPES.get(event, event)
                raise ImportRefused(
                    "$", f"is not a convmem.thread document: expected a JSON object (an export), "
                    f"got {got}"
                )
            values.append({})
            keys.append(None)
            return
        if event == "map_key":
            if value not in TOP_LEVEL:
                raise ImportRefused(
                    f"$.{value}", "is not a field of a thread export (this is not a "
                    f"convmem.thread document of version {VERSION})"
                )
            if value in self._top_seen:
                raise ImportRefused(f"$.{value}", "is given twice")
            self._top_seen.add(value)
            self._top_key = value
        elif event == "end_map":
            values.pop()
            keys.pop()
            self._done = True
            missing = [k for k in TOP_LEVEL if k not in self._top_seen]
            if missing:
                raise ImportRefused(f"$.{missing[0]}", "is missing")
        elif event == "start_array" and self._top_key in SECTIONS:
            self._in_section = True
            self._section_index = -1
        elif event == "end_array" and self._in_section:
            self._in_section = False
            assert self._top_key is not None
            self._out.append((self._top_key, None, None))
        elif event in ("start_map", "start_array"):  # the thread object, or a wrong shape
            values.append({} if event == "start_map" else [])
            keys.append(None)
        else:
            if event == "string" and len(value) > self.limits.max_raw_string:
                raise self._too_long(value)
            self._complete(value)


_JSON_TYPES = {"start_array": "list", "string": "str", "number": "number", "boolean": "bool",
               "null": "null"}

# Events of a section's item (not of the section's list itself) while no item is open.
_INNER = frozenset({"start_map", "start_array", "string", "number", "boolean", "null"})


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


__all__ = [
    "SECTIONS",
    "AttachmentDoc",
    "DerivedDoc",
    "DocumentReader",
    "ImportLimits",
    "MessageDoc",
    "ModelInputDoc",
    "RedactionDoc",
    "ThreadDoc",
    "check_header",
    "parse_record",
    "record_json",
]

