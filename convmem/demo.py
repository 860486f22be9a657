"""``convmem demo``: the seed chapter's argument in six turns.

A scripted session (a named entity, a pronoun follow-up with a filter change, a
format request, an ambiguous name and its clarification, a topic change) on the
embedded defaults, with prompt tokens for "replay raw history" beside convmem's,
sized like the reference session (4,000-token system prompt + context per turn,
2,000-token answers). The script and its domain are package data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from importlib import resources
from typing import Any

from convmem.domain import Domain
from convmem.reference import ANSWER_TOKENS, SYSTEM_TOKENS, _exact
from convmem.session import Clarification, SessionMemory
from convmem.tokens import count_message_tokens


@dataclass(frozen=True)
class DemoTurn:
    turn: int
    question: str
    rewritten: str
    block: str
    clarification: str | None
    replay_tokens: int
    convmem_tokens: int
    memory_tokens: int

    def as_json(self) -> dict[str, Any]:
        return {
            "turn": self.turn, "question": self.question, "rewritten": self.rewritten,
            "block": self.block, "clarification": self.clarification,
            "replay_tokens": self.replay_tokens, "convmem_tokens": self.convmem_tokens,
            "memory_tokens": self.memory_tokens,
        }


def demo_script() -> dict[str, Any]:
    raw = resources.files("convmem").joinpath("data/demo_session.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(raw)
    return data


def run_demo(memory: SessionMemory | None = None, thread_id: str = "demo") -> list[DemoTurn]:
    """Play the script through ``SessionMemory`` and count both prompts per turn."""
    script = demo_script()
    if memory is None:
        memory = SessionMemory(Domain.from_dict(script["domain"], source="demo_session.json"),
                               tenant="demo")
    today = date.fromisoformat(script["today"])
    system = _exact("You are a careful sales-operations assistant. Retrieved records follow. ", SYSTEM_TOKENS)
    history: list[tuple[str, str]] = []
    rows: list[DemoTurn] = []
    for n, turn in enumerate(script["turns"], 1):
        question = turn["user"]
        started = memory.begin_turn(thread_id, question, today=today)
        clarification: Clarification | None = None
        if isinstance(started, Clarification):
            clarification, rewritten, block = started, "", ""
        else:
            rewritten, block = started.rewritten, started.block
            for call in turn["tools"]:
                clarification = memory.record_tool(thread_id, call["name"], call["args"], call["result"])
                if clarification is not None:
                    break
        answer = clarification.text if clarification else _exact(f"Answer {n}: [doc-{n}] ", ANSWER_TOKENS)
        memory.end_turn(thread_id, answer=answer)
        system_with_block = f"{system}\n\n{block}" if block else system
        baseline = count_message_tokens([("system", system), ("user", question)])
        convmem_tokens = count_message_tokens([("system", system_with_block), ("user", rewritten or question)])
        replay = count_message_tokens([("system", system), *history, ("user", question)])
        if clarification is not None and not rewritten:
            convmem_tokens = baseline = 0  # clarified before any model call
        rows.append(DemoTurn(n, question, rewritten, block,
                             clarification.text if clarification else None,
                             replay, convmem_tokens, convmem_tokens - baseline))
        history += [("user", question), ("assistant", answer)]
    return rows
