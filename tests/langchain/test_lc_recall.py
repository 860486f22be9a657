"""``recall_tool`` and ``SessionMemoryMiddleware(recall=True)`` inside a real
``create_agent`` graph: a scripted model calls ``recall_conversation`` for "what was
the total you gave me?" and answers from what it returns; sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from lc_fakes import ScriptedChatModel, call

from convmem.domain import Domain
from convmem.errors import ConfigError
from convmem.render import recall_line
from convmem.session import RECALL_TOOL, SessionMemory
from convmem.session.recall import NO_MATCH
from convmem.transcript import Message, TranscriptStore
from langchain_convmem import SessionMemoryMiddleware, recall_tool

SYSTEM = "You are a CRM assistant."
TOTAL = "The total on invoice 42 for Brightwater Farms is $4,200."


@pytest.fixture
def recorded(
    crm: Domain, tenant: str, sqlite_url: str, migrated_store: Callable[[str], TranscriptStore]
) -> Iterator[SessionMemory]:
    store = migrated_store(sqlite_url)
    yield SessionMemory(crm, transcript=store, tenant=tenant)
    asyncio.run(store.aclose())


def _script() -> ScriptedChatModel:
    return ScriptedChatModel(responses=[
        AIMessage(TOTAL),
        AIMessage("Brightwater Farms is in Fresno."),
        call(RECALL_TOOL, "r1", query="total you gave me"),
        AIMessage("I told you the total was $4,200."),
    ])


def _agent(model: ScriptedChatModel, memory: SessionMemory) -> Any:
    return create_agent(
        model, [], system_prompt=SYSTEM,
        middleware=[SessionMemoryMiddleware(memory, recall=True)],
        checkpointer=InMemorySaver(),
    )


QUESTIONS = (
    "How much does Brightwater Farms owe on invoice 42?",
    "Where is Brightwater Farms?",
    "What was the total you gave me?",
)
CFG = {"configurable": {"thread_id": "t-1"}}


def _check(model: ScriptedChatModel, final: dict[str, Any], path: list[Message]) -> None:
    assert final["messages"][-1].text == "I told you the total was $4,200."
    recall_step = model.received[3]  # the model call after the tool ran
    (result,) = [m for m in recall_step if isinstance(m, ToolMessage)]
    assert result.name == RECALL_TOOL and TOTAL in result.text
    assert result.text.startswith("[assistant, turn ")
    system = model.received[2][0]
    assert system.text.startswith(SYSTEM) and system.text.endswith(recall_line(RECALL_TOOL))
    assert all(TOTAL not in m.text for m in model.received[2])  # never in the prompt itself
    # recorded like any tool: the call and its result are on the thread's path
    assert [m.role for m in path[-4:]] == ["user", "assistant", "tool", "assistant"]
    assert path[-3].parts[0].name == RECALL_TOOL  # type: ignore[union-attr]


def test_the_model_recalls_an_earlier_answer(recorded: SessionMemory) -> None:
    model = _script()
    agent = _agent(model, recorded)
    final: dict[str, Any] = {}
    for q in QUESTIONS:
        final = agent.invoke({"messages": [HumanMessage(q)]}, CFG)
    assert recorded.transcript is not None
    tid = recorded.transcript_thread_id("t-1")
    _check(model, final, recorded.transcript.active_path(recorded.tenant, tid))


async def test_the_model_recalls_an_earlier_answer_async(recorded: SessionMemory) -> None:
    model = _script()
    agent = _agent(model, recorded)
    final: dict[str, Any] = {}
    for q in QUESTIONS:
        final = await agent.ainvoke({"messages": [HumanMessage(q)]}, CFG)
    assert recorded.transcript is not None
    tid = await recorded.atranscript_thread_id("t-1")
    _check(model, final, await recorded.transcript.aactive_path(recorded.tenant, tid))


def test_the_record_keeps_a_recall_as_links_so_redaction_reaches_it(
    recorded: SessionMemory,
) -> None:
    """The model reads the snippets; the recorded tool result keeps only the references
    (role, turn, message id): no copy of the answer that a redaction of it would miss."""
    model = _script()
    agent = _agent(model, recorded)
    for q in QUESTIONS:
        agent.invoke({"messages": [HumanMessage(q)]}, CFG)
    t = recorded.transcript
    assert t is not None
    tid = recorded.transcript_thread_id("t-1")
    path = t.active_path(recorded.tenant, tid)
    (answer,) = [m for m in path if m.text == TOTAL]
    kept = path[-2].parts[0].content  # type: ignore[union-attr]
    assert kept == f"[assistant, turn {answer.seq}, message {answer.id}]"
    recorded.redact("t-1", answer.id, actor="dpo", reason="erasure request")
    assert "invoice 42 for Brightwater" not in repr(t.export_thread(recorded.tenant, tid))


def test_the_tool_reads_only_the_runs_thread_and_tenant(recorded: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[AIMessage(TOTAL)])
    _agent(model, recorded).invoke({"messages": [HumanMessage(QUESTIONS[0])]}, CFG)
    tool: BaseTool = recall_tool(recorded)
    assert tool.name == RECALL_TOOL and set(tool.args) == {"query"}
    assert TOTAL in tool.invoke({"query": "total"}, CFG)
    assert tool.invoke({"query": "total"}, {"configurable": {"thread_id": "t-2"}}) == NO_MATCH
    other = {"configurable": {"thread_id": "t-1", "tenant_id": recorded.tenant + "-b"}}
    assert tool.invoke({"query": "total"}, other) == NO_MATCH
    with pytest.raises(ConfigError, match="thread_id"):
        tool.invoke({"query": "total"}, {"configurable": {}})


async def test_the_tool_is_async_too(recorded: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[AIMessage(TOTAL)])
    await _agent(model, recorded).ainvoke({"messages": [HumanMessage(QUESTIONS[0])]}, CFG)
    assert TOTAL in await recall_tool(recorded).ainvoke({"query": "total"}, CFG)


def test_without_recall_nothing_is_offered(crm: Domain) -> None:
    memory = SessionMemory(crm)
    assert SessionMemoryMiddleware(memory).tools == []
    (offered,) = SessionMemoryMiddleware(memory, recall=True).tools
    assert offered.name == RECALL_TOOL
    with pytest.raises(ConfigError, match="no transcript"):
        offered.invoke({"query": "total"}, CFG)
