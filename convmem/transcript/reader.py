"""The export document read incrementally: bytes in, one checked-for-shape value out.

``DocumentReader`` is fed the bytes chunk by chunk (ijson's push parser, no prefixes
kept) and hands out one top-level value or one section item at a time, built by an
iterative builder that refuses, with the JSON path, what no convmem export holds:
nesting deeper than ``max_depth``, a key given twice, a string longer than the cap, a
NUL or a lone surrogate anywhere (every write path replaces them with U+FFFD, so a
document carrying one was not written by convmem), non-finite numbers. What each
record must hold is ``convmem.transcript.document``'s to check.

One record (a section's item, or a top-level field such as ``thread``) is built at a
time, and two caps bound it while it streams in, so no document can make the reader
hold more: its JSON values and keys are counted as ijson hands them out
(``ImportLimits.max_record_values``), and its bytes are measured between the pieces
given to the parser (``ImportLimits.max_record_bytes``), which also bounds what the
parser buffers of one long string before handing it out. A record within the byte
cap is never refused; one beyond it is refused at most one chunk later.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from collections.abc import Iterator
from typing import Any

import ijson

from convmem.transcript.document import SECTIONS, TOP_LEVEL, ImportLimits, refuse_type
from convmem.transcript.errors import ImportRefused
from convmem.transcript.export import VERSION

_RUN = re.compile(rb"\\+")
#: While values flow, the parser gets this much at a time (its event list stays small).
PIECE = 64 * 1024
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
        self._parsed = 0  # bytes handed to the parser
        self._record_from = 0  # the record in progress began at or before this offset
        self._record_values = 0  # values and keys of the record in progress
        self._flowing = True  # the last bytes parsed completed some value

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
        if not chunk:
            self._parse(chunk)
        at = 0
        while at < len(chunk):
            # inside one long token the rest goes at once: yajl lexes a token cut by
            # the end of its input again from its start each time
            piece = chunk[at : at + PIECE] if self._flowing else chunk[at:]
            at += len(piece)
            self._parse(piece)
            self._lines += piece.count(b"\n")
            self._check_record_bytes()
        if not chunk and not self._done:
            raise ImportRefused(
                self._where(), f"is not valid JSON at line {self._lines + 1}: the document "
                "ends early (the file ends early: truncated?)"
            )

    def _parse(self, chunk: bytes) -> None:
        """Push bytes into the parser (``b""``: the end), then build what they complete."""
        failure: BaseException | None = None
        self._parsed += len(chunk)
        try:
            if chunk:
                self._parser.send(chunk)
            else:
                self._parser.close()
        except (ijson.JSONError, UnicodeDecodeError, ValueError) as exc:
            failure = exc
        self._flowing = bool(self._events)
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

    # -- the record's caps

    def _check_record_bytes(self) -> None:
        """Refuse the record in progress once it surely spans more than its cap: it
        began at or before ``_record_from`` and is still open at ``_parsed``."""
        if self._done:
            return
        if self._in_section and self._top_key == "attachments":
            cap, name = self.limits.max_attachment_record_bytes, (
                "ImportLimits.max_record_bytes plus the base64 of max_attachment_bytes"
            )
        else:
            cap, name = self.limits.max_record_bytes, "ImportLimits.max_record_bytes"
        if self._parsed - self._record_from > cap:
            raise ImportRefused(
                self._where(), f"makes the record {self._record()} longer than {cap} bytes "
                f"of JSON ({name})"
            )

    def _too_many_values(self) -> ImportRefused:
        cap = self.limits.max_record_values
        return ImportRefused(
            self._where(), f"makes the record {self._record()} more than {cap} JSON values "
            "and keys (ImportLimits.max_record_values)"
        )

    def _record(self) -> str:
        """The JSON path of the record being read."""
        if self._top_key is None:
            return "$"
        if self._in_section:
            return f"$.{self._top_key}[{self._section_index + 1}]"
        return f"$.{self._top_key}"

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
        count, max_values = self._record_values, self.limits.max_record_values
        for event, value in events:
            n = len(values)
            if n < 2 and not (n == 1 and self._in_section and event in _INNER):
                self._top_event(event, value)
                count = 0
                continue
            if event not in _ENDS:
                count += 1
                if count > max_values:
                    raise self._too_many_values()
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
                    count = 0
                elif keys[-1] is not None:
                    keys[-1] = None
            else:
                if event == "string" and len(value) > max_raw:
                    raise self._too_long(value)
                if n == 1:  # a scalar item straight in a section's list
                    self._complete(value)
                    count = 0
                    continue
                parent = values[-1]
                if keys[-1] is not None:
                    parent[keys[-1]] = value
                    keys[-1] = None
                else:
                    parent.append(value)
        self._record_values = count

    def _too_long(self, value: str) -> ImportRefused:
        return ImportRefused(
            self._where(), f"is {len(value)} characters; the limit is {self.limits.max_raw_string} "
            "(ImportLimits.max_string_chars)"
        )

    def _complete(self, value: Any) -> None:
        """A top-level field's value or a section's item is whole."""
        assert self._top_key is not None
        self._record_from = self._parsed
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
            raise refuse_type("a list", value, f"$.{self._top_key}")
        self._out.append((self._top_key, None, value))

    def _top_event(self, event: str, value: Any) -> None:
        """Events of the document's top object itself (and of values straight in it)."""
        values, keys = self._values, self._keys
        self._record_from = self._parsed  # between records
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

_ENDS = frozenset({"end_map", "end_array"})

# Events of a section's item (not of the section's list itself) while no item is open.
_INNER = frozenset({"start_map", "start_array", "string", "number", "boolean", "null"})


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


__all__ = ["DocumentReader"]
