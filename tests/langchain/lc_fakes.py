"""Test helpers around the shipped ``langchain_convmem.testing.ScriptedChatModel``
(a scripted tool-calling chat model that records every prompt it is sent and refuses
to run past its script): tool-call messages, prompt shapes and token counts, a spy
middleware, and a model that never answers in the structured form."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage

from convmem.tokens import count_message_tokens
from langchain_convmem import LLMResolver
from langchain_convmem.testing import ScriptedChatModel


def call(tool: str, call_id: str, **args: Any) -> AIMessage:
    """An AI message asking for one tool call."""
    return AIMessage(content="", tool_calls=[{"name": tool, "args": args, "id": call_id}])


def shape(messages: Sequence[BaseMessage]) -> list[tuple[str, str]]:
    """(type, text) per message: what a test compares a prompt against."""
    out = []
    for m in messages:
        text = m.text
        if isinstance(m, AIMessage) and m.tool_calls:
            text = text + json.dumps([[c["name"], c["args"]] for c in m.tool_calls])
        out.append((m.type, text))
    return out


def prompt_tokens(messages: Sequence[BaseMessage]) -> int:
    """cl100k_base prompt tokens (OpenAI cookbook rule), tool calls counted as JSON."""
    roles = {"human": "user", "ai": "assistant"}
    return count_message_tokens((roles.get(t, t), text) for t, text in shape(messages))


class PromptSpy(AgentMiddleware[AgentState[Any], Any, Any]):
    """Records each model request as it arrives, before inner middleware edits it:
    the prompt a plain replaying agent would send."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[list[BaseMessage]] = []

    def _record(self, request: ModelRequest[Any]) -> None:
        system = [request.system_message] if request.system_message is not None else []
        self.received.append([*system, *request.messages])

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        self._record(request)
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        self._record(request)
        return await handler(request)


def unstructured_model() -> ScriptedChatModel:
    """Answers every prompt with prose, never the structured answer (for the eval run)."""
    return ScriptedChatModel(responses=[AIMessage("It is about a customer.")], cycle=True)


#: Every resolver ``eval_resolver`` built (the eval test reads its counts).
EVAL_RESOLVERS: list[LLMResolver] = []


def eval_resolver() -> LLMResolver:
    """``convmem eval --resolver lc_fakes:eval_resolver``: a LangChain ``LLMResolver``."""
    resolver = LLMResolver(unstructured_model())
    EVAL_RESOLVERS.append(resolver)
    return resolver
