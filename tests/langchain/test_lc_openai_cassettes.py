"""``LLMResolver`` through ``langchain-openai``'s real ``ChatOpenAI``, offline.

Every cassette under ``cassettes/`` is HAND-WRITTEN from OpenAI's documented Chat
Completions response object (and its documented refusal shape); none was recorded
from the API and no real key exists here (the client gets a dummy one). They play in
``record_mode="none"`` behind ``network_guard`` (``tests/offline_http.py``): a request
the cassette does not hold raises, any connection off this machine raises, and a
cassette whose interactions were not all played fails the test, so a fallback test
cannot pass by missing its cassette. Requests match on method, URI and the body
fields each cassette states: the model, the core's prompt, and ``response_format``
of type ``json_schema`` (what ``with_structured_output`` sends by default for
``ChatOpenAI``; not tool calling).
"""

from __future__ import annotations

from datetime import date, datetime

import pytest
from langchain_openai import ChatOpenAI
from vcr.cassette import Cassette

from convmem.domain import Domain
from convmem.resolve import RuleResolver
from convmem.session import SessionMemory, TurnContext
from convmem.state import SessionState
from langchain_convmem import LLMResolver
from tests.offline_http import DUMMY_OPENAI_KEY, OPENAI_BASE_URL

TODAY = date(2026, 11, 30)
QUESTION = "What does Brightwater still owe us? A table please."


def _model() -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", api_key=DUMMY_OPENAI_KEY,  # type: ignore[arg-type]
                      base_url=OPENAI_BASE_URL, max_retries=0)


def _rules(crm: Domain) -> object:
    return RuleResolver().resolve(QUESTION, SessionState(), crm, TODAY)


@pytest.mark.parametrize("cassette", ["openai_structured_good.yaml"], indirect=True)
def test_structured_answer_is_used(cassette: Cassette, crm: Domain) -> None:
    """Hand-written cassette: a 200 whose content is the JSON resolution."""
    resolver = LLMResolver(_model())
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert cassette.play_count == 1
    assert resolver.failures == 0
    assert res.rewritten == "Which Brightwater Farms orders are overdue? Show them in a table."
    assert dict(res.filters) == {"status": "overdue"} and res.format == "table"
    assert [e.id for m in res.mentions for e in m.candidates] == ["C-1080"]
    assert res != _rules(crm)  # the rules read no filter and no format here


@pytest.mark.parametrize(("cassette", "cause"), [
    ("openai_structured_garbage.yaml", "Invalid json output"),  # prose instead of JSON
    ("openai_structured_refusal.yaml", "OpenAIRefusalError"),  # content null, a refusal
], indirect=["cassette"])
def test_garbage_or_refusal_falls_back_to_the_rules(
    cassette: Cassette, cause: str, crm: Domain, caplog: pytest.LogCaptureFixture
) -> None:
    """Hand-written cassettes: a non-JSON answer, and OpenAI's documented refusal."""
    resolver = LLMResolver(_model())
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert cassette.play_count == 1  # the provider answered; the answer was unusable
    assert resolver.failures == 1
    assert res == _rules(crm)
    assert cause in caplog.text  # failed for the reason this cassette is about


@pytest.fixture
def async_model() -> ChatOpenAI:
    # Built outside the event loop, as an application builds its clients at start-up.
    return _model()


@pytest.mark.parametrize("cassette", ["openai_structured_two_turns.yaml"], indirect=True)
async def test_async_session_uses_the_models_rewrite(
    cassette: Cassette, crm: Domain, async_model: ChatOpenAI
) -> None:
    """Hand-written cassette, two turns through ``ainvoke`` under blockbuster: the second
    prompt carries the first turn's focus, and the model's rewrite is the one used."""
    resolver = LLMResolver(async_model)
    memory = SessionMemory(crm, resolver=resolver, clock=lambda: datetime(2026, 11, 30, 12))
    first = await memory.abegin_turn("t", "Pull up Brightwater Farms.")
    assert isinstance(first, TurnContext)
    await memory.aend_turn("t", answer="Brightwater Farms, Fresno.")
    second = await memory.abegin_turn("t", "Who's their rep?")
    assert isinstance(second, TurnContext)
    assert second.rewritten == "Who is the account rep for Brightwater Farms?"
    assert second.state.focus is not None and second.state.focus.id == "C-1080"
    assert cassette.play_count == 2 and resolver.failures == 0
