"""Did the conversation move on? The default topic-change detector.

``topic_changed(question, recent_questions)`` is True when the question starts a new
topic. A question that refers back (spec §9: a third-person or demonstrative pronoun,
one-anaphora, an elliptical opener) never does. Otherwise the contract's overlap rule
decides: content-word overlap with the last three questions below the threshold
(0.12, configurable) is a new topic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from convmem.text import elliptical_opener, has_reference, overlap

DEFAULT_OVERLAP_THRESHOLD = 0.12


class TopicDetector(Protocol):
    """Pluggable fallback for the policy: True = the question starts a new topic."""

    def __call__(self, question: str, recent_questions: Sequence[str]) -> bool: ...


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
    return overlap(question, recent_questions[-3:]) < threshold
