"""``LLMResolver``: the core's ``StructuredResolver`` driven by a LlamaIndex LLM.

The core owns the prompt, the JSON schema, the validation against the domain and the
fallback to ``RuleResolver``; this adapter only supplies ``complete_json`` through
``llm.structured_predict`` / ``astructured_predict`` with a pydantic model mirroring
``RESOLUTION_SCHEMA`` (function calling where the LLM has it, a JSON-parsing completion
program otherwise). Two core resolvers share one fallback: the sync one calls the sync
LLM method, the async one awaits the async method, so ``aresolve`` never blocks the loop.
A reply LlamaIndex cannot parse becomes a ``ValueError``, which the core turns into the
fallback resolution (and counts in ``failures``).
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from llama_index.core.bridge.pydantic import BaseModel, Field, ValidationError
from llama_index.core.llms.llm import LLM
from llama_index.core.output_parsers.base import OutputParserException
from llama_index.core.prompts import PromptTemplate

from convmem.domain import Domain
from convmem.errors import ConfigError
from convmem.resolve import Resolution, Resolver, RuleResolver, StructuredResolver
from convmem.state import SessionState

_PROMPT = PromptTemplate("{request}")


class ResolutionModel(BaseModel):
    """``convmem.resolve.RESOLUTION_SCHEMA`` as a pydantic model (for structured output)."""

    rewritten: str = Field(description="the question made self-contained")
    entities: list[str] = Field(description="names of things the question names, as written")
    filters: dict[str, str] = Field(
        description="filter key -> normalised value stated in the question"
    )
    clear_filters: list[str]
    format: Literal["short", "detailed", "table"] | None
    refers_back: bool = Field(description="true when the question refers to the current topic")


def _checked(answer: object) -> ResolutionModel:
    if not isinstance(answer, ResolutionModel):
        raise TypeError(f"structured_predict returned {type(answer).__name__}")
    return answer


class LLMResolver:
    """A ``Resolver`` asking a LlamaIndex LLM, with the rule resolver as its fallback."""

    def __init__(self, llm: LLM, *, fallback: Resolver | None = None) -> None:
        if not isinstance(llm, LLM):
            raise ConfigError(f"LLMResolver: llm must be a LlamaIndex LLM, got {type(llm).__name__}")
        self.llm = llm
        self.fallback: Resolver = fallback if fallback is not None else RuleResolver()
        self._sync = StructuredResolver(self._complete_json, fallback=self.fallback)
        self._async = StructuredResolver(self._acomplete_json, fallback=self.fallback)

    @property
    def failures(self) -> int:
        """Resolutions that fell back to the rule resolver."""
        return self._sync.failures + self._async.failures

    def _complete_json(self, prompt: str, schema: dict[str, object]) -> ResolutionModel:
        try:
            answer = self.llm.structured_predict(ResolutionModel, _PROMPT, request=prompt)
        except (OutputParserException, ValidationError) as exc:
            raise ValueError(f"unparseable structured output: {exc}") from exc
        return _checked(answer)

    async def _acomplete_json(self, prompt: str, schema: dict[str, object]) -> ResolutionModel:
        try:
            answer = await self.llm.astructured_predict(ResolutionModel, _PROMPT, request=prompt)
        except (OutputParserException, ValidationError) as exc:
            raise ValueError(f"unparseable structured output: {exc}") from exc
        return _checked(answer)

    def resolve(self, question: str, state: SessionState, domain: Domain, today: date) -> Resolution:
        return self._sync.resolve(question, state, domain, today)

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        return await self._async.aresolve(question, state, domain, today)
