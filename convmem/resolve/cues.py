"""The domain terms in a text: filter values, clears and format cues, with their spans.

``scan`` finds every phrase the domain declares (vocabulary values and aliases,
periods, clear phrases, format cues) outside the entity names the catalog found; the
last one stated wins (spec §9). ``cue_only`` says whether nothing but such terms and
request words remains (a filter- or format-only message refers back), and
``residual`` is what is left for the topic detector (§9 "content words"). Phrase
patterns are compiled once per domain.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date

from convmem.catalog import Mention
from convmem.domain import Domain, PeriodFilter, VocabFilter
from convmem.periods import find_periods
from convmem.state import FORMATS, Format
from convmem.text import stopwords, tokenize

__all__ = ["TOPIC_FREE_WORDS", "Cues", "is_cue_only", "overlaps", "residual", "scan"]

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

# --------------------------------------------------------------------------- phrases


@dataclass(frozen=True, slots=True)
class _Phrase:
    key: str  # filter key, or format name
    value: str | None  # normalised filter value; None for a clear phrase
    pattern: re.Pattern[str]
    #: The phrase's longest word, lower-cased, when the phrase is ASCII: an ASCII text
    #: without it cannot match (``_present``), so the pattern is not run.
    needle: str | None = None


def _phrase(key: str, value: str | None, phrase: str) -> _Phrase:
    body = r"\s+".join(re.escape(w) for w in phrase.split())
    pattern = re.compile(rf"(?<![\w-]){body}(?![\w-])", re.IGNORECASE)
    words = phrase.lower().split() if phrase.isascii() else []
    return _Phrase(key, value, pattern, max(words, key=len) if words else None)


def _present(phrases: tuple[_Phrase, ...], lowered: str | None) -> Iterable[_Phrase]:
    """The phrases that may occur in the text ``lowered`` is the lower case of, in order.

    Only ASCII text is filtered (``lowered`` is None otherwise): there case-insensitive
    matching is ASCII case folding, so a match needs the phrase's ``needle`` in the
    lower-cased text. Most phrases are absent from any one question."""
    if lowered is None:
        return phrases
    return [p for p in phrases if p.needle is None or p.needle in lowered]


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
                    vocab.append(_phrase(key, value, alias))
    clears = [
        _phrase(key, None, p) for key, ps in domain.clear_phrases.items() for p in ps
    ]
    formats = [
        _phrase(fmt, fmt, p) for fmt, ps in domain.formats.items() for p in ps
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


def overlaps(start: int, end: int, taken: Sequence[tuple[int, int]]) -> bool:
    """Whether ``[start, end)`` shares a character with any span in ``taken``."""
    return any(s < end and start < e for s, e in taken)


# --------------------------------------------------------------------------- analysis


@dataclass
class Cues:
    """Every domain term found in a text, with spans (mutable while scanning)."""

    mentions: list[Mention]
    taken: list[tuple[int, int]]
    filters: dict[str, str] = field(default_factory=dict)
    clears: set[str] = field(default_factory=set)
    format: Format | None = None
    filter_spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    cue_spans: list[tuple[int, int]] = field(default_factory=list)


def scan(text: str, mentions: Sequence[Mention], domain: Domain, today: date) -> Cues:
    """Filters, clears and format cues outside entity names; the last one stated wins."""
    ph = _phrases(domain)
    cues = Cues(list(mentions), [(m.start, m.end) for m in mentions])
    events: list[tuple[int, str, str | None]] = []  # (position, key, value or None = clear)
    lowered = text.lower() if text.isascii() else None

    def claim(start: int, end: int) -> bool:
        if overlaps(start, end, cues.taken):
            return False
        cues.taken.append((start, end))
        cues.cue_spans.append((start, end))
        return True

    for phrase in _present(ph.clears, lowered):
        for m in phrase.pattern.finditer(text):
            if claim(m.start(), m.end()):
                events.append((m.start(), phrase.key, None))
                cues.filter_spans.setdefault(phrase.key, []).append((m.start(), m.end()))
    fmt_hits: list[tuple[int, Format]] = []
    for phrase in _present(ph.formats, lowered):
        for m in phrase.pattern.finditer(text):
            if claim(m.start(), m.end()) and phrase.value in FORMATS:
                fmt_hits.append((m.start(), phrase.key))  # type: ignore[arg-type]
    if ph.period_key is not None:
        for p in find_periods(text, today):
            if claim(p.start, p.end):
                events.append((p.start, ph.period_key, p.value))
                cues.filter_spans.setdefault(ph.period_key, []).append((p.start, p.end))
    for phrase in _present(ph.vocab, lowered):
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


def is_cue_only(text: str, cues: Cues) -> bool:
    """Spec §9: only stopwords and topic-free request words remain once cues are removed."""
    if not (cues.filters or cues.clears or cues.format):
        return False
    taken = list(cues.taken) + [(m.start(), m.end()) for m in _GROUPING.finditer(text)]
    stops = stopwords()
    for tok in tokenize(text):
        if overlaps(tok.start, tok.end, taken):
            continue
        parts = [p for p in re.split(r"['’]", tok.norm) if p]
        if not all(p in stops or p in TOPIC_FREE_WORDS for p in parts):
            return False
    return True


def residual(text: str, taken: Sequence[tuple[int, int]]) -> str:
    """``text`` with every span in ``taken`` blanked out, whitespace collapsed."""
    out = list(text)
    for s, e in taken:
        for i in range(max(s, 0), min(e, len(out))):
            out[i] = " "
    return " ".join("".join(out).split())


