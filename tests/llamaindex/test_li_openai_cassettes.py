"""``LLMResolver`` through ``llama-index-llms-openai``'s real ``OpenAI`` LLM, offline.

Every cassette under ``cassettes/`` is HAND-WRITTEN from OpenAI's documented Chat
Completions response object (and its documented refusal shape); none was recorded
from the API and no real key exists here (the client gets a dummy one). They play in
``record_mode="none"`` behind ``network_guard`` (``tests/offline_http.py``): a request
the cassette does not hold raises, any connection off this machine raises, and a
cassette whose interactions were not all played fails the test, so a fallback test
cannot pass by missing its cassette. Requests match on method, URI and the body
fields each cassette states: the model, the core's prompt, and ``response_format``
of type ``json_schema`` with ``strict: true`` (what ``structured_predict`` sends for a
model with Structured Outputs; not tool calling), whose schema keeps
``additionalProperties: false`` and carries filters as an array, as strict mode needs.
"""

from __future__ import annotations

import json
from datetime import date, datetime

import pytest
from llama_index.llms.openai import OpenAI
from vcr.cassette import Cassette

from convmem.domain import Domain
from convmem.resolve import Resolution, RuleResolver
from convmem.session import SessionMemory, TurnContext
from convmem.state import SessionState
from llamaindex_convmem import LLMResolver
from tests.llamaindex.test_li_resolver import ScriptedLLM
from tests.offline_http import DUMMY_OPENAI_KEY, OPENAI_BASE_URL

TODAY = date(2026, 11, 30)
QUESTION = "What does Brightwater still owe us? A table please."


def _llm() -> OpenAI:
    return OpenAI(model="gpt-4o-mini", api_key=DUMMY_OPENAI_KEY, api_base=OPENAI_BASE_URL,
                  max_retries=0)


def _rules(crm: Domain) -> Resolution:
    return RuleResolver().resolve(QUESTION, SessionState(), crm, TODAY)


@pytest.mark.parametrize("cassette", ["openai_structured_good.yaml"], indirect=True)
def test_structured_answer_is_used(cassette: Cassette, crm: Domain) -> None:
    """Hand-written cassette: a 200 whose content is the JSON resolution."""
    resolver = LLMResolver(_llm())
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert cassette.play_count == 1
    assert resolver.failures == 0
    assert res.rewritten == "Which Brightwater Farms orders are overdue? Show them in a table."
    assert dict(res.filters) == {"status": "overdue"} and res.format == "table"
    assert [e.id for m in res.mentions for e in m.candidates] == ["C-1080"]
    assert res != _rules(crm)  # the rules read no filter and no format here


@pytest.mark.parametrize(("cassette", "cause"), [
    ("openai_structured_truncated.yaml", "unparseable structured output"),  # invalid JSON
    ("openai_structured_refusal.yaml", "input_value='None'"),  # content null, a refusal
], indirect=["cassette"])
def test_invalid_json_or_refusal_falls_back_to_the_rules(
    cassette: Cassette, cause: str, crm: Domain, caplog: pytest.LogCaptureFixture
) -> None:
    """Hand-written cassettes: a reply cut off mid-JSON, and OpenAI's documented refusal."""
    resolver = LLMResolver(_llm())
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert cassette.play_count == 1  # the provider answered; the answer was unusable
    assert resolver.failures == 1
    assert res == _rules(crm)
    assert cause in caplog.text


@pytest.fixture
def async_llm() -> OpenAI:
    # Built outside the event loop, as an application builds its clients at start-up.
    return _llm()


@pytest.mark.parametrize("cassette", ["openai_structured_two_turns.yaml"], indirect=True)
async def test_async_session_uses_the_models_rewrite(
    cassette: Cassette, crm: Domain, async_llm: OpenAI
) -> None:
    """Hand-written cassette, two turns through ``astructured_predict`` under blockbuster:
    the second prompt carries the first turn's focus, and the model's rewrite is used."""
    resolver = LLMResolver(async_llm)
    memory = SessionMemory(crm, resolver=resolver, clock=lambda: datetime(2026, 11, 30, 12))
    first = await memory.abegin_turn("t", "Pull up Brightwater Farms.")
    assert isinstance(first, TurnContext)
    await memory.aend_turn("t", answer="Brightwater Farms, Fresno.")
    second = await memory.abegin_turn("t", "Who's their rep?")
    assert isinstance(second, TurnContext)
    assert second.rewritten == "Who is the account rep for Brightwater Farms?"
    assert second.state.focus is not None and second.state.focus.id == "C-1080"
    assert cassette.play_count == 2 and resolver.failures == 0


@pytest.mark.parametrize("cassette", ["openai_structured_good.yaml"], indirect=True)
def test_a_text_completion_llm_first_leaves_the_request_alone(
    cassette: Cassette, crm: Domain
) -> None:
    """Hand-written cassette. Regression: a JSON-parsing program (any LLM without
    Structured Outputs) once attached its format instructions to a shared prompt
    template, so every later OpenAI request carried them and missed this cassette."""
    scripted = ScriptedLLM(replies=[json.dumps({
        "rewritten": QUESTION, "entities": [], "filters": [], "clear_filters": [],
        "format": None, "refers_back": False,
    })])
    LLMResolver(scripted).resolve(QUESTION, SessionState(), crm, TODAY)
    assert "JSON schema to follow" in scripted.prompts[0]
    res = LLMResolver(_llm()).resolve(QUESTION, SessionState(), crm, TODAY)
    assert cassette.play_count == 1 and res.format == "table"
