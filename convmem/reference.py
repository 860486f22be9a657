"""The reference session every prompt-size figure is reported on.

Pinned by ``bench/prompt_tokens.py`` and reused by the demo, the adapters' token
tests and the cookbook: a fixed 4,000-token system prompt plus retrieved context per
turn, user questions of 17–27 tokens, scripted 2,000-token answers, 50 turns, seed 0
(as in the peer baselines). Tokens are cl100k_base; prompt tokens follow the OpenAI
cookbook rule (``convmem.tokens.count_message_tokens``). The session's domain is
synthetic and generic (projects, teams, stages), generated here from the seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date

from convmem.domain import Domain, Entity, PeriodFilter, ToolFocusRule, ToolRule, VocabFilter
from convmem.tokens import count_tokens, encoding

SYSTEM_TOKENS = 4000
ANSWER_TOKENS = 2000
TURNS = 50
SEED = 0
TODAY = date(2026, 11, 30)

_SYLLABLES = ["lor", "ven", "tak", "mira", "sol", "quen", "dar", "eli", "bro", "tess", "ka", "ru"]
_WORDS = ["record", "status", "revenue", "margin", "forecast", "quarter", "pipeline", "ledger", "invoice", "shipment", "account", "review", "region", "backlog", "target", "variance", "summary", "contract", "renewal", "balance", "schedule"]


@dataclass(frozen=True)
class ReferenceTurn:
    turn: int
    question: str
    system: str  # system prompt + this turn's retrieved context: exactly SYSTEM_TOKENS
    answer: str  # scripted answer: exactly ANSWER_TOKENS
    tool: tuple[str, dict[str, object], dict[str, object]] | None = None


def _exact(text: str, tokens: int) -> str:
    """``text`` repeated and cut to exactly ``tokens`` cl100k_base tokens."""
    enc = encoding()
    repeated = text
    while count_tokens(repeated) < tokens + 16:
        repeated += " " + text
    ids = enc.encode(repeated, disallowed_special=())
    for cut in range(tokens, tokens - 16, -1):
        candidate = enc.decode(ids[:cut])
        if count_tokens(candidate) == tokens:
            return candidate
    raise ValueError(f"cannot cut the filler to exactly {tokens} tokens")


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(2)).capitalize()


def reference_domain(seed: int = SEED) -> Domain:
    """Twelve generated projects and four teams, a period filter, a stage vocabulary."""
    rng = random.Random(seed)
    projects = [Entity("project", f"PR-{100 + i}", f"{_name(rng)} {_name(rng)}") for i in range(12)]
    teams = [Entity("team", f"T-{i}", f"{_name(rng)} Team") for i in range(4)]
    return Domain(
        name="reference",
        entities=(*projects, *teams),
        filters={
            "period": PeriodFilter(),
            "stage": VocabFilter({"draft": ("draft", "drafting"), "live": ("live", "launched")}),
        },
        clear_phrases={"stage": ("any stage",), "period": ("all time",)},
        tools={"get_project": ToolRule("get_project", ToolFocusRule("project", "id", "name"))},
    )


_TEMPLATES = [
    "Can you summarise where {name} stands on revenue and margin for {period}, compared with the plan we agreed?",
    "What changed in their pipeline since the last review, and which items look most at risk right now?",
    "And what about {name} for {period}, especially the {stage} items that the finance team keeps asking about?",
    "Which of those items are still {stage}, and who on the team is responsible for moving them forward?",
    "Give me the short version of their backlog and the top three risks for the forecast this quarter.",
    "How does their invoice balance compare with the target, and is anything late that I should chase today?",
]


def reference_session(seed: int = SEED, turns: int = TURNS) -> Iterator[ReferenceTurn]:
    """The 50-turn session: questions 17–27 tokens, fixed-size system and answers."""
    rng = random.Random(seed)
    domain = reference_domain(seed)
    projects = [e for e in domain.entities if e.type == "project"]
    periods = ["last quarter", "this quarter", "Q2", "October", "this year"]
    stages = ["draft", "live"]
    for t in range(1, turns + 1):
        while True:
            entity = rng.choice(projects)
            question = rng.choice(_TEMPLATES).format(
                name=entity.label, period=rng.choice(periods), stage=rng.choice(stages)
            )
            if 17 <= count_tokens(question) <= 27:
                break
        context_words = " ".join(rng.choice(_WORDS) for _ in range(400))
        system = _exact(
            f"You are a careful operations assistant. Retrieved records for turn {t}:\n" + context_words,
            SYSTEM_TOKENS,
        )
        answer_words = " ".join(rng.choice(_WORDS) for _ in range(300))
        answer = _exact(f'[doc-{t}] "{answer_words}"', ANSWER_TOKENS)
        tool: tuple[str, dict[str, object], dict[str, object]] | None = None
        if "{name}" in question or entity.label in question:
            tool = ("get_project", {"id": entity.id}, {"ok": True, "data": {"id": entity.id, "name": entity.label}})
        yield ReferenceTurn(t, question, system, answer, tool)
