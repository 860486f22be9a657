"""``convmem demo``: the seed chapter's argument in six turns.

A scripted session (a named entity, a pronoun follow-up with a filter change, a
format request, an ambiguous name and its clarification, a topic change) on the
embedded defaults, with prompt tokens for "replay raw history" beside convmem's,
sized like the reference session (4,000-token system prompt + context per turn,
2,000-token answers). The script and its domain are package data.

``record_demo(url)`` plays the same session into a transcript (``convmem demo --db
URL``). The recording is ``TranscriptRecorder``, kept apart so it can give way to
``SessionMemory`` driving the commit points itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from importlib import resources
from typing import TYPE_CHECKING, Any

from convmem.domain import Domain
from convmem.reference import ANSWER_TOKENS, SYSTEM_TOKENS, _exact
from convmem.session import Clarification, SessionMemory, TurnContext
from convmem.state import state_to_dict
from convmem.tokens import count_message_tokens

if TYPE_CHECKING:
    from convmem.transcript import TranscriptStore

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


@dataclass(frozen=True)
class DemoExchange:
    """One played turn as a transcript sees it: what went in, which tools ran, what came out."""

    turn: int
    question: str
    started: TurnContext | Clarification
    system: str
    tool_calls: Sequence[dict[str, Any]] = field(default_factory=tuple)
    answer: str = ""


def demo_script() -> dict[str, Any]:
    raw = resources.files("convmem").joinpath("data/demo_session.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(raw)
    return data


def run_demo(
    memory: SessionMemory | None = None,
    thread_id: str = "demo",
    on_turn: Callable[[DemoExchange], None] | None = None,
) -> list[DemoTurn]:
    """Play the script through ``SessionMemory`` and count both prompts per turn.

    ``on_turn`` sees each turn once its answer exists (``record_demo`` keeps it).
    """
    script = demo_script()
    if memory is None:
        memory = SessionMemory(Domain.from_dict(script["domain"], source="demo_session.json"),
                               tenant="demo")
    today = date.fromisoformat(script["today"])
    system = _exact(SYSTEM_TEXT, SYSTEM_TOKENS)
    history: list[tuple[str, str]] = []
    rows: list[DemoTurn] = []
    for n, turn in enumerate(script["turns"], 1):
        question = turn["user"]
        started = memory.begin_turn(thread_id, question, today=today)
        clarification: Clarification | None = None
        tool_calls: list[dict[str, Any]] = []
        if isinstance(started, Clarification):
            clarification, rewritten, block = started, "", ""
        else:
            rewritten, block = started.rewritten, started.block
            for call in turn["tools"]:
                tool_calls.append(call)
                clarification = memory.record_tool(thread_id, call["name"], call["args"], call["result"])
                if clarification is not None:
                    break
        answer = clarification.text if clarification else _exact(f"Answer {n}: [doc-{n}] ", ANSWER_TOKENS)
        if on_turn is not None:
            on_turn(DemoExchange(n, question, started, system, tuple(tool_calls), answer))
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


class TranscriptRecorder:
    """Keeps the demo session in a transcript: each turn through the two commit points.

    A turn that reached the model writes the question with its model input (the
    rendered block, the state snapshot, the system prompt; the rewritten question in
    the message's ``extra``), then its tool calls, their results and the answer. A
    clarification asked before any model call is the question and the clarification,
    with no model input. ``edit_and_regenerate`` then makes the two branches a user
    makes: the last question edited, and the answer to it regenerated.
    """

    def __init__(self, store: TranscriptStore, tenant: str, thread_id: str) -> None:
        self.store = store
        self.tenant = tenant
        self.thread_id = thread_id
        self.last_question_id: str | None = None

    def turn(self, ex: DemoExchange) -> None:
        from convmem.transcript import ModelInput, NewMessage, ToolCallPart, ToolResultPart

        tenant, tid = self.tenant, self.thread_id
        if isinstance(ex.started, Clarification):
            question, _ = self.store.append(tenant, tid, [
                NewMessage(role="user", content=ex.question),
                NewMessage(role="assistant", content=ex.answer, author="convmem",
                           extra={"convmem": {"clarification": True}}),
            ])
            self.last_question_id = question.id
            return
        started = ex.started
        record = self.store.begin_turn_record(
            tenant, tid,
            NewMessage(role="user", content=ex.question,
                       extra={"convmem": {"rewritten": started.rewritten}}),
            ModelInput(rendered_block=started.block, state_snapshot=state_to_dict(started.state),
                       system_prompt=ex.system, model="demo (scripted answers)"),
        )
        self.last_question_id = record.user_message.id
        outcome: list[NewMessage] = []
        for i, call in enumerate(ex.tool_calls, 1):
            call_id = f"call-{ex.turn}-{i}"
            outcome.append(NewMessage(role="assistant", content=[
                ToolCallPart(call_id=call_id, name=call["name"], arguments=dict(call["args"]))]))
            outcome.append(NewMessage(role="tool", content=[ToolResultPart(
                call_id=call_id, content=json.dumps(call["result"], sort_keys=True))]))
        outcome.append(NewMessage(role="assistant", content=ex.answer))
        self.store.complete_turn(tenant, tid, record.turn_id, outcome)

    def edit_and_regenerate(self) -> None:
        from convmem.transcript import NewMessage

        if self.last_question_id is None:
            return
        tenant, tid = self.tenant, self.thread_id
        self.store.edit(tenant, tid, self.last_question_id,
                        "Unrelated: how do I export a report to CSV?")
        (first,) = self.store.append(tenant, tid, NewMessage(
            role="assistant", content=_exact("Answer (edited question): [doc-csv] ", ANSWER_TOKENS)))
        self.store.regenerate(tenant, tid, first.id,
                              _exact("Answer (regenerated): [doc-csv-2] ", ANSWER_TOKENS))


def record_demo(url: str, tenant: str = "demo") -> tuple[str, list[DemoTurn]]:
    """Play the demo into a transcript at ``url`` (schema migrated); returns (thread id, rows)."""
    from convmem.transcript import RetentionPolicy, TranscriptStore

    store = TranscriptStore(url, retention=RetentionPolicy(max_age=None, owner="convmem demo"))
    try:
        store.migrate()
        thread = store.create_thread(tenant, title="convmem demo")
        recorder = TranscriptRecorder(store, tenant, thread.id)
        rows = run_demo(thread_id=thread.id, on_turn=recorder.turn)
        recorder.edit_and_regenerate()
    finally:
        store.close()
    return thread.id, rows
