"""``create_agent`` + ``SessionMemoryMiddleware`` without the replayed checkpoint.

With no checkpointer the session state and the record carry the conversation; with
``checkpoint="bounded"`` a checkpointer (``InMemorySaver`` or ``PostgresSaver`` on the
run's PostgreSQL) keeps only the last turn's messages, however long the conversation,
while the record keeps every turn and still says exactly what the model received. A
tool's ``interrupt()`` resumed with ``Command(resume=...)`` completes the turn.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from lc_fakes import ScriptedChatModel, call, shape
from test_lc_middleware import SYSTEM, lookup_customer
from test_lc_record import sent

from convmem.domain import Domain
from convmem.errors import ConfigError
from convmem.session import SessionMemory
from convmem.transcript import ToolCallPart, ToolResultPart, TranscriptStore
from langchain_convmem import SessionMemoryMiddleware
from tests.recorded_inputs import Record, arecord, record

CFG = {"configurable": {"thread_id": "t-1"}}
TURNS = 50
QUESTIONS = [  # cycled: each names a customer or leans on the one in focus
    "Pull up Brightwater Farms.",
    "What did they order last quarter?",
    "Pull up Cobalt Freight.",
    "What did they order last quarter?",
]
SENT = [  # what the model is sent for each (the middleware's rewrite)
    "Pull up Brightwater Farms.",
    "What did Brightwater Farms order last quarter?",
    "Pull up Cobalt Freight.",
    "What did Cobalt Freight order last quarter?",
]


@tool
def list_orders(customer: str, period: str) -> str:
    """List a customer's orders in a period."""
    return json.dumps([{"id": "SO-2211", "customer": customer, "total": 1840}])


@tool
def approve_discount(customer: str, percent: int) -> str:
    """Ask a manager to approve a discount (pauses the agent until they answer)."""
    answer = interrupt({"approve": f"{percent}% for {customer}?"})
    return f"manager said: {answer}"


def _agent(model: ScriptedChatModel, memory: SessionMemory, saver: Any = None,
           checkpoint: str = "bounded") -> Any:
    return create_agent(
        model,
        [lookup_customer, list_orders, approve_discount],
        system_prompt=SYSTEM,
        middleware=[SessionMemoryMiddleware(memory, checkpoint=checkpoint)],
        checkpointer=saver,
    )


def _ask(question: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(question)]}


def _turn_script(turns: int) -> list[AIMessage]:
    """Per turn: one ``list_orders`` call, then the answer."""
    out: list[AIMessage] = []
    for i in range(turns):
        out.append(call("list_orders", f"o{i}", customer="current", period="last_quarter"))
        out.append(AIMessage(f"Answer {i}."))
    return out


def _recorded(crm: Domain, transcript: TranscriptStore) -> SessionMemory:
    return SessionMemory(crm, transcript=transcript, tenant=f"t-{uuid.uuid4().hex[:10]}")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def recorded(crm: Domain, transcript: TranscriptStore) -> SessionMemory:
    return _recorded(crm, transcript)


@pytest.fixture(params=[
    pytest.param("memory", marks=pytest.mark.sqlite),
    pytest.param("postgres", marks=pytest.mark.postgres),
])
def saved(
    request: pytest.FixtureRequest, crm: Domain,
    migrated_store: Callable[[str], TranscriptStore],
) -> Iterator[tuple[SessionMemory, str]]:
    """(memory recording into a transcript, checkpointer kind): ``"memory"`` (a SQLite
    record) or the psycopg URL of the run's PostgreSQL, its checkpoint tables set up
    (the record on the same database)."""
    url = request.getfixturevalue("sqlite_url" if request.param == "memory" else "postgres_url")
    transcript = migrated_store(url)
    kind = "memory"
    if request.param == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        kind = _psycopg(url)
        with PostgresSaver.from_conn_string(kind) as saver:
            saver.setup()
    yield _recorded(crm, transcript), kind
    transcript.close()


@contextmanager
def _saver(kind: str) -> Iterator[Any]:
    if kind == "memory":
        yield InMemorySaver()
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(kind) as saver:
        yield saver


@asynccontextmanager
async def _asaver(kind: str) -> AsyncIterator[Any]:
    if kind == "memory":
        yield InMemorySaver()
        return
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(kind) as saver:
        yield saver


def _psycopg(url: str) -> str:
    """The SQLAlchemy URL as psycopg (and so ``PostgresSaver``) spells it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


# --------------------------------------------------------------------------- checks


def _check_no_checkpointer(found: Record, model: ScriptedChatModel) -> None:
    """Turn 2's pronoun reached the model resolved; the record has every message."""
    recorded, path = found
    assert shape(model.received[2])[-1] == (
        "human", "What did Brightwater Farms order last quarter?")
    assert 'customer "Brightwater Farms" (C-1080)' in model.received[2][0].text
    assert [sent(r) for r in recorded] == [shape(model.received[0]), shape(model.received[2])]
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"] * 2
    assert path[1].parts == (ToolCallPart("c1", "lookup_customer", {"name": "Brightwater Farms"}),)
    assert isinstance(path[2].parts[0], ToolResultPart) and path[2].parts[0].call_id == "c1"
    assert path[5].parts == (ToolCallPart(
        "o1", "list_orders", {"customer": "C-1080", "period": "last_quarter"}),)
    assert isinstance(path[6].parts[0], ToolResultPart) and path[6].parts[0].call_id == "o1"
    assert [m.text for m in path if m.role != "tool" and m.text] == [
        "Pull up Brightwater Farms.", "Brightwater Farms, Fresno.",
        "What did they order last quarter?", "One order, SO-2211."]


def _no_checkpointer_model() -> ScriptedChatModel:
    return ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="Brightwater Farms"),
        AIMessage("Brightwater Farms, Fresno."),
        call("list_orders", "o1", customer="C-1080", period="last_quarter"),
        AIMessage("One order, SO-2211."),
    ])


def _check_bounded(found: Record, model: ScriptedChatModel, counts: list[int]) -> None:
    """Checkpoint flat at one turn; the record has all of them, each as the model saw it."""
    assert counts == [4] * TURNS  # human, tool call, tool result, answer
    recorded, path = found
    assert len(recorded) == TURNS
    assert len(path) == 4 * TURNS
    for i, r in enumerate(recorded):
        assert sent(r) == shape(model.received[2 * i])
        assert sent(r)[-1] == ("human", SENT[i % len(SENT)])
    assert [m.text for m in path if m.role == "assistant" and m.text][-1] == f"Answer {TURNS - 1}."


def _approval_model() -> ScriptedChatModel:
    return ScriptedChatModel(responses=[
        AIMessage("Brightwater Farms, Fresno."),
        call("approve_discount", "d1", customer="Brightwater Farms", percent=10),
        AIMessage("Approved: 10% for Brightwater Farms."),
    ])


def _check_resumed(paused: dict[str, Any], done: dict[str, Any], found: Record) -> None:
    """The turn paused inside the tool, resumed, completed, and only then was bounded."""
    (pause,) = paused["__interrupt__"]
    assert pause.value == {"approve": "10% for Brightwater Farms?"}
    assert len(paused["messages"]) == 4  # turn 1 (2 messages) still there mid-turn
    assert shape(done["messages"]) == [
        ("human", "Give them 10% off."),
        ("ai", '[["approve_discount", {"customer": "Brightwater Farms", "percent": 10}]]'),
        ("tool", "manager said: yes"),
        ("ai", "Approved: 10% for Brightwater Farms."),
    ]
    _, path = found
    assert [m.role for m in path] == ["user", "assistant", "user", "assistant", "tool",
                                      "assistant"]
    assert path[-1].text == "Approved: 10% for Brightwater Farms."


# --------------------------------------------------------------------------- sync


def test_no_checkpointer_remembers_through_convmem(recorded: SessionMemory) -> None:
    model = _no_checkpointer_model()
    agent = _agent(model, recorded, saver=None)
    agent.invoke(_ask("Pull up Brightwater Farms."), CFG)
    out = agent.invoke(_ask("What did they order last quarter?"), CFG)
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai"]  # turn 2 only
    _check_no_checkpointer(record(recorded, "t-1"), model)


def test_bounded_checkpoint_stays_flat(saved: tuple[SessionMemory, str]) -> None:
    memory, kind = saved
    model = ScriptedChatModel(responses=_turn_script(TURNS))
    counts = []
    with _saver(kind) as saver:
        agent = _agent(model, memory, saver)
        for i in range(TURNS):
            agent.invoke(_ask(QUESTIONS[i % len(QUESTIONS)]), CFG)
            counts.append(len(agent.get_state(CFG).values["messages"]))
    _check_bounded(record(memory, "t-1"), model, counts)


def test_full_checkpoint_keeps_growing(memory: SessionMemory) -> None:
    """The default: the checkpoint keeps every turn (what bounded mode changes)."""
    model = ScriptedChatModel(responses=_turn_script(3))
    agent = _agent(model, memory, InMemorySaver(), checkpoint="full")
    for i in range(3):
        agent.invoke(_ask(QUESTIONS[i]), CFG)
    assert len(agent.get_state(CFG).values["messages"]) == 12


def test_interrupt_in_a_tool_resumes_in_bounded_mode(recorded: SessionMemory) -> None:
    agent = _agent(_approval_model(), recorded, InMemorySaver())
    agent.invoke(_ask("Pull up Brightwater Farms."), CFG)
    paused = agent.invoke(_ask("Give them 10% off."), CFG)
    assert recorded.get_state("t-1").open_turn is not None  # type: ignore[union-attr]
    done = agent.invoke(Command(resume="yes"), CFG)
    _check_resumed(paused, done, record(recorded, "t-1"))
    assert recorded.get_state("t-1").open_turn is None  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", ["bounded ", "none", "", None, 1])
def test_bad_checkpoint_mode_is_refused(memory: SessionMemory, bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"checkpoint=.*expected one of 'full', 'bounded'"):
        SessionMemoryMiddleware(memory, checkpoint=bad)


# --------------------------------------------------------------------------- async


async def _dispose(memory: SessionMemory) -> None:
    assert memory.transcript is not None
    await memory.transcript.async_engine.dispose()


async def test_async_no_checkpointer_remembers(recorded: SessionMemory) -> None:
    model = _no_checkpointer_model()
    agent = _agent(model, recorded, saver=None)
    await agent.ainvoke(_ask("Pull up Brightwater Farms."), CFG)
    await agent.ainvoke(_ask("What did they order last quarter?"), CFG)
    found = await arecord(recorded, "t-1")
    await _dispose(recorded)
    _check_no_checkpointer(found, model)


async def test_async_bounded_checkpoint_stays_flat(saved: tuple[SessionMemory, str]) -> None:
    memory, kind = saved
    model = ScriptedChatModel(responses=_turn_script(TURNS))
    counts = []
    async with _asaver(kind) as saver:
        agent = _agent(model, memory, saver)
        for i in range(TURNS):
            await agent.ainvoke(_ask(QUESTIONS[i % len(QUESTIONS)]), CFG)
            counts.append(len((await agent.aget_state(CFG)).values["messages"]))
    found = await arecord(memory, "t-1")
    await _dispose(memory)
    _check_bounded(found, model, counts)


async def test_async_interrupt_resumes_in_bounded_mode(recorded: SessionMemory) -> None:
    agent = _agent(_approval_model(), recorded, InMemorySaver())
    await agent.ainvoke(_ask("Pull up Brightwater Farms."), CFG)
    paused = await agent.ainvoke(_ask("Give them 10% off."), CFG)
    done = await agent.ainvoke(Command(resume="yes"), CFG)
    found = await arecord(recorded, "t-1")
    await _dispose(recorded)
    _check_resumed(paused, done, found)
    state = await recorded.aget_state("t-1")
    assert state is not None and state.open_turn is None

