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

The same works for an engine built on a session-view chat store
(``ChatMemoryBuffer``/``Memory`` over ``ConvMemChatStore(memory, view="session")``):
``ConvMemChatEngine(inner_engine)`` finds the store and the key in the engine's memory,
opens the turn in the store before the engine reads it (so a reading-first engine gets
the fresh block and the rewrite instead of last turn's block), and records a
clarification through the engine's memory.

Streaming clarifications go through LlamaIndex's own ``StreamingAgentChatResponse``
writers (a thread for ``stream_chat``, a task for ``astream_chat``), exactly as the
engines record streamed answers, so callers wait for the record the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator
from threading import Thread
from typing import TYPE_CHECKING

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.chat_engine.types import (
    AGENT_CHAT_RESPONSE_TYPE,
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.memory.types import BaseMemory

from convmem.errors import ConfigError
from convmem.session import Clarification, TurnContext
from llamaindex_convmem.memory import ConvMemMemory, message_text

if TYPE_CHECKING:  # the session view loads the SQL stack: only an engine over it needs it
    from llamaindex_convmem.session_store import KeyTurns


class ConvMemChatEngine(BaseChatEngine):
    """Wraps a chat engine: clarifications without a model call, rewritten questions.

    ``memory``: the ``ConvMemMemory`` the inner engine was built with; omit it when the
    inner engine's memory is a ``ChatMemoryBuffer`` or ``Memory`` over a session-view
    chat store.
    """

    def __init__(self, inner_engine: BaseChatEngine, memory: ConvMemMemory | None = None) -> None:
        if not isinstance(inner_engine, BaseChatEngine):
            raise ConfigError(
                f"ConvMemChatEngine: inner_engine must be a BaseChatEngine, "
                f"got {type(inner_engine).__name__}"
            )
        inner_memory = getattr(inner_engine, "_memory", None)
        turns: ConvMemMemory | KeyTurns | None
        if inner_memory is not None and not isinstance(inner_memory, BaseMemory):
            raise ConfigError(
                f"ConvMemChatEngine: the inner engine's memory is a {type(inner_memory).__name__}"
            )
        if memory is None:
            turns = inner_memory if isinstance(inner_memory, ConvMemMemory) else None
            if turns is None:
                from llamaindex_convmem.session_store import session_turns

                turns = session_turns(inner_memory)
            if turns is None:
                raise ConfigError(
                    "ConvMemChatEngine: pass memory=ConvMemMemory(...) (the inner engine's), or "
                    "build the inner engine on a chat store with view='session', e.g. "
                    "memory=ChatMemoryBuffer.from_defaults(chat_store=ConvMemChatStore("
                    "session_memory, view='session'), chat_store_key=...)"
                )
        elif not isinstance(memory, ConvMemMemory):
            raise ConfigError(
                f"ConvMemChatEngine: memory must be a ConvMemMemory, got {type(memory).__name__}"
            )
        elif (inner_memory if inner_memory is not None else memory) is not memory:
            raise ConfigError(
                "ConvMemChatEngine: build the inner engine with the same memory, e.g. "
                "ContextChatEngine.from_defaults(retriever=..., memory=memory)"
            )
        else:
            turns = memory
        self.inner_engine = inner_engine
        self._turns = turns
        #: where the clarification exchange is stored: the memory the inner engine writes to
        target = turns if isinstance(turns, ConvMemMemory) else inner_memory
        assert target is not None  # session_turns found the store in it
        self.memory: BaseMemory = target
        prefix = getattr(inner_engine, "_prefix_messages", None) or []
        system = [message_text(m) for m in prefix if m.role == MessageRole.SYSTEM]
        system_prompt = "\n\n".join(system) if system else None
        metadata = getattr(getattr(inner_engine, "_llm", None), "metadata", None)
        model = getattr(metadata, "model_name", None)
        if isinstance(turns, ConvMemMemory):
            if turns.system_prompt is None:
                turns.system_prompt = system_prompt
            turns.describe_model(model=model)
        else:
            turns.describe(system_prompt=system_prompt, model=model)

    # ------------------------------------------------------------------ helpers

    def _question(self, started: TurnContext, message: str) -> str:
        """What the inner engine retrieves and answers on: the rewrite (``rewrite=True``,
        or a turn answering a clarification), else the user's message."""
        return started.sent_question(self._turns.rewrite) or message

    def _no_model_call(self) -> None:
        """A session-view store must not take the engine memory's own reads (``Memory``
        re-reads after every write) for a model call: this turn has none."""
        if not isinstance(self._turns, ConvMemMemory):
            self._turns.no_model_call()

    def _clarified(self, message: str, clarification: Clarification) -> None:
        """Record the exchange: it closes the turn like an answer would."""
        self._no_model_call()
        self.memory.put(ChatMessage(role=MessageRole.USER, content=message))
        self.memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=clarification.text))

    async def _aclarified(self, message: str, clarification: Clarification) -> None:
        self._no_model_call()
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
        started = self._turns.start(message)
        if isinstance(started, Clarification):
            self._clarified(message, started)
            return AgentChatResponse(response=started.text)
        return self.inner_engine.chat(self._question(started, message), chat_history)

    async def achat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> AGENT_CHAT_RESPONSE_TYPE:
        started = await self._turns.astart(message)
        if isinstance(started, Clarification):
            await self._aclarified(message, started)
            return AgentChatResponse(response=started.text)
        return await self.inner_engine.achat(self._question(started, message), chat_history)

    def stream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        started = self._turns.start(message)
        if not isinstance(started, Clarification):
            question = self._question(started, message)
            return self.inner_engine.stream_chat(question, chat_history)
        self._no_model_call()
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
        started = await self._turns.astart(message)
        if not isinstance(started, Clarification):
            question = self._question(started, message)
            return await self.inner_engine.astream_chat(question, chat_history)
        self._no_model_call()
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
        """The conversation: this process's messages (``ConvMemMemory``) or the record."""
        if not isinstance(self._turns, ConvMemMemory):
            return self._turns.history()
        return self.memory.get_all()
