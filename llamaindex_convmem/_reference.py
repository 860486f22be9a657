"""A small stand-in for the 50-turn reference session (bench spec), and its measurement.

TEMPORARY: ``convmem.reference`` (the lead's generator) replaces ``reference_session``
when it lands; ``prompt_tokens_per_turn`` then takes its turns unchanged.

Bench spec: seed 0, 50 turns; each turn sends a system prompt + retrieved context of
exactly 4,000 tokens (only the current turn's), a question of 17–27 tokens, and gets an
answer of exactly 2,000 tokens. Questions name CRM customers and then refer back to them
("their", "And X?"), so the session block has something to hold. Memory is driven the way
LlamaIndex's retrieving engines drive it: ``get(input=question)`` before the new messages
are stored, then system/context + what memory returned + the question; tokens by the
OpenAI cookbook rule (``convmem.tokens.count_message_tokens``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from convmem.tokens import count_message_tokens, count_tokens

CONTEXT_TOKENS = 4000
ANSWER_TOKENS = 2000
TURNS = 50

_WORDS = ["account", "order", "invoice", "revenue", "margin", "region", "quarter", "shipment", "payment", "contract", "renewal", "pipeline", "forecast", "customer", "product", "discount", "volume", "schedule", "delivery", "status", "report", "summary", "balance", "credit", "record", "region", "channel", "partner", "territory", "target", "review"]

_NAMES = (
    "Brightwater Farms", "Pinecrest Clinics", "Harbor Logistics", "Velvet Road Coffee",
    "Apex Dental Supply", "Orion Medical Group", "Lumen Health",
)
_OPENERS = (
    "Pull up {name} and give me a short overview of the account and its current standing.",
    "What did {name} order over the last two quarters, and were any of those orders late?",
)
_FOLLOW_UPS = (
    "Who is their account rep, and when did that rep last speak with them about renewal?",
    "Is any of their recent spending overdue, and how large is the outstanding balance now?",
    "How does their order volume this quarter compare with the same period last year, region by region?",
    "And {name}? Same question, with the same level of detail as before, please.",
)


@dataclass(frozen=True)
class Turn:
    context: str
    question: str
    answer: str


def _exact(rng: random.Random, n: int, prefix: str = "") -> str:
    """Text of exactly ``n`` cl100k tokens (words of one token each, then trimmed)."""
    words = [prefix] if prefix else []
    words += [rng.choice(_WORDS) for _ in range(n)]
    text = " ".join(words)
    excess = count_tokens(text) - n
    while excess > 0:  # the vocabulary is one token per word, so this converges fast
        del words[-excess:]
        text = " ".join(words)
        excess = count_tokens(text) - n
    while count_tokens(text) < n:  # a word boundary can merge; top up with a period run
        text += "."
    return text


def _question(rng: random.Random, index: int) -> str:
    if index % 5 == 0:
        q = rng.choice(_OPENERS).format(name=rng.choice(_NAMES))
    else:
        q = rng.choice(_FOLLOW_UPS).format(name=rng.choice(_NAMES))
    n = count_tokens(q)
    assert 17 <= n <= 27, (q, n)
    return q


def reference_session(seed: int = 0, turns: int = TURNS) -> list[Turn]:
    """The synthetic session: fixed-size context and answers, CRM questions."""
    rng = random.Random(seed)
    out = []
    for i in range(turns):
        context = _exact(rng, CONTEXT_TOKENS, "You are a CRM assistant. Records:")
        answer = _exact(rng, ANSWER_TOKENS, "Answer:")
        out.append(Turn(context, _question(rng, i), answer))
    return out


def _pairs(messages: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    return [(m.role.value, m.content or "") for m in messages]


def prompt_tokens_per_turn(memory: Any, session: Sequence[Turn]) -> list[tuple[int, int]]:
    """``(prompt tokens, tokens memory added)`` per turn for a LlamaIndex memory."""
    out = []
    for turn in session:
        history = memory.get(input=turn.question)
        system = ChatMessage(role=MessageRole.SYSTEM, content=turn.context)
        user = ChatMessage(role=MessageRole.USER, content=turn.question)
        prompt = count_message_tokens(_pairs([system, *history, user]))
        base = count_message_tokens(_pairs([system, user]))
        out.append((prompt, prompt - base))
        memory.put(user)
        memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=turn.answer))
    return out
