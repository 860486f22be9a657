"""Constructing every public class raises no warning; the public surface is pinned."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest
from blockbuster import BlockingError
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI

import llamaindex_convmem
from convmem.session import SessionMemory
from convmem.transcript import RetentionPolicy, TranscriptStore
from llamaindex_convmem import (
    ConvMemChatEngine,
    ConvMemChatStore,
    ConvMemDBChatStore,
    ConvMemMemory,
    LLMResolver,
    SessionStateBlock,
    wrap_tools,
)
from tests.llamaindex.li_helpers import CountingLLM, RecordingRetriever
from tests.offline_http import DUMMY_OPENAI_KEY


def _tool(x: int) -> int:
    """Doubles x."""
    return 2 * x


def test_all_is_pinned() -> None:
    assert sorted(llamaindex_convmem.__all__) == sorted([
        "SESSION_BLOCK_TEMPLATE", "ConvMemChatEngine", "ConvMemChatStore",
        "ConvMemDBChatStore", "ConvMemMemory", "ConvMemTool", "LLMResolver",
        "SessionStateBlock", "recall_tool", "tool_result", "wrap_tools",
    ])


def test_construction_raises_no_warning(session: SessionMemory) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        memory = ConvMemMemory(session, thread_id="t")
        inner = ContextChatEngine.from_defaults(
            retriever=RecordingRetriever(), llm=CountingLLM(), memory=memory
        )
        ConvMemChatEngine(inner, memory)
        SessionStateBlock(session, thread_id="t")
        wrap_tools([FunctionTool.from_defaults(fn=_tool)], memory)
        LLMResolver(CountingLLM())
        LLMResolver(OpenAI(model="gpt-4o-mini", api_key=DUMMY_OPENAI_KEY))


def test_chat_stores_construct_without_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        transcript = TranscriptStore(
            f"sqlite:///{tmp_path / 'c.db'}", retention=RetentionPolicy(max_age=None, owner="t")
        )
        ChatMemoryBuffer.from_defaults(chat_store=ConvMemChatStore(transcript), chat_store_key="k")
        Memory.from_defaults(session_id="k", chat_store=ConvMemDBChatStore(transcript, tenant="a"))
        transcript.close()


async def test_blockbuster_is_active() -> None:
    with pytest.raises(BlockingError):
        time.sleep(0.001)
