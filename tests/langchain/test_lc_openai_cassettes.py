"""``LLMResolver`` through ``langchain-openai``'s real ``ChatOpenAI``, offline.

The cassettes under ``cassettes/`` are hand-written and play offline, as
``tests/openai_cassette_checks.py`` describes. Their ``response_format`` is of type
``json_schema`` (what ``with_structured_output`` sends by default for ``ChatOpenAI``;
not tool calling).
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
