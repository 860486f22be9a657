"""The agent ``bench/load.py`` drives: a real ``create_agent`` graph around an instant model.

The model answers at once and from the prompt alone (no script, no state), so any
number of concurrent sessions can share one instance: a user message that asks to
*look up* a customer gets a ``lookup_customer`` tool call, a tool result or any other
question gets the answer, a fixed text of about 2,000 tokens (the size the issue's
per-turn measurements use). The tool returns the customer's record from the CRM
example domain, so convmem's tool rule sets the focus as it would in an application.
Every session asks the same ten questions about its own customers; three of them call
the tool.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool

from convmem import load_domain

SYSTEM = "You are a CRM assistant. Answer from the tools' records."
DOMAIN = load_domain("crm")
#: Customers whose name is unique in the example catalog (no clarification turns).
CUSTOMERS = tuple(
    e for e in DOMAIN.entities
    if e.type == "customer" and sum(o.label == e.label for o in DOMAIN.entities) == 1
)
_BY_NAME = {e.label: e for e in CUSTOMERS}
ANSWER = " ".join(f"Line {i}: the account is current, orders ship on schedule." for i in range(220))

QUESTIONS = (
    "Look up {a}.",
    "Who's their rep?",
    "What are their open orders in EMEA?",
    "Briefly, and for last quarter?",
    "Look up {b}.",
    "Compare them with {a} in a table.",
    "Any overdue invoices?",
    "Look up {c}.",
    "What did they order last month?",
    "Thanks, summarise briefly.",
)


def question(session: int, turn: int) -> str:
    """Session ``session``'s question at ``turn`` (0-based; ten turns, then again)."""
    pick = [CUSTOMERS[(session + k) % len(CUSTOMERS)].label for k in range(3)]
    return QUESTIONS[turn % len(QUESTIONS)].format(a=pick[0], b=pick[1], c=pick[2])


@tool
def lookup_customer(name: str) -> str:
    """Look up one customer by name."""
    found = _BY_NAME.get(name)
    if found is None:
        return json.dumps({"ok": False, "error": f"no customer named {name!r}"})
    return json.dumps({"id": found.id, "name": found.label, "city": "Fresno"})


class InstantChatModel(BaseChatModel):
    """Answers at once, from the last message: a tool call for "Look up X.", else text."""

    @property
    def _llm_type(self) -> str:
        return "instant-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # type: ignore[return-value]

    def _reply(self, messages: list[BaseMessage]) -> ChatResult:
        last = messages[-1]
        if isinstance(last, HumanMessage) and not isinstance(last, ToolMessage):
            text = last.text
            for name in _BY_NAME:
                if text.startswith("Look up") and name in text:
                    call = {"name": "lookup_customer", "args": {"name": name},
                            "id": f"call_{abs(hash((text, len(messages)))):x}"}
                    return ChatResult(generations=[ChatGeneration(
                        message=AIMessage(content="", tool_calls=[call]))])
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=ANSWER))])

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return self._reply(messages)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        return self._reply(messages)


def build_agent(*, middleware: Sequence[Any] = (), checkpointer: Any = None) -> Any:
    """The one agent every row runs: same model, tool and prompt."""
    return create_agent(
        InstantChatModel(),
        [lookup_customer],
        system_prompt=SYSTEM,
        middleware=list(middleware),
        checkpointer=checkpointer,
    )
