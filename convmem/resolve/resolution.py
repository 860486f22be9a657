"""What a resolver returns, what a resolver is, and how a label enters a rewrite.

The records every other module reads — the policy, the façade, the adapters' LLM
resolvers — live here, apart from the rules and the LLM prompt, so reading a
``Resolution`` imports neither. ``label_text`` is the one place an entity's label
enters a rewrite (the rule resolver's substitutions, the policy's clarification
answers, the façade's "(about …)" note), so every path bounds it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol, runtime_checkable

from convmem.catalog import Mention
from convmem.domain import Domain
from convmem.render import inert_label
from convmem.state import Focus, Format, SessionState

__all__ = ["Resolution", "Resolver", "carry_focus", "label_text"]


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


def label_text(label: str, *, possessive: bool = False) -> str:
    """How an entity's label enters a rewrite: the one place every substitution goes
    through (a pronoun, a typed reference, the "(about …)" note, a clarification's
    chosen option in ``policy.answer_rewrite``). The label did not come from the user:
    inert and bounded like the block's (``render.inert_label``)."""
    text = inert_label(label)
    return f"{text}'s" if possessive else text


def carry_focus(rewritten: str, focus: Focus | None) -> str:
    """The rewrite of a question that named nothing and kept ``focus`` (by any rule,
    overlap included), naming the focus when it does not already: a follow-up the
    model reads alone must still say what it is about ("What was the total?" →
    "What was the total? (about Brightwater Farms)")."""
    if focus is None or label_text(focus.label).lower() in rewritten.lower():
        return rewritten
    return f"{rewritten} (about {label_text(focus.label)})"
