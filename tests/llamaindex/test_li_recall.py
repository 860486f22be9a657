"""``recall_tool`` and ``ConvMemMemory(recall=True)`` in a real ``FunctionAgent``: a
scripted function-calling model calls ``recall_conversation`` for "what was the total
you gave me?" and answers from what it returns (the async tool); the sync tool and
the thread it is bound to, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM

from convmem.errors import ConfigError
from convmem.render import recall_line
from convmem.session import RECALL_TOOL, SessionMemory
from convmem.session.recall import NO_MATCH
from llamaindex_convmem import ConvMemMemory, recall_tool, wrap_tools
from tests.llamaindex.li_helpers import roles_and_text

SYSTEM = "You are a CRM assistant."
TOTAL = "The total on invoice 42 for Brightwater Farms is $4,200."
ASK_TOTAL = "How much does Brightwater Farms owe on invoice 42?"
RECALL = "What was the total you gave me?"


class Script:
    """Answers the first question, recalls for the second, answers from the tool."""

    def __init__(self) -> None:
        self.inputs: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.inputs.append(list(messages))
        last = messages[-1]
        if last.role.value == "tool":
            told = "$4,200" if "$4,200" in (last.content or "") else "nothing"
            return ChatMessage(role="assistant", content=f"I told you the total was {told}.")
        if last.content == RECALL:
            return ChatMessage(role="assistant", blocks=[ToolCallBlock(
                tool_call_id="r1", tool_name=RECALL_TOOL, tool_kwargs={"query": "total"})])
        if last.content == ASK_TOTAL:
            return ChatMessage(role="assistant", content=TOTAL)
        return ChatMessage(role="assistant", content="Noted.")


async def test_the_agent_recalls_an_earlier_answer(recorded: SessionMemory) -> None:
    script = Script()
    memory = ConvMemMemory(recorded, thread_id="t-1", recall=True)
    agent = FunctionAgent(
        tools=wrap_tools([memory.recall_tool()], memory),
        llm=MockFunctionCallingLLM(response_generator=script), system_prompt=SYSTEM,
    )
    await agent.run(user_msg=ASK_TOTAL, memory=memory)
    result = await agent.run(user_msg=RECALL, memory=memory)
    assert str(result.response.content) == "I told you the total was $4,200."
    asked, answered = script.inputs[1], script.inputs[2]
    block = roles_and_text(asked)[1]
    assert block[0] == "system" and block[1].endswith(recall_line(RECALL_TOOL))
    assert all(TOTAL not in text for _, text in roles_and_text(asked))  # never in the prompt
    tool_text = roles_and_text(answered)[-1]
    assert tool_text[0] == "tool" and TOTAL in tool_text[1] and "[assistant, turn " in tool_text[1]
    # recorded like the agent's other tools (wrap_tools): call and result on the path
    assert recorded.transcript is not None
    tid = await recorded.atranscript_thread_id("t-1")
    path = await recorded.transcript.aactive_path(recorded.tenant, tid)
    assert [m.role for m in path[-4:]] == ["user", "assistant", "tool", "assistant"]
    # the record keeps the recall's references, not copies a redaction would miss
    kept = path[-2].parts[0].content  # type: ignore[union-attr]
    assert kept.startswith("[assistant, turn ") and "message " in kept and TOTAL not in kept
    assert path[-3].parts[0].name == RECALL_TOOL  # type: ignore[union-attr]


def test_the_sync_tool_reads_only_its_thread(recorded: SessionMemory) -> None:
    recorded.begin_turn("t-1", ASK_TOTAL)
    recorded.end_turn("t-1", answer=TOTAL)
    tool = recall_tool(recorded, thread_id="t-1")
    assert tool.metadata.name == RECALL_TOOL
    assert TOTAL in tool.call(query="total").content
    assert recall_tool(recorded, thread_id="t-2").call(query="total").content == NO_MATCH
    other = recorded.for_tenant(recorded.tenant + "-b")
    assert recall_tool(other, thread_id="t-1").call(query="total").content == NO_MATCH
    assert ConvMemMemory(recorded, thread_id="t-1").recall_tool().call(query="total").content \
        == tool.call(query="total").content


def test_recall_tool_checks_its_arguments(session: SessionMemory) -> None:
    with pytest.raises(ConfigError, match="SessionMemory"):
        recall_tool(object(), thread_id="t")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        recall_tool(session, thread_id="")
    with pytest.raises(ConfigError, match="no transcript"):
        recall_tool(session, thread_id="t").call(query="total")
