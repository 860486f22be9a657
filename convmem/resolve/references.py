"""Typed references (spec §10): which entity "she", "them" or "that invoice" points at.

In a domain that declares ``types``, a declared pronoun, or "that/this/the" + a
declared noun, resolves to the focus when the focus's type declares the word (or
declares nothing), else to the most recent ``salient`` entity whose type does. Several
references in one question take different entities unless they are forms of one
pronoun; every resolved reference is substituted through ``label_text``.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from convmem.domain import Domain, TypeWords
from convmem.resolve.cues import overlaps
from convmem.resolve.resolution import label_text
from convmem.state import Focus, SessionState
from convmem.text import (
    OBJECT_PRONOUNS,
    Token,
    contraction_after,
    is_possessive,
    pronoun_family,
    pronoun_view,
    tokenize,
)

__all__ = [
    "DETERMINERS",
    "Reference",
    "TypeIndex",
    "find_references",
    "resolve_references",
    "substitute_references",
    "type_index",
]

#: Spec §10: a declared noun refers back only right after one of these.
DETERMINERS = frozenset({"that", "this", "the"})


@dataclass(frozen=True, slots=True)
class Reference:
    """A typed reference in the question (spec §10) and what it resolved to."""

    start: int
    end: int
    word: str  # the pronoun, or the noun phrase without its determiner
    noun: bool
    possessive: bool
    target: Focus | None = None


@dataclass(frozen=True, slots=True)
class TypeIndex:
    pronouns: frozenset[str]
    nouns: tuple[tuple[str, ...], ...]  # longest first (§10: the longest match wins)
    types: Mapping[str, TypeWords]


_TYPE_INDEX: weakref.WeakKeyDictionary[Domain, TypeIndex] = weakref.WeakKeyDictionary()


def type_index(domain: Domain) -> TypeIndex:
    cached = _TYPE_INDEX.get(domain)
    if cached is not None:
        return cached
    types = {
        t: TypeWords(tuple(p.lower() for p in w.pronouns),
                     tuple(" ".join(t.norm for t in tokenize(n)) for n in w.nouns))
        for t, w in domain.types.items()
    }
    nouns = {tuple(n.split()) for w in types.values() for n in w.nouns if n}
    built = TypeIndex(
        frozenset(p for w in types.values() for p in w.pronouns),
        tuple(sorted(nouns, key=len, reverse=True)),
        types,
    )
    _TYPE_INDEX[domain] = built
    return built


def find_references(text: str, index: TypeIndex, taken: Sequence[tuple[int, int]]) -> list[Reference]:
    """Declared pronouns and "that/this/the" + declared noun, in text order, outside ``taken``."""
    toks = pronoun_view(tokenize(text))
    refs: list[Reference] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if overlaps(tok.start, tok.end, taken):
            i += 1
            continue
        if tok.norm in DETERMINERS:
            noun = _noun_at(toks, i + 1, index, taken)
            if noun is not None:
                last = toks[i + len(noun)]  # a possessive "'s" stays in the text after it
                refs.append(Reference(tok.start, last.end, " ".join(noun), True, False))
                i += len(noun) + 1
                continue
        if tok.norm in index.pronouns:
            refs.append(Reference(tok.start, tok.end, tok.norm, False, is_possessive(toks, i)))
        i += 1
    return refs


def _noun_at(
    toks: Sequence[Token], i: int, index: TypeIndex, taken: Sequence[tuple[int, int]]
) -> tuple[str, ...] | None:
    for noun in index.nouns:
        span = toks[i:i + len(noun)]
        if len(span) == len(noun) and tuple(t.norm for t in span) == noun and not overlaps(
            span[0].start, span[-1].end, taken
        ):
            return noun
    return None


def _declares(index: TypeIndex, entity: Focus, ref: Reference, *, is_focus: bool) -> bool:
    """Spec §10: the focus takes a reference its type declares or when its type declares
    nothing; a salient entity only one its type declares."""
    words = index.types.get(entity.type)
    if words is None or words.declares_nothing:
        return is_focus
    return words.declares(ref.word, noun=ref.noun)


def _reference_key(ref: Reference) -> tuple[str, str]:
    """(family, role): one noun is its own family; a pronoun's family is its lemma
    ("them" → they) and its role subject, object or possessive."""
    if ref.noun:
        return f"noun:{ref.word}", "subj"
    role = "poss" if ref.possessive else ("obj" if ref.word in OBJECT_PRONOUNS else "subj")
    return pronoun_family(ref.word), role


def resolve_references(
    refs: Sequence[Reference], state: SessionState, index: TypeIndex
) -> list[Reference]:
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
    out: list[Reference] = []
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
        out.append(Reference(ref.start, ref.end, ref.word, ref.noun, ref.possessive, target))
    return out


def substitute_references(text: str, refs: Sequence[Reference], named: set[tuple[str, str]]) -> str:
    """Every resolved reference replaced by its entity's label, unless the question names it."""
    for ref in sorted(refs, key=lambda r: r.start, reverse=True):
        t = ref.target
        if t is None or (t.type, t.id) in named:
            continue
        cut, expansion = contraction_after(text, ref.end, word=ref.word) if not ref.noun else (0, "")
        text = (text[:ref.start] + label_text(t.label, possessive=ref.possessive) + expansion
                + text[ref.end + cut:])
    return text

