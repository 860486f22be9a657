"""Issue 22, finding 10, through the façade: the largest legal questions (``MAX_QUESTION_CHARS``
four-byte characters) never lose a save, on the in-memory store and on Redis. The stored
state keeps a cut of each (``convmem.state.state_text``); the model's input and the
transcript keep the whole text, and the same message again is still the same turn."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest

from convmem import (
    Clarification,
    Domain,
    InMemorySessionStateStore,
    ModelCall,
    SessionMemory,
    TurnContext,
)
from convmem.session import MAX_QUESTION_CHARS
from convmem.state import (
    MAX_STATE_BYTES,
    MAX_STATE_TEXT_BYTES,
    MAX_TURN_TEXT_BYTES,
    encode_state,
    state_text,
)
from convmem.stores import RedisSessionStateStore
from convmem.transcript import TranscriptStore

TODAY = date(2026, 11, 30)
FILL = "\U0001f600"  # four bytes of UTF-8


def largest(text: str) -> str:
    """``text`` padded with four-byte characters to the longest legal question."""
    return f"{text} " + FILL * (MAX_QUESTION_CHARS - len(text) - 1)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, key_prefix: str) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemorySessionStateStore()
        return
    redis_store = RedisSessionStateStore(request.getfixturevalue("redis_url"), prefix=key_prefix,
                                         socket_timeout=5.0)
    yield redis_store
    redis_store.close()


def test_the_largest_questions_never_lose_a_save(crm: Domain, store: Any) -> None:
    memory = SessionMemory(crm, store=store)
    questions = [largest("How is Brightwater Farms doing?"),
                 largest("What did they order last quarter?"), largest("And Pinecrest Clinics?")]
    for i, question in enumerate(questions):
        ctx = memory.begin_turn("th", question, today=TODAY)
        assert isinstance(ctx, TurnContext) and ctx.question == question  # whole for the model
        if i < 2:  # (the elliptical repeat is the previous question: the state's copy of it)
            assert ctx.rewritten.count(FILL) == question.count(FILL)
        # the same message again is the same turn, also in a process that reads the
        # stored state (its copy of the question is cut)
        other = SessionMemory(crm, store=store)
        assert other.begin_turn("th", question, today=TODAY).state.version == ctx.state.version
        memory.end_turn("th", answer="ok")
    clarified = memory.begin_turn("th", largest("How is Northline doing?"), today=TODAY)
    assert isinstance(clarified, Clarification)
    memory.end_turn("th")
    # the answer turn, read from the store, continues with the stored original question:
    # the turn's own question keeps MAX_TURN_TEXT_BYTES (1,536 four-byte characters)
    answered = SessionMemory(crm, store=store).begin_turn("th", "The Toronto one.", today=TODAY)
    assert isinstance(answered, TurnContext) and answered.rewritten.count(FILL) >= 1500
    # nine saves (three turns of two, the clarification and its end, the answer), none lost
    assert store.stats.degraded == 0
    stored = memory.get_state("th")
    assert stored is not None and stored.version == 9 and stored.open_turn is not None
    assert len(encode_state(stored)) <= MAX_STATE_BYTES // 2
    if isinstance(store, InMemorySessionStateStore):  # the stored copy itself
        raw = store.raw("default", "th")
        assert raw is not None and len(raw) <= MAX_STATE_BYTES // 2
        kept = [*stored.recent_questions, *stored.open_turn.base.recent_questions]
        assert all(len(q.encode()) <= MAX_STATE_TEXT_BYTES for q in kept)
        assert len(stored.open_turn.resolved_question.encode()) <= MAX_TURN_TEXT_BYTES
        assert stored.recent_questions[-1] == state_text(largest("How is Northline doing?"))


def test_the_record_keeps_the_whole_question(crm: Domain, transcript: TranscriptStore) -> None:
    store = InMemorySessionStateStore()
    memory = SessionMemory(crm, store=store, transcript=transcript)
    question = largest("How is Brightwater Farms doing?")
    ctx = memory.begin_turn("th", question, today=TODAY, model_call=ModelCall(system_prompt="s"))
    assert isinstance(ctx, TurnContext)
    memory.end_turn("th", answer="ok")
    path = transcript.active_path(memory.tenant, memory.transcript_thread_id("th"))
    assert path[0].text == question
    stored = memory.get_state("th")
    assert stored is not None and stored.recent_questions == (state_text(question),)
    assert len(stored.recent_questions[0]) < len(question)
    # redaction finds the state's cut copy of the question it takes out
    memory.redact("th", path[0].id, actor="test", reason="finding 10")
    after = memory.get_state("th")
    assert after is not None and after.recent_questions == () and after.last_rewrite is None
