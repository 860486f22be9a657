"""``SessionMemoryMiddleware`` inside a real ``create_agent`` graph with ``InMemorySaver``.

The scripted model records every prompt, so each test asserts exactly what the model
received, turn by turn, while the checkpoint keeps every message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from lc_fakes import ScriptedChatModel, call, shape

from convmem.domain import Domain
from convmem.errors import ConfigError
from convmem.session import SessionMemory
from langchain_convmem import SessionMemoryMiddleware

SYSTEM = "You are a CRM assistant."
HEADER = "## Session context"
BRIGHTWATER = 'Currently discussing: customer "Brightwater Farms" (C-1080)'
SUMMIT_OPTIONS = (
    'Two customers match "Summit". Which one?\n'
    "1. Summit Outdoor Co. — Denver, acct 52210\n"
    "2. Summit Outdoor GmbH — Munich, acct 52877"
)


@tool
def lookup_customer(name: str) -> str:
    """Look up one customer by name."""
    return json.dumps({"id": "C-1080", "name": "Brightwater Farms", "city": "Fresno"})


@tool
def search_customers(industry: str, area: str) -> str:
    """Search customers by industry and area."""
    return json.dumps([
        {"id": "C-1050", "name": "Harbor Logistics", "city": "Seattle", "account": "38804"},
        {"id": "C-1044", "name": "Northline Logistics", "city": "Vancouver", "account": "41230"},
    ])


def _agent(model: ScriptedChatModel, memory: SessionMemory, **kw: Any) -> Any:
    return create_agent(
        model,
        [lookup_customer, search_customers],
        system_prompt=SYSTEM,
        middleware=[SessionMemoryMiddleware(memory, **kw)],
        checkpointer=InMemorySaver(),
    )


def _ask(question: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(question)]}


CFG = {"configurable": {"thread_id": "t-1"}}


def test_model_sees_system_block_and_current_turn_only(memory: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="Brightwater Farms"),
        AIMessage("Brightwater Farms, Fresno."),
        AIMessage("Ben Carter."),
        AIMessage("Munich it is."),
    ])
    agent = _agent(model, memory, rewrite=True)

    agent.invoke(_ask("Pull up Brightwater Farms."), CFG)
    block1 = f"{SYSTEM}\n\n{HEADER}\n{BRIGHTWATER}"
    tool_json = '{"id": "C-1080", "name": "Brightwater Farms", "city": "Fresno"}'
    assert [shape(r) for r in model.received] == [
        [("system", block1), ("human", "Pull up Brightwater Farms.")],
        [
            ("system", block1),
            ("human", "Pull up Brightwater Farms."),
            ("ai", '[["lookup_customer", {"name": "Brightwater Farms"}]]'),
            ("tool", tool_json),
        ],
    ]

    agent.invoke(_ask("Who's their rep?"), CFG)
    assert shape(model.received[2]) == [
        ("system", f'{block1}\nEarlier in this session: "Pull up Brightwater Farms."'),
        ("human", "Who's Brightwater Farms's rep?"),  # the rewrite, not turn 1's messages
    ]

    # An ambiguous name: the clarification comes back and the model is not called.
    out = agent.invoke(_ask("How is Summit doing?"), CFG)
    assert len(model.received) == 3
    assert shape(out["messages"][-1:]) == [("ai", SUMMIT_OPTIONS)]

    agent.invoke(_ask("Munich."), CFG)
    assert shape(model.received[3])[-1] == ("human", "How is Summit Outdoor GmbH doing?")
    assert 'customer "Summit Outdoor GmbH" (C-1061)' in model.received[3][0].text

    # The checkpoint keeps every message, the user's own words included.
    kept = agent.get_state(CFG).values["messages"]
    assert [m.text for m in kept if isinstance(m, HumanMessage)] == [
        "Pull up Brightwater Farms.", "Who's their rep?", "How is Summit doing?", "Munich.",
    ]
    assert len(kept) == 10
    assert memory.get_state("t-1").open_turn is None  # every turn was closed


def test_without_rewrite_the_model_gets_the_users_words(memory: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[AIMessage("Loaded."), AIMessage("Ben Carter.")])
    agent = _agent(model, memory, rewrite=False)
    agent.invoke(_ask("Pull up Brightwater Farms."), CFG)
    agent.invoke(_ask("Who's their rep?"), CFG)
    assert shape(model.received[1])[1:] == [("human", "Who's their rep?")]


def test_stream_ends_with_the_clarification(memory: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[AIMessage("unused")])
    agent = _agent(model, memory)
    chunks = list(agent.stream(_ask("How is Summit doing?"), CFG, stream_mode="values"))
    assert shape(chunks[-1]["messages"][-1:]) == [("ai", SUMMIT_OPTIONS)]
    assert model.received == []


def test_tool_with_several_candidates_ends_the_turn(memory: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[
        call("search_customers", "s1", industry="logistics", area="Pacific Northwest"),
        AIMessage("Harbor Logistics is in Seattle."),
    ])
    agent = _agent(model, memory)
    out = agent.invoke(_ask("Find the logistics customer up in the Pacific Northwest."), CFG)
    assert len(model.received) == 1  # not called again after the candidate list
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert "1. Harbor Logistics — Seattle, acct 38804" in last.text
    assert "2. Northline Logistics — Vancouver, acct 41230" in last.text
    assert out["messages"][-2].type == "tool"  # the tool result is checkpointed as usual

    agent.invoke(_ask("The first one."), CFG)
    state = memory.get_state("t-1")
    assert state is not None and state.focus is not None and state.focus.id == "C-1050"
    assert 'customer "Harbor Logistics" (C-1050)' in model.received[1][0].text


def test_missing_thread_id_names_the_key(crm: Domain) -> None:
    model = ScriptedChatModel(responses=[AIMessage("hi")])
    agent = create_agent(model, [], middleware=[SessionMemoryMiddleware(SessionMemory(crm))])
    with pytest.raises(ConfigError, match=r'\["thread_id"\]'):
        agent.invoke(_ask("Pull up Brightwater Farms."))


def test_tenants_do_not_share_state(memory: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[AIMessage("a"), AIMessage("b")])
    agent = _agent(model, memory)
    agent.invoke(_ask("Pull up Brightwater Farms."),
                 {"configurable": {"thread_id": "t-1", "tenant_id": "acme"}})
    agent.invoke(_ask("Pull up Cobalt Freight."),
                 {"configurable": {"thread_id": "t-2", "tenant_id": "globex"}})
    acme = memory.store.load("acme", "t-1")
    assert acme is not None and acme.focus is not None and acme.focus.id == "C-1080"
    assert memory.store.load("globex", "t-1") is None
    assert memory.get_state("t-1") is None  # the default tenant saw nothing
    assert memory.tenant == "default"  # the application's memory is not changed


def test_bad_tenant_is_a_config_error(memory: SessionMemory) -> None:
    agent = _agent(ScriptedChatModel(responses=[AIMessage("a")]), memory)
    with pytest.raises(ConfigError, match="tenant_id"):
        agent.invoke(_ask("Hi."), {"configurable": {"thread_id": "t", "tenant_id": ""}})


async def test_async_agent_turns(memory: SessionMemory) -> None:
    model = ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="Brightwater Farms"),
        AIMessage("Brightwater Farms, Fresno."),
        AIMessage("Ben Carter."),
    ])
    agent = _agent(model, memory, rewrite=True)
    await agent.ainvoke(_ask("Pull up Brightwater Farms."), CFG)
    await agent.ainvoke(_ask("Who's their rep?"), CFG)
    assert shape(model.received[2])[1:] == [("human", "Who's Brightwater Farms's rep?")]
    assert len(model.received[1]) == 4  # system, question, tool call, tool result

    chunks = [c async for c in agent.astream(_ask("How is Summit doing?"), CFG,
                                            stream_mode="values")]
    assert shape(chunks[-1]["messages"][-1:]) == [("ai", SUMMIT_OPTIONS)]
    assert len(model.received) == 3
    state = await memory.aget_state("t-1")
    assert state is not None and state.open_turn is None and state.pending is not None
