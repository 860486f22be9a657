"""Real LlamaIndex traffic with default arguments (issue 12's "done when").

``FunctionAgent`` + ``wrap_tools`` + ``ConvMemMemory`` and ``ConvMemChatEngine`` with
nothing but defaults and LlamaIndex's own ``MockFunctionCallingLLM`` driven by a
script: a tool result in the spec §6 envelope sets the focus, a failed one sets
neither focus nor filters, and the turn after a clarification sends the original
question resolved to the chosen entity (whatever ``rewrite`` says). Plus every
``ToolOutput`` form, read under the one contract (``docs/tool-results.md``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool, ToolOutput
from pydantic import BaseModel

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from llamaindex_convmem import ConvMemChatEngine, ConvMemMemory, tool_result, wrap_tools
from llamaindex_convmem.memory import CLARIFY_INSTRUCTION
from tests.llamaindex.li_helpers import CountingLLM, RecordingRetriever, roles_and_text

SYSTEM = "You are a CRM assistant. Use the tools."
RECORD = {"id": "C-1080", "name": "Brightwater Farms"}
ASK = "How is Northline doing on payments?"
RESOLVED = "How is Northline Foods doing on payments?"


class Customer(BaseModel):
    id: str
    name: str


@dataclass
class Row:
    id: str
    name: str


def _out(raw: Any, content: str | None = None, **kw: Any) -> ToolOutput:
    text = content if content is not None else (raw if isinstance(raw, str) else str(raw))
    return ToolOutput(content=text, tool_name="lookup_customer", raw_input={}, raw_output=raw,
                      **kw)


@pytest.mark.parametrize(
    ("output", "ok", "data"),
    [
        (_out({"ok": True, "data": RECORD}), True, RECORD),
        (_out({"ok": False, "data": RECORD}), False, RECORD),
        (_out({"ok": "false", "data": RECORD}), False, RECORD),
        (_out(RECORD), True, RECORD),
        (_out([RECORD, RECORD]), True, [RECORD, RECORD]),
        (_out(json.dumps({"ok": True, "data": RECORD})), True, RECORD),
        (_out(json.dumps({"ok": False})), False, None),
        (_out("Brightwater Farms, Fresno."), True, None),
        (_out(Customer(**RECORD)), True, RECORD),
        (_out(Row(**RECORD)), True, RECORD),
        (_out({"ok": True, "data": Customer(**RECORD)}), True, RECORD),
        (_out(object(), content=json.dumps(RECORD)), True, RECORD),  # unreadable raw: content
        (_out(None, content="None"), True, None),
        (_out({"ok": True, "data": RECORD}, is_error=True), False, None),  # the tool raised
    ],
)
def test_tool_output_forms(output: ToolOutput, ok: bool, data: Any) -> None:
    result = tool_result(output)
    assert (result.ok, result.data) == (ok, data)
    assert result.text == output.content  # the record keeps LlamaIndex's text


def test_the_core_does_not_read_a_tool_output(session: SessionMemory) -> None:
    with pytest.raises(ConfigError, match=r"llamaindex_convmem\.tool_result"):
        session.record_tool("t", "lookup_customer", {}, _out(RECORD))


# ---------------------------------------------------------------------- FunctionAgent


def lookup_customer(name: str) -> dict[str, Any]:
    """Look a customer up by name."""
    if name == "the Fresno farm":
        return {"ok": True, "data": RECORD}
    return {"ok": False, "error": "CRM timeout", "data": {"id": "C-1094", "name": "Pinecrest"}}


def list_orders(status: str) -> dict[str, Any]:
    """List the focused customer's orders with a status."""
    return {"ok": False, "error": "orders service unavailable"}


PLAN: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "Find the farm account in Fresno.": [("lookup_customer", {"name": "the Fresno farm"})],
    "What's on their order list?": [("list_orders", {"status": "overdue"}),
                                    ("lookup_customer", {"name": "Pinecrest"})],
}


class Script:
    """A function-calling model: the plan's tool calls for a question, then an answer;
    a clarification instruction is repeated verbatim. Records every input."""

    def __init__(self) -> None:
        self.inputs: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.inputs.append(list(messages))
        system = "\n".join(m.content or "" for m in messages if m.role.value == "system")
        if CLARIFY_INSTRUCTION in system:
            return ChatMessage(role="assistant", content=system.split(CLARIFY_INSTRUCTION)[1])
        if messages[-1].role.value == "tool":
            return ChatMessage(role="assistant", content="Done.")
        calls = PLAN.get(messages[-1].content or "")
        if calls is None:
            return ChatMessage(role="assistant", content="Noted.")
        return ChatMessage(role="assistant", blocks=[
            ToolCallBlock(tool_call_id=f"c{len(self.inputs)}-{i}", tool_name=n, tool_kwargs=a)
            for i, (n, a) in enumerate(calls)
        ])


def _focus_id(session: SessionMemory, thread: str) -> str | None:
    state = session.get_state(thread)
    assert state is not None
    return state.focus.id if state.focus is not None else None


@pytest.mark.parametrize("rewrite", [None, False])
async def test_function_agent_with_default_arguments(
    session: SessionMemory, rewrite: bool | None
) -> None:
    script = Script()
    kw = {} if rewrite is None else {"rewrite": rewrite}
    memory = ConvMemMemory(session, thread_id="t-agent", **kw)
    tools = wrap_tools([FunctionTool.from_defaults(fn=f) for f in (lookup_customer, list_orders)],
                       memory)
    agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=script),
                          system_prompt=SYSTEM)

    await agent.run(user_msg="Find the farm account in Fresno.", memory=memory)
    state = await session.aget_state("t-agent")
    assert state is not None and state.focus is not None
    assert (state.focus.id, state.focus.source) == ("C-1080", "tool")

    await agent.run(user_msg="What's on their order list?", memory=memory)
    state = await session.aget_state("t-agent")
    assert state is not None and dict(state.filters) == {}
    assert state.focus is None or state.focus.id != "C-1094"

    result = await agent.run(user_msg=ASK, memory=memory)
    assert "1. Northline Foods — Toronto" in str(result.response.content)

    before = len(script.inputs)
    await agent.run(user_msg="The Toronto one.", memory=memory)
    first = script.inputs[before]
    assert roles_and_text(first)[-1] == ("user", RESOLVED)
    assert _focus_id(session, "t-agent") == "C-1042"


# ---------------------------------------------------------------------- ConvMemChatEngine


@pytest.mark.parametrize("rewrite", [None, False])
def test_chat_engine_with_default_arguments(session: SessionMemory, rewrite: bool | None) -> None:
    llm, retriever = CountingLLM(), RecordingRetriever()
    kw = {} if rewrite is None else {"rewrite": rewrite}
    memory = ConvMemMemory(session, thread_id="t-engine", **kw)
    inner = CondensePlusContextChatEngine.from_defaults(
        retriever=retriever, llm=llm, memory=memory, skip_condense=True
    )
    engine = ConvMemChatEngine(inner, memory)

    reply = engine.chat(ASK)
    assert "1. Northline Foods — Toronto" in reply.response
    assert llm.calls == [] and retriever.queries == []

    engine.chat("The Toronto one.")
    assert retriever.queries == [RESOLVED]
    assert roles_and_text(llm.last_chat_messages)[-1] == ("user", RESOLVED)
    assert _focus_id(session, "t-engine") == "C-1042"

    engine.chat("Who's their rep?")
    expected = "Who's Northline Foods's rep?" if rewrite is None else "Who's their rep?"
    assert retriever.queries[-1] == expected  # the flag decides the ordinary turns


async def test_chat_engine_async_answer_turn(session: SessionMemory) -> None:
    llm, retriever = CountingLLM(), RecordingRetriever()
    memory = ConvMemMemory(session, thread_id="t-engine-async", rewrite=False)
    inner = CondensePlusContextChatEngine.from_defaults(
        retriever=retriever, llm=llm, memory=memory, skip_condense=True
    )
    engine = ConvMemChatEngine(inner, memory)
    await engine.achat(ASK)
    await engine.achat("The Toronto one.")
    assert retriever.queries == [RESOLVED]


@pytest.mark.parametrize(
    ("text", "ok", "data"),
    [
        ('{"ok": true, "data": {"id": "C-1080", "name": "Brightwater Farms"}}', True, RECORD),
        ("{'ok': False, 'data': {'id': 'C-1080', 'name': 'Brightwater Farms'}}", False, RECORD),
        ('{"id": "C-1080", "name": "Brightwater Farms"}', True, RECORD),
        ("Brightwater Farms, Fresno.", True, None),
    ],
)
def test_a_stored_tool_message_is_read_under_the_contract(text: str, ok: bool, data: Any) -> None:
    """The session-view chat store reads tool *messages* (what agents store), as text
    (``FunctionTool`` stores ``str()`` of the return value): the same contract."""
    from llamaindex_convmem.session_store import tool_result as message_result

    result = message_result(ChatMessage(role="tool", content=text))
    assert (result.ok, result.data) == (ok, data)
