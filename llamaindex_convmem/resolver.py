"""``LLMResolver``: the core's ``StructuredResolver`` driven by a LlamaIndex LLM.

The core owns the prompt, the JSON schema, the validation against the domain and the
fallback to ``RuleResolver``; this adapter only supplies ``complete_json`` through
``llm.structured_predict`` / ``astructured_predict`` with a pydantic model mirroring
``RESOLUTION_SCHEMA`` (OpenAI's ``json_schema`` response format, function calling, or a
JSON-parsing completion program, whichever the LLM uses). The model carries filters as
a list of ``{key, value}`` pairs rather than the core's ``{key: value}`` object: the
OpenAI LLM always sends ``strict: true``, and strict mode rejects an object schema
whose ``additionalProperties`` is not ``false``; the pairs are turned back into the
core's mapping here. Two core resolvers share one fallback: the sync one calls the sync
LLM method, the async one awaits the async method, so ``aresolve`` never blocks the loop.
A reply LlamaIndex cannot parse, a refusal or a provider error (timeout, rate limit)
becomes a ``ResolverError``, which the core turns into the fallback resolution (and counts
in ``failures``); the cause stays chained.
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from llama_index.core.bridge.pydantic import BaseModel, Field, ValidationError
from llama_index.core.llms.llm import LLM
from llama_index.core.output_parsers.base import OutputParserException
from llama_index.core.prompts import PromptTemplate

from convmem.domain import Domain
from convmem.errors import ConfigError, ResolverError
from convmem.resolve import Resolution, Resolver, RuleResolver, StructuredResolver
from convmem.state import SessionState


def _prompt() -> PromptTemplate:
    """A fresh template per call: LlamaIndex's text-completion program attaches its
    output parser (and so its format instructions) to the template it is given, which
    a shared template would then carry into every later call, whatever the LLM."""
    return PromptTemplate("{request}")


class FilterValue(BaseModel):
    """One filter stated in the question."""

    key: str = Field(description="filter key")
    value: str = Field(description="normalised value")


class ResolutionModel(BaseModel):
    """How the question resolves against the conversation state."""

    # ``convmem.resolve.RESOLUTION_SCHEMA`` as a pydantic model (its docstring is sent).

    rewritten: str = Field(description="the question made self-contained")
    entities: list[str] = Field(description="names of things the question names, as written")
    filters: list[FilterValue] = Field(description="filters stated in the question")
    clear_filters: list[str]
    format: Literal["short", "detailed", "table"] | None
    refers_back: bool = Field(description="true when the question refers to the current topic")
    salient: str | None = Field(
        default=None,  # OpenAI's strict schema still lists it as required (nullable)
        description="id of the 'Also in this conversation' entity the question's first "
                    "reference (a pronoun, or 'that/this/the' + noun) points at, or null",
    )


def _failed(exc: Exception) -> ResolverError:
    if isinstance(exc, (OutputParserException, ValidationError)):
        return ResolverError(f"unparseable structured output: {exc}")
    return ResolverError(f"structured_predict failed: {type(exc).__name__}: {exc}")


def _as_core_answer(answer: object) -> dict[str, object]:
    """The structured answer in the core's shape (``filters`` as a ``{key: value}`` object)."""
    if not isinstance(answer, ResolutionModel):
        raise ResolverError(f"structured_predict returned {type(answer).__name__}")
    filters: dict[str, str] = {}
    for pair in answer.filters:
        if filters.setdefault(pair.key, pair.value) != pair.value:
            raise ResolverError(f"filter {pair.key!r} given two values")
    return {**answer.model_dump(exclude={"filters"}), "filters": filters}


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

    def _complete_json(self, prompt: str, schema: dict[str, object]) -> dict[str, object]:
        try:
            answer = self.llm.structured_predict(ResolutionModel, _prompt(), request=prompt)
        except Exception as exc:  # garbage, refusal or a provider error: the core falls back
            raise _failed(exc) from exc
        return _as_core_answer(answer)

    async def _acomplete_json(self, prompt: str, schema: dict[str, object]) -> dict[str, object]:
        try:
            answer = await self.llm.astructured_predict(ResolutionModel, _prompt(), request=prompt)
        except Exception as exc:
            raise _failed(exc) from exc
        return _as_core_answer(answer)

    def resolve(self, question: str, state: SessionState, domain: Domain, today: date) -> Resolution:
        return self._sync.resolve(question, state, domain, today)

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        return await self._async.aresolve(question, state, domain, today)
