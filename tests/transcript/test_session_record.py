"""``SessionMemory`` with a transcript: the two commit points of a turn, driven by the façade.

Every test runs on SQLite and PostgreSQL, through the sync methods and through their
async twins (on one event loop, ``blockbuster`` active).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from convmem import (
    Clarification,
    Domain,
    InMemorySessionStateStore,
    ModelCall,
    SessionMemory,
    SessionStateStore,
    TranscriptUnavailable,
    TurnContext,
    count_tokens,
)
from convmem.testing.transcript_spec import FOREVER, Api
from convmem.transcript import TextPart, ToolCallPart, ToolResultPart, TranscriptStore
from convmem.transcript.models import CONTENT_TABLES

DATA = Path(__file__).resolve().parent.parent / "data"
TODAY = date(2026, 11, 30)
LOOKUP = {"ok": True, "data": {"id": "C-1080", "name": "Brightwater Farms"}}
CALL = ModelCall(
    system_prompt="You answer questions about the account book.",
    tool_schemas=({"type": "function", "function": {"name": "lookup_customer"}},),
    model="fake-model-1",
    model_params={"temperature": 0.0},
)
assert count_tokens("warm the tokenizer up") > 0  # read once, before any event loop runs


@pytest.fixture
def transcript(transcript_url: str, migrated_store: Callable[[str], TranscriptStore]) -> TranscriptStore:
    """Closed by ``Turns.close``, on the loop its turns ran on."""
    return migrated_store(transcript_url)


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Turns:
    """A ``SessionMemory`` and its transcript, called through sync or async methods."""

    def __init__(self, memory: SessionMemory, mode: str, loop_owner: Api | None = None) -> None:
        self.memory = memory
        self.api = loop_owner if loop_owner is not None else Api(memory, mode)  # type: ignore[arg-type]
        self.mode = mode
        self.threads_before = set(threading.enumerate())

    def __getattr__(self, name: str) -> Any:
        if self.api.loop is None:
            return getattr(self.memory, name)
        afn = getattr(self.memory, "a" + name)
        return lambda *a, **k: self.api.run(afn(*a, **k))

    def store(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A call on the transcript, through the same mode."""
        transcript = self.memory.transcript
        assert transcript is not None
        if self.api.loop is None:
            return getattr(transcript, name)(*args, **kwargs)
        return self.api.run(getattr(transcript, "a" + name)(*args, **kwargs))

    def close(self) -> None:
        transcript = self.memory.transcript
        if self.api.loop is not None:
            if transcript is not None:
                self.api.run(transcript.async_engine.dispose())
            self.api.run(_workers_done(self.threads_before))
            self.api.loop.close()
        if transcript is not None:
            transcript.engine.dispose()


async def _workers_done(before: set[threading.Thread]) -> None:
    """Return once the worker threads started since ``before`` by aiosqlite (one per
    connection) have exited. Each posts its last result to this loop as it stops, so the
    loop must outlive them; they are joined off the loop, and the results they posted run
    before this returns (the join's own result is posted after them)."""
    loop = asyncio.get_running_loop()
    for thread in set(threading.enumerate()) - before:
        if thread.name.endswith("(_connection_worker_thread)"):
            await loop.run_in_executor(None, thread.join, 30)
            assert not thread.is_alive(), f"{thread.name} did not stop"


@pytest.fixture
def make(crm: Domain, tenant: str, mode: str) -> Iterator[Any]:
    """``make(transcript, state_store=None, **kw)`` → ``Turns``; blockbuster on in async mode."""
    made: list[Turns] = []

    def build(
        transcript: TranscriptStore | None,
        state_store: SessionStateStore | None = None,
        **kw: Any,
    ) -> Turns:
        memory = SessionMemory(
            crm,
            store=state_store if state_store is not None else InMemorySessionStateStore(),
            transcript=transcript,
            tenant=tenant,
            **kw,
        )
        turns = Turns(memory, mode, made[0].api if made else None)
        made.append(turns)
        return turns

    with ExitStack() as stack:
        if mode == "async":
            from blockbuster import blockbuster_ctx

            stack.enter_context(blockbuster_ctx())
        yield build
    for turns in reversed(made):
        if turns is made[0]:
            continue
        transcript = turns.memory.transcript
        if transcript is not None and turns.api.loop is not None:
            turns.api.run(transcript.async_engine.dispose())
        if transcript is not None:
            transcript.engine.dispose()
    if made:
        made[0].close()


@pytest.fixture
def t(make: Any, transcript: TranscriptStore) -> Turns:
    """``make(transcript)``: turns recorded into the ``transcript`` (the test's first)."""
    return make(transcript)  # type: ignore[no-any-return]


@pytest.fixture
def devices(
    make: Any, transcript_url: str, migrated_store: Callable[[str], TranscriptStore]
) -> tuple[Turns, Turns]:
    """Two devices of one user: one session-state store, a transcript store each (on the
    same database)."""
    shared = InMemorySessionStateStore()
    return make(migrated_store(transcript_url), shared), make(migrated_store(transcript_url), shared)


def _clarified(t: Turns) -> Clarification:
    """Ask ``"th"`` a question the CRM domain answers with a clarification (no model call)."""
    clar = t.begin_turn("th", "Briefly, how is Harbor doing?", today=TODAY, model_call=CALL)
    assert isinstance(clar, Clarification)
    return clar


def _rows(store: TranscriptStore, tenant: str) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {
            t: conn.execute(sa.text(f'SELECT COUNT(*) FROM "{t}" WHERE tenant = :t'), {"t": tenant})
            .scalar_one()
            for t in CONTENT_TABLES
        }


def _dump(store: TranscriptStore, tenant: str) -> str:
    """Every row of the tenant, as text."""
    out: list[str] = []
    with store.engine.connect() as conn:
        for t in CONTENT_TABLES:
            rows = conn.execute(sa.text(f'SELECT * FROM "{t}" WHERE tenant = :t'), {"t": tenant})
            out.extend(repr(tuple(r)) for r in rows)
    return "\n".join(out)


# --------------------------------------------------------------------------- commit points


def test_two_commit_points_per_turn(t: Turns, tenant: str) -> None:
    started = t.begin_turn("th", "Pull up Brightwater Farms.", message_id="m1", today=TODAY)
    assert isinstance(started, TurnContext)
    tid = t.transcript_thread_id("th")
    assert t.store("active_path", tenant, tid) == []  # nothing before the model input is known

    first = t.record_model_input("th", CALL)
    assert first is not None
    again = t.record_model_input("th", ModelCall(system_prompt="a later step of the tool loop"))
    assert again == first  # one model-input record per turn: the first call's
    (user,) = t.store("active_path", tenant, tid)  # commit point 1: the user message
    assert user.role == "user" and user.text == "Pull up Brightwater Farms."
    assert user.extra == {"convmem": {"message_id": "m1", "version": 1}}
    assert user.turn_id == first.turn_id

    seen = t.store("reconstruct_model_input", tenant, tid, first.turn_id)
    assert seen.system_prompt == CALL.system_prompt and seen.model == "fake-model-1"
    assert seen.rendered_block == started.block and seen.messages == ()
    assert seen.tool_schemas == tuple(dict(s) for s in CALL.tool_schemas)
    assert seen.model_params == {"temperature": 0.0}
    assert seen.state_snapshot["turn"] == 1 and seen.completed_at is None

    t.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP, call_id="c1")
    t.end_turn("th", answer="Brightwater Farms: 12 open orders.")
    path = t.store("active_path", tenant, tid)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    assert path[1].parts == (ToolCallPart("c1", "lookup_customer", {"name": "Brightwater Farms"}),)
    assert isinstance(path[2].parts[0], ToolResultPart) and path[2].parts[0].call_id == "c1"
    assert "Brightwater Farms" in path[2].parts[0].content
    assert path[3].parts == (TextPart("Brightwater Farms: 12 open orders."),)
    assert {m.turn_id for m in path} == {first.turn_id}
    done = t.store("reconstruct_model_input", tenant, tid, first.turn_id)
    assert done.completed_at is not None and done.answer_message_id == path[3].id

    # begin_turn(model_call=...) writes commit point 1 at once; ids of replayed messages kept.
    second = t.begin_turn(
        "th", "Who's their rep?", today=TODAY,
        model_call=ModelCall(system_prompt=CALL.system_prompt, history_ids=(user.id, path[3].id),
                             sent_question="Who's Brightwater Farms's rep?"),
    )
    assert isinstance(second, TurnContext)
    path = t.store("active_path", tenant, tid)
    assert path[-1].text == "Who's their rep?"
    assert path[-1].extra == {"convmem": {"rewritten": "Who's Brightwater Farms's rep?",
                                          "sent_as": "Who's Brightwater Farms's rep?",
                                          "version": 1}}
    seen = t.store("reconstruct_model_input", tenant, tid, path[-1].turn_id)
    assert [m.id for m in seen.messages] == [user.id, path[3].id]
    assert seen.rendered_block == second.block and "Brightwater Farms" in seen.rendered_block
    t.end_turn("th", answer="Dana Whitfield.")
    assert [m.text for m in t.store("active_path", tenant, tid)][-2:] == [
        "Who's their rep?", "Dana Whitfield."]
    state = t.get_state("th")
    assert state is not None and state.open_turn is None


def test_clarification_records_question_and_answer_without_model_input(
    t: Turns, transcript: TranscriptStore, tenant: str
) -> None:
    clar = _clarified(t)
    tid = t.transcript_thread_id("th")
    assert t.store("active_path", tenant, tid) == []  # the model is not called: no commit 1
    t.end_turn("th", answer=clar.text)
    path = t.store("active_path", tenant, tid)
    assert [(m.role, m.text) for m in path] == [
        ("user", "Briefly, how is Harbor doing?"), ("assistant", clar.text)]
    assert all(m.turn_id is None for m in path)
    assert _rows(transcript, tenant)["convmem_turns"] == 0


def test_failed_model_call_leaves_commit_point_one(
    t: Turns, transcript: TranscriptStore, tenant: str
) -> None:
    t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
    # The model raised: no end_turn. The next message starts a new turn.
    t.begin_turn("th", "Pull up Brightwater Farms, please.", today=TODAY, model_call=CALL)
    t.end_turn("th", answer="Here it is.")
    path = t.store("active_path", tenant, t.transcript_thread_id("th"))
    assert [m.text for m in path] == [
        "Pull up Brightwater Farms.", "Pull up Brightwater Farms, please.", "Here it is."]
    assert _rows(transcript, tenant)["convmem_turns"] == 2
    first = t.store("reconstruct_model_input", tenant, path[0].thread_id, path[0].turn_id)
    assert first.completed_at is None and first.answer_message_id is None


def test_full_text_is_recorded_when_the_question_is_cut(t: Turns, tenant: str) -> None:
    long = "Pull up Brightwater Farms. " + "x" * 5000
    t.begin_turn("th", long[:4000], today=TODAY, full_text=long, model_call=CALL)
    t.end_turn("th", answer="ok")
    path = t.store("active_path", tenant, t.transcript_thread_id("th"))
    assert path[0].text == long


def test_model_call_must_be_plain_json() -> None:
    with pytest.raises(ValueError, match="model_params"):
        ModelCall(model_params={"client": object()})


# --------------------------------------------------------------------------- unavailable


def _unreachable(url: str, tmp_path: Path) -> TranscriptStore:
    if url.startswith("sqlite"):
        return TranscriptStore(f"sqlite:///{tmp_path / 'missing' / 'dir' / 'x.db'}", retention=FOREVER)
    return TranscriptStore("postgresql://nobody@127.0.0.1:1/none", retention=FOREVER)


def test_unwritable_record_fails_the_turn_before_the_model_call(
    make: Any, transcript_url: str, tmp_path: Path
) -> None:
    t = make(_unreachable(transcript_url, tmp_path))
    calls: list[str] = []
    started = t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY)
    with pytest.raises(TranscriptUnavailable):
        t.record_model_input("th", CALL)
        calls.append("model")  # where the adapter would call the model
    assert calls == []
    with pytest.raises(TranscriptUnavailable):
        t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
    assert isinstance(started, TurnContext)


def test_degrade_switch_lets_the_turn_go_on(
    make: Any, transcript_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = make(_unreachable(transcript_url, tmp_path), on_transcript_error="degrade")
    with caplog.at_level(logging.WARNING, logger="convmem.session"):
        started = t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
        assert isinstance(started, TurnContext)
        assert t.record_model_input("th", CALL) is None  # not retried within the turn
        t.record_tool("th", "lookup_customer", {}, LOOKUP)
        state = t.end_turn("th", answer="ok")
    assert state.open_turn is None and state.focus is not None
    assert t.memory.stats.transcript_failures == 2  # commit point 1, then point 2
    assert sum("not recorded" in r.getMessage() for r in caplog.records) == 2


def test_bad_switch_is_a_config_error(crm: Domain) -> None:
    with pytest.raises(ValueError, match="on_transcript_error"):
        SessionMemory(crm, on_transcript_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TranscriptStore"):
        SessionMemory(crm, transcript="sqlite:///x.db")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- erasure


def _two_turns(t: Turns) -> None:
    t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
    t.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP, call_id="c1")
    t.end_turn("th", answer="Found it.")
    t.begin_turn("th", "What did they order last quarter?", today=TODAY, model_call=CALL)
    t.end_turn("th", answer="Three orders.")


def test_delete_thread_leaves_no_row_and_no_state_key(
    t: Turns, transcript: TranscriptStore, tenant: str
) -> None:
    _two_turns(t)
    assert _rows(transcript, tenant)["convmem_messages"] == 6
    receipt = t.delete_thread("th")
    assert receipt is not None and receipt.messages == 6 and receipt.turns == 2
    assert set(_rows(transcript, tenant).values()) == {0}
    assert t.get_state("th") is None
    t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)  # a new record
    assert _rows(transcript, tenant)["convmem_threads"] == 1


@pytest.mark.redis
def test_delete_thread_with_redis_state(
    make: Any, transcript: TranscriptStore, tenant: str, redis_url: str, key_prefix: str
) -> None:
    import redis

    from convmem.stores.redis import RedisSessionStateStore

    state_store = RedisSessionStateStore(redis_url, prefix=key_prefix, strict=True)
    t = make(transcript, state_store)
    _two_turns(t)
    raw = redis.Redis.from_url(redis_url)
    try:
        assert raw.keys(f"{key_prefix}*")
        t.delete_thread("th")
        assert raw.keys(f"{key_prefix}*") == []
        assert set(_rows(transcript, tenant).values()) == {0}
    finally:
        raw.close()


def test_delete_through_one_device_then_the_other_goes_on(
    devices: tuple[Turns, Turns], tenant: str
) -> None:
    a, b = devices
    _two_turns(a)
    b.transcript_thread_id("th")  # b caches the thread id
    a.delete_thread("th")
    b.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
    b.end_turn("th", answer="Found it.")
    tid = a.transcript_thread_id("th")
    assert [m.text for m in a.store("active_path", tenant, tid)] == [
        "Pull up Brightwater Farms.", "Found it."]


def test_redaction_reaches_the_live_state(
    t: Turns, transcript: TranscriptStore, tenant: str
) -> None:
    _two_turns(t)
    state = t.get_state("th")
    assert state is not None and "What did they order last quarter?" in state.recent_questions
    tid = t.transcript_thread_id("th")
    question = next(m for m in t.store("active_path", tenant, tid)
                    if m.text == "What did they order last quarter?")
    receipt = t.redact("th", question.id, actor="dpo@example.org", reason="user request")
    assert question.id in receipt.message_ids
    state = t.get_state("th")
    assert state is not None
    assert "What did they order last quarter?" not in state.recent_questions
    assert "Pull up Brightwater Farms." in state.recent_questions
    assert state.last_rewrite is None
    assert "What did they order" not in t.block("th")
    texts = [m.text for m in t.store("active_path", tenant, tid)]
    assert "What did they order last quarter?" not in texts and "[redacted]" in texts
    # The resolver's rewrite quotes the question in other words: it goes too, everywhere
    # (the user message's extra, model-input snapshots and blocks).
    assert question.extra["convmem"]["rewritten"] == "What did Brightwater Farms order last quarter?"
    rows = _dump(transcript, tenant)
    assert "order last quarter" not in rows and "[redacted]" in rows


def test_redaction_during_a_turn_drops_the_open_turn(t: Turns, tenant: str) -> None:
    t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
    tid = t.transcript_thread_id("th")
    (question,) = t.store("active_path", tenant, tid)
    t.redact("th", question.id, actor="dpo@example.org", reason="pasted by mistake")
    state = t.get_state("th")
    assert state is not None and state.open_turn is None and state.recent_questions == ()


# --------------------------------------------------------------------------- two devices


def test_two_devices_append_to_one_ordered_thread(
    devices: tuple[Turns, Turns], tenant: str
) -> None:
    phone, laptop = devices
    script = [
        (phone, "Pull up Brightwater Farms.", "Found it."),
        (laptop, "Who's their rep?", "Dana Whitfield."),
        (phone, "What did they order last quarter?", "Three orders."),
    ]
    for device, question, answer in script:
        device.begin_turn("th", question, today=TODAY, model_call=CALL)
        device.end_turn("th", answer=answer)
    tid = phone.transcript_thread_id("th")
    assert laptop.transcript_thread_id("th") == tid
    expected = [text for _, q, a in script for text in (q, a)]
    for device in (phone, laptop):
        path = device.store("active_path", tenant, tid)
        assert [m.text for m in path] == expected
        assert [m.seq for m in path] == sorted(m.seq for m in path)


# --------------------------------------------------------------------------- edit, regenerate


def _comparable(state: Any) -> dict[str, Any]:
    """A state as JSON without its store version (two stores count saves differently)."""
    from convmem.state import state_to_dict

    data = state_to_dict(state)
    data.pop("version")
    return data


def _asked_after_first_turn(make: Any, question: str) -> Any:
    """The state of a fresh session: the first turn, then ``question`` (no transcript)."""
    fresh = make(None)
    fresh.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY)
    fresh.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP)
    fresh.end_turn("th", answer="Found it.")
    started = fresh.begin_turn("th", question, today=TODAY)
    assert isinstance(started, TurnContext)
    return started, fresh.end_turn("th", answer="Dana Whitfield.")


def test_edit_turn_is_a_sibling_turn_with_its_own_model_input(
    t: Turns, make: Any, transcript: TranscriptStore, tenant: str
) -> None:
    t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
    t.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP, call_id="c1")
    t.end_turn("th", answer="Found it.")
    t.begin_turn("th", "How is Harbor Logistics doing as a table?", today=TODAY, model_call=CALL)
    t.end_turn("th", answer="| Harbor Logistics | ... |")
    tid = t.transcript_thread_id("th")
    original = t.store("active_path", tenant, tid)[-2]
    assert original.text == "How is Harbor Logistics doing as a table?"
    left = t.get_state("th")
    assert left is not None and left.focus is not None and left.focus.label == "Harbor Logistics"

    edited_call = ModelCall(system_prompt=CALL.system_prompt, model="fake-model-2")
    started = t.edit_turn("th", original.id, "Who's their rep?", message_id="m9", today=TODAY,
                          model_call=edited_call)
    assert isinstance(started, TurnContext)
    # Resolved against the state the original was asked in: "their" is Brightwater Farms,
    # and the abandoned branch's question, focus and format are gone.
    assert started.rewritten == "Who's Brightwater Farms's rep?"
    assert "Harbor" not in started.block
    path = t.store("active_path", tenant, tid)
    edited = path[-1]  # commit point 1 written at once, the pointer on the new branch
    assert edited.text == "Who's their rep?" and edited.parent_id == original.parent_id
    assert [m.id for m in t.store("branches", tenant, tid, original.id)] == [original.id, edited.id]
    assert edited.turn_id is not None and edited.turn_id != original.turn_id
    seen = t.store("reconstruct_model_input", tenant, tid, edited.turn_id)
    assert seen.user_message.id == edited.id and seen.model == "fake-model-2"
    assert seen.rendered_block == started.block
    assert t.store("reconstruct_model_input", tenant, tid, original.turn_id).model == "fake-model-1"

    # The same message id again while the turn is open: the same turn, written once.
    again = t.edit_turn("th", original.id, "Who's their rep?", message_id="m9", today=TODAY,
                        model_call=edited_call)
    assert isinstance(again, TurnContext) and again.turn == started.turn
    assert _rows(transcript, tenant)["convmem_turns"] == 3

    state = t.end_turn("th", answer="Dana Whitfield.")
    path = t.store("active_path", tenant, tid)
    assert [m.text for m in path][-2:] == ["Who's their rep?", "Dana Whitfield."]
    assert path[-1].turn_id == edited.turn_id
    assert "How is Harbor Logistics doing as a table?" not in [m.text for m in path]
    # The same state as asking the edited question right after the first turn.
    fresh_started, fresh_state = _asked_after_first_turn(make, "Who's their rep?")
    assert _comparable(state) == _comparable(fresh_state)
    assert started.block == fresh_started.block


def test_edit_turn_model_input_later_and_clarified_original(t: Turns, tenant: str) -> None:
    clar = _clarified(t)
    t.end_turn("th", answer=clar.text)
    tid = t.transcript_thread_id("th")
    original, asked = t.store("active_path", tenant, tid)
    assert original.turn_id is None  # clarified before any model call: no model input

    # No record to restore from: the live state without the original question (and the
    # clarification it caused), so the edit is a new question, not an answer to it.
    started = t.edit_turn("th", original.id, "Pull up Brightwater Farms.", today=TODAY)
    assert isinstance(started, TurnContext)
    assert t.store("active_path", tenant, tid) == [original, asked]  # nothing sent yet
    record = t.record_model_input("th", CALL)
    assert record is not None
    assert record.user_message.parent_id is None  # a second root, beside the original
    assert t.store("active_path", tenant, tid) == [record.user_message]
    t.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP, call_id="c1")
    state = t.end_turn("th", answer="Found it.")
    tree = t.store("tree", tenant, tid)
    assert [m.id for m in tree.children(None)] == [original.id, record.user_message.id]
    assert [m.role for m in t.store("active_path", tenant, tid)] == [
        "user", "assistant", "tool", "assistant"]
    assert state.pending is None and "Briefly, how is Harbor doing?" not in state.recent_questions
    assert state.focus is not None and state.focus.label == "Brightwater Farms"


def test_edit_turn_clarified_edit_goes_beside_the_original(t: Turns, tenant: str) -> None:
    _two_turns(t)
    tid = t.transcript_thread_id("th")
    original = t.store("active_path", tenant, tid)[-2]
    clar = t.edit_turn("th", original.id, "Briefly, how is Harbor doing?", today=TODAY,
                       model_call=CALL)
    assert isinstance(clar, Clarification)
    t.end_turn("th", answer=clar.text)
    path = t.store("active_path", tenant, tid)
    assert [m.text for m in path][-2:] == ["Briefly, how is Harbor doing?", clar.text]
    assert path[-2].parent_id == original.parent_id and path[-2].turn_id is None


def test_edit_turn_needs_a_transcript_and_a_recorded_question(
    make: Any, transcript: TranscriptStore, tenant: str
) -> None:
    with pytest.raises(ValueError, match="edit_turn needs the record"):
        make(None).edit_turn("th", "some-id", "Who's their rep?", today=TODAY)
    with pytest.raises(ValueError, match="regenerate records a new answer"):
        make(None).regenerate("th", "some-id", "Another answer.")
    t = make(transcript)
    _two_turns(t)
    answer = t.store("active_path", tenant, t.transcript_thread_id("th"))[-1]
    with pytest.raises(ValueError, match="is a assistant message; only a user's question"):
        t.edit_turn("th", answer.id, "Who's their rep?", today=TODAY)
    with pytest.raises(ValueError, match="not in the record of thread 'th'"):
        t.edit_turn("th", "no-such-message", "Who's their rep?", today=TODAY)
    other = make(transcript)  # same tenant, another thread: its ids are not this thread's
    with pytest.raises(ValueError, match="not in the record of thread 'other'"):
        other.edit_turn("other", answer.id, "Who's their rep?", today=TODAY)


def test_regenerated_answer_carries_the_turn(
    t: Turns, transcript: TranscriptStore, tenant: str
) -> None:
    _two_turns(t)
    tid = t.transcript_thread_id("th")
    before = t.get_state("th")
    first = t.store("active_path", tenant, tid)[-1]
    again = t.regenerate("th", first.id, "Three orders, all delivered.")
    assert again.turn_id == first.turn_id is not None and again.parent_id == first.parent_id
    assert [m.id for m in t.store("branches", tenant, tid, first.id)] == [first.id, again.id]
    assert t.store("active_path", tenant, tid)[-1].id == again.id
    tree = t.store("tree", tenant, tid)
    assert [m.id for m in tree.children(first.parent_id)] == [first.id, again.id]
    seen = t.store("reconstruct_model_input", tenant, tid, first.turn_id)
    assert seen.user_message.text == "What did they order last quarter?"
    assert seen.answer_message_id == first.id  # the turn's first answer; both carry it
    assert t.get_state("th") == before  # answers never enter the state
    # A store-level edit of a question is not the old turn's input: it carries no turn.
    question = t.store("active_path", tenant, tid)[-2]
    edited = t.store("edit", tenant, tid, question.id, "What did they order this year?")
    assert edited.turn_id is None
    with pytest.raises(ValueError, match="not assistant"):
        t.regenerate("th", question.id, "An answer.")


def test_a_recorded_turn_loads_its_state_once(make: Any, transcript: TranscriptStore) -> None:
    """The state is read with the record's binding; on a new key it is not there, and
    that answer stands: the turn does not read the store a second time to find out."""
    from tests.core.test_session import CountingStore

    store = CountingStore()
    t = make(transcript, store)
    t.begin_turn("fresh", "Pull up Brightwater Farms.", message_id="m1", today=TODAY,
                 model_call=CALL)
    assert store.loads == 1
    t.end_turn("fresh", answer="Brightwater Farms: 12 open orders.")
    t.begin_turn("fresh", "And their rep?", message_id="m2", today=TODAY, model_call=CALL)
    assert store.loads == 2
