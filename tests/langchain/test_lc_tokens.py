"""Prompt size on the 50-turn reference session, through a real ``create_agent``.

What the model receives with ``SessionMemoryMiddleware`` is measured from the
scripted model's own record; the replay figure is the same request as it reached
the middleware (system prompt + every checkpointed message), i.e. what the agent
sends without convmem. Memory-added = convmem prompt − (system + question alone).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, dynamic_prompt
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from lc_fakes import PromptSpy, ScriptedChatModel, call, prompt_tokens

from convmem.reference import TURNS, reference_domain, reference_session
from convmem.session import SessionMemory
from convmem.tokens import count_message_tokens
from langchain_convmem import SessionMemoryMiddleware


@dataclass
class Turn:
    system: str


@dynamic_prompt
def per_turn_system(request: ModelRequest[Turn]) -> str:
    """The application's system prompt + this turn's retrieved context."""
    return request.runtime.context.system


def test_reference_session_prompt_stays_flat() -> None:
    turns = list(reference_session())
    records = {t.tool[1]["id"]: t.tool[2]["data"] for t in turns if t.tool}  # id -> record

    @tool
    def get_project(id: str) -> str:
        """Fetch one project record."""
        return json.dumps(records[id])

    script: list[AIMessage] = []
    for t in turns:
        if t.tool is not None:
            script.append(call("get_project", f"call-{t.turn}", **t.tool[1]))
        script.append(AIMessage(t.answer))
    model = ScriptedChatModel(responses=script)
    spy = PromptSpy()
    saver = InMemorySaver()
    session = SessionMemory(reference_domain())
    memory = SessionMemoryMiddleware(session)
    agent = create_agent(
        model, [get_project],
        middleware=[per_turn_system, spy, memory],
        context_schema=Turn, checkpointer=saver,
    )
    cfg: Any = {"configurable": {"thread_id": "reference"}}

    rows = []
    kept_before = 0
    for t in turns:
        first_call = len(model.received)
        agent.invoke({"messages": [HumanMessage(t.question)]}, cfg, context=Turn(t.system))
        kept = len(agent.get_state(cfg).values["messages"])
        assert kept > kept_before  # the checkpoint keeps growing
        kept_before = kept
        convmem = prompt_tokens(model.received[first_call])
        replay = prompt_tokens(spy.received[first_call])
        bare = count_message_tokens([("system", t.system), ("user", t.question)])
        rows.append((t.turn, convmem, convmem - bare, replay, kept))

    print("\nturn  convmem  memory-added  replay  checkpointed-messages")
    for turn, convmem, added, replay, kept in rows:
        print(f"{turn:4d}  {convmem:7d}  {added:12d}  {replay:6d}  {kept:5d}")
    first, last = rows[0], rows[-1]
    ratio = last[1] / first[1]
    print(f"prompt(50)/prompt(1): convmem {ratio:.3f}, replay {last[3] / first[3]:.2f}; "
          f"max memory-added {max(r[2] for r in rows)}")

    assert len(rows) == TURNS
    assert all(0 <= added <= 160 for _, _, added, _, _ in rows)
    assert ratio <= 1.05
    assert last[3] > 20 * last[1]  # replay keeps every answer: the contrast is real
    state = session.get_state("reference")  # the tool results did set the focus
    assert state is not None and state.focus is not None and state.focus.type == "project"
    assert "Currently discussing: project" in model.received[-1][0].text
