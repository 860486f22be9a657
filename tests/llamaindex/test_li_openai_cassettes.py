"""``LLMResolver`` through ``llama-index-llms-openai``'s real ``OpenAI`` LLM, offline.

The cassettes under ``cassettes/`` are hand-written and play offline, as
``tests/openai_cassette_checks.py`` describes. Their ``response_format`` is of type
``json_schema`` with ``strict: true`` (what ``structured_predict`` sends for a model
with Structured Outputs; not tool calling), whose schema keeps ``additionalProperties:
false`` and carries filters as an array, as strict mode needs.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from llama_index.llms.openai import OpenAI
from vcr.cassette import Cassette

from convmem.domain import Domain
from convmem.state import SessionState
from llamaindex_convmem import LLMResolver
from tests.llamaindex.test_li_resolver import ScriptedLLM
from tests.offline_http import DUMMY_OPENAI_KEY, OPENAI_BASE_URL
from tests.openai_cassette_checks import QUESTION, TODAY, OpenAIResolverCassettes


def _llm() -> OpenAI:
    return OpenAI(model="gpt-4o-mini", api_key=DUMMY_OPENAI_KEY, api_base=OPENAI_BASE_URL,
                  max_retries=0)


class TestOpenAIResolver(OpenAIResolverCassettes):
    """The shared cassette tests through ``OpenAI`` (``structured_predict``, and
    ``astructured_predict`` on the async turns)."""

    UNUSABLE: ClassVar[list[tuple[str, str]]] = [
        ("openai_structured_truncated.yaml", "unparseable structured output"),  # cut mid-JSON
        ("openai_structured_refusal.yaml", "input_value='None'"),  # content null, a refusal
    ]

    def resolver(self) -> Any:
        return LLMResolver(_llm())


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
