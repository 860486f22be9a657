"""Resolving a question before retrieval: what it names, filters, asks for, and means.

``RuleResolver`` reads the question against the domain and the current state and
returns a ``Resolution``: entity mentions (through the catalog), explicit filter
values and clears, a format cue, whether the question refers back (pronouns,
one-anaphora, elliptical openers, filter- or format-only messages: spec §8–9), the
residual text the topic detector sees (domain terms removed: §9 "content words"), and
a rewrite that *substitutes* rather than appends ("Who's their rep?" → "Who's
Brightwater Farms's rep?"; "And Pinecrest Clinics?" → the previous question with the
new name and every filter in effect named). It decides nothing about the state: that
is the policy's job (``convmem.policy``).

In a domain that declares ``types`` (spec §10) references are typed: a declared pronoun,
or "that/this/the" + a declared noun, resolves to the focus when the focus's type
declares the word (or declares nothing), else to the most recent ``salient`` entity
whose type does; every resolved reference is substituted ("Has she chased them about
it?" → "Has Sam Lee chased Brightwater Farms about it?"), and a first reference to a
salient entity is reported (``Resolution.refers_to_salient``) for the policy to make it
the focus. Every label enters a rewrite through ``label_text``.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol, runtime_checkable

from convmem.catalog import Mention
from convmem.domain import Domain, PeriodFilter, TypeWords, VocabFilter
from convmem.periods import find_periods, is_period_value
from convmem.render import ID_TOKENS, NAME_TOKENS, inert, inert_label
from convmem.state import FORMATS, Focus, Format, SessionState
from convmem.text import (
    OBJECT_PRONOUNS,
    PERSONAL_PRONOUNS,
    Token,
    contraction_after,
    elliptical_opener,
    is_possessive,
    pronoun_family,
    pronoun_view,
    reference_tokens,
    stopwords,
    tokenize,
)

#: Spec §9: request words that carry no topic in a filter- or format-only message,
#: plus interjections and quantifiers that carry none either.
TOPIC_FREE_WORDS = frozenset(
    ["show", "list", "put", "give", "pull", "switch", "include", "restrict", "just", "only", "instead", "again", "please", "similar", "version", "answer", "breakdown", "summarize", "summarise", "everything", "anything", "ok", "okay", "fine", "hm", "hmm", "sure", "thanks", "thank", "yes", "yeah", "right", "well", "actually", "also", "still", "let", "us", "let's",
     # the same kind of word: how a filter-only request is phrased ("What if we look at
     # Q2 instead?", "Try Q1.", "Now do EMEA.", "Narrow it to overdue.")
     "look", "try", "see", "check", "repeat", "redo", "rerun", "run", "view", "display",
     "narrow", "filter", "limit", "change", "make", "go", "use", "apply", "keep", "drop",
     "remove", "add", "exclude", "zoom", "expand", "swap", "same", "too", "either"]
)

_GROUPING = re.compile(r"\b(?:by|per)\s+[^\W\d_]+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int


@dataclass(frozen=True)
class Resolution:
    """What a question says, before any state is changed (spec §3 step 3)."""

    question: str
    rewritten: str
    mentions: tuple[Mention, ...] = ()
    filters: Mapping[str, str] = field(default_factory=dict)
    clears: frozenset[str] = frozenset()
    format: Format | None = None
    refers_back: bool = False
    cue_only: bool = False
    residual: str = ""
    core_rewrite: str = ""  # the rewrite without the appended filter note (kept for repeats)
    #: Spec §10: the salient entity the question's first reference resolves to; the
    #: policy makes it the focus. Always None in a domain without ``types``.
    refers_to_salient: Focus | None = None


@runtime_checkable
class Resolver(Protocol):
    """question + state + domain + clock → ``Resolution``."""

    def resolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution: ...

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution: ...


# --------------------------------------------------------------------------- phrases


@dataclass(frozen=True, slots=True)
class _Phrase:
    key: str  # filter key, or format name
    value: str | None  # normalised filter value; None for a clear phrase
    pattern: re.Pattern[str]


def _phrase_pattern(phrase: str) -> re.Pattern[str]:
    body = r"\s+".join(re.escape(w) for w in phrase.split())
    return re.compile(rf"(?<![\w-]){body}(?![\w-])", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _DomainPhrases:
    vocab: tuple[_Phrase, ...]
    clears: tuple[_Phrase, ...]
    formats: tuple[_Phrase, ...]
    period_key: str | None


_PHRASES: weakref.WeakKeyDictionary[Domain, _DomainPhrases] = weakref.WeakKeyDictionary()


def _phrases(domain: Domain) -> _DomainPhrases:
    cached = _PHRASES.get(domain)
    if cached is not None:
        return cached
    vocab: list[_Phrase] = []
    period_key: str | None = None
    for key, spec in domain.filters.items():
        if isinstance(spec, PeriodFilter):
            period_key = period_key or key
        elif isinstance(spec, VocabFilter):
            for value, aliases in spec.values.items():
                for alias in {value, *aliases}:
                    vocab.append(_Phrase(key, value, _phrase_pattern(alias)))
    clears = [
        _Phrase(key, None, _phrase_pattern(p)) for key, ps in domain.clear_phrases.items() for p in ps
    ]
    formats = [
        _Phrase(fmt, fmt, _phrase_pattern(p)) for fmt, ps in domain.formats.items() for p in ps
    ]

    def by_length(p: _Phrase) -> int:
        return -len(p.pattern.pattern)

    built = _DomainPhrases(
        tuple(sorted(vocab, key=by_length)),
        tuple(sorted(clears, key=by_length)),
        tuple(sorted(formats, key=by_length)),
        period_key,
    )
    _PHRASES[domain] = built
    return built


def _overlaps(start: int, end: int, taken: Sequence[tuple[int, int]]) -> bool:
    return any(s < end and start < e for s, e in taken)


# --------------------------------------------------------------------------- analysis


@dataclass
class _Cues:
    """Every domain term found in a text, with spans (mutable while scanning)."""

    mentions: list[Mention]
    taken: list[tuple[int, int]]
    filters: dict[str, str] = field(default_factory=dict)
    clears: set[str] = field(default_factory=set)
    format: Format | None = None
    filter_spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    cue_spans: list[tuple[int, int]] = field(default_factory=list)


def _scan(text: str, mentions: Sequence[Mention], domain: Domain, today: date) -> _Cues:
    """Filters, clears and format cues outside entity names; the last one stated wins."""
    ph = _phrases(domain)
    cues = _Cues(list(mentions), [(m.start, m.end) for m in mentions])
    events: list[tuple[int, str, str | None]] = []  # (position, key, value or None = clear)

    def claim(start: int, end: int) -> bool:
        if _overlaps(start, end, cues.taken):
            return False
        cues.taken.append((start, end))
        cues.cue_spans.append((start, end))
        return True

    for phrase in ph.clears:
        for m in phrase.pattern.finditer(text):
            if claim(m.start(), m.end()):
                events.append((m.start(), phrase.key, None))
                cues.filter_spans.setdefault(phrase.key, []).append((m.start(), m.end()))
    fmt_hits: list[tuple[int, Format]] = []
    for phrase in ph.formats:
        for m in phrase.pattern.finditer(text):
            if claim(m.start(), m.end()) and phrase.value in FORMATS:
                fmt_hits.append((m.start(), phrase.key))  # type: ignore[arg-type]
    if ph.period_key is not None:
        for p in find_periods(text, today):
            if claim(p.start, p.end):
                events.append((p.start, ph.period_key, p.value))
                cues.filter_spans.setdefault(ph.period_key, []).append((p.start, p.end))
    for phrase in ph.vocab:
        for m in phrase.pattern.finditer(text):
            if claim(m.start(), m.end()):
                events.append((m.start(), phrase.key, phrase.value))
                cues.filter_spans.setdefault(phrase.key, []).append((m.start(), m.end()))
    for _pos, key, value in sorted(events, key=lambda e: e[0]):
        if value is None:
            cues.filters.pop(key, None)
            cues.clears.add(key)
        else:
            cues.filters[key] = value
            cues.clears.discard(key)
    if fmt_hits:
        cues.format = max(fmt_hits)[1]
    return cues


def _cue_only(text: str, cues: _Cues) -> bool:
    """Spec §9: only stopwords and topic-free request words remain once cues are removed."""
    if not (cues.filters or cues.clears or cues.format):
        return False
    taken = list(cues.taken) + [(m.start(), m.end()) for m in _GROUPING.finditer(text)]
    stops = stopwords()
    for tok in tokenize(text):
        if _overlaps(tok.start, tok.end, taken):
            continue
        parts = [p for p in re.split(r"['’]", tok.norm) if p]
        if not all(p in stops or p in TOPIC_FREE_WORDS for p in parts):
            return False
    return True


def _residual(text: str, taken: Sequence[tuple[int, int]]) -> str:
    out = list(text)
    for s, e in taken:
        for i in range(max(s, 0), min(e, len(out))):
            out[i] = " "
    return " ".join("".join(out).split())


# --------------------------------------------------------------------------- rewrite


def label_text(label: str, *, possessive: bool = False) -> str:
    """How an entity's label enters a rewrite: the one place every substitution goes
    through (a pronoun, a typed reference, the "(about …)" note, a clarification's
    chosen option in ``policy.answer_rewrite``). The label did not come from the user:
    inert and bounded like the block's (``render.inert_label``)."""
    text = inert_label(label)
    return f"{text}'s" if possessive else text


def _substitute_pronoun(text: str, label: str, skip: Sequence[tuple[int, int]]) -> str | None:
    """Replace the first personal pronoun outside ``skip`` by ``label`` (possessive kept)."""
    toks = pronoun_view(tokenize(text))
    for i, tok in enumerate(toks):
        if tok.norm not in PERSONAL_PRONOUNS or _overlaps(tok.start, tok.end, skip):
            continue
        repl = label_text(label, possessive=is_possessive(toks, i))
        cut, expansion = contraction_after(text, tok.end, word=tok.norm)
        return text[: tok.start] + repl + expansion + text[tok.end + cut:]
    return None


def carry_focus(rewritten: str, focus: Focus | None) -> str:
    """The rewrite of a question that named nothing and kept ``focus`` (by any rule,
    overlap included), naming the focus when it does not already: a follow-up the
    model reads alone must still say what it is about ("What was the total?" →
    "What was the total? (about Brightwater Farms)")."""
    if focus is None or label_text(focus.label).lower() in rewritten.lower():
        return rewritten
    return f"{rewritten} (about {label_text(focus.label)})"


# --------------------------------------------------------------------------- typed references

#: Spec §10: a declared noun refers back only right after one of these.
DETERMINERS = frozenset({"that", "this", "the"})


@dataclass(frozen=True, slots=True)
class _Reference:
    """A typed reference in the question (spec §10) and what it resolved to."""

    start: int
    end: int
    word: str  # the pronoun, or the noun phrase without its determiner
    noun: bool
    possessive: bool
    target: Focus | None = None


@dataclass(frozen=True, slots=True)
class _TypeIndex:
    pronouns: frozenset[str]
    nouns: tuple[tuple[str, ...], ...]  # longest first (§10: the longest match wins)
    types: Mapping[str, TypeWords]


_TYPE_INDEX: weakref.WeakKeyDictionary[Domain, _TypeIndex] = weakref.WeakKeyDictionary()


def _type_index(domain: Domain) -> _TypeIndex:
    cached = _TYPE_INDEX.get(domain)
    if cached is not None:
        return cached
    types = {
        t: TypeWords(tuple(p.lower() for p in w.pronouns),
                     tuple(" ".join(t.norm for t in tokenize(n)) for n in w.nouns))
        for t, w in domain.types.items()
    }
    nouns = {tuple(n.split()) for w in types.values() for n in w.nouns if n}
    built = _TypeIndex(
        frozenset(p for w in types.values() for p in w.pronouns),
        tuple(sorted(nouns, key=len, reverse=True)),
        types,
    )
    _TYPE_INDEX[domain] = built
    return built


def _find_references(text: str, index: _TypeIndex, taken: Sequence[tuple[int, int]]) -> list[_Reference]:
    """Declared pronouns and "that/this/the" + declared noun, in text order, outside ``taken``."""
    toks = pronoun_view(tokenize(text))
    refs: list[_Reference] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if _overlaps(tok.start, tok.end, taken):
            i += 1
            continue
        if tok.norm in DETERMINERS:
            noun = _noun_at(toks, i + 1, index, taken)
            if noun is not None:
                last = toks[i + len(noun)]  # a possessive "'s" stays in the text after it
                refs.append(_Reference(tok.start, last.end, " ".join(noun), True, False))
                i += len(noun) + 1
                continue
        if tok.norm in index.pronouns:
            refs.append(_Reference(tok.start, tok.end, tok.norm, False, is_possessive(toks, i)))
        i += 1
    return refs


def _noun_at(
    toks: Sequence[Token], i: int, index: _TypeIndex, taken: Sequence[tuple[int, int]]
) -> tuple[str, ...] | None:
    for noun in index.nouns:
        span = toks[i:i + len(noun)]
        if len(span) == len(noun) and tuple(t.norm for t in span) == noun and not _overlaps(
            span[0].start, span[-1].end, taken
        ):
            return noun
    return None


def _declares(index: _TypeIndex, entity: Focus, ref: _Reference, *, is_focus: bool) -> bool:
    """Spec §10: the focus takes a reference its type declares or when its type declares
    nothing; a salient entity only one its type declares."""
    words = index.types.get(entity.type)
    if words is None or words.declares_nothing:
        return is_focus
    return words.declares(ref.word, noun=ref.noun)


def _reference_key(ref: _Reference) -> tuple[str, str]:
    """(family, role): one noun is its own family; a pronoun's family is its lemma
    ("them" → they) and its role subject, object or possessive."""
    if ref.noun:
        return f"noun:{ref.word}", "subj"
    role = "poss" if ref.possessive else ("obj" if ref.word in OBJECT_PRONOUNS else "subj")
    return pronoun_family(ref.word), role


def _resolve_references(
    refs: Sequence[_Reference], state: SessionState, index: _TypeIndex
) -> list[_Reference]:
    """Spec §10: the focus if its type declares the word (or declares nothing), else the
    most recent salient entity whose type does. Readings for several references in one
    question: a reference does not take an entity another reference already took, except
    that a repeated form takes what the first took ("they ... they") and a possessive takes
    what the nearest earlier form of its pronoun took ("them ... their"); so subject and
    object forms point at different entities ("he saw him"), as English would say
    "himself" otherwise."""
    candidates = [(f, i == 0) for i, f in enumerate((state.focus, *state.salient)) if f is not None]
    claimed: dict[tuple[str, str], tuple[str, str]] = {}  # entity -> the key that took it
    taken: dict[tuple[str, str], Focus | None] = {}  # key -> what it resolved to
    last_of_family: dict[str, Focus] = {}
    out: list[_Reference] = []
    for ref in refs:
        key = _reference_key(ref)
        if key in taken:
            target = taken[key]
        elif key[1] == "poss" and key[0] in last_of_family:
            target = last_of_family[key[0]]
        else:
            target = next(
                (c for c, is_focus in candidates
                 if claimed.get((c.type, c.id), key) == key
                 and _declares(index, c, ref, is_focus=is_focus)),
                None,
            )
            if target is not None:
                claimed.setdefault((target.type, target.id), key)
        taken[key] = target
        if target is not None:
            last_of_family[key[0]] = target
        out.append(_Reference(ref.start, ref.end, ref.word, ref.noun, ref.possessive, target))
    return out


def _substitute_references(text: str, refs: Sequence[_Reference], named: set[tuple[str, str]]) -> str:
    """Every resolved reference replaced by its entity's label, unless the question names it."""
    for ref in sorted(refs, key=lambda r: r.start, reverse=True):
        t = ref.target
        if t is None or (t.type, t.id) in named:
            continue
        cut, expansion = contraction_after(text, ref.end, word=ref.word) if not ref.noun else (0, "")
        text = (text[:ref.start] + label_text(t.label, possessive=ref.possessive) + expansion
                + text[ref.end + cut:])
    return text


def _filter_note(filters: Mapping[str, str], text: str) -> str:
    missing = [f"{k} {v}" for k, v in sorted(filters.items()) if v.lower() not in text.lower()]
    return f" ({', '.join(missing)})" if missing else ""


def _replace_span(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


class RuleResolver:
    """The deterministic resolver: catalog lookups, phrase rules and a substituting rewrite."""

    def resolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        return self._build(question, state, domain, today, domain.catalog.find(question))

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        return self._build(question, state, domain, today, await domain.catalog.afind(question))

    def _build(
        self,
        question: str,
        state: SessionState,
        domain: Domain,
        today: date,
        mentions: Sequence[Mention],
    ) -> Resolution:
        cues = _scan(question, mentions, domain, today)
        refs = [t for t in reference_tokens(question) if not _overlaps(t.start, t.end, cues.taken)]
        ellipsis = elliptical_opener(question)
        cue_only = not mentions and _cue_only(question, cues)
        typed: list[_Reference] = []
        if domain.types:
            typed = _resolve_references(
                _find_references(question, _type_index(domain), cues.taken), state,
                _type_index(domain),
            )
        resolved = [r for r in typed if r.target is not None]
        first = typed[0].target if typed else None
        salient_ref = first if first is not None and first != state.focus else None
        refers_back = bool(refs) or bool(resolved) or ellipsis is not None or cue_only
        in_effect = {k: v.value for k, v in state.filters.items() if k not in cues.clears}
        in_effect.update(cues.filters)
        if domain.types:
            core = self._typed_rewrite(question, state, domain, today, cues, ellipsis, cue_only,
                                       typed, salient_ref)
        else:
            core = self._rewrite(question, state, domain, today, cues, ellipsis, cue_only)
        return Resolution(
            question=question,
            rewritten=core + (_filter_note(in_effect, core) if ellipsis else ""),
            mentions=tuple(mentions),
            filters=dict(cues.filters),
            clears=frozenset(cues.clears),
            format=cues.format,
            refers_back=refers_back,
            cue_only=cue_only,
            residual=_residual(question, cues.taken),
            core_rewrite=core,
            refers_to_salient=salient_ref,
        )

    def _typed_rewrite(
        self,
        question: str,
        state: SessionState,
        domain: Domain,
        today: date,
        cues: _Cues,
        ellipsis: tuple[str, str] | None,
        cue_only: bool,
        refs: Sequence[_Reference],
        salient_ref: Focus | None,
    ) -> str:
        """Spec §10's rewrite: every resolved reference substituted; a reference nothing
        declares stays as typed. An elliptical repeat is the previous question (§9)
        unless the question points at a salient entity, which that question was not about."""
        focus = salient_ref or state.focus
        text: str | None = None
        if ellipsis is not None and state.last_rewrite and salient_ref is None:
            text = self._repeat(state.last_rewrite, question, state, domain, today, cues)
        if text is None:
            named = {(e.type, e.id) for m in cues.mentions for e in m.candidates}
            text = _substitute_references(question, refs, named).strip()
        return self._about(text, question, focus, cues, ellipsis, cue_only,
                           any(r.target is not None for r in refs))

    def _about(
        self,
        text: str,
        question: str,
        focus: Focus | None,
        cues: _Cues,
        ellipsis: tuple[str, str] | None,
        cue_only: bool,
        typed_refs: bool = False,
    ) -> str:
        """Name the focus when the question refers back to it without its label in the text."""
        if (
            focus is not None
            and not cues.mentions
            and (ellipsis is not None or cue_only or typed_refs or reference_tokens(question))
            and label_text(focus.label).lower() not in text.lower()
        ):
            text = f"{text} (about {label_text(focus.label)})"
        return text

    def _rewrite(
        self,
        question: str,
        state: SessionState,
        domain: Domain,
        today: date,
        cues: _Cues,
        ellipsis: tuple[str, str] | None,
        cue_only: bool,
    ) -> str:
        focus = state.focus
        text = question.strip()
        repeated = None
        if ellipsis is not None and state.last_rewrite:
            repeated = self._repeat(state.last_rewrite, question, state, domain, today, cues)
        if repeated is not None:
            text = repeated
        elif focus is not None and not cue_only:
            named_focus = any(focus.id in {e.id for e in m.candidates} for m in cues.mentions)
            if not named_focus:
                text = _substitute_pronoun(text, focus.label, cues.cue_spans) or text
        return self._about(text, question, focus, cues, ellipsis, cue_only)

    def _repeat(
        self,
        previous: str,
        question: str,
        state: SessionState,
        domain: Domain,
        today: date,
        cues: _Cues,
    ) -> str | None:
        """Spec §9 elliptical repeat: the previous question with X substituted."""
        if cues.mentions:
            new = cues.mentions[0]
            prev_mentions = domain.catalog.find(previous)
            focus = state.focus
            target = next(
                (m for m in prev_mentions if focus is not None and focus.id in {e.id for e in m.candidates}),
                None,
            ) or next(
                (m for m in prev_mentions
                 if {e.type for e in m.candidates} & {e.type for e in new.candidates}),
                None,
            )
            if target is not None:
                return _replace_span(previous, target.start, target.end, new.text)
            return f"{previous.rstrip()} — {new.text}"
        changed = list(cues.filters) + sorted(cues.clears)
        if not changed:
            return None
        prev_cues = _scan(previous, domain.catalog.find(previous), domain, today)
        text = previous
        spans: list[tuple[int, int, str]] = []
        extra: list[str] = []
        for key in changed:
            new_spans = cues.filter_spans.get(key, [])
            phrase = question[new_spans[-1][0]:new_spans[-1][1]] if new_spans else ""
            old = prev_cues.filter_spans.get(key)
            if old:
                spans.append((old[-1][0], old[-1][1], phrase))
            else:
                extra.append(phrase)
        for s, e, new_text in sorted(spans, reverse=True):
            text = _replace_span(text, s, e, new_text)
        text = " ".join(text.split()).replace(" ?", "?").replace(" .", ".")
        extra = [x for x in extra if x]
        if extra:
            text = f"{text.rstrip()} ({', '.join(extra)})"
        return text


# --------------------------------------------------------------------------- LLM resolver

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
                raise TypeError("an async complete_json needs aresolve()")
            return self._validated(answer, question, state, domain, domain.catalog.find)
        except (ValueError, TypeError, KeyError) as exc:
            return self._fall_back(exc, lambda: self.fallback.resolve(question, state, domain, today))

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        try:
            answer = self.complete_json(self.prompt(question, state, domain, today), RESOLUTION_SCHEMA)
            if inspect.isawaitable(answer):
                answer = await answer
            found: dict[str, list[Mention]] = {}
            data = _as_mapping(answer)
            for name in _strings(data.get("entities"), "entities"):
                found[name] = await domain.catalog.afind(name)
            return self._validated(data, question, state, domain, lambda n: found.get(n, []))
        except (ValueError, TypeError, KeyError) as exc:
            failed = exc
        self.failures += 1
        _log.warning("structured resolver failed (%s); using the fallback resolver", failed)
        return await self.fallback.aresolve(question, state, domain, today)

    def _fall_back(self, exc: Exception, run: Callable[[], Resolution]) -> Resolution:
        self.failures += 1
        _log.warning("structured resolver failed (%s); using the fallback resolver", exc)
        return run()

    def _validated(
        self,
        answer: object,
        question: str,
        state: SessionState,
        domain: Domain,
        find: Callable[[str], Sequence[Mention]],
    ) -> Resolution:
        data = _as_mapping(answer)
        rewritten = data.get("rewritten")
        if not isinstance(rewritten, str) or not rewritten.strip():
            raise ValueError("'rewritten' must be a non-empty string")
        mentions: list[Mention] = []
        lowered = question.lower()
        for name in _strings(data.get("entities"), "entities"):
            for m in find(name):
                start = lowered.find(m.text.lower())
                # a name the question does not contain (the model's own wording) spans nothing
                end = start + len(m.text) if start >= 0 else 0
                mentions.append(Mention(max(start, 0), end, m.text, m.candidates, m.kind))
        filters: dict[str, str] = {}
        raw_filters = data.get("filters") or {}
        if not isinstance(raw_filters, Mapping):
            raise ValueError("'filters' must be an object")
        for key, value in raw_filters.items():
            spec = domain.filters.get(str(key))
            ok = isinstance(value, str) and (
                (isinstance(spec, PeriodFilter) and is_period_value(value))
                or (isinstance(spec, VocabFilter) and spec.accepts(value))
            )
            if not ok:
                raise ValueError(f"filter {key}={value!r} is not valid for this domain")
            filters[str(key)] = str(value)
        clears = frozenset(k for k in _strings(data.get("clear_filters"), "clear_filters")
                           if k in domain.filters)
        fmt = data.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise ValueError(f"format {fmt!r} is not one of {FORMATS}")
        refers_back = data.get("refers_back")
        if not isinstance(refers_back, bool):
            raise ValueError("'refers_back' must be a boolean")
        salient_id = data.get("salient")  # missing = null: answers from before §10 stay valid
        if salient_id is not None and not isinstance(salient_id, str):
            raise ValueError("'salient' must be a string or null")
        referred = None
        if salient_id is not None and domain.salient_size:
            referred = next((f for f in state.salient if f.id == salient_id), None)
            if referred is None:
                raise ValueError(f"salient {salient_id!r} is not an entity in 'Also in this conversation'")
        taken = [(m.start, m.end) for m in mentions]
        text = rewritten.strip()[:1000]
        return Resolution(
            question=question,
            rewritten=text,
            mentions=tuple(sorted(mentions, key=lambda m: m.start)),
            filters=filters,
            clears=clears,
            format=fmt,
            refers_back=refers_back,
            residual=_residual(question, taken),
            core_rewrite=text,
            refers_to_salient=referred,
        )


def _as_mapping(answer: object) -> Mapping[str, object]:
    if isinstance(answer, str):
        answer = json.loads(answer)
    if hasattr(answer, "model_dump"):
        answer = answer.model_dump()
    if not isinstance(answer, Mapping):
        raise ValueError(f"expected a JSON object, got {type(answer).__name__}")
    return answer


def _strings(value: object, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'{name}' must be a list of strings")
    return [v for v in value if v.strip()]
