"""The agent every agent benchmark drives: a real ``create_agent`` with an instant fake model.

``TurnModel`` answers without a script, so a run can take any number of turns: to a
user message it asks for one ``list_orders`` call, to the tool's result it answers with
``answer_tokens`` tokens (~2,000 by default, as in the issue's measurements). It is
stateless (no prompt is kept), so the model costs the same on turn 50 as on turn 1
whatever it is sent. ``QUESTIONS`` cycle through the CRM example domain: a customer by
name, then a pronoun that leans on it. ``agent()`` builds the graph with whatever
middleware and checkpointer a row needs.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Sequence
from functools import cache
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import PrivateAttr

SYSTEM = "You are a CRM assistant. Answer from the tools' results."
QUESTIONS = (
    "Pull up Brightwater Farms.",
    "What did they order last quarter?",
    "Pull up Cobalt Freight.",
    "Who's their rep?",
)
ANSWER_TOKENS = 2_000


_WORDS = (
    "order", "shipped", "invoice", "pallet", "warehouse", "Fresno", "Denver", "quarter",
    "revenue", "margin", "net", "thirty", "paid", "overdue", "credit", "rep", "account",
    "region", "produce", "freight", "carrier", "delay", "volume", "discount", "contract",
    "renewal", "forecast", "customer", "segment", "growth", "decline", "steady",
    "seasonal", "peak", "units", "cases", "refrigerated", "dry", "goods", "lead", "time",
    "backorder", "returned", "damaged", "replacement", "priority", "standard", "express",
    "route", "depot", "weekly", "monthly", "the", "a", "of", "to", "and", "in", "on",
    "with", "for", "by", "from",
)


@cache
def answer_text(variant: int = 0, tokens: int = ANSWER_TOKENS) -> str:
    """About ``tokens`` cl100k tokens of prose-like text, different per ``variant`` (so a
    database does not see the same value twice; it compresses about as prose does)."""
    rng = random.Random(variant)
    words: list[str] = []
    for i in range(int(tokens * 0.62)):  # ~1.6 tokens per word with the numbers
        words.append(rng.choice(_WORDS))
        if i % 9 == 8:
            words.append(f"SO-{rng.randrange(1000, 9999)},")
    return " ".join(words) + "."


@tool
def list_orders(customer: str, period: str) -> str:
    """List a customer's orders in a period."""
    return json.dumps([{"id": "SO-2211", "customer": customer, "period": period, "total": 1840}])


class TurnModel(BaseChatModel):
    """A tool call for a user message, a long answer for a tool result; never runs out."""

    answer_tokens: int = ANSWER_TOKENS
    _answers: int = PrivateAttr(default=0)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            self._answers += 1
            reply = AIMessage(answer_text(self._answers % 16, self.answer_tokens))
        else:
            n = sum(isinstance(m, HumanMessage) for m in messages)
            reply = AIMessage("", tool_calls=[{
                "name": "list_orders", "id": f"call-{n}-{len(messages)}",
                "args": {"customer": "current", "period": "last_quarter"}}])
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # type: ignore[return-value]

    @property
    def _llm_type(self) -> str:
        return "convmem-bench-turn"


class NoopMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """The hooks ``SessionMemoryMiddleware`` implements (``wrap_model_call``,
    ``wrap_tool_call``, ``after_agent``), each passing straight through: LangGraph's
    cost of having those hooks, without convmem's work in them."""

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> Any:
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        return await handler(request)

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]) -> Any:
        return handler(request)

    async def awrap_tool_call(
        self, request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> Any:
        return await handler(request)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        return None

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        return None


def agent(middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (), checkpointer: Any = None,
          answer_tokens: int = ANSWER_TOKENS) -> Any:
    """``create_agent`` over ``TurnModel`` and ``list_orders``."""
    return create_agent(TurnModel(answer_tokens=answer_tokens), [list_orders],
                        system_prompt=SYSTEM, middleware=list(middleware),
                        checkpointer=checkpointer)


def question(turn: int) -> dict[str, Any]:
    """The input of turn ``turn`` (1-based)."""
    return {"messages": [HumanMessage(QUESTIONS[(turn - 1) % len(QUESTIONS)])]}


def crm_domain() -> Any:
    """The CRM example domain with its catalog built (outside any timed region)."""
    from convmem.domain import load_domain

    domain = load_domain("crm")
    assert domain.catalog is not None
    return domain
