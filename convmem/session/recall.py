"""Recall on demand: the model looks up what was said earlier in its thread.

The prompt holds the session state and never an old answer (spec §seed: answers
pollute), yet users refer to answers ("what was the total you gave me?"). Rather than
replaying them, the adapters offer the model one tool, ``recall_conversation``; the
façade's ``recall`` answers it from the durable record with one indexed statement
(``TranscriptStore.search(match="any", active_path=True)``): the question's content
words, any of them, ranked by the backend, over this thread's active path only (never
another thread, an abandoned branch or another tenant), over the user's messages and
the answers (tool calls and results only when asked), never redacted or deleted text.
This module holds what the façade and both adapters share: the hit, its snippet, and
the text the model reads. No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from convmem.errors import ConfigError
from convmem.session.records import MAX_QUESTION_CHARS
from convmem.text import search_terms

#: The tool's name, as both adapters offer it and the block names it.
RECALL_TOOL = "recall_conversation"

#: What the model is told the tool does.
RECALL_DESCRIPTION = (
    "Look up what was said earlier in this conversation (your earlier answers and the "
    "user's messages). Pass the words to look for, e.g. 'total invoice'. Use it when the "
    "user refers to something said before that the session context does not show."
)

#: Shown to the model when nothing matched.
NO_MATCH = "No earlier message of this conversation matches that."

SNIPPET_CHARS = 240
MAX_RECALL = 20


@dataclass(frozen=True, slots=True)
class RecallHit:
    """An earlier message of the thread matching a recall: ``text`` is a snippet of it
    (``SNIPPET_CHARS`` at most, around the first matching word); ``turn`` is its
    position in the thread's record (``seq``: increasing, so later is larger);
    ``score`` the backend's rank (lower is better)."""

    message_id: str
    role: str
    text: str
    turn: int
    created_at: datetime
    score: float | None = None


def check_recall(query: object, limit: object) -> tuple[str, int]:
    """``(query, limit)`` when a recall may run with them, else ``ConfigError``."""
    if not isinstance(query, str):
        raise ConfigError(f"recall: query must be a string, got {type(query).__name__}")
    if len(query) > MAX_QUESTION_CHARS:
        raise ConfigError(
            f"recall: query is {len(query)} characters; the limit is {MAX_QUESTION_CHARS}"
        )
    if type(limit) is not int or not 1 <= limit <= MAX_RECALL:
        raise ConfigError(f"recall: limit must be an integer from 1 to {MAX_RECALL}, got {limit!r}")
    return query, limit


def snippet(text: str, query: str, max_chars: int = SNIPPET_CHARS) -> str:
    """One line of ``text`` around the first word ``query``'s terms match."""
    flat = " ".join(text.split())
    if len(flat) <= max_chars:
        return flat
    words = [w for w, _ in search_terms(query)]
    found = [m.start() for w in words if (m := re.search(rf"\b{re.escape(w)}", flat, re.I))]
    start = max(0, min(found) - max_chars // 4) if found else 0
    start = min(start, len(flat) - max_chars + 1)
    cut = flat[start : start + max_chars - 2].strip()
    return ("…" if start > 0 else "") + cut + ("…" if start + max_chars - 2 < len(flat) else "")


def recall_text(hits: Sequence[RecallHit]) -> str:
    """The hits as the model reads them: one line each, role, turn, the message's id
    and the snippet."""
    if not hits:
        return NO_MATCH
    return "\n".join(f"[{h.role}, turn {h.turn}, message {h.message_id}] {h.text}" for h in hits)


#: A line of ``recall_text``: its reference, then the snippet.
_RECALL_LINE = re.compile(r"(\[(?:user|assistant|tool|system), turn \d+, message [\w-]{1,64}\]) .*")


def recorded_recall(text: str) -> str:
    """What the record keeps of a recall's result: the references without the snippets.

    The snippets are copies of earlier messages; kept in the tool's result they would
    outlive a redaction or deletion of those messages, which reaches them by link,
    not by text. The references are that link (the snippet is rebuilt from the message
    and the query, the tool call's argument). Text that is not ``recall_text``'s, line
    for line, is kept as it is."""
    lines = text.split("\n")
    refs = [_RECALL_LINE.fullmatch(line) for line in lines]
    if not all(refs):
        return text
    return "\n".join(m.group(1) for m in refs if m is not None)
