"""Prompt tokens over the 50-turn reference session: convmem beside LlamaIndex's defaults.

The session is ``convmem.reference`` (seed 0: 4,000-token system + context, 17–27-token
questions, 2,000-token answers, one focus-setting tool call on most turns). Memory is
driven as ``SimpleChatEngine`` and the agents drive it: ``put(user)``, then ``get()``,
then the model sees the turn's system prompt + what memory returned.
"""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer, Memory

from convmem import count_message_tokens
from convmem.reference import TODAY, ReferenceTurn, reference_domain, reference_session
from convmem.session import SessionMemory
from llamaindex_convmem import ConvMemMemory

WINDOW = 128_000  # the model window LlamaIndex sizes its defaults from
SHOWN = (1, 3, 6, 10, 20, 50)


def prompt_tokens(memory: Any, turns: list[ReferenceTurn], on_tool: Any = None) -> list[tuple[int, int]]:
    """``(prompt tokens, memory-added tokens)`` per turn."""
    rows = []
    for t in turns:
        memory.put(ChatMessage(role="user", content=t.question))
        got = memory.get()
        if on_tool is not None and t.tool is not None:
            on_tool(*t.tool)
        sent = [("system", t.system)] + [(m.role.value, m.content or "") for m in got]
        prompt = count_message_tokens(sent)
        rows.append((prompt, prompt - count_message_tokens([("system", t.system), ("user", t.question)])))
        memory.put(ChatMessage(role="assistant", content=t.answer))
    return rows


def test_memory_added_tokens_flat_over_fifty_turns() -> None:
    turns = list(reference_session())
    session = SessionMemory(reference_domain(), clock=lambda: datetime.combine(TODAY, time(12)))
    ours = prompt_tokens(
        ConvMemMemory(session, thread_id="ref"), turns,
        on_tool=lambda name, args, result: session.record_tool("ref", name, args, result),
    )
    engines_default = prompt_tokens(Memory.from_defaults(token_limit=WINDOW - 256), turns)
    agents_default = prompt_tokens(ChatMemoryBuffer.from_defaults(token_limit=int(0.75 * WINDOW)), turns)

    print("\nprompt tokens (memory-added) per turn, convmem.reference session, seed 0")
    for name, rows in (
        ("convmem ConvMemMemory", ours),
        ("Memory(token_limit=window-256) (engines' default)", engines_default),
        ("ChatMemoryBuffer(0.75*window) (agents' default)", agents_default),
    ):
        cells = "  ".join(f"t{t}={rows[t - 1][0]:,}({rows[t - 1][1]:,})" for t in SHOWN)
        print(f"{name:50s} {cells}  max added={max(a for _, a in rows):,}  "
              f"t50/t1={rows[49][0] / rows[0][0]:.3f}")

    assert max(added for _, added in ours) <= 160
    assert ours[49][0] / ours[0][0] <= 1.05
    assert any(added > 0 for _, added in ours)  # the block is there at all
    # what the comparison is about: the defaults replay the history
    assert engines_default[49][0] / engines_default[0][0] > 20
    assert agents_default[49][0] / agents_default[0][0] > 20
