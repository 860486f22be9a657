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

from typing import Any, ClassVar

from langchain_openai import ChatOpenAI

from langchain_convmem import LLMResolver
from tests.offline_http import DUMMY_OPENAI_KEY, OPENAI_BASE_URL
from tests.openai_cassette_checks import OpenAIResolverCassettes


class TestOpenAIResolver(OpenAIResolverCassettes):
    """The shared cassette tests through ``ChatOpenAI`` (``invoke``, and ``ainvoke`` on the
    async turns)."""

    UNUSABLE: ClassVar[list[tuple[str, str]]] = [
        ("openai_structured_garbage.yaml", "Invalid json output"),  # prose instead of JSON
        ("openai_structured_refusal.yaml", "OpenAIRefusalError"),  # content null, a refusal
    ]

    def resolver(self) -> Any:
        return LLMResolver(
            ChatOpenAI(
                model="gpt-4o-mini",
                api_key=DUMMY_OPENAI_KEY,  # type: ignore[arg-type]
                base_url=OPENAI_BASE_URL,
                max_retries=0,
            )
        )
