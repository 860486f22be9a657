"""ConvMemMemory under real LlamaIndex engines: what the model receives, turn by turn."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.llms import ChatMessage

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from llamaindex_convmem import ConvMemMemory
from llamaindex_convmem.memory import CLARIFY_INSTRUCTION
from tests.llamaindex.li_helpers import CountingLLM, RecordingRetriever, roles_and_text

SYSTEM = "You are a CRM assistant."
BRIGHTWATER_BLOCK = (
    '## Session context\nCurrently discussing: customer "Brightwater Farms" (C-1080)'
)


def _simple(session: SessionMemory, **kw: object) -> tuple[SimpleChatEngine, CountingLLM]:
    llm = CountingLLM()
    memory = ConvMemMemory(session, thread_id="t-simple", **kw)  # type: ignore[arg-type]
    return SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt=SYSTEM), llm


def test_simple_engine_sees_block_and_rewritten_question(session: SessionMemory) -> None:
    engine, llm = _simple(session)
    engine.chat("Pull up Brightwater Farms.")
    assert roles_and_text(llm.last_chat_messages) == [
        ("system", SYSTEM),
        ("system", BRIGHTWATER_BLOCK),
        ("user", "Pull up Brightwater Farms."),
    ]
    engine.chat("Who's their rep?")
    sent = roles_and_text(llm.last_chat_messages)
    assert sent[-1] == ("user", "Who's Brightwater Farms's rep?")
    assert [r for r, _ in sent] == ["system", "system", "user"]  # no replayed history
    assert "Earlier in this session" in sent[1][1]
    state = session.get_state("t-simple")
    assert state is not None and state.turn == 2 and state.open_turn is None
    assert [m.role.value for m in engine.chat_history] == ["user", "assistant"] * 2


def test_rewrite_false_keeps_the_users_words(session: SessionMemory) -> None:
    engine, llm = _simple(session, rewrite=False)
    engine.chat("Pull up Brightwater Farms.")
    engine.chat("Who's their rep?")
    assert roles_and_text(llm.last_chat_messages)[-1] == ("user", "Who's their rep?")


def test_clarification_then_answer(session: SessionMemory) -> None:
    engine, llm = _simple(session)
    engine.chat("How is Summit doing?")
    sent = roles_and_text(llm.last_chat_messages)
    assert sent[1][1].startswith(CLARIFY_INSTRUCTION)
    assert "1. Summit Outdoor Co." in sent[1][1] and "2. Summit Outdoor GmbH" in sent[1][1]
    engine.chat("Munich.")
    sent = roles_and_text(llm.last_chat_messages)
    assert sent[-1] == ("user", "How is Summit Outdoor GmbH doing?")
    state = session.get_state("t-simple")
    assert state is not None and state.focus is not None and state.focus.id == "C-1061"


def test_begin_turn_once_per_message_however_many_gets(session: SessionMemory) -> None:
    memory = ConvMemMemory(session, thread_id="t-many")
    memory.put(ChatMessage(role="user", content="Pull up Brightwater Farms."))
    first = memory.get()
    for _ in range(5):
        assert memory.get() == first
        assert memory.get(input="Pull up Brightwater Farms.") == first
    state = session.get_state("t-many")
    assert state is not None and state.turn == 1
    memory.put(ChatMessage(role="assistant", content="Here it is."))
    # the same words again, after the answer: a new turn
    memory.put(ChatMessage(role="user", content="Pull up Brightwater Farms."))
    memory.get()
    state = session.get_state("t-many")
    assert state is not None and state.turn == 2


def test_get_before_put_leaves_the_question_to_the_engine(session: SessionMemory) -> None:
    memory = ConvMemMemory(session, thread_id="t-ctx")
    got = memory.get(input="Pull up Brightwater Farms.")
    assert roles_and_text(got) == [("system", BRIGHTWATER_BLOCK)]


def test_assistant_tool_call_step_does_not_end_the_turn(session: SessionMemory) -> None:
    from llama_index.core.base.llms.types import ToolCallBlock

    memory = ConvMemMemory(session, thread_id="t-tools")
    memory.put(ChatMessage(role="user", content="Pull up Brightwater Farms."))
    memory.get()
    memory.put_messages([
        ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_name="x", tool_kwargs={})]),
        ChatMessage(role="tool", content="{}", additional_kwargs={"tool_call_id": "c1"}),
    ])
    state = session.get_state("t-tools")
    assert state is not None and state.open_turn is not None
    memory.put(ChatMessage(role="assistant", content="Done."))
    state = session.get_state("t-tools")
    assert state is not None and state.open_turn is None


def test_context_engine_with_plain_memory(session: SessionMemory) -> None:
    llm, retriever = CountingLLM(), RecordingRetriever()
    memory = ConvMemMemory(session, thread_id="t-context")
    engine = ContextChatEngine.from_defaults(retriever=retriever, llm=llm, memory=memory)
    engine.chat("Pull up Brightwater Farms.")
    engine.chat("Who's their rep?")
    sent = roles_and_text(llm.last_chat_messages)
    # context system message, the session block, then the engine's own question
    assert [r for r, _ in sent] == ["system", "system", "user"]
    assert "Brightwater Farms" in sent[1][1]
    assert sent[-1][1] == "Who's their rep?"
    assert retriever.queries == ["Pull up Brightwater Farms.", "Who's their rep?"]
    state = session.get_state("t-context")
    assert state is not None and state.turn == 2 and state.open_turn is None


def test_condense_plus_context_with_plain_memory(session: SessionMemory) -> None:
    llm, retriever = CountingLLM(), RecordingRetriever()
    memory = ConvMemMemory(session, thread_id="t-cpc")
    engine = CondensePlusContextChatEngine.from_defaults(
        retriever=retriever, llm=llm, memory=memory, skip_condense=True
    )
    for q in ["Pull up Brightwater Farms.", "Who's their rep?", "And Pinecrest Clinics?"]:
        engine.chat(q)
        sent = roles_and_text(llm.last_chat_messages)
        assert [r for r, _ in sent] == ["system", "system", "user"]
        assert sent[-1][1] == q
    assert "Pinecrest Clinics" in sent[1][1]
    state = session.get_state("t-cpc")
    assert state is not None and state.turn == 3


async def test_async_simple_engine(session: SessionMemory) -> None:
    engine, llm = _simple(session)
    await engine.achat("Pull up Brightwater Farms.")
    await engine.achat("Who's their rep?")
    assert roles_and_text(llm.last_chat_messages)[-1] == ("user", "Who's Brightwater Farms's rep?")
    assert llm.calls.count("achat") == 2
    state = await session.aget_state("t-simple")
    assert state is not None and state.turn == 2 and state.open_turn is None


async def test_sync_methods_inside_a_running_loop(session: SessionMemory) -> None:
    memory = ConvMemMemory(session, thread_id="t-loop")
    for q in ["Pull up Brightwater Farms.", "Who's their rep?", "And Pinecrest Clinics?"]:
        memory.put(ChatMessage(role="user", content=q))
        assert memory.get()[-1].role.value == "user"
        memory.put(ChatMessage(role="assistant", content="ok"))
        await asyncio.sleep(0)
    state = session.get_state("t-loop")
    assert state is not None and state.turn == 3 and state.focus is not None
    assert state.focus.label == "Pinecrest Clinics"


def test_construction_errors(session: SessionMemory) -> None:
    with pytest.raises(ConfigError):
        ConvMemMemory(session, thread_id="")
    with pytest.raises(ConfigError):
        ConvMemMemory(object(), thread_id="t")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="thread_id"):
        ConvMemMemory.from_defaults(chat_history=[], token_limit=100)


def test_reset_drops_state(session: SessionMemory) -> None:
    engine, _ = _simple(session)
    engine.chat("Pull up Brightwater Farms.")
    engine.reset()
    assert session.get_state("t-simple") is None
    assert engine.chat_history == []
