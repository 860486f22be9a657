"""``LLMResolver`` with langchain-core fake chat models (structured output = one tool call).

The fake model answers through ``with_structured_output``'s own machinery (``bind_tools``
+ the JSON tool-call parser), so these tests exercise the real LangChain path; only the
provider is scripted. The same resolver through ``langchain-openai``'s ``ChatOpenAI``, on
hand-written vcrpy cassettes behind a network guard, is in ``test_lc_openai_cassettes.py``.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from lc_fakes import ScriptedChatModel

from convmem.domain import Domain
from convmem.errors import ResolverError
from convmem.resolve import RESOLUTION_SCHEMA, RuleResolver
from convmem.session import SessionMemory, TurnContext
from convmem.state import SessionState
from langchain_convmem import LLMResolver
from tests.hostile_answers import (
    HOSTILE_REWRITE,
    CountingCatalog,
    assert_inert,
    nested,
    nested_json,
)

TODAY = date(2026, 11, 30)
QUESTION = "Show me Brightwater Farms's overdue orders in a table."


def _answer(**args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "Resolution", "args": args, "id": "r1"}])


GOOD = _answer(rewritten=QUESTION, entities=["Brightwater Farms"], filters={"status": "overdue"},
               clear_filters=[], format="table", refers_back=False)


class Failing(ScriptedChatModel):
    def _generate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
        raise RuntimeError("429 Too Many Requests")


def test_structured_answer_becomes_a_resolution(crm: Domain) -> None:
    model = ScriptedChatModel(responses=[GOOD])
    resolver = LLMResolver(model)
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert res.rewritten == QUESTION
    assert dict(res.filters) == {"status": "overdue"} and res.format == "table"
    assert [e.id for m in res.mentions for e in m.candidates] == ["C-1080"]
    assert resolver.failures == 0
    sent = model.received[0][-1].text
    assert sent.endswith(f"Question: {QUESTION}")  # the core's prompt, unchanged


@pytest.mark.parametrize("reply", [
    AIMessage("I think they mean Brightwater."),  # no structured answer at all
    _answer(rewritten=QUESTION, entities=[], filters={"status": "late"}, clear_filters=[],
            format=None, refers_back=False),  # a filter value the domain does not have
])
def test_garbage_falls_back_to_the_rules(crm: Domain, reply: AIMessage) -> None:
    resolver = LLMResolver(ScriptedChatModel(responses=[reply]))
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert res == RuleResolver().resolve(QUESTION, SessionState(), crm, TODAY)
    assert resolver.failures == 1


def test_provider_error_falls_back(crm: Domain) -> None:
    resolver = LLMResolver(Failing(responses=[GOOD]))
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert res == RuleResolver().resolve(QUESTION, SessionState(), crm, TODAY)
    assert resolver.failures == 1


async def test_a_provider_error_is_a_resolver_error_with_its_cause() -> None:
    with pytest.raises(ResolverError, match="429") as sync_info:
        LLMResolver(Failing(responses=[GOOD])).complete_json("prompt", RESOLUTION_SCHEMA)
    with pytest.raises(ResolverError, match="429") as async_info:
        await LLMResolver(Failing(responses=[GOOD])).acomplete_json("prompt", RESOLUTION_SCHEMA)
    assert isinstance(sync_info.value.__cause__, RuntimeError)
    assert isinstance(async_info.value.__cause__, RuntimeError)


async def test_async_path_through_the_session(crm: Domain) -> None:
    model = ScriptedChatModel(responses=[GOOD])
    memory = SessionMemory(crm, resolver=LLMResolver(model))
    started = await memory.abegin_turn("t", QUESTION, today=TODAY)
    assert isinstance(started, TurnContext)
    assert started.state.focus is not None and started.state.focus.id == "C-1080"
    assert started.state.format == "table"
    assert len(model.received) == 1


def test_salient_travels_through_with_structured_output() -> None:
    """Spec §10: the core schema's ``salient`` comes back through LangChain's tool call."""
    from pathlib import Path

    from convmem import load_domain
    from convmem.state import Focus

    typed = load_domain(Path(__file__).resolve().parents[1] / "data" / "domains" / "crm_typed.json")
    bf = Focus("customer", "C-1080", "Brightwater Farms", "tool")
    state = SessionState(focus=Focus("rep", "R-08", "Ben Carter", "tool"), salient=(bf,))
    model = ScriptedChatModel(responses=[_answer(
        rewritten="What did Brightwater Farms order last quarter?", entities=[], filters={},
        clear_filters=[], format=None, refers_back=True, salient="C-1080")])
    resolver = LLMResolver(model)
    res = resolver.resolve("What did they order last quarter?", state, typed, TODAY)
    assert resolver.failures == 0 and res.refers_to_salient == bf
    assert "Also in this conversation: customer 'Brightwater Farms'" in model.received[0][-1].text


# --------------------------------------------------------------------------- issue 22, finding 4


def _raw_tool_call(arguments: str) -> AIMessage:
    """A tool call whose arguments are still JSON text (LangChain parses them on invoke)."""
    return AIMessage(content="", additional_kwargs={"tool_calls": [{
        "function": {"name": "Resolution", "arguments": arguments}, "id": "r1",
        "type": "function"}]})


@pytest.mark.parametrize("reply", [
    pytest.param(lambda: _raw_tool_call(nested_json(100_000)), id="arguments-100000-deep"),
    pytest.param(lambda: _answer(rewritten=QUESTION, entities=[], filters={"status": nested(100_000)},
                                 clear_filters=[], format=None, refers_back=False),
                 id="filter-value-100000-deep"),
])
async def test_a_hostile_nested_reply_falls_back_to_the_rules(crm: Domain, reply: Any) -> None:
    resolver = LLMResolver(ScriptedChatModel(responses=[reply(), reply()]))
    rules = RuleResolver().resolve(QUESTION, SessionState(), crm, TODAY)
    assert resolver.resolve(QUESTION, SessionState(), crm, TODAY) == rules
    assert await resolver.aresolve(QUESTION, SessionState(), crm, TODAY) == rules
    assert resolver.failures == 2


async def test_the_models_rewrite_is_inert_and_its_names_bounded(crm: Domain) -> None:
    from convmem.resolve.structured import MAX_ANSWER_NAMES

    reply = _answer(rewritten=HOSTILE_REWRITE, entities=["Brightwater Farms", "Northline"] * 10_000,
                    filters={}, clear_filters=[], format=None, refers_back=False)
    catalog = CountingCatalog(crm.catalog)
    domain = crm.with_catalog(catalog)  # type: ignore[arg-type]
    resolver = LLMResolver(ScriptedChatModel(responses=[reply, reply]))
    res = resolver.resolve(QUESTION, SessionState(), domain, TODAY)
    assert res == await resolver.aresolve(QUESTION, SessionState(), domain, TODAY)
    assert resolver.failures == 0 and catalog.calls == 4  # two distinct names, twice
    assert_inert(res.rewritten)
    assert len(res.mentions) <= MAX_ANSWER_NAMES
