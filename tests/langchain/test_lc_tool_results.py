"""Every form a LangChain tool result takes, read under the one contract
(``docs/tool-results.md``): ``ToolMessage`` content (JSON envelope, bare record, list,
plain text, content blocks), ``artifact``, ``status="error"``, ``Command`` updates; and
inside ``create_agent``, a tool returning a ``Command``."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from lc_fakes import ScriptedChatModel, call
from pydantic import BaseModel

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from convmem.tools import ToolResult
from convmem.transcript import ToolResultPart, TranscriptStore
from langchain_convmem import SessionMemoryMiddleware, tool_result
from langchain_convmem.tool_results import command_results, output_result

RECORD = {"id": "C-1080", "name": "Brightwater Farms"}
ENVELOPE = json.dumps({"ok": True, "data": RECORD})


class Customer(BaseModel):
    id: str
    name: str


@dataclass
class CustomerRow:
    id: str
    name: str


def _msg(content: Any, **kw: Any) -> ToolMessage:
    return ToolMessage(content=content, tool_call_id="c1", **kw)


@pytest.mark.parametrize(
    ("message", "ok", "data"),
    [
        (_msg(ENVELOPE), True, RECORD),
        (_msg(json.dumps(RECORD)), True, RECORD),
        (_msg(json.dumps([RECORD, RECORD])), True, [RECORD, RECORD]),
        (_msg(json.dumps({"ok": False, "data": RECORD})), False, RECORD),
        (_msg(json.dumps({"ok": "false", "data": RECORD})), False, RECORD),  # not a boolean
        (_msg(json.dumps({"ok": 1, "data": RECORD})), False, RECORD),
        (_msg("Brightwater Farms, Fresno."), True, None),
        (_msg(""), True, None),
        (_msg(ENVELOPE, status="error"), False, None),  # the tool raised: nothing is read
        (_msg([{"type": "text", "text": ENVELOPE}]), True, RECORD),
        (_msg(["{\"ok\": true, ", "\"data\": {\"id\": \"C-1080\"}}"]), True, {"id": "C-1080"}),
        (_msg([{"type": "json", "json": {"ok": False}}]), False, None),
        (_msg([RECORD, RECORD]), True, [RECORD, RECORD]),  # plain dicts: records
        (_msg([{"type": "image", "url": "https://x.example/a.png"}]), True, None),
        (_msg("shown to the model", artifact={"ok": True, "data": RECORD}), True, RECORD),
        (_msg("shown to the model", artifact=RECORD), True, RECORD),
        (_msg("shown to the model", artifact={"ok": False, "data": RECORD}), False, RECORD),
        (_msg("x", artifact=Customer(**RECORD)), True, RECORD),
        (_msg("x", artifact=CustomerRow(**RECORD)), True, RECORD),
        (_msg(ENVELOPE, artifact=object()), True, RECORD),  # unreadable artifact: content
        (_msg(ENVELOPE, artifact="not json"), True, RECORD),
    ],
)
def test_tool_message_forms(message: ToolMessage, ok: bool, data: Any) -> None:
    result = tool_result(message)
    assert (result.ok, result.data) == (ok, data)


def test_the_record_keeps_the_tools_text() -> None:
    assert tool_result(_msg(ENVELOPE)).text == ENVELOPE
    blocks = [{"type": "text", "text": ENVELOPE}]
    assert tool_result(_msg(blocks)).text == json.dumps(blocks)
    assert tool_result(_msg("boom", status="error")).text == "boom"


def test_command_updates() -> None:
    answer = _msg(ENVELOPE)
    other = ToolMessage(content=json.dumps({"id": "C-1"}), tool_call_id="other")
    assert command_results(Command(update={"messages": [other, answer]}), "c1") == [
        ToolResult(True, RECORD, ENVELOPE)
    ]
    assert command_results(Command(update=[("messages", [answer])]), "c1")[0].data == RECORD
    assert command_results(Command(update={"focus": "x"}), "c1") == []
    assert command_results(Command(goto="end"), "c1") == []
    assert command_results(answer, "c1")[0].ok


def test_callback_outputs() -> None:
    """What ``on_tool_end`` hands the Runnable's listener: a message, a Command or the
    tool's own return value."""
    assert output_result(_msg(ENVELOPE)).data == RECORD
    assert output_result({"ok": False, "data": RECORD}).ok is False
    assert output_result(RECORD).data == RECORD
    assert output_result(Command(update={"messages": [_msg(ENVELOPE)]})).data == RECORD
    assert output_result(42) == ToolResult(True, None, "42")


def test_the_core_does_not_read_framework_objects(memory: SessionMemory) -> None:
    memory.begin_turn("t", "Find the farm account in Fresno.")
    with pytest.raises(ConfigError, match=r"langchain_convmem\.tool_result"):
        memory.record_tool("t", "lookup_customer", {}, _msg(ENVELOPE))
    memory.record_tool("t", "lookup_customer", {}, tool_result(_msg(ENVELOPE)))
    state = memory.get_state("t")
    assert state is not None and state.focus is not None and state.focus.id == "C-1080"


def test_the_record_holds_the_tool_message_as_produced(
    memory: SessionMemory, transcript: TranscriptStore
) -> None:
    recorded = SessionMemory(memory.domain, transcript=transcript, tenant=uuid.uuid4().hex)
    model = ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="Brightwater"), AIMessage("Found it."),
    ])

    @tool
    def lookup_customer(name: str) -> str:
        """Look up one customer by name."""
        return ENVELOPE

    agent = create_agent(model, [lookup_customer], middleware=[SessionMemoryMiddleware(recorded)],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("Find the farm account in Fresno.")]},
                 {"configurable": {"thread_id": "t-rec"}})
    path = transcript.active_path(recorded.tenant, recorded.transcript_thread_id("t-rec"))
    results = [p for m in path for p in m.parts if isinstance(p, ToolResultPart)]
    assert [(p.content, p.is_error) for p in results] == [(ENVELOPE, False)]


def test_a_tool_returning_a_command_inside_create_agent(memory: SessionMemory) -> None:
    @tool
    def lookup_customer(name: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Look up one customer by name."""
        return Command(update={"messages": [
            ToolMessage(content=ENVELOPE, tool_call_id=tool_call_id)
        ]})

    model = ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="Brightwater"), AIMessage("Found it."),
    ])
    agent = create_agent(model, [lookup_customer], middleware=[SessionMemoryMiddleware(memory)],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("Find the farm account in Fresno.")]},
                 {"configurable": {"thread_id": "t-cmd"}})
    state = memory.get_state("t-cmd")
    assert state is not None and state.focus is not None
    assert (state.focus.id, state.focus.source) == ("C-1080", "tool")


def test_the_session_view_history_reads_the_envelope(
    memory: SessionMemory, transcript: TranscriptStore
) -> None:
    """``ConvMemChatMessageHistory(view="session")`` replays a ``ToolMessage`` into the
    tool rules through the same reader: an envelope sets the focus, ``ok: false`` not."""
    from langchain_convmem import ConvMemChatMessageHistory

    recorded = SessionMemory(memory.domain, transcript=transcript, tenant=uuid.uuid4().hex)
    history = ConvMemChatMessageHistory(recorded, "k", view="session")
    history.add_messages([
        HumanMessage("Find the farm account in Fresno."),
        call("lookup_customer", "c1", name="the Fresno farm"),
        ToolMessage(ENVELOPE, tool_call_id="c1"),
        AIMessage("Brightwater Farms, Fresno."),
        HumanMessage("And the clinic?"),
        call("lookup_customer", "c2", name="the clinic"),
        ToolMessage(json.dumps({"ok": False, "data": {"id": "C-1094", "name": "Pinecrest"}}),
                    tool_call_id="c2"),
        AIMessage("The CRM timed out."),
    ])
    state = recorded.get_state("k")
    assert state is not None and state.focus is not None
    assert (state.focus.id, state.focus.source) == ("C-1080", "tool")
