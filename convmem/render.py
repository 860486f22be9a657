"""Rendering the state as the one part of the prompt that varies per turn.

The prompt-size contract every adapter relies on: cl100k_base tokens; at most
``SLOT_BUDGET`` (60) without recent questions and at most ``BLOCK_BUDGET`` (160) for
any state whatever its content; the empty state renders as ``""``. Every value that did
not come from the domain file (questions, labels and ids from tools) is made *inert*:
one line, quoted, capped, with nothing that could close the block or open a section
or a role. The block never holds an answer, a passage or a tool result body. Spec §10's
other entities (``salient``) take one line after the focus, inert like the focus, and
are the first thing given up when the slots exceed their budget.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from convmem.errors import ConfigError
from convmem.identity import clean_text
from convmem.state import Focus, SessionState
from convmem.tokens import count_tokens, truncate_tokens

HEADER = "## Session context"
SLOT_BUDGET = 60
BLOCK_BUDGET = 160
QUESTION_CHARS = 200
QUESTION_TOKENS = 28
LABEL_TOKENS = 12
ID_TOKENS = 8
VALUE_TOKENS = 8
NAME_TOKENS = 6

_ROLE = re.compile(
    r"(system|assistant|user|human|ai|tool|function|developer)\s*:", re.IGNORECASE
)
_TRANSLATE = str.maketrans({
    '"': "'", "`": "'", "<": "‹", ">": "›", "#": "＃", "|": "¦", "{": "(", "}": ")",
    "[": "(", "]": ")", "\\": "/",
})


def inert(text: str, *, max_tokens: int, max_chars: int = QUESTION_CHARS) -> str:
    """One safe line: no control characters or newlines, no markup that opens a section,
    a fence, a role or a chat-template token, and capped in characters and tokens.
    NUL and lone surrogates become U+FFFD first (``convmem.identity.clean_text``).

    Only the start of the text can show, so a long text is normalised from a prefix
    when that already overflows the cap (the result is the same: normalising maps a
    prefix to a prefix, up to a role marker cut at its end): a 2,000-token tool label
    costs what a 200-character one does.
    """
    window = 4 * max_chars + 64
    if len(text) > window:
        head = _one_line(text[:window])
        if len(head) > max_chars + 16:
            return _capped(head, max_tokens=max_tokens, max_chars=max_chars)
    return _capped(_one_line(text), max_tokens=max_tokens, max_chars=max_chars)


def _one_line(text: str) -> str:
    cleaned = "".join(
        " " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch
        for ch in clean_text(text)
    )
    cleaned = " ".join(cleaned.split()).translate(_TRANSLATE)
    return _ROLE.sub(lambda m: f"{m.group(1)} -", cleaned)


def _capped(cleaned: str, *, max_tokens: int, max_chars: int) -> str:
    if len(cleaned) > max_chars:
        cleaned = cleaned[: max_chars - 1].rstrip() + "…"
    return truncate_tokens(cleaned, max_tokens)


def inert_label(label: str) -> str:
    """A label that did not come from the user (a catalog's, a tool's, any entity the
    state carries) as it may enter the rewritten question: made inert and bounded
    exactly as the block shows it (issue 11, finding 7: a tool result's label went into
    the user message raw, newlines, ``## SYSTEM`` and chat-template tokens included).

    The same focus label is rewritten turn after turn: a small bounded cache keeps the
    last labels' inert forms (labels up to ``_CACHED_LABEL_CHARS``)."""
    if len(label) > _CACHED_LABEL_CHARS:
        return inert(label, max_tokens=LABEL_TOKENS)
    return _inert_label(label)


_CACHED_LABEL_CHARS = 1000


@lru_cache(maxsize=256)
def _inert_label(label: str) -> str:
    return inert(label, max_tokens=LABEL_TOKENS)


SALIENT_PREFIX = "Also in this conversation: "


def _entity(f: Focus) -> str:
    """``customer "Brightwater Farms" (C-1080)``: type, label and id, each made inert."""
    return (
        f"{inert(f.type, max_tokens=NAME_TOKENS)} "
        f'"{inert_label(f.label)}" ({inert(f.id, max_tokens=ID_TOKENS)})'
    )


#: What the block depends on, hashable: focus, other entities, (filter, value) pairs in
#: name order, answer format, the questions shown.
_Key = tuple[Focus | None, tuple[Focus, ...], tuple[tuple[str, str], ...], str | None,
             tuple[str, ...]]


def _slot_lines(key: _Key, salient: int) -> list[str]:
    """The slot lines with the first ``salient`` other entities."""
    focus, others, filters, format_, _ = key
    lines: list[str] = []
    if focus is not None:
        lines.append(f"Currently discussing: {_entity(focus)}")
        if salient > 0:  # spec §10: one line, most recent first
            lines.append(SALIENT_PREFIX + "; ".join(_entity(s) for s in others[:salient]))
    if filters:
        parts = [
            f"{inert(k, max_tokens=NAME_TOKENS)}={inert(v, max_tokens=VALUE_TOKENS)}"
            for k, v in filters
        ]
        lines.append("Filters in effect: " + ", ".join(parts))
    if format_ is not None:
        lines.append(f"Answer style requested: {format_}")
    return lines


def _fits(lines: list[str], budget: int) -> bool:
    return count_tokens("\n".join([HEADER, *lines])) <= budget


def _slots(key: _Key) -> list[str]:
    """Slot lines within ``SLOT_BUDGET``: the oldest other entity is given up first (§10),
    then trailing filters, then whole lines."""
    n = len(key[1])
    lines = _slot_lines(key, n)
    while n > 0 and not _fits(lines, SLOT_BUDGET):
        n -= 1
        lines = _slot_lines(key, n)
    return _fit(lines, SLOT_BUDGET)


def _fit(lines: list[str], budget: int) -> list[str]:
    """Drop trailing filters (then whole lines) until the block fits ``budget`` tokens."""
    while lines and not _fits(lines, budget):
        filt = next((i for i, ln in enumerate(lines) if ln.startswith("Filters in effect: ")), None)
        if filt is not None and ", " in lines[filt]:
            lines[filt] = lines[filt].rsplit(", ", 1)[0]
        else:
            lines.pop()
    return lines


def render(
    state: SessionState,
    *,
    questions: tuple[str, ...] | None = None,
    recall_tool: str | None = None,
) -> str:
    """The fenced session block (the seed's ``renderState``); ``""`` for an empty state.

    ``questions`` stands in for ``state.recent_questions`` (an open turn shows the
    earlier ones). ``recall_tool``: the model is offered that tool to look up earlier
    answers (``convmem.session.recall``), and a last line says so (``recall_line``),
    within the same budget. The block depends on a few fields only, and an agent's turn
    renders the same state on every step of its tool loop: the last blocks are kept by
    those fields (tokenizing them is most of the cost)."""
    asked = state.recent_questions if questions is None else questions
    filters = tuple((k, v.value) for k, v in sorted(state.filters.items()))
    return _render((state.focus, state.salient, filters, state.format, asked[-3:]), recall_tool)


_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def recall_line(tool: str) -> str:
    """The block's line naming the recall tool (the answers themselves are never in it)."""
    if not isinstance(tool, str) or not _TOOL_NAME.fullmatch(tool):
        raise ConfigError(f"recall tool name must be a tool identifier, got {tool!r}")
    return f"Earlier answers are not shown here; call {tool} to look up what was said."


@lru_cache(maxsize=64)
def _inert_question(question: str) -> str:
    """A recent question as the block shows it. Each is shown on the next three turns'
    blocks (and the open turn's): made inert once (questions are at most
    ``MAX_QUESTION_CHARS`` long, so the cache stays small)."""
    return inert(question, max_tokens=QUESTION_TOKENS)


@lru_cache(maxsize=128)
def _render(key: _Key, recall_tool: str | None = None) -> str:
    lines = _slots(key)
    tail = [recall_line(recall_tool)] if recall_tool is not None else []
    questions = [_inert_question(q) for q in key[4]]
    while questions:
        asked = "Earlier in this session: " + "; ".join(f'"{q}"' for q in questions)
        if _fits([*lines, asked, *tail], BLOCK_BUDGET):
            lines = [*lines, asked]
            break
        questions.pop(0)  # the oldest question goes first
    if not lines:
        return ""
    return "\n".join([HEADER, *lines, *tail])
