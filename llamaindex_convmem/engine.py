"""``ConvMemChatEngine``: resolve the question before the inner engine retrieves.

A retrieving engine (``ContextChatEngine``, ``CondensePlusContextChatEngine``) searches
with the message it is given, before it ever asks its memory. So the wrapper begins the
turn first (``ConvMemMemory.start``): a clarification is answered right here, with no
retrieval and no model call, and recorded like any reply; otherwise the inner engine gets
the *rewritten* question ("Who's their rep?" → "Who's Brightwater Farms's rep?"), so it
retrieves and answers on a standalone question (with the memory's ``rewrite=False``
the user's words instead, except on a turn that answers a clarification: that one
always carries the original question resolved to the chosen entity). The inner engine must have been built
with the same ``ConvMemMemory`` (it records the answer and so closes the turn). Use
``CondensePlusContextChatEngine(skip_condense=True)``: the rewrite already is the
condensed question, and condensing again costs a model call per turn.

With a transcript, the wrapper tells the memory the inner engine's system prompt (its
system prefix messages) and model name, so the memory's model-input record holds them.

Streaming clarifications go through LlamaIndex's own ``StreamingAgentChatResponse``
writers (a thread for ``stream_chat``, a task for ``astream_chat``), exactly as the
engines record streamed answers, so callers wait for the record the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator
from threading import Thread

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.chat_engine.types import (
    AGENT_CHAT_RESPONSE_TYPE,
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)

from convmem.errors import ConfigError
from convmem.session import Clarification, TurnContext
from llamaindex_convmem.memory import ConvMemMemory, message_text


class ConvMemChatEngine(BaseChatEngine):
    """Wraps a chat engine: clarifications without a model call, rewritten questions."""

    def __init__(self, inner_engine: BaseChatEngine, memory: ConvMemMemory) -> None:
        if not isinstance(inner_engine, BaseChatEngine):
            raise ConfigError(
                f"ConvMemChatEngine: inner_engine must be a BaseChatEngine, "
                f"got {type(inner_engine).__name__}"
            )
        if not isinstance(memory, ConvMemMemory):
            raise ConfigError(
                f"ConvMemChatEngine: memory must be a ConvMemMemory, got {type(memory).__name__}"
            )
        inner_memory = getattr(inner_engine, "_memory", memory)
        if inner_memory is not memory:
            raise ConfigError(
                "ConvMemChatEngine: build the inner engine with the same memory, e.g. "
                "ContextChatEngine.from_defaults(retriever=..., memory=memory)"
            )
        self.inner_engine = inner_engine
        self.memory = memory
        if memory.system_prompt is None:
            prefix = getattr(inner_engine, "_prefix_messages", None) or []
            system = [message_text(m) for m in prefix if m.role == MessageRole.SYSTEM]
            memory.system_prompt = "\n\n".join(system) if system else None
        metadata = getattr(getattr(inner_engine, "_llm", None), "metadata", None)
        memory.describe_model(model=getattr(metadata, "model_name", None))

    # ------------------------------------------------------------------ helpers

    def _question(self, started: TurnContext, message: str) -> str:
        """What the inner engine retrieves and answers on: the rewrite (``rewrite=True``,
        or a turn answering a clarification), else the user's message."""
        return started.sent_question(self.memory.rewrite) or message

    def _clarified(self, message: str, clarification: Clarification) -> None:
        """Record the exchange: it closes the turn like an answer would."""
        self.memory.put(ChatMessage(role=MessageRole.USER, content=message))
        self.memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=clarification.text))

    async def _aclarified(self, message: str, clarification: Clarification) -> None:
        await self.memory.aput(ChatMessage(role=MessageRole.USER, content=message))
        await self.memory.aput(ChatMessage(role=MessageRole.ASSISTANT, content=clarification.text))

    @staticmethod
    def _reply(text: str) -> ChatResponse:
        message = ChatMessage(role=MessageRole.ASSISTANT, content=text)
        return ChatResponse(message=message, delta=text)

    # ------------------------------------------------------------------ BaseChatEngine

    def chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> AGENT_CHAT_RESPONSE_TYPE:
        started = self.memory.start(message)
        if isinstance(started, Clarification):
            self._clarified(message, started)
            return AgentChatResponse(response=started.text)
        return self.inner_engine.chat(self._question(started, message), chat_history)

    async def achat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> AGENT_CHAT_RESPONSE_TYPE:
        started = await self.memory.astart(message)
        if isinstance(started, Clarification):
            await self._aclarified(message, started)
            return AgentChatResponse(response=started.text)
        return await self.inner_engine.achat(self._question(started, message), chat_history)

    def stream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        started = self.memory.start(message)
        if not isinstance(started, Clarification):
            question = self._question(started, message)
            return self.inner_engine.stream_chat(question, chat_history)
        self.memory.put(ChatMessage(role=MessageRole.USER, content=message))
        text = started.text

        def gen() -> Generator[ChatResponse, None, None]:
            yield self._reply(text)

        response = StreamingAgentChatResponse(chat_stream=gen())
        thread = Thread(target=response.write_response_to_history, args=(self.memory,))
        response.write_response_to_history_thread = thread
        thread.start()
        return response

    async def astream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        started = await self.memory.astart(message)
        if not isinstance(started, Clarification):
            question = self._question(started, message)
            return await self.inner_engine.astream_chat(question, chat_history)
        await self.memory.aput(ChatMessage(role=MessageRole.USER, content=message))
        text = started.text

        async def agen() -> AsyncGenerator[ChatResponse, None]:
            yield self._reply(text)

        response = StreamingAgentChatResponse(achat_stream=agen())
        response.awrite_response_to_history_task = asyncio.create_task(
            response.awrite_response_to_history(self.memory)
        )
        return response

    def reset(self) -> None:
        self.inner_engine.reset()

    @property
    def chat_history(self) -> list[ChatMessage]:
        return self.memory.get_all()
