"""The session state: three slots, three recent questions, and nothing else.

Immutable records (spec §2). Every change makes a new ``SessionState``; the policy
is written as functions from one state to the next. ``encode_state`` /
``decode_state`` are the one codec every store uses; the JSON carries its format
version (``"v"``) so a value written by an older release still loads: format 1 (before
``salient``, spec §10) loads with no salient entities, and is written back as format 2.

The encoding is compact UTF-8 JSON that always starts ``{"v":2,"version":<n>,``, so
a store's compare-and-set can read the stored version (``stored_version``; the Redis
stores do the same in Lua) without decoding the whole value on every save. A value of
any readable format (``READABLE_FORMATS``) starts the same way, so a format-1 value an
older release left behind is compared on its version too. Any other serialisation of
the same JSON object is still a valid value, only read more slowly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from operator import attrgetter
from typing import Any, Literal

import orjson

from convmem.errors import CorruptState
from convmem.identity import clean_data, clean_text

FocusSource = Literal["user", "tool", "confirmed"]
Format = Literal["short", "detailed", "table"]
FORMATS: tuple[Format, ...] = ("short", "detailed", "table")
ClarificationOrigin = Literal["name", "tool"]

#: Version of the JSON layout written by ``encode_state`` (2: ``salient``, spec §10).
STATE_FORMAT_VERSION = 2
#: Layouts ``decode_state`` reads and compare-and-set compares: 1 is format 2 without
#: ``salient``. A value of any other format counts as "not ours" (version 0).
READABLE_FORMATS: tuple[int, ...] = (1, 2)
#: A stored value larger than this is treated as corrupt (it cannot be ours).
MAX_STATE_BYTES = 64 * 1024
#: How every encoded value starts; the decimal ``version`` follows, then ``,`` or ``}``.
STATE_HEAD = b'{"v":%d,"version":' % STATE_FORMAT_VERSION
#: The head of a value of any readable format (a one-digit ``v``; the Lua twin matches
#: the same with a character class).
_HEAD_VERSION = re.compile(
    rb'\{"v":[' + b"".join(b"%d" % v for v in READABLE_FORMATS) + rb'],"version":([0-9]+)[,}]'
)
#: Stored versions (and turn counts) are whole numbers below this: what a Lua number (a
#: double, as the Redis compare-and-set script reads it) holds exactly, so the decoder and
#: the script read one value alike (spec §5; issue 22, finding 6).
COUNT_LIMIT = 2**53
#: What the stored state keeps of each text derived from a user's question: at most this
#: many bytes of its JSON (UTF-8; an escaped control character counts its escape), cut
#: at a character boundary (``state_text``). The turn's own question (the open turn's
#: question, rewrite and resolved question, a pending clarification's question) keeps
#: ``MAX_TURN_TEXT_BYTES`` (a 4,000-character question of ASCII or two-byte letters
#: whole), every other such text ``MAX_STATE_TEXT_BYTES``: the recent questions, the last
#: rewrite, a clarification's mention and prompt, and all of the open turn's base. At
#: most 4 x 6 KB + 13 x 1 KB = 37 KB, so the largest legal questions (4,000 four-byte or
#: escaped characters) never push a state over ``MAX_STATE_BYTES`` and lose a save
#: (issue 22, finding 10). The process that wrote the state, the model's input and the
#: transcript keep the whole text.
MAX_STATE_TEXT_BYTES = 1024
MAX_TURN_TEXT_BYTES = 6144
#: At most this many salient entities are kept (spec §10).
MAX_SALIENT = 2


@dataclass(frozen=True, slots=True)
class Focus:
    """The entity the conversation is about, and how sure we are of it."""

    type: str
    id: str
    label: str
    source: FocusSource = "user"


@dataclass(frozen=True, slots=True)
class FilterValue:
    """A normalised filter value and the turn that last set or refreshed it."""

    value: str
    set_at_turn: int


#: Distinguishing attrs an option's description shows (spec §4: enough to tell apart).
SHOWN_ATTRS = 2


@dataclass(frozen=True, slots=True)
class Option:
    """One answer to a clarifying question, with what tells it apart."""

    type: str
    id: str
    label: str
    attrs: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """``Northline Foods — Toronto, acct 40112``: label plus the first
        ``SHOWN_ATTRS`` distinguishing attrs (the others still match an answer)."""
        if not self.attrs:
            return f"{self.label} ({self.id})" if self.label != self.id else self.label
        shown = list(self.attrs.items())[:SHOWN_ATTRS]
        details = ", ".join(_short_attr(k, v) for k, v in shown)
        return f"{self.label} — {details}"


def _short_attr(key: str, value: str) -> str:
    if key in ("city", "country", "region", "location"):
        return value
    if key == "account":
        return f"acct {value}"
    return f"{key} {value}"


@dataclass(frozen=True, slots=True)
class PendingClarification:
    """An open clarifying question: the question that caused it and its options."""

    question: str
    prompt: str
    options: tuple[Option, ...]
    origin: ClarificationOrigin = "name"
    mention: str | None = None  # the ambiguous text, replaced by the chosen label


@dataclass(frozen=True, slots=True)
class OpenTurn:
    """The turn in progress, so repeated ``begin_turn`` calls are idempotent and a
    tool-triggered clarification can return the state to where the turn started."""

    question: str
    rewritten: str
    message_id: str | None
    base: SessionState
    clarified: bool = False
    resolved_question: str = ""  # the question processed (the original one on an answer turn)


@dataclass(frozen=True, slots=True)
class SessionState:
    """Spec §2. ``version`` increases by one on every save (compare-and-set)."""

    focus: Focus | None = None
    filters: Mapping[str, FilterValue] = field(default_factory=dict)
    format: Format | None = None
    recent_questions: tuple[str, ...] = ()
    turn: int = 0
    pending: PendingClarification | None = None
    version: int = 0
    last_rewrite: str | None = None
    open_turn: OpenTurn | None = None
    #: Spec §10: up to two other entities, most recent first, each the last focus of a
    #: type other than the focus's; empty whenever ``focus`` is None.
    salient: tuple[Focus, ...] = ()

    def filter_values(self) -> dict[str, str]:
        """``{key: normalised value}`` of the filters in effect."""
        return {k: v.value for k, v in self.filters.items()}

    def is_empty(self) -> bool:
        return (
            self.focus is None
            and not self.filters
            and self.format is None
            and not self.recent_questions
        )

    def evolve(self, **changes: Any) -> SessionState:
        """A copy with ``changes``; ``dataclasses.replace`` without its per-call cost.

        The policy evolves the state several times a turn and every save stamps its
        version, so this is on the hot path: every field read at once (``attrgetter``),
        the changed ones put in, each slot written through its descriptor (the frozen
        ``__setattr__`` is bypassed as ``replace`` would, and there is no
        ``__post_init__`` to rerun). An unknown field name is a ``TypeError``.
        """
        values = list(_ALL_FIELDS(self))
        for name, value in changes.items():
            index = _FIELD_INDEX.get(name)
            if index is None:
                unknown = sorted(changes.keys() - _FIELD_INDEX.keys())
                raise TypeError(f"SessionState has no field(s) {unknown}")
            values[index] = value
        new = object.__new__(SessionState)
        for put, value in zip(_SLOT_SETTERS, values, strict=True):
            put(new, value)
        return new


_FIELD_INDEX = {f.name: i for i, f in enumerate(fields(SessionState))}
_ALL_FIELDS = attrgetter(*_FIELD_INDEX)
_SLOT_SETTERS = tuple(getattr(SessionState, name).__set__ for name in _FIELD_INDEX)


# --------------------------------------------------------------------------- codec


def state_text(text: str, limit: int = MAX_STATE_TEXT_BYTES) -> str:
    """``text`` as the stored state keeps it: whole when its JSON takes at most ``limit``
    bytes, else its longest prefix that does (a character boundary). A lone surrogate
    is replaced first, as ``encode_state`` would. Cutting twice is cutting once."""
    if len(text) * 6 <= limit:  # no character takes more than 6 bytes of JSON
        return text
    try:
        size = len(orjson.dumps(text)) - 2
    except orjson.JSONEncodeError:
        text = clean_text(text)
        size = len(orjson.dumps(text)) - 2
    if size <= limit:
        return text
    fits, over = 0, min(len(text), limit + 1)  # every character takes at least one byte
    while over - fits > 1:  # the JSON of a prefix grows with it: bisect
        mid = (fits + over) // 2
        if len(orjson.dumps(text[:mid])) - 2 <= limit:
            fits = mid
        else:
            over = mid
    return text[:fits]


def _cut(text: str | None) -> str | None:
    return None if text is None else state_text(text)


def is_stored_cut(cut: str, text: str) -> bool:
    """Whether ``cut`` is how a stored state keeps ``text`` (at either limit), so a
    question read back from the store is still recognised (the same message again,
    redaction)."""
    return text.startswith(cut) and cut in (state_text(text), state_text(text, MAX_TURN_TEXT_BYTES))


def state_to_dict(state: SessionState) -> dict[str, Any]:
    """Plain JSON-ready form of a state; ``v`` and ``version`` first (see ``STATE_HEAD``).
    Texts derived from questions are cut (``state_text``; ``MAX_STATE_TEXT_BYTES``)."""
    return _to_dict(state, MAX_TURN_TEXT_BYTES)


def _to_dict(state: SessionState, turn_limit: int) -> dict[str, Any]:
    """``state_to_dict`` with the turn's own question cut to ``turn_limit`` bytes (the
    open turn's base keeps every text at ``MAX_STATE_TEXT_BYTES``)."""
    data: dict[str, Any] = {
        "v": STATE_FORMAT_VERSION,
        "version": state.version,
        "focus": _focus_to_dict(state.focus),
        "filters": {
            k: {"value": f.value, "set_at_turn": f.set_at_turn} for k, f in state.filters.items()
        },
        "format": state.format,
        "recent_questions": [state_text(q) for q in state.recent_questions],
        "turn": state.turn,
        "pending": _pending_to_dict(state.pending, turn_limit),
        "last_rewrite": _cut(state.last_rewrite),
        "open_turn": None,
        "salient": [_focus_to_dict(f) for f in state.salient],
    }
    if state.open_turn is not None:
        ot = state.open_turn
        data["open_turn"] = {
            "question": state_text(ot.question, turn_limit),
            "rewritten": state_text(ot.rewritten, turn_limit),
            "message_id": ot.message_id,
            "clarified": ot.clarified,
            "resolved_question": state_text(ot.resolved_question, turn_limit),
            "base": _to_dict(ot.base.evolve(open_turn=None), MAX_STATE_TEXT_BYTES),
        }
    return data


def whole_number(value: object) -> int | None:
    """``value`` as a stored version or turn count, or None when it is not one.

    The one rule the decoder and compare-and-set share (the Lua twin is in
    ``convmem.stores.redis_wire``): a JSON number with a whole value, 0 <= v < 2**53
    (``COUNT_LIMIT``). ``5.0`` is 5, as a reader with one number type (Lua's cjson) sees
    it; a fraction, a string, a boolean, null, a negative or a larger number is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < COUNT_LIMIT else None
    if isinstance(value, float) and value.is_integer() and 0 <= value < COUNT_LIMIT:
        return int(value)
    return None


def _count(value: object, key: str) -> int:
    number = whole_number(value)
    if number is None:
        raise CorruptState(f"{key} {value!r} is not a whole number from 0 to 2**53 - 1")
    return number


def _head_number(digits: bytes) -> int:
    """The version digits of a value's head (``_HEAD_VERSION``) under ``whole_number``'s
    rule, 0 when outside it: a leading zero is not JSON, 17 digits are past 2**53."""
    if len(digits) > 16 or (len(digits) > 1 and digits.startswith(b"0")):
        return 0
    number = int(digits)
    return number if number < COUNT_LIMIT else 0


def state_from_dict(data: Mapping[str, Any]) -> SessionState:
    """Inverse of ``state_to_dict``; raises ``CorruptState`` on anything else."""
    try:
        version = data.get("v")
        if isinstance(version, bool) or version not in READABLE_FORMATS:
            raise CorruptState(f"unknown session-state format version {version!r}")
        fmt = data.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise CorruptState(f"unknown format {fmt!r}")
        open_turn = None
        if data.get("open_turn"):
            ot = data["open_turn"]
            open_turn = OpenTurn(
                question=str(ot["question"]),
                rewritten=str(ot["rewritten"]),
                message_id=None if ot.get("message_id") is None else str(ot["message_id"]),
                clarified=bool(ot.get("clarified", False)),
                resolved_question=str(ot.get("resolved_question", "")),
                base=state_from_dict(ot["base"]),
            )
        return SessionState(
            focus=_focus_from_dict(data.get("focus")),
            filters={
                str(k): FilterValue(str(v["value"]), _count(v["set_at_turn"], "set_at_turn"))
                for k, v in dict(data.get("filters") or {}).items()
            },
            format=fmt,
            recent_questions=tuple(str(q) for q in data.get("recent_questions") or ()),
            turn=_count(data.get("turn", 0), "turn"),
            pending=_pending_from_dict(data.get("pending")),
            version=_count(data.get("version", 0), "version"),
            last_rewrite=None if data.get("last_rewrite") is None else str(data["last_rewrite"]),
            open_turn=open_turn,
            salient=_salient_from_list(data.get("salient") if version >= 2 else None),
        )
    except CorruptState:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptState(f"session state does not decode: {exc!r}") from exc


def encode_state(state: SessionState) -> bytes:
    """Compact UTF-8 JSON starting with ``STATE_HEAD``: the bytes every store keeps.

    A lone surrogate cannot be UTF-8 (orjson refuses it): text the façade did not see
    (a catalog label, a custom resolver's rewrite) is then normalised like all text at
    the edge (``convmem.identity.clean_data``), so a state always encodes. Any other
    text, NUL included, round-trips unchanged.
    """
    data = state_to_dict(state)
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        return orjson.dumps(clean_data(data))


def decode_state(raw: bytes | str) -> SessionState:
    """Decode a stored value; oversized, malformed or foreign input is ``CorruptState``.

    A turn loads the same stored bytes several times (every step of an agent's tool
    loop): the last few decodings are kept by their bytes (states are immutable)."""
    if isinstance(raw, bytes) and len(raw) <= MAX_STATE_BYTES:
        return _decode_bytes(raw)
    return _decode(raw)


@lru_cache(maxsize=32)
def _decode_bytes(raw: bytes) -> SessionState:
    return _decode(raw)


def _decode(raw: bytes | str) -> SessionState:
    if len(raw) > MAX_STATE_BYTES:
        raise CorruptState(f"session state is {len(raw)} bytes, over the {MAX_STATE_BYTES} limit")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptState(f"session state is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptState("session state is not a JSON object")
    state = state_from_dict(data)
    head = _HEAD_VERSION.match(raw if isinstance(raw, bytes) else raw.encode())
    if head is not None and _head_number(head[1]) != state.version:
        # Only a duplicate "version" key can do this; compare-and-set would read the first.
        raise CorruptState("session state has two different versions")
    return state


def stored_version(raw: bytes | None) -> int:
    """The version compare-and-set compares against: 0 when absent or not a state of ours.

    The Redis stores' Lua script implements the same rule: over ``MAX_STATE_BYTES``
    -> 0; starts with the head of a readable format -> the number after it; otherwise
    the ``version`` of a JSON object whose ``v`` is ours; either number only when
    ``whole_number`` accepts it (as the decoder does), else 0.
    A value that is not ours, or whose version the decoder refuses, therefore yields
    to ``expected_version=0``.
    """
    if raw is None or len(raw) > MAX_STATE_BYTES:
        return 0
    head = _HEAD_VERSION.match(raw)
    if head is not None:
        return _head_number(head[1])
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return 0
    fmt = data.get("v") if isinstance(data, dict) else None
    if not isinstance(data, dict) or isinstance(fmt, bool) or fmt not in READABLE_FORMATS:
        return 0
    return whole_number(data.get("version", 0)) or 0


def _focus_to_dict(focus: Focus | None) -> dict[str, str] | None:
    if focus is None:
        return None
    return {"type": focus.type, "id": focus.id, "label": focus.label, "source": focus.source}


def _focus_from_dict(data: Any) -> Focus | None:
    if data is None:
        return None
    source = data.get("source", "user")
    if source not in ("user", "tool", "confirmed"):
        raise CorruptState(f"unknown focus source {source!r}")
    return Focus(str(data["type"]), str(data["id"]), str(data["label"]), source)


def _salient_from_list(data: Any) -> tuple[Focus, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise CorruptState("salient is not a list")
    if len(data) > MAX_SALIENT:
        raise CorruptState(f"salient holds {len(data)} entities, over the {MAX_SALIENT} limit")
    out: list[Focus] = []
    for item in data:
        focus = _focus_from_dict(item)
        if focus is None:
            raise CorruptState("salient holds a null entity")
        out.append(focus)
    return tuple(out)


def _option_to_dict(option: Option) -> dict[str, Any]:
    return {"type": option.type, "id": option.id, "label": option.label, "attrs": dict(option.attrs)}


def _pending_to_dict(pending: PendingClarification | None, limit: int) -> dict[str, Any] | None:
    if pending is None:
        return None
    return {
        "question": state_text(pending.question, limit),
        "prompt": state_text(pending.prompt),
        "options": [_option_to_dict(o) for o in pending.options],
        "origin": pending.origin,
        "mention": _cut(pending.mention),
    }


def _pending_from_dict(data: Any) -> PendingClarification | None:
    if data is None:
        return None
    origin = data.get("origin", "name")
    if origin not in ("name", "tool"):
        raise CorruptState(f"unknown clarification origin {origin!r}")
    return PendingClarification(
        question=str(data["question"]),
        prompt=str(data["prompt"]),
        options=tuple(
            Option(str(o["type"]), str(o["id"]), str(o["label"]),
                   {str(k): str(v) for k, v in dict(o.get("attrs") or {}).items()})
            for o in data["options"]
        ),
        origin=origin,
        mention=None if data.get("mention") is None else str(data["mention"]),
    )
