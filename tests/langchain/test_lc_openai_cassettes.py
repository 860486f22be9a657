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

import pytest
from langchain_openai import ChatOpenAI
from vcr.cassette import Cassette

from convmem.domain import Domain
from langchain_convmem import LLMResolver
from tests.offline_http import DUMMY_OPENAI_KEY, OPENAI_BASE_URL
from tests.openai_cassette_checks import (
    check_async_session_uses_the_models_rewrite,
    check_falls_back_to_the_rules,
    check_structured_answer_is_used,
)


def _model() -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", api_key=DUMMY_OPENAI_KEY,  # type: ignore[arg-type]
                      base_url=OPENAI_BASE_URL, max_retries=0)


@pytest.mark.parametrize("cassette", ["openai_structured_good.yaml"], indirect=True)
def test_structured_answer_is_used(cassette: Cassette, crm: Domain) -> None:
    """Hand-written cassette: a 200 whose content is the JSON resolution."""
    check_structured_answer_is_used(LLMResolver(_model()), cassette, crm)


@pytest.mark.parametrize(("cassette", "cause"), [
    ("openai_structured_garbage.yaml", "Invalid json output"),  # prose instead of JSON
    ("openai_structured_refusal.yaml", "OpenAIRefusalError"),  # content null, a refusal
], indirect=["cassette"])
def test_garbage_or_refusal_falls_back_to_the_rules(
    cassette: Cassette, cause: str, crm: Domain, caplog: pytest.LogCaptureFixture
) -> None:
    """Hand-written cassettes: a non-JSON answer, and OpenAI's documented refusal."""
    check_falls_back_to_the_rules(LLMResolver(_model()), cassette, crm, cause, caplog)


@pytest.fixture
def async_model() -> ChatOpenAI:
    # Built outside the event loop, as an application builds its clients at start-up.
    return _model()


@pytest.mark.parametrize("cassette", ["openai_structured_two_turns.yaml"], indirect=True)
async def test_async_session_uses_the_models_rewrite(
    cassette: Cassette, crm: Domain, async_model: ChatOpenAI
) -> None:
    """Hand-written cassette, two turns through ``ainvoke`` under blockbuster."""
    await check_async_session_uses_the_models_rewrite(LLMResolver(async_model), cassette, crm)
