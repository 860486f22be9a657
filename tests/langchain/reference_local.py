"""A local stand-in for the core's reference session (``convmem.reference``).

The bench spec: a fixed 4,000-token system prompt plus retrieved context per turn,
user questions of 17–27 tokens, scripted 2,000-token answers, 50 turns, seed 0,
cl100k_base tokens. The core's generator had not landed on this branch when the
adapter tests were written; this one follows the same spec and the same names
(``reference_domain``, ``reference_session``, ``ReferenceTurn``) so the tests and
cookbook (c) switch to ``convmem.reference`` by changing one import.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

from convmem.domain import Domain, Entity, PeriodFilter, ToolFocusRule, ToolRule, VocabFilter
from convmem.tokens import count_tokens, encoding

SYSTEM_TOKENS = 4000
ANSWER_TOKENS = 2000
TURNS = 50
SEED = 0

_WORDS = [
    "record", "status", "revenue", "margin", "forecast", "quarter", "pipeline", "ledger",
    "invoice", "shipment", "account", "review", "region", "backlog", "target", "variance",
    "summary", "contract", "renewal", "balance", "schedule",
]
_TEMPLATES = [
    "Can you summarise where {name} stands on revenue and margin for {period}, against plan?",
    "What changed in their pipeline since the last review, and which items look most at risk now?",
    "And what about {name} for {period}, especially the {stage} items finance keeps asking about?",
    "Which of those items are still {stage}, and who on the team is responsible for moving them?",
    "Give me the short version of their backlog and the top three risks for the forecast.",
    "How does their invoice balance compare with target, and is anything overdue to chase?",
]


@dataclass(frozen=True)
class ReferenceTurn:
    turn: int
    question: str
    system: str  # system prompt + this turn's retrieved context: exactly SYSTEM_TOKENS
    answer: str  # exactly ANSWER_TOKENS
    tool: tuple[str, dict[str, str], str] | None = None  # name, args, JSON result


def _exact(text: str, tokens: int) -> str:
    enc = encoding()
    ids = enc.encode(text, disallowed_special=())
    while len(ids) < tokens + 16:
        ids = ids + ids
    for cut in range(tokens, tokens - 8, -1):
        candidate = enc.decode(ids[:cut])
        if count_tokens(candidate) == tokens:
            return candidate
    raise AssertionError(f"cannot cut text to exactly {tokens} tokens")


def reference_domain(seed: int = SEED) -> Domain:
    rng = random.Random(seed)
    syllables = ["lor", "ven", "tak", "mira", "sol", "quen", "dar", "eli", "bro", "tess"]

    def name() -> str:
        return "".join(rng.choice(syllables) for _ in range(2)).capitalize()

    projects = [Entity("project", f"PR-{100 + i}", f"{name()} {name()}") for i in range(12)]
    return Domain(
        name="reference",
        entities=tuple(projects),
        filters={
            "period": PeriodFilter(),
            "stage": VocabFilter({"draft": ("draft", "drafting"), "live": ("live", "launched")}),
        },
        tools={"get_project": ToolRule("get_project", ToolFocusRule("project", "id", "name"))},
    )


def reference_session(seed: int = SEED, turns: int = TURNS) -> Iterator[ReferenceTurn]:
    rng = random.Random(seed)
    projects = reference_domain(seed).entities
    for t in range(1, turns + 1):
        while True:
            entity = rng.choice(projects)
            question = rng.choice(_TEMPLATES).format(
                name=entity.label,
                period=rng.choice(["last quarter", "this quarter", "Q2", "October"]),
                stage=rng.choice(["draft", "live"]),
            )
            if 17 <= count_tokens(question) <= 27:
                break
        context = " ".join(rng.choice(_WORDS) for _ in range(400))
        system = _exact(f"You are a careful operations assistant. Records for turn {t}:\n{context}",
                        SYSTEM_TOKENS)
        answer = _exact(f"[doc-{t}] " + " ".join(rng.choice(_WORDS) for _ in range(300)),
                        ANSWER_TOKENS)
        tool = None
        if entity.label in question:
            result = json.dumps({"id": entity.id, "name": entity.label})
            tool = ("get_project", {"id": entity.id}, result)
        yield ReferenceTurn(t, question, system, answer, tool)
