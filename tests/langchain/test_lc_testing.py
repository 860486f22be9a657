"""``langchain_convmem.testing.ScriptedChatModel``: the shipped offline chat model."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from langchain_convmem.testing import ScriptedChatModel


@tool
def lookup_customer(name: str) -> str:
    """Look up one customer by name."""
    return name


def test_answers_in_order_records_prompts_and_refuses_to_cycle() -> None:
    model = ScriptedChatModel(responses=[AIMessage("one"), AIMessage("two")])
    bound = model.bind_tools([lookup_customer])
    assert bound.invoke([HumanMessage("a")]).text == "one"
    assert model.invoke([HumanMessage("b")]).text == "two"
    assert [[m.text for m in prompt] for prompt in model.received] == [["a"], ["b"]]
    with pytest.raises(AssertionError, match="called 3 times; its script has 2"):
        model.invoke([HumanMessage("c")])  # FakeMessagesListChatModel would answer "one"


def test_cycle_starts_the_script_over() -> None:
    model = ScriptedChatModel(responses=[AIMessage("one"), AIMessage("two")], cycle=True)
    answers = [model.invoke([HumanMessage(q)]).text for q in "abc"]
    assert answers == ["one", "two", "one"]
    assert len(model.received) == 3


async def test_async_path() -> None:
    model = ScriptedChatModel(responses=[AIMessage("", tool_calls=[
        {"name": "lookup_customer", "args": {"name": "x"}, "id": "c1"}])])
    answer = await model.ainvoke([HumanMessage("a")])
    assert answer.tool_calls[0]["name"] == "lookup_customer"
