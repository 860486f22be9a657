"""``LLMResolver``: the core's ``StructuredResolver`` driven by a LangChain chat model.

The core owns everything about LLM resolution (the prompt, the JSON schema of a
``Resolution``, validating the answer against the domain, the fallback to
``RuleResolver`` and counting failures); this adapter only supplies the
``complete_json(prompt, schema)`` call, as ``chat_model.with_structured_output(schema)``
(sync through ``invoke``, async through ``ainvoke``, each its own native path). A
provider error (timeout, rate limit, refusal) is turned into a ``ResolverError`` so the
core falls back and counts it like any garbage answer; the cause stays chained.
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable

from convmem.domain import Domain
from convmem.errors import ConfigError, ResolverError
from convmem.resolve import RESOLUTION_SCHEMA, Resolution, Resolver, StructuredResolver
from convmem.state import SessionState


class LLMResolver:
    """A ``Resolver`` backed by a chat model's structured output, rules as the fallback.

    ``structured_output_kwargs`` go to ``with_structured_output`` (e.g. ``{"method":
    "function_calling"}``). Leave OpenAI's ``strict`` unset: the core's schema keeps
    filters as a ``{key: value}`` object, which strict mode does not accept.
    """

    def __init__(
        self,
        chat_model: BaseChatModel,
        *,
        fallback: Resolver | None = None,
        structured_output_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(chat_model, BaseChatModel):
            raise ConfigError(
                f"LLMResolver: chat_model must be a LangChain BaseChatModel, "
                f"got {type(chat_model).__name__}"
            )
        self.chat_model = chat_model
        self._kwargs = dict(structured_output_kwargs or {})
        self._runnables: dict[str, Runnable[Any, Any]] = {}
        self._sync = StructuredResolver(self.complete_json, fallback=fallback)
        self._async = StructuredResolver(self.acomplete_json, fallback=self._sync.fallback)
        try:  # a model without structured output fails here, once, not on every turn
            self._structured(RESOLUTION_SCHEMA)
        except NotImplementedError as exc:
            raise ConfigError(
                f"LLMResolver: {type(chat_model).__name__} has no with_structured_output "
                f"(it needs tool calling or a JSON mode): {exc}"
            ) from exc

    @property
    def fallback(self) -> Resolver:
        return self._sync.fallback

    @property
    def failures(self) -> int:
        """Answers that failed (provider error, garbage, invalid for the domain)."""
        return self._sync.failures + self._async.failures

    def resolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        return self._sync.resolve(question, state, domain, today)

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        return await self._async.aresolve(question, state, domain, today)

    # ------------------------------------------------------------------ complete_json

    def complete_json(self, prompt: str, schema: dict[str, object]) -> Any:
        """The model's structured answer to ``prompt`` (a dict when the model complies)."""
        runnable = self._structured(schema)
        try:
            return runnable.invoke(prompt)
        except Exception as exc:  # garbage, refusal or a provider error: the core falls back
            raise ResolverError(f"chat model call failed: {type(exc).__name__}: {exc}") from exc

    async def acomplete_json(self, prompt: str, schema: dict[str, object]) -> Any:
        runnable = self._structured(schema)
        try:
            return await runnable.ainvoke(prompt)
        except Exception as exc:
            raise ResolverError(f"chat model call failed: {type(exc).__name__}: {exc}") from exc

    def _structured(self, schema: dict[str, object]) -> Runnable[Any, Any]:
        key = json.dumps(schema, sort_keys=True)
        runnable = self._runnables.get(key)
        if runnable is None:
            runnable = self.chat_model.with_structured_output(schema, **self._kwargs)
            self._runnables[key] = runnable
        return runnable
