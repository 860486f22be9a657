"""Word-level text handling shared by the catalog, the resolver and the topic detector.

Everything here is domain-free and deterministic: tokens with character spans (so a
rewrite can substitute a span in the user's own text), NLTK's English stopwords
(vendored), a light suffix stemmer (spec §9: "reboots" matches "rebooted"), and the
reference words of spec §9 (pronouns, one-anaphora, elliptical openers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources

_WORD = re.compile(r"[^\W_]+(?:[-'’.&][^\W_]+)*|&", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Token:
    """A word of the input: its normalised form and its span in the original text."""

    norm: str
    start: int
    end: int


def tokenize(text: str) -> list[Token]:
    """Lower-cased word tokens with spans; possessive ``'s`` and a trailing ``'`` are dropped.

    ``"Northline's"`` → ``northline``; ``"O-4478"`` stays one token; ``"Co."`` → ``co``.

    One question is tokenized by the catalog, the cue scan, the reference finder and
    the rewrite within a turn: the last texts' tokens are kept (tokens are immutable;
    each caller gets its own list).
    """
    if len(text) > _CACHED_TEXT_CHARS:
        return list(_tokenize(text))
    return list(_cached_tokens(text))


_CACHED_TEXT_CHARS = 4000  # a question's limit (``MAX_QUESTION_CHARS``)


@lru_cache(maxsize=64)
def _cached_tokens(text: str) -> tuple[Token, ...]:
    return _tokenize(text)


def _tokenize(text: str) -> tuple[Token, ...]:
    tokens: list[Token] = []
    for m in _WORD.finditer(text):
        raw = m.group(0)
        if raw.lower().endswith(("'s", "’s")) and len(raw) > 2:
            raw = raw[:-2]
        raw = raw.rstrip(".")
        if raw:
            norm = raw.lower().replace("’", "'")
            tokens.append(Token(norm, m.start(), m.start() + len(raw)))
    return tuple(tokens)


def words(text: str) -> list[str]:
    """Normalised tokens without spans."""
    return [t.norm for t in tokenize(text)]


@cache
def stopwords() -> frozenset[str]:
    """NLTK's English stopword list (vendored in ``convmem/data/stopwords_en.txt``)."""
    raw = resources.files("convmem").joinpath("data/stopwords_en.txt").read_text("utf-8")
    return frozenset(
        w for line in raw.splitlines() if not line.startswith("#") for w in line.split()
    )


def stem(word: str) -> str:
    """Strip plural, -ed and -ing endings (spec §9); deliberately tiny and predictable."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith("ied"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith(("sses", "shes", "ches", "xes", "zes")):
        return w[:-2]
    if len(w) > 5 and w.endswith("ing"):
        return _undouble(w[:-3])
    if len(w) > 4 and w.endswith("ed"):
        return _undouble(w[:-2])
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def _undouble(w: str) -> str:
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
        return w[:-1]
    return w


def _parts(token: str) -> list[str]:
    # "what's" / "don't" → ["what", "s"] / ["don", "t"]: contractions are stopwords.
    return [p for p in re.split(r"['’]", token) if p]


def content_words(text: str, *, exclude: Iterable[tuple[int, int]] = ()) -> set[str]:
    """Stemmed lower-case words that are not stopwords (spec §9 "content words").

    ``exclude`` lists character spans (entity names, period phrases, filter values,
    format cues) whose words are not content words.
    """
    spans = list(exclude)
    out: set[str] = set()
    stops = stopwords()
    for tok in tokenize(text):
        if any(s <= tok.start < e for s, e in spans):
            continue
        for part in _parts(tok.norm):
            if part in stops or not any(c.isalpha() for c in part):
                continue
            out.add(stem(part))
    return out


#: The most terms a search built from a question carries (its first content words).
MAX_SEARCH_TERMS = 24

_ALNUM = re.compile(r"[^\W_]+")


def search_terms(text: str) -> list[tuple[str, bool]]:
    """``text``'s content words as full-text search terms, to be OR-ed (recall).

    Stopwords are dropped as for ``content_words``; numbers count (an order number is
    content). ``(stem, True)`` matches every indexed word the stem begins ("totals"
    finds "total", "rebooted" finds "reboots"); a word its stem is not a prefix of
    ("companies") comes as itself too, ``(word, False)``. Terms are letters and digits
    only (what both indexes' tokenizers keep), so they need no escaping; at most
    ``MAX_SEARCH_TERMS``, in the order the question has them.
    """
    stops = stopwords()
    out: dict[tuple[str, bool], None] = {}
    for tok in tokenize(text):
        for part in _parts(tok.norm):
            for piece in _ALNUM.findall(part):
                if piece in stops or len(piece) < 2:
                    continue
                root = stem(piece)
                if len(root) < 3 or piece.isdigit():
                    out[(piece, False)] = None
                    continue
                if not piece.startswith(root):
                    out[(piece, False)] = None
                out[(root, True)] = None
    return list(out)[:MAX_SEARCH_TERMS]


def overlap(question: str, recent: Sequence[str], *, exclude: Iterable[tuple[int, int]] = ()) -> float:
    """|Q ∩ R| / |Q| over content words (spec §9); 0 when Q has no content words."""
    q = content_words(question, exclude=exclude)
    if not q:
        return 0.0
    r: set[str] = set()
    for text in recent:
        r |= content_words(text)
    return len(q & r) / len(q)


# --------------------------------------------------------------------------- references

#: Spec §9: third-person and demonstrative words that can point at an entity.
PRONOUNS = frozenset(
    ["it", "its", "itself", "they", "them", "their", "theirs", "themselves", "he", "him", "his", "himself", "she", "her", "hers", "herself", "this", "that", "these", "those", "there"]
)
#: Pronouns a rewrite may replace by the focus label (demonstratives are left in place).
PERSONAL_PRONOUNS = frozenset(
    ["it", "its", "they", "them", "their", "theirs", "he", "him", "his", "she", "her", "hers"]
)
POSSESSIVE_PRONOUNS = frozenset({"its", "their", "theirs", "his", "hers"})
#: Object forms (a possessive "her" is told apart by ``is_possessive``).
OBJECT_PRONOUNS = frozenset({"him", "her", "them"})
#: Forms of one pronoun (spec §10's readings for several references in one question).
_FAMILIES = {
    "they": ("they", "them", "their", "theirs", "themselves"),
    "it": ("it", "its", "itself"),
    "he": ("he", "him", "his", "himself"),
    "she": ("she", "her", "hers", "herself"),
}
_FAMILY_OF = {form: head for head, forms in _FAMILIES.items() for form in forms}


def pronoun_family(word: str) -> str:
    """The family a pronoun belongs to (``"them"`` → ``"they"``); any other word is its own."""
    return _FAMILY_OF.get(word, word)


#: Words that follow an object "her" but never a possessive one ("see her every month",
#: "call her back", "give her everything"): quantifiers, adverbs of time and manner.
_NOT_AFTER_POSSESSIVE = frozenset({
    "every", "each", "again", "back", "today", "tomorrow", "yesterday", "tonight", "now",
    "later", "soon", "yet", "already", "still", "too", "also", "ever", "please", "directly",
    "personally", "right", "anymore", "regularly", "often", "weekly", "monthly", "daily",
    "last", "next", "first", "something", "anything", "everything", "nothing", "either",
    "instead", "quickly", "asap", "sometime", "everyday",
})


def is_possessive(tokens: Sequence[Token], i: int) -> bool:
    """Is the pronoun at ``tokens[i]`` possessive? "her" is when a word follows that could
    be what she owns: not a stopword, and not a quantifier or adverb."""
    word = tokens[i].norm
    if word == "her":
        nxt = tokens[i + 1].norm if i + 1 < len(tokens) else None
        return nxt is not None and nxt not in stopwords() and nxt not in _NOT_AFTER_POSSESSIVE
    return word in POSSESSIVE_PRONOUNS

_ELLIPSIS = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|hmm+|so|right|well|fine|great|thanks|cool|also|now|then)\b[\s,.!—–-]*)*"
    r"(?P<opener>and(?:\s+(?:what|how)\s+about|\s+the\s+same\s+for|\s+for|\s+also)?"
    r"|what\s+about|how\s+about|same\s+(?:thing\s+|question\s+)?(?:for|with)"
    r"|the\s+same\s+for|compare(?:d)?\s+(?:that\s+|it\s+|this\s+)?(?:with|to|against)"
    r"|versus|vs\.?|same)\b[\s,:]*",
    re.IGNORECASE,
)


def elliptical_opener(text: str) -> tuple[str, str] | None:
    """``("and", "Pinecrest Clinics?")`` for an elliptical message, else ``None``.

    Spec §8–9: "And X?", "What about X?", "How about X?", "Same for X", "Compare with X".
    A message that is only "Same ..." refers back too ("Same count across all regions").
    """
    m = _ELLIPSIS.match(text)
    if not m:
        return None
    return m.group("opener").lower(), text[m.end():].strip()


_CONTRACTIONS = {"re": "are", "ve": "have", "ll": "will", "d": "would"}
_CONTRACTION = re.compile(r"['’](re|ve|ll|d)\b", re.IGNORECASE)


def pronoun_view(tokens: Sequence[Token]) -> list[Token]:
    """``tokens`` with a contracted pronoun cut to the pronoun ("they're" → they, its span
    the four letters): a §9 pronoun still refers back when contracted."""
    out: list[Token] = []
    for t in tokens:
        head, sep, tail = t.norm.partition("'")
        if sep and tail in _CONTRACTIONS and head in PRONOUNS:
            out.append(Token(head, t.start, t.start + len(head)))
        else:
            out.append(t)
    return out


_IS_OR_HAS = re.compile(r"['’]s(?=\s+(been|got|gone|had)\b)?\b", re.IGNORECASE)


def contraction_after(text: str, end: int, *, word: str = "") -> tuple[int, str]:
    """``(length, expansion)`` of the contraction right after a pronoun ending at ``end``
    ("'re" → " are"; "'s" after it/he/she → " is", or " has" before "been"), so a
    substituted label reads "Brightwater Farms are"; ``(0, "")`` when there is none."""
    m = _CONTRACTION.match(text, end)
    if m:
        return len(m.group(0)), " " + _CONTRACTIONS[m.group(1).lower()]
    if word in ("it", "he", "she"):
        s = _IS_OR_HAS.match(text, end)
        if s:
            return 2, " has" if s.group(1) else " is"
    return 0, ""


def reference_tokens(text: str) -> list[Token]:
    """Tokens that refer back: §9 pronouns and one-anaphora ("the Toronto one", "ones")."""
    toks = pronoun_view(tokenize(text))
    stops = stopwords()
    out: list[Token] = []
    for i, tok in enumerate(toks):
        if tok.norm in PRONOUNS or tok.norm == "ones":
            out.append(tok)
        elif tok.norm == "one" and i > 0:
            nxt = toks[i + 1].norm if i + 1 < len(toks) else None
            if nxt is None or nxt in stops:
                out.append(tok)
    return out


def has_reference(text: str) -> bool:
    return bool(reference_tokens(text))


def squash(text: str) -> str:
    """Lower-case with single spaces, for phrase matching."""
    return " ".join(text.lower().replace("’", "'").split())
