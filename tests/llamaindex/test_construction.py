"""Constructing every public class raises no warning; the public surface is pinned."""

from __future__ import annotations

import time
import warnings

import pytest
from blockbuster import BlockingError
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI

import llamaindex_convmem
from convmem.session import SessionMemory
from llamaindex_convmem import (
    ConvMemChatEngine,
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
        "SESSION_BLOCK_TEMPLATE", "ConvMemChatEngine", "ConvMemMemory", "ConvMemTool",
        "LLMResolver", "SessionStateBlock", "wrap_tools",
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


async def test_blockbuster_is_active() -> None:
    with pytest.raises(BlockingError):
        time.sleep(0.001)
