"""FunctionAgent with ConvMemMemory and wrapped tools: what the model receives each step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from convmem.session import SessionMemory
from llamaindex_convmem import ConvMemMemory, wrap_tools
from llamaindex_convmem.memory import CLARIFY_INSTRUCTION
from tests.llamaindex.li_helpers import roles_and_text

SYSTEM = "You are a CRM assistant. Use the tools."

CUSTOMERS = {
    "Brightwater Farms": {"id": "C-1080", "name": "Brightwater Farms", "city": "Fresno",
                          "account": "33410", "rep_id": "R-08"},
}
NORTHWEST = [
    {"id": "C-1050", "name": "Harbor Logistics", "city": "Seattle", "account": "38804"},
    {"id": "C-1044", "name": "Northline Logistics", "city": "Vancouver", "account": "41230"},
]


def lookup_customer(name: str) -> dict[str, Any]:
    """Look a customer up by name."""
    return CUSTOMERS[name]


def lookup_rep(customer_id: str) -> dict[str, Any]:
    """The account rep of a customer."""
    return {"id": "R-08", "name": "Dana Whitfield", "customer_id": customer_id}


def search_customers(industry: str, area: str) -> list[dict[str, Any]]:
    """Search customers by industry and area."""
    return NORTHWEST


# what the scripted model calls for each question (first step of each run)
PLAN = {
    "Pull up Brightwater Farms.": ("lookup_customer", {"name": "Brightwater Farms"}),
    "Who's Brightwater Farms's rep?": ("lookup_rep", {"customer_id": "C-1080"}),
    "Find the logistics customer up in the Pacific Northwest.": (
        "search_customers", {"industry": "logistics", "area": "Pacific Northwest"}),
}


class Script:
    """A scripted function-calling model that records every input."""

    def __init__(self) -> None:
        self.inputs: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.inputs.append(list(messages))
        last = messages[-1]
        system = "\n".join(m.content or "" for m in messages if m.role.value == "system")
        if CLARIFY_INSTRUCTION in system:
            return ChatMessage(role="assistant", content=system.split(CLARIFY_INSTRUCTION)[1])
        if last.role.value == "tool":
            return ChatMessage(role="assistant", content=f"Done: {last.content}")
        plan = PLAN.get(last.content or "")
        if plan is None:
            return ChatMessage(role="assistant", content="Noted.")
        name, args = plan
        return ChatMessage(role="assistant", blocks=[
            ToolCallBlock(tool_call_id=f"call-{len(self.inputs)}", tool_name=name, tool_kwargs=args)
        ])


async def test_function_agent_over_four_turns(session: SessionMemory) -> None:
    script = Script()
    memory = ConvMemMemory(session, thread_id="t-agent")
    tools = wrap_tools(
        [FunctionTool.from_defaults(fn=f) for f in (lookup_customer, lookup_rep, search_customers)],
        memory,
    )
    agent = FunctionAgent(
        tools=tools, llm=MockFunctionCallingLLM(response_generator=script), system_prompt=SYSTEM
    )

    await agent.run(user_msg="Pull up Brightwater Farms.", memory=memory)
    assert len(script.inputs) == 2
    assert roles_and_text(script.inputs[0]) == [
        ("system", SYSTEM),
        ("system", "## Session context\n"
                   'Currently discussing: customer "Brightwater Farms" (C-1080)'),
        ("user", "Pull up Brightwater Farms."),
    ]
    assert [r for r, _ in roles_and_text(script.inputs[1])] == [
        "system", "system", "user", "assistant", "tool"
    ]

    await agent.run(user_msg="Who's their rep?", memory=memory)
    first, second = script.inputs[2], script.inputs[3]
    assert [r for r, _ in roles_and_text(first)] == ["system", "system", "user"]  # no history
    assert roles_and_text(first)[-1] == ("user", "Who's Brightwater Farms's rep?")
    assert 'rep "Dana Whitfield"' in roles_and_text(second)[1][1]  # tool result -> focus
    assert [r for r, _ in roles_and_text(second)][-2:] == ["assistant", "tool"]

    handler = agent.run(
        user_msg="Find the logistics customer up in the Pacific Northwest.", memory=memory
    )
    result = await handler
    reply = str(result.response.content)
    assert "1. Harbor Logistics" in reply and "2. Northline Logistics" in reply
    state = await session.aget_state("t-agent")
    assert state is not None and state.pending is not None and state.open_turn is None

    await agent.run(user_msg="Seattle.", memory=memory)
    state = await session.aget_state("t-agent")
    assert state is not None and state.focus is not None and state.focus.id == "C-1050"
    assert state.turn == 4 and state.open_turn is None
    # the agent's scratchpad (tool calls included) is kept locally, the state holds none of it
    roles = [m.role.value for m in await memory.aget_all()]
    assert roles.count("tool") == 3 and roles.count("user") == 4


def test_sync_tool_call_sets_focus_and_clarifies(session: SessionMemory) -> None:
    import pytest

    from convmem.errors import ConfigError

    lookup, search = wrap_tools(
        [FunctionTool.from_defaults(fn=f) for f in (lookup_customer, search_customers)],
        session,
        thread_id="t-sync-tools",
    )
    out = lookup.call(name="Brightwater Farms")
    assert out.raw_output["id"] == "C-1080"
    state = session.get_state("t-sync-tools")
    assert state is not None and state.focus is not None and state.focus.id == "C-1080"
    out = search.call(industry="logistics", area="Pacific Northwest")
    assert out.content.startswith(CLARIFY_INSTRUCTION) and out.raw_output == NORTHWEST
    with pytest.raises(ConfigError, match="thread_id"):
        wrap_tools([lookup], session)
