"""SessionStateBlock inside LlamaIndex's Memory."""

from __future__ import annotations

import pytest
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory, StaticMemoryBlock

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from llamaindex_convmem import SESSION_BLOCK_TEMPLATE, SessionStateBlock
from tests.llamaindex.li_helpers import CountingLLM, roles_and_text


def _memory(session: SessionMemory, **kw: object) -> Memory:
    return Memory.from_defaults(
        session_id="t-block",
        memory_blocks=[SessionStateBlock(session)],
        memory_blocks_template=SESSION_BLOCK_TEMPLATE,
        **kw,  # type: ignore[arg-type]
    )


def test_block_added_history_still_windowed_by_memory(session: SessionMemory) -> None:
    llm = CountingLLM()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=_memory(session))
    engine.chat("Pull up Brightwater Farms.")
    engine.chat("Who's their rep?")
    sent = roles_and_text(llm.last_chat_messages)
    assert [r for r, _ in sent] == ["system", "user", "assistant", "user"]
    assert sent[0][1].startswith('## Session context\nCurrently discussing: customer "Brightwater')
    assert "<memory>" not in sent[0][1]
    assert sent[-1] == ("user", "Who's their rep?")
    state = session.get_state("t-block")
    assert state is not None and state.turn == 2


def test_turn_advances_once_per_message(session: SessionMemory) -> None:
    memory = _memory(session)
    memory.put(ChatMessage(role="user", content="Pull up Brightwater Farms."))
    for _ in range(3):
        memory.get()
        memory.get(input="Pull up Brightwater Farms.")
    state = session.get_state("t-block")
    assert state is not None and state.turn == 1


async def test_get_path_updates_state_async(session: SessionMemory) -> None:
    memory = _memory(session)
    got = await memory.aget(input="How is Summit doing?")
    assert "Summit Outdoor GmbH" in (got[0].content or "")
    await memory.aput(ChatMessage(role="user", content="How is Summit doing?"))
    await memory.aput(ChatMessage(role="assistant", content="Which one?"))
    got = await memory.aget(input="Munich.")
    assert "C-1061" in (got[0].content or "")
    state = await session.aget_state("t-block")
    assert state is not None and state.focus is not None and state.focus.id == "C-1061"


def test_priority_zero_survives_truncation(session: SessionMemory) -> None:
    filler = StaticMemoryBlock(name="filler", static_content="lorem " * 400, priority=1)
    memory = Memory.from_defaults(
        session_id="t-block",
        token_limit=300,
        memory_blocks=[SessionStateBlock(session), filler],
        memory_blocks_template=SESSION_BLOCK_TEMPLATE,
    )
    got = memory.get(input="Pull up Brightwater Farms.")
    assert "Brightwater Farms" in (got[0].content or "")
    assert "lorem" not in (got[0].content or "")


def test_needs_a_thread(session: SessionMemory) -> None:
    import asyncio

    block = SessionStateBlock(session)
    with pytest.raises(ConfigError, match="thread_id"):
        asyncio.run(block.aget([ChatMessage(role="user", content="hi")]))
    assert SessionStateBlock(session, thread_id="x").priority == 0
