"""Scripted LlamaIndex components that record what the model received."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode


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
