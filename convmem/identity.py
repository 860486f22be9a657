"""The one rule for identifiers and text that cross convmem's edge.

Tenants and thread ids are the application's strings: separators (``:``, ``{``,
``}``, ``*``, ``/``), spaces and non-ASCII letters are legal in both (real tenants
are ``acme:eu``, real thread ids are URLs or e-mail addresses). Stores make them
unambiguous by *encoding* them, never by refusing them. What is refused, with a
``ConfigError`` naming the field, is what no store can keep faithfully: a non-string,
an empty or blank value, a value over the length limit, control characters
(NUL, newlines, ...), the Unicode line and paragraph separators (U+2028, U+2029: with
the C0/C1 controls, everything ``str.splitlines`` breaks a line at) and lone surrogates. Both session-state stores and the
transcript apply this rule at their edge, so a value accepted by one is accepted by
all.

Free text (questions, answers, tool output) is *normalised*, not refused: a NUL or a
lone surrogate is replaced by U+FFFD (the Unicode replacement character), the one
documented way, on every path and backend, so neither the JSON codec, SQLite nor
PostgreSQL ever sees them and no turn fails on them. ``clean_data`` applies the same
rule through JSON-like data (tool arguments and results).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from convmem.errors import ConfigError

#: Longest tenant, in characters (the transcript's column width).
MAX_TENANT_CHARS = 200
#: Longest thread id (the application's key for a thread), in characters.
MAX_THREAD_ID_CHARS = 500

REPLACEMENT = "\ufffd"
_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")
#: C0 and C1 controls (NUL, LF, CR, VT, FF, U+001C-U+001E, NEL U+0085, ...), the line
#: and paragraph separators and lone surrogates: nothing that breaks a line in a log, a
#: CLI listing or a key (issue 22, finding 9: U+2028 passed the rule that refused LF).
_FORBIDDEN_IN_ID = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
#: Names of the refused characters that break a line (``unicodedata`` names no control).
_LINE_BREAKS = {
    "\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\x0b": "LINE TABULATION", "\x0c": "FORM FEED",
    "\x1c": "FILE SEPARATOR", "\x1d": "GROUP SEPARATOR", "\x1e": "RECORD SEPARATOR",
    "\x85": "NEXT LINE", "\u2028": "LINE SEPARATOR", "\u2029": "PARAGRAPH SEPARATOR",
}


def check_id(value: object, field: str, max_chars: int) -> str:
    """``value`` when it is a usable identifier, else ``ConfigError`` naming ``field``.

    Checked several times a turn: printable ASCII (no control character, no
    surrogate) that is not all spaces and within the limit passes without the scan."""
    if (
        type(value) is str
        and value.isascii()
        and value.isprintable()
        and len(value) <= max_chars
        and value.strip()
    ):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{field} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ConfigError(f"{field} must be a non-empty string, got {value!r}")
    if len(value) > max_chars:
        raise ConfigError(f"{field} is {len(value)} characters; the limit is {max_chars}")
    bad = _FORBIDDEN_IN_ID.search(value)
    if bad is not None:
        raise ConfigError(
            f"{field} contains {_describe(bad.group())} at position {bad.start()}; control "
            "characters, line or paragraph separators and lone surrogates are not allowed "
            "in identifiers"
        )
    return value


def check_tenant(value: object, field: str = "tenant") -> str:
    """The tenant rule: see the module docstring."""
    return check_id(value, field, MAX_TENANT_CHARS)


def check_thread_id(value: object, field: str = "thread_id") -> str:
    """The thread-id rule: see the module docstring."""
    return check_id(value, field, MAX_THREAD_ID_CHARS)


def clean_text(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by U+FFFD (a no-op, and no
    copy, for ordinary text).

    A turn's answer (thousands of characters) passes here: ASCII text, or text that
    encodes to UTF-8 (no lone surrogate), is checked for NUL alone, at C speed."""
    if "\x00" not in text and (text.isascii() or _encodes(text)):
        return text
    return _UNSAFE_TEXT.sub(REPLACEMENT, text)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _describe(ch: str) -> str:
    """What ``ch`` is, by code point and (for a line break) name: ``a line separator
    (U+2028 LINE SEPARATOR)``, ``a control character (U+000A LINE FEED)``."""
    code = f"U+{ord(ch):04X}"
    if "\ud800" <= ch <= "\udfff":
        return f"a lone surrogate ({code})"
    name = _LINE_BREAKS.get(ch)
    shown = code if name is None else f"{code} {name}"
    if ch == "\u2028":
        return f"a line separator ({shown})"
    if ch == "\u2029":
        return f"a paragraph separator ({shown})"
    return f"a control character ({shown})"


def clean_data(value: Any) -> Any:
    """``clean_text`` through JSON-like data (mappings, lists, tuples; keys too): the
    same rule for structured text such as tool arguments and results. ``value`` itself,
    not a copy, when it holds nothing to replace."""
    if not _holds_unsafe_text(value):
        return value
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_data(k): clean_data(v) for k, v in value.items()}
    return [clean_data(v) for v in value]


def _holds_unsafe_text(value: Any) -> bool:
    if isinstance(value, str):
        return _UNSAFE_TEXT.search(value) is not None
    if isinstance(value, Mapping):
        return any(_holds_unsafe_text(k) or _holds_unsafe_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds_unsafe_text(v) for v in value)
    return False
