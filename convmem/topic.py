"""Did the conversation move on? The default topic-change detector.

``topic_changed(question, recent_questions)`` is True when the question starts a new
topic. A question that refers back (spec §9: a third-person or demonstrative pronoun,
one-anaphora, an elliptical opener) never does, and one that shares no content word
with the last three questions always does (spec §9's overlap rule, threshold 0.12).
The contract's rule alone carries too many shifts whose overlap is only a *weak* word
("who directed the movie the lion king?" after "who directed the movie inception?"),
so a shared word keeps the topic only when it *anchors* the question. A word's rarity
is read from the cl100k_base vocabulary the package already ships: a lower-case word
that is one low-rank token (" name", " first") is common, one that is no single token
or a high-rank one (" normandy", " pompeo") is rare — questions are mostly lower-case,
so rarity stands in for "a named thing". The detector drops a question with overlap
only when it names something rare that the conversation has not seen *and* no shared
word anchors it. A shared word anchors unless it is the tail of a new name ("harald
bluetooth", "yale university": a new rare word right before it); a rare shared word
anchors then; a mid-frequency one ("song", "movie"), or a common one used as a definite
description ("the country"), anchors only when the question neither introduces a
multi-word new name ("celine dion") nor asks what or who something is ("what is the
capital of australia?"). Everything else keeps the §8–9 outcome, so real lexical
overlap still keeps the focus.
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
#: cl100k_base rank below which a lower-case word is common ("first", "many", "people").
COMMON_RANK = 2_000
#: Rank from which a lower-case word is rare; a word that is no single token is rare too.
RARE_RANK = 40_000

_CONTRACTION = re.compile(r"['’]")  # as content_words: "what's" → what, s
_DEFINITIONAL = re.compile(r"\s*(?:what|who)(?:\s+(?:is|was|are|were)|['’]s)\b", re.IGNORECASE)


class TopicDetector(Protocol):
    """Pluggable fallback for the policy: True = the question starts a new topic."""

    def __call__(self, question: str, recent_questions: Sequence[str]) -> bool: ...


def word_rank(word: str) -> int:
    """cl100k_base rank of ``" word"``; words that are no single token rank past the vocabulary."""
    try:
        return encoding().encode_single_token(" " + word.lower())
    except KeyError:
        return 1 << 30


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
                 common_rank: int = COMMON_RANK, rare_rank: int = RARE_RANK) -> bool:
    """True when the question shares words with ``recent_questions`` but none anchors it.

    Only a question that introduces a rare word new to the conversation can have weak
    overlap; see the module docstring for what anchors.
    """
    seen: set[str] = set()
    for text in recent_questions:
        seen |= content_words(text)
    words = _words(question)
    content = [i for i, w in enumerate(words) if w.content]
    shared = [i for i in content if stem(words[i].text) in seen]
    new = [i for i in content if stem(words[i].text) not in seen]
    if not shared:
        return False
    rank = {i: word_rank(words[i].text) for i in content}
    rare_new = {i for i in new if rank[i] >= rare_rank}
    if not rare_new:
        return False
    # a multi-word new name: two adjacent new, not-common words, one of them rare
    uncommon_new = {i for i in new if rank[i] >= common_rank}
    introduces = any(
        (i + 1) in uncommon_new and (i in rare_new or (i + 1) in rare_new) for i in uncommon_new
    ) or _DEFINITIONAL.match(question) is not None
    for i in shared:
        if (i - 1) in rare_new:  # the tail of a new name: "harald bluetooth"
            continue
        if rank[i] >= rare_rank:
            return False
        if introduces:
            continue
        if rank[i] >= common_rank or (i > 0 and words[i - 1].text == "the"):
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
