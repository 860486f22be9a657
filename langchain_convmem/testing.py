"""A scripted tool-calling chat model: try convmem with LangChain offline, no API key.

langchain-core's ``FakeMessagesListChatModel`` answers from a list but cannot stand
in for a model inside ``create_agent``: it has no ``bind_tools`` and it cycles back
to the first answer when the list runs out, so a test that expects two model calls
passes with three. ``ScriptedChatModel`` adds ``bind_tools`` (the tools are accepted
and ignored: the script decides the calls), refuses to run past its script (an
``AssertionError`` naming the count), answers natively async, and keeps every prompt
it was sent in ``received`` — so you can see what the model saw each call::

    from langchain_core.messages import AIMessage
    from langchain_convmem.testing import ScriptedChatModel

    model = ScriptedChatModel(responses=[
        AIMessage("", tool_calls=[{"name": "lookup_customer",
                                   "args": {"name": "Northline"}, "id": "call-1"}]),
        AIMessage("Northline Foods is current on payments."),
    ])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import Field


class ScriptedChatModel(FakeMessagesListChatModel):
    """Answers with ``responses`` in order, once each; records every prompt in ``received``.

    ``cycle=True``: starts the script over when it runs out instead of refusing, for a
    model that answers any number of prompts (``responses=[AIMessage("...")]``: always
    the same answer).
    """

    received: list[list[BaseMessage]] = Field(default_factory=list)
    cycle: bool = False

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if not self.cycle and len(self.received) >= len(self.responses):
            raise AssertionError(
                f"the scripted model called {len(self.received) + 1} times; its script has "
                f"{len(self.responses)} responses"
            )
        self.received.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The script decides which tools are called; binding changes nothing."""
        return self  # type: ignore[return-value]

    @property
    def _llm_type(self) -> str:
        return "convmem-scripted"
