"""Turns recorded through ``ConvMemChatEngine`` / ``ConvMemMemory``: on every turn the
record's model input equals what the scripted LLM received; a failing LLM leaves
commit point 1 only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from convmem.session import SessionMemory
from llamaindex_convmem import ConvMemChatEngine, ConvMemMemory, wrap_tools
from tests.llamaindex.li_helpers import CapturingLLM, CountingLLM, roles_and_text, sent
from tests.llamaindex.test_li_agent import SYSTEM as AGENT_SYSTEM
from tests.llamaindex.test_li_agent import Script, lookup_customer, lookup_rep, search_customers
from tests.recorded_inputs import Record, arecord, record

SYSTEM = "You are a CRM assistant."
QUESTIONS = ["Pull up Brightwater Farms.", "Who's their rep?", "How is Summit doing?", "Munich."]




class BrokenLLM(CountingLLM):
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        raise RuntimeError("provider down")


def _engine(session: SessionMemory, llm: CountingLLM) -> ConvMemChatEngine:
    memory = ConvMemMemory(session, thread_id="t-1")
    inner = SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt=SYSTEM)
    return ConvMemChatEngine(inner, memory)


def _check(found: Record, llm: CapturingLLM) -> None:
    recorded, path = found
    received = llm.__dict__["received"]
    assert len(recorded) == len(received) == 3  # the clarification turn calls no model
    for r, got in zip(recorded, received, strict=True):
        assert sent(r) == got
        assert r.completed_at is not None and r.model == llm.metadata.model_name
    assert received[1][-1] == ("user", "Who's Brightwater Farms's rep?")
    users = [m.text for m in path if m.role == "user"]
    assert users == QUESTIONS  # what the user typed, the rewrite only in sent_as
    assert len(path) == 8 and all(m.role == "assistant" for m in path[1::2])


def test_engine_wrapper_records_what_the_model_received(recorded: SessionMemory) -> None:
    llm = CapturingLLM()
    engine = _engine(recorded, llm)
    for question in QUESTIONS:
        engine.chat(question)
    _check(record(recorded, "t-1"), llm)


async def test_engine_wrapper_records_async(recorded: SessionMemory) -> None:
    llm = CapturingLLM()
    engine = _engine(recorded, llm)
    for question in QUESTIONS:
        await engine.achat(question)
    found = await arecord(recorded, "t-1")
    assert recorded.transcript is not None
    await recorded.transcript.async_engine.dispose()
    _check(found, llm)


def test_failing_llm_leaves_commit_point_one(recorded: SessionMemory) -> None:
    engine = _engine(recorded, BrokenLLM())
    with pytest.raises(RuntimeError, match="provider down"):
        engine.chat("Pull up Brightwater Farms.")
    (r,), path = record(recorded, "t-1")
    assert r.completed_at is None and [m.role for m in path] == ["user"]
    assert sent(r) == [("system", SYSTEM), ("system", r.rendered_block),
                       ("user", "Pull up Brightwater Farms.")]


async def test_function_agent_with_wrapped_tools_records_each_turn(
    recorded: SessionMemory,
) -> None:
    script = Script()
    memory = ConvMemMemory(recorded, thread_id="t-agent", system_prompt=AGENT_SYSTEM)
    tools = wrap_tools(
        [FunctionTool.from_defaults(fn=f) for f in (lookup_customer, lookup_rep, search_customers)],
        memory,
    )
    agent = FunctionAgent(
        tools=tools, llm=MockFunctionCallingLLM(response_generator=script),
        system_prompt=AGENT_SYSTEM,
    )
    firsts = []
    for question in ("Pull up Brightwater Farms.", "Who's their rep?",
                     "Find the logistics customer up in the Pacific Northwest.", "Seattle."):
        firsts.append(len(script.inputs))
        await agent.run(user_msg=question, memory=memory)
    found, path = await arecord(recorded, "t-agent")
    assert recorded.transcript is not None
    await recorded.transcript.async_engine.dispose()
    assert len(found) == 4
    for r, first in zip(found, firsts, strict=True):
        assert sent(r) == roles_and_text(script.inputs[first])
        assert {s["function"]["name"] for s in r.tool_schemas} == {
            "lookup_customer", "lookup_rep", "search_customers"}
        assert r.completed_at is not None
    tool_calls = [p for m in path for p in m.parts if p.kind == "tool_call"]
    results = [p for m in path for p in m.parts if p.kind == "tool_result"]
    assert [c.name for c in tool_calls] == ["lookup_customer", "lookup_rep", "search_customers"]
    assert [r.call_id for r in results] == [c.call_id for c in tool_calls]
    assert "Dana Whitfield" in results[1].content
