"""Scripted LlamaIndex components that record what the model received, and the
message builders the chat-store tests share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms import ChatMessage, ChatResponse, LLMMetadata
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from convmem.transcript import ReconstructedInput


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def bot(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def system(text: str) -> ChatMessage:
    return ChatMessage(role="system", content=text)


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


def roles_and_text(messages: Sequence[ChatMessage] | None) -> list[tuple[str, str]]:
    assert messages is not None
    return [(m.role.value, m.content or "") for m in messages]


class CountingLLM(MockLLMWithChatMemoryOfLastCall):
    """MockLLM that records every chat/complete call (MockLLM echoes its prompt)."""

    calls: list[str] = Field(default_factory=list, exclude=True)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("is_chat_model", True)  # engines then send messages, not a string
        super().__init__(**kwargs)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self.calls.append("complete")
        return super().complete(prompt, formatted=formatted, **kwargs)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self.calls.append("acomplete")
        return super().complete(prompt, formatted=formatted, **kwargs)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        self.calls.append("chat")
        return super().chat(messages, **kwargs)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        self.calls.append("achat")
        return await super().achat(messages, **kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        self.calls.append("stream_chat")
        return super().stream_chat(messages, **kwargs)

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        self.calls.append("astream_chat")
        return await super().astream_chat(messages, **kwargs)


class RecordingRetriever(BaseRetriever):
    """Returns one fixed passage and records every query it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.queries.append(query_bundle.query_str)
        return [NodeWithScore(node=TextNode(text="[doc-1] CRM record."), score=1.0)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._retrieve(query_bundle)


class CapturingLLM(CountingLLM):
    """Keeps every message list it is sent (the mock keeps only the last; its ``achat``
    goes through ``chat``), every completion prompt, and answers from ``answers`` when
    given (else it echoes its prompt, as the mock does)."""

    def __init__(
        self, answers: Sequence[str] = (), window: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.__dict__["received"] = []
        self.__dict__["prompts"] = []
        self.__dict__["answers"] = list(answers)
        self.__dict__["window"] = window

    @property
    def metadata(self) -> LLMMetadata:
        """The mock's metadata; with ``window=``, that context window (engines size
        their prompts from it)."""
        meta = super().metadata
        window = self.__dict__["window"]
        return meta if window is None else meta.model_copy(update={"context_window": window})

    @property
    def received(self) -> list[list[tuple[str, str]]]:
        return self.__dict__["received"]  # type: ignore[no-any-return]

    @property
    def prompts(self) -> list[str]:
        return self.__dict__["prompts"]  # type: ignore[no-any-return]

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        self.received.append(roles_and_text(messages))
        response = super().chat(messages, **kwargs)
        answers: list[str] = self.__dict__["answers"]
        if answers:
            text = answers.pop(0)
            response = ChatResponse(message=ChatMessage(role="assistant", content=text), delta=text)
        return response

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self.prompts.append(prompt)
        return super().complete(prompt, formatted=formatted, **kwargs)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self.prompts.append(prompt)
        return await super().acomplete(prompt, formatted=formatted, **kwargs)


def sent(r: ReconstructedInput) -> list[tuple[str, str]]:
    """The record's model input in LlamaIndex's shape: the engine's system prompt, the
    memory's system message (block or clarification instruction), the question as sent."""
    out = [("system", t) for t in (r.system_prompt, r.rendered_block) if t]
    out += [(m.role, m.text) for m in r.messages]
    ours = r.user_message.extra.get("convmem") or {}
    out.append(("user", ours.get("sent_as", r.user_message.text)))
    return out
