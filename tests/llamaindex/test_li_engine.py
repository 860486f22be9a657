"""ConvMemChatEngine over ContextChatEngine and CondensePlusContextChatEngine."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.chat_engine.types import BaseChatEngine

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from llamaindex_convmem import ConvMemChatEngine, ConvMemMemory
from tests.llamaindex.li_helpers import CountingLLM, RecordingRetriever, roles_and_text

SUMMIT = "How is Summit doing?"


def _build(
    session: SessionMemory, kind: str
) -> tuple[ConvMemChatEngine, CountingLLM, RecordingRetriever]:
    llm, retriever = CountingLLM(), RecordingRetriever()
    memory = ConvMemMemory(session, thread_id=f"t-{kind}")
    inner: BaseChatEngine
    if kind == "context":
        inner = ContextChatEngine.from_defaults(retriever=retriever, llm=llm, memory=memory)
    else:
        inner = CondensePlusContextChatEngine.from_defaults(
            retriever=retriever, llm=llm, memory=memory, skip_condense=True
        )
    return ConvMemChatEngine(inner, memory), llm, retriever


def _closed(session: SessionMemory, thread: str, turn: int) -> None:
    state = session.get_state(thread)
    assert state is not None and state.turn == turn and state.open_turn is None


@pytest.mark.parametrize("kind", ["context", "cpc"])
def test_retrieval_on_rewritten_question_and_clarification_without_llm(
    session: SessionMemory, kind: str
) -> None:
    engine, llm, retriever = _build(session, kind)
    engine.chat("Pull up Brightwater Farms.")
    engine.chat("Who's their rep?")
    assert retriever.queries[-1] == "Who's Brightwater Farms's rep?"
    sent = roles_and_text(llm.last_chat_messages)
    assert sent[-1] == ("user", "Who's Brightwater Farms's rep?")
    assert [r for r, _ in sent] == ["system", "system", "user"]
    calls_before, queries_before = len(llm.calls), len(retriever.queries)

    reply = engine.chat(SUMMIT)
    assert "1. Summit Outdoor Co." in reply.response and "2. Summit Outdoor GmbH" in reply.response
    assert len(llm.calls) == calls_before  # no model call
    assert len(retriever.queries) == queries_before  # no retrieval
    _closed(session, f"t-{kind}", 3)

    engine.chat("Munich.")
    assert retriever.queries[-1] == "How is Summit Outdoor GmbH doing?"
    _closed(session, f"t-{kind}", 4)
    assert engine.chat_history[-3].content == reply.response


def test_first_turn_clarification_calls_nothing(session: SessionMemory) -> None:
    engine, llm, retriever = _build(session, "context")
    engine.chat(SUMMIT)
    assert llm.calls == [] and retriever.queries == []


async def test_achat(session: SessionMemory) -> None:
    engine, llm, retriever = _build(session, "cpc")
    await engine.achat("Pull up Brightwater Farms.")
    await engine.achat("Who's their rep?")
    assert retriever.queries[-1] == "Who's Brightwater Farms's rep?"
    before = len(llm.calls)
    reply = await engine.achat(SUMMIT)
    assert "Summit Outdoor GmbH" in reply.response and len(llm.calls) == before
    await engine.achat("The second one.")
    assert retriever.queries[-1] == "How is Summit Outdoor GmbH doing?"
    state = await session.aget_state("t-cpc")
    assert state is not None and state.turn == 4 and state.open_turn is None


@pytest.mark.parametrize("kind", ["context", "cpc"])
def test_stream_chat_records_when_the_stream_ends(session: SessionMemory, kind: str) -> None:
    engine, llm, retriever = _build(session, kind)
    for q in ["Pull up Brightwater Farms.", "Who's their rep?", SUMMIT]:
        before = len(llm.calls)
        response = engine.stream_chat(q)
        writer = response.write_response_to_history_thread  # LlamaIndex's background writer
        assert writer is not None
        text = "".join(response.response_gen)
        writer.join(timeout=10)
        assert text and not writer.is_alive()
    assert len(llm.calls) == before  # the clarification streamed without the model
    assert "Summit Outdoor GmbH" in text
    assert retriever.queries[-1] == "Who's Brightwater Farms's rep?"
    _closed(session, f"t-{kind}", 3)
    assert [m.role.value for m in engine.chat_history] == ["user", "assistant"] * 3


@pytest.mark.parametrize("kind", ["context", "cpc"])
async def test_astream_chat_records_when_the_stream_ends(
    session: SessionMemory, kind: str
) -> None:
    engine, llm, retriever = _build(session, kind)
    for q in ["Pull up Brightwater Farms.", "Who's their rep?", SUMMIT, "Munich."]:
        before = len(llm.calls)
        response = await engine.astream_chat(q)
        writer = response.awrite_response_to_history_task
        assert writer is not None
        chunks = [t async for t in response.async_response_gen()]
        await asyncio.wait_for(writer, 10)
        assert "".join(chunks)
        if q == SUMMIT:
            assert len(llm.calls) == before
    assert retriever.queries[-1] == "How is Summit Outdoor GmbH doing?"
    state = await session.aget_state(f"t-{kind}")
    assert state is not None and state.turn == 4 and state.open_turn is None


def test_inner_engine_must_share_the_memory(session: SessionMemory) -> None:
    memory = ConvMemMemory(session, thread_id="t")
    other = SimpleChatEngine.from_defaults(llm=CountingLLM())
    with pytest.raises(ConfigError, match="same memory"):
        ConvMemChatEngine(other, memory)
