"""Real LangChain traffic with default arguments (issue 12's "done when").

``create_agent`` + ``SessionMemoryMiddleware(memory)`` and ``RunnableWithSessionMemory``
around a tool-calling chain, both with nothing but defaults and a scripted tool-calling
model: a tool result in the spec §6 envelope sets the focus; a failed one (``ok:
false``, even with a record in ``data``) sets neither focus nor filters; the turn after
a clarification sends the original question resolved to the chosen entity.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from lc_fakes import ScriptedChatModel, call

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from langchain_convmem import RunnableWithSessionMemory, SessionMemoryMiddleware

SYSTEM = "You are a CRM assistant."
NORTHLINE = (
    'Three customers match "Northline". Which one?\n'
    "1. Northline Foods — Toronto, acct 40112\n"
    "2. Northline Foods — Chicago, acct 40587\n"
    "3. Northline Logistics — Vancouver, acct 41230"
)
RESOLVED = "How is Northline Foods doing on payments?"


@tool
def lookup_customer(name: str) -> str:
    """Look up one customer by name."""
    if name == "the Fresno farm":
        return json.dumps({"ok": True, "data": {"id": "C-1080", "name": "Brightwater Farms"}})
    # A failure that still carries a record: reading it as data would move the focus.
    return json.dumps({"ok": False, "error": "CRM timeout",
                       "data": {"id": "C-1094", "name": "Pinecrest Clinics"}})


@tool
def list_orders(status: str) -> str:
    """List the focused customer's orders with a status."""
    return json.dumps({"ok": False, "error": "orders service unavailable"})


TOOLS: dict[str, BaseTool] = {t.name: t for t in (lookup_customer, list_orders)}


def _script() -> list[BaseMessage]:
    return [
        call("lookup_customer", "c1", name="the Fresno farm"),
        AIMessage("Brightwater Farms, Fresno."),
        call("list_orders", "c2", status="overdue"),
        call("lookup_customer", "c3", name="Pinecrest"),
        AIMessage("The order service is down."),
        AIMessage("Northline Foods (Toronto) is current on payments."),
    ]


def _focus_id(memory: SessionMemory, thread: str) -> str | None:
    state = memory.get_state(thread)
    assert state is not None
    return state.focus.id if state.focus is not None else None


# ---------------------------------------------------------------------- create_agent


def _agent(model: ScriptedChatModel, memory: SessionMemory, **kw: Any) -> Any:
    return create_agent(
        model, list(TOOLS.values()), system_prompt=SYSTEM,
        middleware=[SessionMemoryMiddleware(memory, **kw)], checkpointer=InMemorySaver(),
    )


def _ask(agent: Any, text: str, thread: str) -> Any:
    return agent.invoke({"messages": [HumanMessage(text)]},
                        {"configurable": {"thread_id": thread}})


async def _aask(agent: Any, text: str, thread: str) -> Any:
    return await agent.ainvoke({"messages": [HumanMessage(text)]},
                               {"configurable": {"thread_id": thread}})


def test_agent_with_default_arguments(memory: SessionMemory) -> None:
    model = ScriptedChatModel(responses=_script())
    agent = _agent(model, memory)

    _ask(agent, "Find the farm account in Fresno.", "t-1")
    state = memory.get_state("t-1")
    assert state is not None and state.focus is not None
    assert (state.focus.id, state.focus.source) == ("C-1080", "tool")  # the envelope was read

    _ask(agent, "What's on their order list?", "t-1")
    state = memory.get_state("t-1")
    assert state is not None
    assert _focus_id(memory, "t-1") != "C-1094"  # ok: false never sets the focus ...
    assert dict(state.filters) == {}  # ... nor a filter from the call's arguments

    out = _ask(agent, "How is Northline doing on payments?", "t-1")
    assert out["messages"][-1].text == NORTHLINE
    assert len(model.received) == 5  # the clarification called no model

    _ask(agent, "The Toronto one.", "t-1")
    sent = model.received[5]
    assert isinstance(sent[-1], HumanMessage) and sent[-1].text == RESOLVED
    assert _focus_id(memory, "t-1") == "C-1042"
    kept = agent.get_state({"configurable": {"thread_id": "t-1"}}).values["messages"]
    assert [m.text for m in kept if isinstance(m, HumanMessage)][-1] == "The Toronto one."


@pytest.mark.parametrize("rewrite", [True, False])
async def test_agent_answer_turn_sends_the_resolved_question_async(
    memory: SessionMemory, rewrite: bool
) -> None:
    model = ScriptedChatModel(responses=[AIMessage("Current on payments.")])
    agent = _agent(model, memory, rewrite=rewrite)
    out = await _aask(agent, "How is Northline doing on payments?", "t-2")
    assert out["messages"][-1].text == NORTHLINE and model.received == []
    await _aask(agent, "The Toronto one.", "t-2")
    assert [m.text for m in model.received[0] if isinstance(m, HumanMessage)] == [RESOLVED]


# ---------------------------------------------------------------------- the Runnable

PROMPT = ChatPromptTemplate.from_messages([
    ("system", SYSTEM), MessagesPlaceholder("history"), ("human", "{question}"),
])


def _tool_chain(model: ScriptedChatModel) -> RunnableLambda[dict[str, Any], AIMessage]:
    """A hand-written tool-calling loop, as an LCEL user writes one without an agent."""

    def run(inputs: dict[str, Any], config: RunnableConfig) -> AIMessage:
        messages = PROMPT.invoke(inputs, config).to_messages()
        answer = model.invoke(messages, config)
        while answer.tool_calls:
            messages.append(answer)
            messages += [TOOLS[c["name"]].invoke(c, config) for c in answer.tool_calls]
            answer = model.invoke(messages, config)
        return answer

    async def arun(inputs: dict[str, Any], config: RunnableConfig) -> AIMessage:
        messages = (await PROMPT.ainvoke(inputs, config)).to_messages()
        answer = await model.ainvoke(messages, config)
        while answer.tool_calls:
            messages.append(answer)
            messages += [await TOOLS[c["name"]].ainvoke(c, config) for c in answer.tool_calls]
            answer = await model.ainvoke(messages, config)
        return answer

    return RunnableLambda(run, afunc=arun)


def _questions(model: ScriptedChatModel, index: int) -> list[str]:
    return [m.text for m in model.received[index] if isinstance(m, HumanMessage)]


def test_runnable_with_default_arguments(memory: SessionMemory) -> None:
    model = ScriptedChatModel(responses=_script())
    chain = RunnableWithSessionMemory(
        _tool_chain(model), memory, input_messages_key="question", history_messages_key="history"
    )
    cfg: Any = {"configurable": {"session_id": "s-1"}}

    chain.invoke({"question": "Find the farm account in Fresno."}, cfg)
    state = memory.get_state("s-1")
    assert state is not None and state.focus is not None
    assert (state.focus.id, state.focus.source) == ("C-1080", "tool")

    chain.invoke({"question": "What's on their order list?"}, cfg)
    state = memory.get_state("s-1")
    assert state is not None and dict(state.filters) == {}
    assert _focus_id(memory, "s-1") != "C-1094"

    clarification = chain.invoke({"question": "How is Northline doing on payments?"}, cfg)
    assert isinstance(clarification, AIMessage) and clarification.text == NORTHLINE
    assert len(model.received) == 5

    chain.invoke({"question": "The Toronto one."}, cfg)
    assert _questions(model, 5) == [RESOLVED]
    assert _focus_id(memory, "s-1") == "C-1042"


@pytest.mark.parametrize("rewrite", [True, False])
async def test_runnable_async_reads_tools_and_resends_the_question(
    memory: SessionMemory, rewrite: bool
) -> None:
    model = ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="the Fresno farm"), AIMessage("Found it."),
        AIMessage("Current on payments."),
    ])
    chain = RunnableWithSessionMemory(
        _tool_chain(model), memory, input_messages_key="question",
        history_messages_key="history", rewrite=rewrite,
    )
    cfg: Any = {"configurable": {"session_id": "s-2"}}
    await chain.ainvoke({"question": "Find the farm account in Fresno."}, cfg)
    assert _focus_id(memory, "s-2") == "C-1080"
    await chain.ainvoke({"question": "How is Northline doing on payments?"}, cfg)
    chunks = [c async for c in chain.astream({"question": "The Toronto one."}, cfg)]
    assert chunks and _questions(model, 2) == [RESOLVED]


def test_runnable_records_a_raising_tool_as_a_failure(memory: SessionMemory) -> None:
    @tool
    def lookup_customer(name: str) -> dict[str, str]:
        """Look up one customer by name."""
        raise RuntimeError("CRM down")

    def run(inputs: dict[str, Any], config: RunnableConfig) -> str:
        try:
            lookup_customer.invoke({"name": "Brightwater Farms"}, config)
        except RuntimeError:
            return "The CRM is down."
        return "unreachable"

    chain = RunnableWithSessionMemory(RunnableLambda(run), memory, input_messages_key="question")
    assert chain.invoke({"question": "Find the farm account in Fresno."},
                        {"configurable": {"session_id": "s-3"}}) == "The CRM is down."
    assert _focus_id(memory, "s-3") is None


def test_runnable_reads_a_tools_plain_return_value(memory: SessionMemory) -> None:
    """A tool invoked with plain arguments (no tool call) ends with its own return value."""

    @tool
    def lookup_customer(name: str) -> dict[str, Any]:
        """Look up one customer by name."""
        return {"ok": True, "data": {"id": "C-1080", "name": "Brightwater Farms"}}

    def run(inputs: dict[str, Any], config: RunnableConfig) -> str:
        found = lookup_customer.invoke({"name": "Brightwater Farms"}, config)
        return str(found["data"]["name"])

    chain = RunnableWithSessionMemory(RunnableLambda(run), memory, input_messages_key="question")
    chain.invoke({"question": "Find the farm account in Fresno."},
                 {"configurable": {"session_id": "s-4"}})
    assert _focus_id(memory, "s-4") == "C-1080"


def test_tool_messages_in_the_chain_output_are_not_read_twice(memory: SessionMemory) -> None:
    """The listener reads each tool run once, however the chain passes the message on."""
    model = ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="the Fresno farm"), AIMessage("Found it."),
    ])
    seen: list[ToolMessage] = []

    def run(inputs: dict[str, Any], config: RunnableConfig) -> list[BaseMessage]:
        answer = model.invoke(PROMPT.invoke(inputs, config).to_messages(), config)
        result = lookup_customer.invoke(answer.tool_calls[0], config)
        seen.append(result)
        return [answer, result, model.invoke([result], config)]

    chain = RunnableWithSessionMemory(RunnableLambda(run), memory,
                                      input_messages_key="question",
                                      history_messages_key="history")
    chain.invoke({"question": "Find the farm account in Fresno."},
                 {"configurable": {"session_id": "s-5"}})
    state = memory.get_state("s-5")
    assert state is not None and state.focus is not None and state.focus.id == "C-1080"
    assert state.version == 3  # begin_turn, one record_tool, end_turn


# ---------------------------------------------------------------------- tracing


def _tree(run: Any) -> tuple[str, list[Any]]:
    return run.name, [_tree(child) for child in run.child_runs]


@pytest.mark.parametrize("mode", ["invoke", "stream", "ainvoke", "astream"])
async def test_runnable_is_a_named_run_in_tracing(memory: SessionMemory, mode: str) -> None:
    """Every turn is one run named ``RunnableWithSessionMemory``: the chain's runs
    nest under it, and a clarification (no chain call) is a run of its own."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.tracers.run_collector import RunCollectorCallbackHandler

    model = ScriptedChatModel(responses=[AIMessage("Brightwater Farms, Fresno.")])
    chain = RunnableWithSessionMemory(
        PROMPT | model | StrOutputParser(), memory,
        input_messages_key="question", history_messages_key="history",
    )

    async def turn(question: str) -> Any:
        tracer = RunCollectorCallbackHandler()
        cfg: Any = {"configurable": {"session_id": f"s-{mode}"}, "callbacks": [tracer]}
        inputs = {"question": question}
        if mode == "invoke":
            chain.invoke(inputs, cfg)
        elif mode == "stream":
            list(chain.stream(inputs, cfg))
        elif mode == "ainvoke":
            await chain.ainvoke(inputs, cfg)
        else:
            [c async for c in chain.astream(inputs, cfg)]
        (root,) = tracer.traced_runs
        return root

    root = await turn("Pull up Brightwater Farms.")
    name, children = _tree(root)
    assert name == "RunnableWithSessionMemory"
    assert [c[0] for c in children] == ["RunnableSequence"]
    assert [c[0] for c in children[0][1]] == [
        "ChatPromptTemplate", "ScriptedChatModel", "StrOutputParser"
    ]
    assert root.outputs == {"output": "Brightwater Farms, Fresno."}

    root = await turn("How is Northline doing on payments?")
    assert _tree(root) == ("RunnableWithSessionMemory", [])
    assert root.outputs == {"output": NORTHLINE}
    assert root.inputs == {"question": "How is Northline doing on payments?"}


# ---------------------------------------------------------------------- tenancy


def test_a_tenant_from_the_config_is_read_through_for_tenant(memory: SessionMemory) -> None:
    """``docs/tenancy.md``: ``configurable["tenant_id"]`` picks the tenant of the call;
    the application reads that tenant's state through ``memory.for_tenant``."""
    model = ScriptedChatModel(responses=[*_script()[:2], AIMessage("Fresno.")])
    agent = _agent(model, memory)
    acme: Any = {"configurable": {"thread_id": "thread-42", "tenant_id": "acme"}}
    agent.invoke({"messages": [HumanMessage("Find the farm account in Fresno.")]}, acme)
    assert memory.get_state("thread-42") is None  # the memory's own tenant: "default"
    state = memory.for_tenant("acme").get_state("thread-42")
    assert state is not None and state.focus is not None and state.focus.id == "C-1080"

    chain = RunnableWithSessionMemory(PROMPT | model, memory, input_messages_key="question",
                                      history_messages_key="history")
    chain.invoke({"question": "Where are they?"},
                 {"configurable": {"session_id": "thread-42", "tenant_id": "acme"}})
    state = memory.for_tenant("acme").get_state("thread-42")
    assert state is not None and state.turn == 2  # the same tenant's thread, both adapters

    with pytest.raises(ConfigError, match=r'"tenant_id"\] contains a control character'):
        chain.invoke({"question": "Hi"},
                     {"configurable": {"session_id": "thread-42", "tenant_id": "acme\n"}})
