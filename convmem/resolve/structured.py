"""``StructuredResolver``: what an LLM resolver needs, framework-free.

The prompt, the JSON schema a model answers with (``RESOLUTION_SCHEMA``), validation
of the answer against the domain, and a fallback resolver (``RuleResolver``) when the
model fails, refuses or answers garbage. A failed answer is a ``ResolverError`` (the
adapters' ``complete_json`` raise it for a provider error; validation raises it naming
the field), but *any* exception out of ``complete_json`` or the answer (a reply nested
100,000 deep is a ``RecursionError``) is a failure too, never a failed turn: the
resolver counts it in ``failures``, logs one WARNING on ``convmem.resolve`` and returns
the fallback's resolution. Only ``BaseException``s that are not ``Exception``s
(cancellation, ``KeyboardInterrupt``) go through.

The answer is untrusted input: what is read from it is bounded before the work it
causes (a JSON text over ``MAX_ANSWER_CHARS`` is refused unparsed; at most
``MAX_ANSWER_NAMES`` entity names are looked up, and as many mentions kept), so a
20,000-name answer costs what a 16-name one does; and the rewrite the user's turn sends
in place of the question is made inert like every text of the block
(``convmem.render.inert``: one line, no heading, fence, role marker or chat-template
token, NUL and lone surrogates replaced), at most ``REWRITE_CHARS`` long. The adapters
(``langchain_convmem.LLMResolver``, ``llamaindex_convmem.LLMResolver``) only supply
``complete_json`` around their frameworks' structured-output calls.

Validation is one flow (``convmem.effects``) yielding a catalog lookup per entity the
model named, so ``aresolve`` awaits ``afind`` where ``resolve`` calls ``find``.
"""

from __future__ import annotations

import inspect
import json
import logging
import reprlib
from collections.abc import Callable, Mapping
from datetime import date

from convmem.catalog import Mention
from convmem.domain import Domain, PeriodFilter, VocabFilter
from convmem.effects import Flow, aperform, perform
from convmem.errors import ResolverError
from convmem.periods import is_period_value
from convmem.render import ID_TOKENS, NAME_TOKENS, inert, inert_label
from convmem.resolve.cues import residual
from convmem.resolve.resolution import Resolution, Resolver
from convmem.resolve.rules import RuleResolver, find_mentions
from convmem.state import FORMATS, SessionState

__all__ = ["RESOLUTION_SCHEMA", "StructuredResolver"]

#: Longest JSON text answer parsed; a longer one is a failed answer, left unparsed.
MAX_ANSWER_CHARS = 100_000
#: Entity names read from an answer (the rest is not looked up), and mentions kept.
MAX_ANSWER_NAMES = 16
#: Longest entity name looked up: a longer one is a failed answer.
MAX_NAME_CHARS = 500
#: Longest rewrite taken from an answer (characters, after it is made inert).
REWRITE_CHARS = 1000
#: How much of a failure's message the WARNING shows.
_LOGGED_CHARS = 300
#: Values quoted in a ``ResolverError``: bounded in depth and length.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, 60, 60


def _shown(value: object) -> str:
    return _REPR.repr(value)

#: The JSON schema a model must answer with; ``StructuredResolver`` validates against it.
RESOLUTION_SCHEMA: dict[str, object] = {
    "title": "Resolution",
    "type": "object",
    "properties": {
        "rewritten": {"type": "string", "description": "the question made self-contained"},
        "entities": {"type": "array", "items": {"type": "string"},
                     "description": "names of things the question names, as written"},
        "filters": {"type": "object", "additionalProperties": {"type": "string"},
                    "description": "filter key -> normalised value stated in the question"},
        "clear_filters": {"type": "array", "items": {"type": "string"}},
        "format": {"type": ["string", "null"], "enum": ["short", "detailed", "table", None]},
        "refers_back": {"type": "boolean",
                        "description": "true when the question refers to the current topic"},
        "salient": {"type": ["string", "null"],
                    "description": "id of the 'Also in this conversation' entity the question's "
                                   "first reference (a pronoun, or 'that/this/the' + noun) points "
                                   "at, or null"},
    },
    "required": ["rewritten", "entities", "filters", "clear_filters", "format", "refers_back",
                 "salient"],
    "additionalProperties": False,
}

_log = logging.getLogger("convmem.resolve")

class StructuredResolver:
    """What an LLM resolver needs, framework-free: the prompt, the schema, validation of the
    answer against the domain, and a fallback (``RuleResolver``) on failure or garbage.

    ``complete_json(prompt, schema)`` may be sync or async and may return a dict or a JSON
    string; the adapters wrap their frameworks' structured-output calls around it.
    """

    def __init__(
        self,
        complete_json: Callable[[str, dict[str, object]], object],
        *,
        fallback: Resolver | None = None,
    ) -> None:
        self.complete_json = complete_json
        self.fallback: Resolver = fallback if fallback is not None else RuleResolver()
        self.failures = 0

    def prompt(self, question: str, state: SessionState, domain: Domain, today: date) -> str:
        lines = [
            "Resolve the user's question against the conversation state. Answer with JSON only.",
            f"Today is {today.isoformat()}.",
            "Filters (key: allowed values):",
        ]
        for key, spec in domain.filters.items():
            if isinstance(spec, PeriodFilter):
                lines.append(f"- {key}: a period like 2026, 2026-Q3, 2026-11 or 2026-11-02..2026-11-08")
            else:
                lines.append(f"- {key}: {', '.join(sorted(spec.values))}")
        lines.append("Formats: short, detailed, table (only when asked for).")
        if state.focus is not None:
            lines.append(f"Current focus: {state.focus.type} {inert_label(state.focus.label)!r}")
        if state.salient:  # spec §10; absent otherwise, so prompts without it are unchanged
            lines.append("Also in this conversation: " + "; ".join(
                f"{inert(s.type, max_tokens=NAME_TOKENS)} {inert_label(s.label)!r} "
                f"(id {inert(s.id, max_tokens=ID_TOKENS)})" for s in state.salient))
            lines.append("If the question's first reference (a pronoun, or 'that/this/the' + "
                         "noun) points at one of those rather than the focus, set 'salient' to "
                         "its id and rewrite the reference with its name; otherwise null.")
        if state.filters:
            lines.append("Filters in effect: " + ", ".join(f"{k}={v.value}" for k, v in state.filters.items()))
        if state.recent_questions:
            lines.append("Earlier questions: " + " | ".join(state.recent_questions))
        lines.append("Rewrite pronouns that point at the focus with its name.")
        lines.append(f"Question: {question}")
        return "\n".join(lines)

    def resolve(self, question: str, state: SessionState, domain: Domain, today: date) -> Resolution:
        try:
            answer = self.complete_json(self.prompt(question, state, domain, today), RESOLUTION_SCHEMA)
            if inspect.isawaitable(answer):
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                raise ResolverError("complete_json returned an awaitable: an async "
                                    "complete_json needs aresolve()")
            return perform(self._validated(answer, question, state, domain))
        except Exception as exc:  # any failure: see the module docstring
            self._failed(exc)
        return self.fallback.resolve(question, state, domain, today)

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        try:
            answer = self.complete_json(self.prompt(question, state, domain, today), RESOLUTION_SCHEMA)
            if inspect.isawaitable(answer):
                answer = await answer
            return await aperform(self._validated(answer, question, state, domain))
        except Exception as exc:
            self._failed(exc)
        return await self.fallback.aresolve(question, state, domain, today)

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        _log.warning("structured resolver failed (%s: %s); using the fallback resolver",
                     type(exc).__name__, _brief(exc))

    def _validated(
        self, answer: object, question: str, state: SessionState, domain: Domain
    ) -> Flow[Resolution]:
        """The answer as a ``Resolution``, or ``ResolverError`` naming the first field
        that is wrong; yields one catalog lookup per entity the model named."""
        data = _as_mapping(answer)
        rewritten = data.get("rewritten")
        if not isinstance(rewritten, str) or not rewritten.strip():
            raise ResolverError("'rewritten' must be a non-empty string")
        mentions: list[Mention] = []
        lowered = question.lower()
        for name in _strings(data.get("entities"), "entities", MAX_ANSWER_NAMES):
            if len(name) > MAX_NAME_CHARS:
                raise ResolverError(f"an entity name is {len(name)} characters; "
                                    f"the limit is {MAX_NAME_CHARS}")
            found = yield from find_mentions(domain, name)
            for m in found[: MAX_ANSWER_NAMES - len(mentions)]:
                start = lowered.find(m.text.lower())
                # a name the question does not contain (the model's own wording) spans nothing
                end = start + len(m.text) if start >= 0 else 0
                mentions.append(Mention(max(start, 0), end, m.text, m.candidates, m.kind))
        filters: dict[str, str] = {}
        raw_filters = data.get("filters") or {}
        if not isinstance(raw_filters, Mapping):
            raise ResolverError("'filters' must be an object")
        for key, value in raw_filters.items():
            spec = domain.filters.get(key) if isinstance(key, str) else None
            ok = isinstance(value, str) and (
                (isinstance(spec, PeriodFilter) and is_period_value(value))
                or (isinstance(spec, VocabFilter) and spec.accepts(value))
            )
            if not ok:
                shown_key = key[:60] if isinstance(key, str) else _shown(key)
                raise ResolverError(f"filter {shown_key}={_shown(value)} is not valid for "
                                    "this domain")
            filters[str(key)] = str(value)
        clears = frozenset(
            k for k in _strings(data.get("clear_filters"), "clear_filters", len(domain.filters))
            if k in domain.filters)
        fmt = data.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise ResolverError(f"format {_shown(fmt)} is not one of {FORMATS}")
        refers_back = data.get("refers_back")
        if not isinstance(refers_back, bool):
            raise ResolverError("'refers_back' must be a boolean")
        salient_id = data.get("salient")  # missing = null: answers from before §10 stay valid
        if salient_id is not None and not isinstance(salient_id, str):
            raise ResolverError("'salient' must be a string or null")
        referred = None
        if salient_id is not None and domain.salient_size:
            referred = next((f for f in state.salient if f.id == salient_id), None)
            if referred is None:
                raise ResolverError(f"salient {_shown(salient_id)} is not an entity in "
                                    "'Also in this conversation'")
        taken = [(m.start, m.end) for m in mentions]
        # sent to the model in place of the question and kept in the state: inert like
        # every text the block shows (issue 22, finding 4)
        text = inert(rewritten, max_tokens=2 * REWRITE_CHARS, max_chars=REWRITE_CHARS)
        if not text:
            raise ResolverError("'rewritten' holds nothing once made inert")
        return Resolution(
            question=question,
            rewritten=text,
            mentions=tuple(sorted(mentions, key=lambda m: m.start)),
            filters=filters,
            clears=clears,
            format=fmt,
            refers_back=refers_back,
            residual=residual(question, taken),
            core_rewrite=text,
            refers_to_salient=referred,
        )


def _as_mapping(answer: object) -> Mapping[str, object]:
    if isinstance(answer, str):
        if len(answer) > MAX_ANSWER_CHARS:
            raise ResolverError(f"the answer is {len(answer)} characters; "
                                f"the limit is {MAX_ANSWER_CHARS}")
        try:
            answer = json.loads(answer)
        except ValueError as exc:  # JSONDecodeError, or a number too long to convert
            raise ResolverError(f"the answer is not JSON: {exc}") from exc
    if hasattr(answer, "model_dump"):
        answer = answer.model_dump()
    if not isinstance(answer, Mapping):
        raise ResolverError(f"expected a JSON object, got {type(answer).__name__}")
    return answer


def _strings(value: object, name: str, limit: int) -> list[str]:
    """The first ``limit`` non-blank strings of the answer's list ``name``; the rest of
    the list is not read (an answer is untrusted: its size must not set the cost)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ResolverError(f"'{name}' must be a list of strings")
    taken: list[str] = []
    for v in value:
        if len(taken) >= limit:
            break
        if not isinstance(v, str):
            raise ResolverError(f"'{name}' must be a list of strings")
        if v.strip() and v not in taken:
            taken.append(v)
    return taken


def _brief(exc: BaseException) -> str:
    """A failure's message as the WARNING shows it: at most ``_LOGGED_CHARS``."""
    text = str(exc)
    return text if len(text) <= _LOGGED_CHARS else text[: _LOGGED_CHARS - 1] + "…"
