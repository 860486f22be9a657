"""``convmem demo``: the seed chapter's argument in six turns.

A scripted session on the embedded defaults: a named entity, a tool moving the focus to
another kind of entity ("Who's their rep?"), a pronoun that still means the customer
("What did they order last quarter?", with a filter change), a question about both
("Briefly: has she chased them about it?", with a format request), an ambiguous name and
its clarification. The demo domain declares ``types`` (spec §10). Prompt tokens for
"replay raw history" are shown beside convmem's,
sized like the reference session (4,000-token system prompt + context per turn,
2,000-token answers). The script and its domain are package data.

``record_demo(url)`` plays the same session into a transcript (``convmem demo --db
URL``), ``SessionMemory`` driving the commit points, and ends with an edit and a
regeneration so the record has branches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from importlib import resources
from typing import Any

from convmem.domain import Domain
from convmem.reference import ANSWER_TOKENS, SYSTEM_TOKENS, _exact
from convmem.session import Clarification, ModelCall, SessionMemory
from convmem.tokens import count_message_tokens

SYSTEM_TEXT = "You are a careful sales-operations assistant. Retrieved records follow. "


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


def demo_domain() -> Domain:
    return Domain.from_dict(demo_script()["domain"], source="demo_session.json")


def run_demo(
    memory: SessionMemory | None = None,
    thread_id: str = "demo",
    model_call: ModelCall | None = None,
) -> list[DemoTurn]:
    """Play the script through ``SessionMemory`` and count both prompts per turn.

    ``model_call`` goes to each ``begin_turn`` (with a transcript: commit point 1);
    tool calls get ids ``call-<turn>-<n>``.
    """
    script = demo_script()
    if memory is None:
        memory = SessionMemory(demo_domain(), tenant="demo")
    today = date.fromisoformat(script["today"])
    system = _exact(SYSTEM_TEXT, SYSTEM_TOKENS)
    history: list[tuple[str, str]] = []
    rows: list[DemoTurn] = []
    for n, turn in enumerate(script["turns"], 1):
        question = turn["user"]
        started = memory.begin_turn(thread_id, question, today=today, model_call=model_call)
        clarification: Clarification | None = None
        if isinstance(started, Clarification):
            clarification, rewritten, block = started, "", ""
        else:
            rewritten, block = started.rewritten, started.block
            for i, call in enumerate(turn["tools"], 1):
                clarification = memory.record_tool(thread_id, call["name"], call["args"],
                                                   call["result"], call_id=f"call-{n}-{i}")
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


def record_demo(url: str, tenant: str = "demo") -> tuple[str, list[DemoTurn]]:
    """Play the demo into a transcript at ``url`` (schema migrated); returns (thread id, rows).

    ``SessionMemory`` drives each turn's two commit points (the model input names the
    system prompt and a scripted model); then the last question is edited
    (``edit_turn``: a sibling turn with its own model input) and the answer to the
    edit regenerated (``regenerate``: a sibling answer of the same turn).
    """
    from convmem.transcript import RetentionPolicy, TranscriptStore
    from convmem.transcript.ids import new_id

    store = TranscriptStore(url, retention=RetentionPolicy(max_age=None, owner="convmem demo"))
    try:
        store.migrate()
        thread_id = new_id()  # the application's thread id is the record's key: the same id
        store.create_thread(tenant, key=thread_id, thread_id=thread_id, title="convmem demo")
        memory = SessionMemory(demo_domain(), transcript=store, tenant=tenant)
        call = ModelCall(system_prompt=_exact(SYSTEM_TEXT, SYSTEM_TOKENS),
                         model="demo (scripted answers)")
        rows = run_demo(memory, thread_id=thread_id, model_call=call)
        today = date.fromisoformat(demo_script()["today"])
        last = [m for m in store.active_path(tenant, thread_id) if m.role == "user"][-1]
        memory.edit_turn(thread_id, last.id, "Unrelated: how do I export a report to CSV?",
                         today=today, model_call=call)
        memory.end_turn(thread_id,
                        answer=_exact("Answer (edited question): [doc-csv] ", ANSWER_TOKENS))
        first = store.active_path(tenant, thread_id)[-1]
        memory.regenerate(thread_id, first.id,
                          _exact("Answer (regenerated): [doc-csv-2] ", ANSWER_TOKENS))
    finally:
        store.close()
    return thread_id, rows
