"""Prompt tokens over the 50-turn reference session: convmem beside LlamaIndex's defaults.

Uses the local stand-in ``llamaindex_convmem._reference`` until ``convmem.reference``
lands (same spec: seed 0, 4,000-token context, 17–27-token questions, 2,000-token answers).
"""

from __future__ import annotations

import pytest
from llama_index.core.memory import ChatMemoryBuffer, Memory

from convmem.session import SessionMemory
from convmem.tokens import count_tokens
from llamaindex_convmem import ConvMemMemory
from llamaindex_convmem._reference import (
    ANSWER_TOKENS,
    CONTEXT_TOKENS,
    Turn,
    prompt_tokens_per_turn,
    reference_session,
)

WINDOW = 128_000  # the model window the defaults are sized from
SHOWN = (1, 3, 6, 10, 20, 50)


@pytest.fixture(scope="module")
def ref() -> list[Turn]:
    return reference_session(seed=0)


def test_reference_session_follows_the_spec(ref: list[Turn]) -> None:
    assert len(ref) == 50
    for turn in ref:
        assert count_tokens(turn.context) == CONTEXT_TOKENS
        assert count_tokens(turn.answer) == ANSWER_TOKENS
        assert 17 <= count_tokens(turn.question) <= 27
    assert reference_session(seed=0) == ref


def test_memory_added_tokens_flat_over_fifty_turns(
    ref: list[Turn], session: SessionMemory
) -> None:
    ours = prompt_tokens_per_turn(ConvMemMemory(session, thread_id="ref"), ref)
    engines_default = prompt_tokens_per_turn(Memory.from_defaults(token_limit=WINDOW - 256), ref)
    agents_default = prompt_tokens_per_turn(ChatMemoryBuffer.from_defaults(token_limit=96_000), ref)

    print("\nprompt tokens (memory-added) per turn, reference session, seed 0")
    for name, rows in (
        ("convmem ConvMemMemory", ours),
        ("Memory(token_limit=window-256), engines' default", engines_default),
        ("ChatMemoryBuffer(0.75*window), agents' default", agents_default),
    ):
        cells = "  ".join(f"t{t}={rows[t - 1][0]:,}({rows[t - 1][1]:,})" for t in SHOWN)
        print(f"{name:52s} {cells}  t50/t1={rows[49][0] / rows[0][0]:.3f}")

    assert max(added for _, added in ours) <= 160
    assert ours[49][0] / ours[0][0] <= 1.05
    assert any(added > 0 for _, added in ours)  # the block is there at all
    # the defaults replay history, which is what the comparison is about
    assert engines_default[49][0] / engines_default[0][0] > 20
    assert agents_default[49][0] / agents_default[0][0] > 20
