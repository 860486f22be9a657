"""The LlamaIndex adapters as components: spans through LlamaIndex's instrumentation
(seen by any span handler, nested under the engine's or agent's span), and pickling:
a chat store pickles by reference (the same store again in this process, a clear
error anywhere else, never a password); a memory refuses at pickling time. Neither
comes back silently without its connection."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.tools import FunctionTool

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import TranscriptStore
from llamaindex_convmem import (
    ConvMemChatEngine,
    ConvMemChatStore,
    ConvMemDBChatStore,
    ConvMemMemory,
    SessionStateBlock,
    wrap_tools,
)
from tests.llamaindex.li_helpers import CountingLLM

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spans() -> Iterator[SimpleSpanHandler]:
    """A span handler on LlamaIndex's root dispatcher, as an application registers one."""
    handler = SimpleSpanHandler()
    root = get_dispatcher()
    root.add_span_handler(handler)
    try:
        yield handler
    finally:
        root.span_handlers.remove(handler)


def _names(handler: SimpleSpanHandler) -> dict[str, str | None]:
    """span name -> parent span name (the last span of each name)."""
    by_id = {s.id_: s.id_.rsplit("-", 5)[0] for s in handler.completed_spans}
    return {by_id[s.id_]: (by_id.get(s.parent_id) if s.parent_id else None)
            for s in handler.completed_spans}


def test_chat_engine_turn_is_traced(session: SessionMemory, spans: SimpleSpanHandler) -> None:
    memory = ConvMemMemory(session, thread_id="t-spans")
    engine = ConvMemChatEngine(SimpleChatEngine.from_defaults(llm=CountingLLM(), memory=memory),
                               memory)
    engine.chat("Pull up Brightwater Farms.")
    names = _names(spans)
    assert names["ConvMemChatEngine.chat"] is None
    assert names["ConvMemMemory.start"] == "ConvMemChatEngine.chat"
    assert names["SimpleChatEngine.chat"] == "ConvMemChatEngine.chat"
    assert names["ConvMemMemory.get"] == "SimpleChatEngine.chat"
    assert names["ConvMemMemory.put"] == "SimpleChatEngine.chat"

    spans.completed_spans.clear()
    engine.chat("How is Northline doing on payments?")  # a clarification is traced too
    names = _names(spans)
    assert names["ConvMemMemory.start"] == "ConvMemChatEngine.chat"
    assert "SimpleChatEngine.chat" not in names


async def test_function_agent_turn_is_traced(
    session: SessionMemory, spans: SimpleSpanHandler
) -> None:
    def lookup_customer(name: str) -> dict[str, Any]:
        """Look a customer up by name."""
        return {"ok": True, "data": {"id": "C-1080", "name": "Brightwater Farms"}}

    def script(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        if messages[-1].role.value == "tool":
            return ChatMessage(role="assistant", content="Found it.")
        return ChatMessage(role="assistant", blocks=[ToolCallBlock(
            tool_call_id="c1", tool_name="lookup_customer", tool_kwargs={"name": "Brightwater"})])

    memory = ConvMemMemory(session, thread_id="t-agent-spans")
    agent = FunctionAgent(tools=wrap_tools([FunctionTool.from_defaults(fn=lookup_customer)], memory),
                          llm=MockFunctionCallingLLM(response_generator=script))
    await agent.run(user_msg="Find the farm account in Fresno.", memory=memory)
    names = set(_names(spans))
    assert {"ConvMemTool.acall", "ConvMemMemory.aget", "ConvMemMemory.aput"} <= names


async def test_memory_block_is_traced(session: SessionMemory, spans: SimpleSpanHandler) -> None:
    memory = Memory.from_defaults(session_id="t-block-spans",
                                  memory_blocks=[SessionStateBlock(session)])
    await memory.aput(ChatMessage(role="user", content="Pull up Brightwater Farms."))
    await memory.aget()
    assert "SessionStateBlock._aget" in _names(spans)


def test_chat_stores_are_traced(transcript: TranscriptStore, tenant: str,
                                spans: SimpleSpanHandler) -> None:
    buffer = ChatMemoryBuffer.from_defaults(
        chat_store=ConvMemChatStore(transcript, tenant=tenant), chat_store_key="k")
    buffer.put(ChatMessage(role="user", content="Pull up Brightwater Farms."))
    buffer.get()
    names = set(_names(spans))
    assert {"ConvMemChatStore.add_message", "ConvMemChatStore.get_messages"} <= names


async def test_db_chat_store_is_traced(transcript: TranscriptStore, tenant: str,
                                       spans: SimpleSpanHandler) -> None:
    store = ConvMemDBChatStore(transcript, tenant=tenant)
    await store.add_message("k", ChatMessage(role="user", content="hello"))
    assert len(await store.get_messages("k")) == 1
    names = set(_names(spans))
    assert {"ConvMemDBChatStore.add_message", "ConvMemDBChatStore.get_messages"} <= names
    await transcript.async_engine.dispose()


# ---------------------------------------------------------------------- pickling


def test_a_buffer_over_the_chat_store_pickles_in_process(
    transcript: TranscriptStore, tenant: str
) -> None:
    store = ConvMemChatStore(transcript, tenant=tenant)
    buffer = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="k")
    buffer.put(ChatMessage(role="user", content="hello"))
    again = pickle.loads(pickle.dumps(buffer))
    assert isinstance(again.chat_store, ConvMemChatStore)  # not LlamaIndex's default store
    assert again.chat_store.transcript is transcript and again.chat_store.tenant == tenant
    again.put(ChatMessage(role="assistant", content="hi"))
    assert [m.content for m in buffer.get_all()] == ["hello", "hi"]  # one record


def test_a_session_view_store_pickles_in_process(
    session: SessionMemory, transcript: TranscriptStore, tenant: str
) -> None:
    memory = SessionMemory(session.domain, transcript=transcript, tenant=tenant)
    store = ConvMemChatStore(memory, view="session", rewrite=False)
    again = pickle.loads(pickle.dumps(ChatMemoryBuffer.from_defaults(
        chat_store=store, chat_store_key="k"))).chat_store
    assert isinstance(again, ConvMemChatStore)
    assert (again.view, again.rewrite, again.tenant) == ("session", False, tenant)
    assert again.transcript is transcript


async def test_a_db_chat_store_pickles_in_process(transcript: TranscriptStore, tenant: str) -> None:
    store = ConvMemDBChatStore(transcript, tenant=tenant)
    await store.add_message("k", ChatMessage(role="user", content="hello"))
    again = pickle.loads(pickle.dumps(store))
    assert [m.content for m in await again.get_messages("k")] == ["hello"]
    await transcript.async_engine.dispose()


def test_a_pickle_carries_no_password_and_fails_clearly_elsewhere() -> None:
    url = "postgresql://app:s3cret-pw@127.0.0.1:5432/test?sslmode=disable"
    store = ConvMemChatStore(TranscriptStore(url, retention=FOREVER), tenant="acme")
    data = pickle.dumps(ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="k"))
    assert b"s3cret-pw" not in data
    child = subprocess.run(
        [sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"],
        input=data, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert child.returncode != 0
    err = child.stderr.decode()
    assert "ConfigError" in err and "does not travel in a pickle" in err
    assert "ConvMemChatStore(TranscriptStore(url, retention=...), tenant='acme')" in err
    store.transcript.close()


@pytest.mark.parametrize("build", ["memory", "block"])
def test_memories_refuse_pickling_at_once(session: SessionMemory, build: str) -> None:
    component: Any = {
        "memory": lambda: ConvMemMemory(session, thread_id="t"),
        "block": lambda: SessionStateBlock(session),
    }[build]()
    with pytest.raises(ConfigError, match="cannot be pickled"):
        pickle.dumps(component)
