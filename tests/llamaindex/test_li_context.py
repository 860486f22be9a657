"""A ``FunctionAgent`` whose workflow ``Context`` is reused turn after turn.

The Context snapshots its state between runs (``to_dict``) and restores it on the next
one, the memory included: ``ConvMemMemory`` comes back as itself (its ``SessionMemory``
does not travel in a snapshot), and the snapshot stays the same size however long the
conversation runs, because the history lives in the session state, not in the Context.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from llamaindex_convmem import ConvMemMemory, wrap_tools
from tests.llamaindex.li_helpers import roles_and_text

TURNS = 30
QUESTIONS = ("Pull up Brightwater Farms.", "What did they order last quarter?")
ANSWER = "Order SO-2211 shipped from Fresno on time and was paid in full. " * 120


def list_orders(customer: str, period: str) -> list[dict[str, Any]]:
    """List a customer's orders in a period."""
    return [{"id": "SO-2211", "customer": customer, "period": period}]


class Script:
    """A tool call for the question, a long answer for the tool's result."""

    def __init__(self) -> None:
        self.inputs: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.inputs.append(list(messages))
        if messages[-1].role.value == "tool":
            return ChatMessage(role="assistant", content=ANSWER)
        return ChatMessage(role="assistant", blocks=[ToolCallBlock(
            tool_call_id=f"call-{len(self.inputs)}", tool_name="list_orders",
            tool_kwargs={"customer": "current", "period": "last_quarter"})])


def _state_size(ctx: Context) -> int:
    """Bytes of the Context's serialized state (what a reused Context carries)."""
    return len(json.dumps(ctx.to_dict()["state"]))


async def test_reused_context_stays_flat(session: SessionMemory) -> None:
    script = Script()
    memory = ConvMemMemory(session, thread_id="t-ctx")
    tools = wrap_tools([FunctionTool.from_defaults(fn=list_orders)], memory)
    agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=script),
                          system_prompt="You are a CRM assistant.")
    ctx = Context(agent)
    sizes = {}
    for turn in range(1, TURNS + 1):
        result = await agent.run(user_msg=QUESTIONS[(turn - 1) % 2], memory=memory, ctx=ctx)
        assert str(result.response.content) == ANSWER
        assert await ctx.store.get("memory") is memory  # restored as itself, not a copy
        sizes[turn] = _state_size(ctx)

    # turn 2's pronoun reached the model resolved, with no history replayed
    assert roles_and_text(script.inputs[2])[-1] == (
        "user", "What did Brightwater Farms order last quarter?")
    assert [r for r, _ in roles_and_text(script.inputs[2])] == ["system", "system", "user"]
    # the same question leaves the same snapshot on turn 2 and turn 30: nothing accumulates
    assert sizes[2] == sizes[10] == sizes[TURNS]
    assert sizes[1] == sizes[TURNS - 1]
    assert sizes[TURNS] < len(ANSWER)  # not even one answer is kept in it
    state = await session.aget_state("t-ctx")
    assert state is not None and state.turn == TURNS and state.open_turn is None


def test_snapshot_of_another_process_names_what_to_do(session: SessionMemory) -> None:
    memory = ConvMemMemory(session, thread_id="t-away")
    data = memory.to_dict()
    assert ConvMemMemory.from_dict(data) is memory  # in this process: itself
    data["live_ref"] = "0" * 32  # a memory this process never had
    with pytest.raises(ConfigError, match=r"another process.*thread_id='t-away'"):
        ConvMemMemory.from_dict(data)
