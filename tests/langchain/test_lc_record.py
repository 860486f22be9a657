"""Turns recorded by the LangChain adapters: on every turn, what the record says the
model received equals what the scripted model captured (and a failing model leaves
commit point 1 only)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from lc_fakes import ScriptedChatModel, call, shape
from test_lc_middleware import SUMMIT_OPTIONS, SYSTEM, lookup_customer, search_customers

from convmem.domain import Domain
from convmem.session import SessionMemory
from convmem.transcript import (
    ReconstructedInput,
    ToolCallPart,
    ToolResultPart,
    TranscriptStore,
)
from langchain_convmem import RunnableWithSessionMemory, SessionMemoryMiddleware
from tests.recorded_inputs import Record, arecord, record

_ROLE = {"user": "human", "assistant": "ai", "system": "system", "tool": "tool"}




@pytest.fixture
def recorded(crm: Domain, transcript: TranscriptStore) -> SessionMemory:
    import uuid

    return SessionMemory(crm, transcript=transcript, tenant=f"t-{uuid.uuid4().hex[:10]}")


def sent(r: ReconstructedInput, *, block_apart: bool = False) -> list[tuple[str, str]]:
    """The messages the record says the model received, in LangChain's shape: the system
    prompt with the block appended (the middleware) or as its own message (a prompt
    template's history slot), replayed messages, then the question as sent."""
    if block_apart:
        out = [("system", t) for t in (r.system_prompt, r.rendered_block) if t]
    else:
        system = "\n\n".join(t for t in (r.system_prompt, r.rendered_block) if t)
        out = [("system", system)] if system else []
    out += [(_ROLE[m.role], m.text) for m in r.messages]
    ours = r.user_message.extra.get("convmem") or {}
    out.append(("human", ours.get("sent_as", r.user_message.text)))
    return out




def _agent(model: ScriptedChatModel, memory: SessionMemory) -> Any:
    return create_agent(
        model,
        [lookup_customer, search_customers],
        system_prompt=SYSTEM,
        middleware=[SessionMemoryMiddleware(memory, rewrite=True)],
        checkpointer=InMemorySaver(),
    )


CFG = {"configurable": {"thread_id": "t-1"}}
SCRIPT = [
    ("Pull up Brightwater Farms.", 2),  # (question, model calls it takes)
    ("Who's their rep?", 1),
    ("How is Summit doing?", 0),  # a clarification: no model call, no model input
    ("Munich.", 1),
]


def _model() -> ScriptedChatModel:
    return ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="Brightwater Farms"),
        AIMessage("Brightwater Farms, Fresno."),
        AIMessage("Ben Carter."),
        AIMessage("Munich it is."),
    ])


def _script(model: ScriptedChatModel, firsts: list[int]) -> Iterator[dict[str, Any]]:
    """The agent's input for each ``SCRIPT`` question, in turn. Just before a question the
    model answers is handed out, appends to ``firsts`` where its first call will stand in
    ``model.received``."""
    for question, calls in SCRIPT:
        if calls:
            firsts.append(len(model.received))
        yield {"messages": [HumanMessage(question)]}


def _check_agent_record(found: Record, model: ScriptedChatModel, firsts: list[int]) -> None:
    recorded, path = found
    assert len(recorded) == 3 == len(firsts)
    for r, first in zip(recorded, firsts, strict=True):
        assert sent(r) == shape(model.received[first])
        assert r.completed_at is not None and r.model == "ScriptedChatModel"
        assert {s["function"]["name"] for s in r.tool_schemas} == {
            "lookup_customer", "search_customers"}
    assert [m.text for m in path if m.role in ("user", "assistant") and m.text] == [
        "Pull up Brightwater Farms.", "Brightwater Farms, Fresno.", "Who's their rep?",
        "Ben Carter.", "How is Summit doing?", SUMMIT_OPTIONS, "Munich.", "Munich it is."]
    assert path[1].parts == (ToolCallPart("c1", "lookup_customer", {"name": "Brightwater Farms"}),)
    assert isinstance(path[2].parts[0], ToolResultPart) and path[2].parts[0].call_id == "c1"
    assert path[4].extra["convmem"]["sent_as"] == "Who's Brightwater Farms's rep?"


def test_middleware_records_what_the_model_received(recorded: SessionMemory) -> None:
    model = _model()
    agent = _agent(model, recorded)
    firsts: list[int] = []
    for turn in _script(model, firsts):
        agent.invoke(turn, CFG)
    _check_agent_record(record(recorded, "t-1"), model, firsts)


async def test_middleware_records_async(recorded: SessionMemory) -> None:
    model = _model()
    agent = _agent(model, recorded)
    firsts: list[int] = []
    for turn in _script(model, firsts):
        await agent.ainvoke(turn, CFG)
    found = await arecord(recorded, "t-1")
    assert recorded.transcript is not None
    await recorded.transcript.async_engine.dispose()
    _check_agent_record(found, model, firsts)


def test_failing_model_leaves_commit_point_one(recorded: SessionMemory) -> None:
    agent = _agent(ScriptedChatModel(responses=[]), recorded)  # every call fails
    with pytest.raises(AssertionError, match="model called"):
        agent.invoke({"messages": [HumanMessage("Pull up Brightwater Farms.")]}, CFG)
    (r,), path = record(recorded, "t-1")
    assert r.completed_at is None and r.answer_message_id is None
    assert sent(r)[-1] == ("human", "Pull up Brightwater Farms.")
    assert [m.role for m in path] == ["user"]


# --------------------------------------------------------------------------- Runnable

PROMPT = ChatPromptTemplate.from_messages([
    ("system", SYSTEM),
    MessagesPlaceholder("history"),
    ("human", "{question}"),
])


def _chain(model: ScriptedChatModel, memory: SessionMemory) -> RunnableWithSessionMemory:
    return RunnableWithSessionMemory(
        PROMPT | model | StrOutputParser(), memory,
        input_messages_key="question", history_messages_key="history", rewrite=True,
    )


RCFG = {"configurable": {"session_id": "t-1"}}
QUESTIONS = ["Pull up Brightwater Farms.", "Who's their rep?", "How is Summit doing?", "Munich."]


def _check_chain_record(found: Record, model: ScriptedChatModel) -> None:
    recorded, path = found
    assert len(recorded) == len(model.received) == 3
    for r, received in zip(recorded, model.received, strict=True):
        assert sent(r, block_apart=True) == shape(received)
        assert r.completed_at is not None
    assert [m.text for m in path] == [
        "Pull up Brightwater Farms.", "Loaded.", "Who's their rep?", "Ben Carter.",
        "How is Summit doing?", SUMMIT_OPTIONS, "Munich.", "Munich it is."]


def test_runnable_records_what_the_model_received(recorded: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[AIMessage(a) for a in
                                         ("Loaded.", "Ben Carter.", "Munich it is.")])
    chain = _chain(model, recorded)
    for question in QUESTIONS:
        chain.invoke({"question": question}, RCFG)
    _check_chain_record(record(recorded, "t-1"), model)


async def test_runnable_records_async_and_streamed(recorded: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[AIMessage(a) for a in
                                         ("Loaded.", "Ben Carter.", "Munich it is.")])
    chain = _chain(model, recorded)
    for i, question in enumerate(QUESTIONS):
        if i % 2:
            "".join([c async for c in chain.astream({"question": question}, RCFG)])
        else:
            await chain.ainvoke({"question": question}, RCFG)
    found = await arecord(recorded, "t-1")
    assert recorded.transcript is not None
    await recorded.transcript.async_engine.dispose()
    _check_chain_record(found, model)


def test_runnable_failing_model_leaves_commit_point_one(recorded: SessionMemory) -> None:
    chain = _chain(ScriptedChatModel(responses=[]), recorded)
    with pytest.raises(AssertionError, match="model called"):
        chain.invoke({"question": "Pull up Brightwater Farms."}, RCFG)
    (r,), _ = record(recorded, "t-1")
    assert r.completed_at is None
    assert sent(r, block_apart=True) == [
        ("system", SYSTEM), ("system", r.rendered_block), ("human", "Pull up Brightwater Farms.")]


def test_a_tool_call_with_a_nan_argument_is_recorded_by_name(recorded: SessionMemory) -> None:
    """The model asks for a tool with ``NaN`` in its arguments (LangChain's tool and
    ``ToolMessage`` take it): the turn completes and the record names the number
    (PostgreSQL refused the whole commit point 2 before)."""

    @tool
    def score(ratio: float) -> str:
        """Score a ratio."""
        return json.dumps({"ok": True, "data": []})

    model = ScriptedChatModel(responses=[call("score", "c1", ratio=float("nan")),
                                         AIMessage("No score for that.")])
    agent = create_agent(model, [score], system_prompt=SYSTEM,
                         middleware=[SessionMemoryMiddleware(recorded)])
    out = agent.invoke({"messages": [HumanMessage("Score it.")]}, CFG)
    assert out["messages"][-1].text == "No score for that."
    _, path = record(recorded, "t-1")
    assert [p for m in path for p in m.parts if isinstance(p, ToolCallPart)] == [
        ToolCallPart("c1", "score", {"ratio": "NaN"})]
    assert path[-1].text == "No score for that."
