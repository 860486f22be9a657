"""LLMResolver with a scripted CustomLLM that returns fixed JSON (MockLLM would echoes its
prompt, so it would always fall back)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms.custom import CustomLLM

from convmem.domain import Domain
from convmem.session import SessionMemory, TurnContext
from convmem.state import SessionState
from llamaindex_convmem import LLMResolver
from tests.hostile_answers import HOSTILE_REWRITE, CountingCatalog, assert_inert, nested_json
from tests.llamaindex.conftest import TODAY


class ScriptedLLM(CustomLLM):
    """Returns the scripted replies in order and records the prompts it got."""

    replies: list[str] = Field(default_factory=list)
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.replies.pop(0))

    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        raise NotImplementedError("not used by structured_predict")


def _reply(rewritten: str, entities: list[str], refers_back: bool) -> str:
    return json.dumps({
        "rewritten": rewritten, "entities": entities, "filters": [], "clear_filters": [],
        "format": None, "refers_back": refers_back,
    })


def _session(crm: Domain, llm: ScriptedLLM) -> tuple[SessionMemory, LLMResolver]:
    resolver = LLMResolver(llm)
    return SessionMemory(crm, resolver=resolver, clock=lambda: TODAY), resolver


@pytest.mark.parametrize(("second_reply", "rewritten", "failures"), [
    pytest.param(_reply("Who is the account rep for Brightwater Farms?", [], True),
                 "Who is the account rep for Brightwater Farms?", 0, id="llm-rewrite-is-used"),
    pytest.param("I am not JSON at all", "Who's Brightwater Farms's rep?", 1,
                 id="garbage-falls-back-to-rules"),
])
def test_second_turn_uses_the_llm_or_falls_back_to_rules(
    crm: Domain, second_reply: str, rewritten: str, failures: int
) -> None:
    llm = ScriptedLLM(replies=[
        _reply("Pull up Brightwater Farms.", ["Brightwater Farms"], False),
        second_reply,
    ])
    session, resolver = _session(crm, llm)
    session.begin_turn("t", "Pull up Brightwater Farms.")
    session.end_turn("t")
    started = session.begin_turn("t", "Who's their rep?")
    assert isinstance(started, TurnContext)
    assert started.rewritten == rewritten
    assert started.state.focus is not None and started.state.focus.id == "C-1080"
    assert "Current focus: customer 'Brightwater Farms'" in llm.prompts[-1]
    assert resolver.failures == failures


def test_invalid_filter_falls_back(crm: Domain) -> None:
    bad = json.loads(_reply("Orders in Narnia?", [], False))
    bad["filters"] = [{"key": "region", "value": "narnia"}]
    session, resolver = _session(crm, ScriptedLLM(replies=[json.dumps(bad)]))
    started = session.begin_turn("t", "Show open orders in EMEA.")
    assert isinstance(started, TurnContext)
    assert resolver.failures == 1
    assert started.state.filters["region"].value == "emea"


async def test_async_path(crm: Domain) -> None:
    llm = ScriptedLLM(replies=[
        _reply("How is Summit doing?", ["Summit"], False),
        _reply("How is Summit Outdoor GmbH doing?", ["Summit Outdoor GmbH"], False),
    ])
    session, resolver = _session(crm, llm)
    first = await session.abegin_turn("t", "How is Summit doing?")
    assert not isinstance(first, TurnContext)  # two Summits: a clarification
    await session.aend_turn("t")
    second = await session.abegin_turn("t", "Munich.")
    assert isinstance(second, TurnContext)
    assert second.state.focus is not None and second.state.focus.id == "C-1061"
    assert resolver.failures == 0


class FailingLLM(ScriptedLLM):
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise TimeoutError("provider timed out")


def test_provider_error_falls_back(crm: Domain, caplog: pytest.LogCaptureFixture) -> None:
    session, resolver = _session(crm, FailingLLM())
    with caplog.at_level(logging.WARNING, logger="convmem.resolve"):
        started = session.begin_turn("t", "Show open orders in EMEA.")
    assert "ResolverError: structured_predict failed: TimeoutError" in caplog.text
    assert isinstance(started, TurnContext)
    assert resolver.failures == 1
    assert started.state.filters["region"].value == "emea"


def test_salient_travels_through_structured_predict() -> None:
    """Spec §10: the pydantic model mirrors the core schema's ``salient`` (nullable, and in
    OpenAI's strict schema listed as required); a reply without it still parses."""
    from pathlib import Path

    from openai.resources.chat.completions.completions import _type_to_response_format

    from convmem import load_domain
    from convmem.state import Focus, SessionState
    from llamaindex_convmem.resolver import ResolutionModel

    schema = _type_to_response_format(ResolutionModel)["json_schema"]["schema"]  # type: ignore[index]
    assert "salient" in schema["required"] and schema["additionalProperties"] is False
    typed = load_domain(Path(__file__).resolve().parents[1] / "data" / "domains" / "crm_typed.json")
    bf = Focus("customer", "C-1080", "Brightwater Farms", "tool")
    state = SessionState(focus=Focus("rep", "R-08", "Ben Carter", "tool"), salient=(bf,))
    reply = json.loads(_reply("What did Brightwater Farms order last quarter?", [], True))
    llm = ScriptedLLM(replies=[json.dumps({**reply, "salient": "C-1080"}), json.dumps(reply)])
    resolver = LLMResolver(llm)
    assert resolver.resolve("What did they order last quarter?", state, typed, TODAY).refers_to_salient == bf
    assert resolver.resolve("What did they order?", state, typed, TODAY).refers_to_salient is None
    assert resolver.failures == 0


# --------------------------------------------------------------------------- issue 22, finding 4


async def test_a_hostile_nested_reply_falls_back_to_the_rules(crm: Domain) -> None:
    from convmem.resolve import RuleResolver

    question = "Show open orders in EMEA."
    resolver = LLMResolver(ScriptedLLM(replies=[nested_json(100_000)] * 2))
    rules = RuleResolver().resolve(question, SessionState(), crm, TODAY)
    assert resolver.resolve(question, SessionState(), crm, TODAY) == rules
    assert await resolver.aresolve(question, SessionState(), crm, TODAY) == rules
    assert resolver.failures == 2


async def test_the_models_rewrite_is_inert_and_its_names_bounded(crm: Domain) -> None:
    from convmem.resolve.structured import MAX_ANSWER_NAMES

    # (pydantic's JSON parser refuses a lone surrogate's escape: that reply would fall back)
    hostile = HOSTILE_REWRITE.replace("\ud800", "")
    reply = json.loads(_reply(hostile, ["Brightwater Farms", "Northline"] * 10_000, False))
    catalog = CountingCatalog(crm.catalog)
    domain = crm.with_catalog(catalog)  # type: ignore[arg-type]
    resolver = LLMResolver(ScriptedLLM(replies=[json.dumps(reply)] * 2))
    question = "What did Brightwater Farms buy?"
    res = resolver.resolve(question, SessionState(), domain, TODAY)
    assert res == await resolver.aresolve(question, SessionState(), domain, TODAY)
    assert resolver.failures == 0 and catalog.calls == 4  # two distinct names, twice
    assert_inert(res.rewritten)
    assert len(res.mentions) <= MAX_ANSWER_NAMES
