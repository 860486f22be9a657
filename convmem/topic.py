"""Did the conversation move on? The default topic-change detector.

``topic_changed(question, recent_questions)`` is True when the question starts a new
topic. A question that refers back (spec §9: a third-person or demonstrative pronoun,
one-anaphora, an elliptical opener) never does, and one whose content-word overlap with
the last three questions is below the threshold (spec §9, 0.12) always does. The
contract's rule alone carries shifts whose overlap is only a *weak* word ("who was the
first king of norway?" after "who was the first president?"), so a question that
overlaps is still new when it names something rare the conversation has not seen and
none of its shared words anchors it. Rarity is read from the cl100k_base vocabulary the
package already ships (nothing is downloaded): a lower-case word that is one low-rank
token is common, one of rank ``RARE_RANK`` or more, or no single token at all
(" pompeo"), is rare — open-domain questions are mostly lower-case, so rarity stands in
for "a named thing". A shared word does not anchor when it is a question-template word
(``GENERIC_WORDS``: "first", "name", "many"), the tail of a new name (right after a new
word that is no token: "harald bluetooth", "yale university"), or a not-rare word beside
a new name of two words that are no token ("songs" in "what other songs has celine dion
recorded?"). Any other shared word keeps the topic, as the labelled sessions require:
keeping on real lexical overlap stays the default; only weak overlap becomes a drop.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from convmem.text import (
    content_words,
    elliptical_opener,
    has_reference,
    overlap,
    stem,
    stopwords,
    tokenize,
)
from convmem.tokens import encoding

DEFAULT_OVERLAP_THRESHOLD = 0.12
#: Question-template words: shared, they say nothing about the topic ("who was the
#: first ...", "how many people ..."). Domain nouns are deliberately absent: a labelled
#: session keeps its focus on any shared domain word.
GENERIC_WORDS = frozenset({
    "many", "much", "first", "name", "names", "called", "known", "famous", "people", "person",
    "year", "years", "long", "old", "big", "main", "best", "most", "other", "others",
    "different", "kind", "kinds", "mean", "means", "meaning", "part", "get", "got", "make",
    "made", "take", "took", "come", "came", "go", "went", "use", "used", "become", "became",
    "happen", "happened", "thing", "things", "way", "ways", "one", "ones", "also",
})
#: Rank from which a lower-case word is rare; a word that is no single token is rare too.
RARE_RANK = 40_000

_NO_TOKEN = 1 << 30
_CONTRACTION = re.compile(r"['’]")  # as content_words: "what's" → what, s
_GENERIC_STEMS = frozenset(stem(w) for w in GENERIC_WORDS)


class TopicDetector(Protocol):
    """Pluggable fallback for the policy: True = the question starts a new topic."""

    def __call__(self, question: str, recent_questions: Sequence[str]) -> bool: ...


def word_rank(word: str) -> int:
    """cl100k_base rank of ``" word"``; words that are no single token rank past the vocabulary."""
    try:
        return encoding().encode_single_token(" " + word.lower())
    except KeyError:  # not one token
        return _NO_TOKEN


@dataclass(frozen=True, slots=True)
class _Word:
    text: str
    content: bool


def _words(text: str) -> list[_Word]:
    """Every word of ``text`` in order (contractions split), flagged content or not."""
    stops = stopwords()
    return [
        _Word(part, part not in stops and any(c.isalpha() for c in part))
        for tok in tokenize(text)
        for part in _CONTRACTION.split(tok.norm)
        if part
    ]


def weak_overlap(question: str, recent_questions: Sequence[str], *,
                 rare_rank: int = RARE_RANK) -> bool:
    """True when the question shares words with ``recent_questions`` but none anchors it.

    Only a question that introduces a rare word new to the conversation can have weak
    overlap; a shared word anchors unless it is a question-template word
    (``GENERIC_WORDS``) or the tail of a new name (see the module docstring).
    """
    seen: set[str] = set()
    for text in recent_questions:
        seen |= content_words(text)
    words = _words(question)
    content = [i for i, w in enumerate(words) if w.content]
    shared = [i for i in content if stem(words[i].text) in seen]
    if not shared:
        return False
    rare_new = {i for i in content if i not in shared and word_rank(words[i].text) >= rare_rank}
    if not rare_new:
        return False
    unseen_new = {i for i in rare_new if word_rank(words[i].text) >= _NO_TOKEN}
    # a new multi-word name: two adjacent new words that are no token ("celine dion");
    # single-token jargon pairs ("outage escalations") do not count
    names_new = any(i + 1 in unseen_new for i in unseen_new)
    for i in shared:
        if stem(words[i].text) in _GENERIC_STEMS or (i - 1) in unseen_new:  # "harald bluetooth"
            continue
        if names_new and word_rank(words[i].text) < rare_rank:  # "songs" beside "celine dion"
            continue
        return False
    return True


def topic_changed(
    question: str,
    recent_questions: Sequence[str],
    *,
    threshold: float = DEFAULT_OVERLAP_THRESHOLD,
) -> bool:
    """True when ``question`` starts a new topic relative to ``recent_questions``."""
    if has_reference(question) or elliptical_opener(question) is not None:
        return False
    if not recent_questions:
        return True
    recent = recent_questions[-3:]
    if overlap(question, recent) < threshold:
        return True
    return weak_overlap(question, recent)
