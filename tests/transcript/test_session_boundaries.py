"""Issue 11 through ``SessionMemory``: erasure by provenance, and deletion with a turn
in flight. SQLite and PostgreSQL, sync and async (the fixtures of
``test_session_record``: blockbuster on in async mode).

- finding 5: a question longer than the render cut, with ``"``, ``#`` and newlines,
  asked and then quoted (shortened, character-mapped) by later turns' blocks, is gone
  from every row, the SQLite file and ``pg_dump --data-only`` after ``redact`` —
  through the quote links, and through the renderer's forms for rows without links;
- finding 6: a turn that began before ``delete_thread`` (in another worker) writes
  nothing afterwards, whether it had written commit point 1 or not, and also not into
  the same export imported again; a new conversation under the key starts clean, and
  the old turn's ``end_turn`` does not close the new conversation's open turn
  (issue 22, finding 7);
- a question redacted by another worker while a turn quoting it is open is not
  recorded with that turn's model input (issue 22, finding 2);
- a question redacted through a fork's copy leaves the original conversation's live
  state too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from convmem import InMemorySessionStateStore, ModelCall, TurnContext
from convmem.render import QUESTION_TOKENS, inert
from convmem.transcript import ThreadDeleted, TranscriptStore
from tests.transcript import test_session_record as record
from tests.transcript.test_session_record import (
    CALL,
    LOOKUP,
    TODAY,
    _dump,
    _rows,
    _two_turns,
)
from tests.transcript.test_transcript_postgres import pg_dump_data
from tests.transcript.test_transcript_sqlite import sqlite_dump

# the fixtures of test_session_record (two workers, both backends, sync and async);
# crm, tenant and transcript_url come from tests/conftest.py
make, mode, transcript = record.make, record.mode, record.transcript


def residue(store: TranscriptStore) -> bytes:
    """Every row, plus the SQLite file and WAL bytes and ``.dump``, or ``pg_dump``."""
    out: list[str] = []
    with store.engine.connect() as conn:
        for table in sa.inspect(conn).get_table_names():
            if store.dialect == "sqlite" and table.startswith("convmem_search_"):
                continue  # FTS5 shadow tables: in the file bytes
            out.extend(repr(tuple(r)) for r in conn.execute(sa.text(f'SELECT * FROM "{table}"')))
    rows = "\n".join(out).encode()
    if store.dialect == "sqlite":
        db = Path(str(store.engine.url.database))
        raw = b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())
        return rows + raw + sqlite_dump(db)
    return rows + pg_dump_data(store)


# --------------------------------------------------------------------------- finding 5


@pytest.mark.parametrize("links", ["linked", "unlinked"])
def test_redaction_reaches_every_rendered_copy_of_a_question(
    make: Any, transcript: TranscriptStore, tenant: str, links: str
) -> None:
    marker = f"zq{uuid.uuid4().hex[:10]}"
    question = (
        f'Pull up Brightwater Farms {marker} "the big one" #priority\n'
        "and also their orders\n" + "please check every detail of the account " * 8
    )
    assert len(question) > 200  # longer than the render cut
    t = make(transcript)
    t.begin_turn("th", question, today=TODAY, model_call=CALL)
    t.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP, call_id="c1")
    t.end_turn("th", answer="Found it.")
    for later in ("Who's their rep?", "What did they order last quarter?"):
        started = t.begin_turn("th", later, today=TODAY, model_call=CALL)
        assert isinstance(started, TurnContext)
        t.end_turn("th", answer="Noted.")
    shown = inert(question, max_tokens=QUESTION_TOKENS)
    assert marker in shown and shown in started.block  # the copy the finding was about
    tid = t.transcript_thread_id("th")
    asked = next(m for m in t.store("active_path", tenant, tid) if marker in m.text)
    if links == "unlinked":  # rows written before the links existed
        with transcript.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE convmem_turns SET quoted_message_ids = NULL WHERE tenant = :t"),
                {"t": tenant},
            )
    else:
        quoted = _quoted(transcript, tenant)
        assert [asked.id in q for q in quoted] == [False, True, True]
    receipt = t.redact("th", asked.id, actor="dpo@example.org", reason="user request")
    assert len(receipt.turn_ids) == 3  # its own model input and the two that quote it
    everything = residue(transcript)
    for form in (marker, "'the big one'", "＃priority", "the big one", "#priority"):
        assert form.encode() not in everything, form
    assert marker not in _dump(transcript, tenant)
    assert marker not in t.block("th")
    state = t.get_state("th")
    assert state is not None and not any(marker in q for q in state.recent_questions)


def test_redacting_a_forks_copy_takes_the_question_out_of_the_originals_state(
    make: Any, transcript: TranscriptStore, tenant: str
) -> None:
    """The thread of key "th" is forked under key "branch"; the question is redacted
    through "branch" (its copy there). The redaction reaches the original, and so does
    the erasure of its live state: "th"'s state, block and next model input no longer
    quote it (they did: only the key the redaction was called on was scrubbed)."""
    secret = "What did they order last quarter?"
    t = make(transcript)
    _two_turns(t)
    state = t.get_state("th")
    assert state is not None and secret in state.recent_questions
    tid = t.transcript_thread_id("th")
    path = t.store("active_path", tenant, tid)
    t.store("fork_thread", tenant, tid, path[-1].id, key="branch")
    (copy,) = [m for m in t.store("active_path", tenant, t.transcript_thread_id("branch"))
               if m.text == secret]
    receipt = t.redact("branch", copy.id, actor="dpo", reason="erasure request")
    assert tid in receipt.thread_ids and len(receipt.message_ids) == 2
    state = t.get_state("th")
    assert state is not None and "order last quarter" not in repr(state)  # and its rewrite
    assert secret not in t.block("th")
    started = t.begin_turn("th", "Who's their rep?", today=TODAY, model_call=CALL)
    assert isinstance(started, TurnContext) and secret not in started.block
    t.end_turn("th", answer="Dana.")
    assert secret not in _dump(transcript, tenant)


def _quoted(store: TranscriptStore, tenant: str) -> list[list[str]]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(sa.column("quoted_message_ids", sa.JSON))
            .select_from(sa.table("convmem_turns"))
            .where(sa.column("tenant") == tenant)
            .order_by(sa.column("created_at"))
        ).all()
    return [list(r[0] or []) for r in rows]


# --------------------------------------------------------------------------- finding 6


@pytest.fixture
def workers(
    make: Any, transcript_url: str, migrated_store: Callable[[str], TranscriptStore]
) -> Callable[[str], tuple[Any, Any]]:
    """``workers(on_error)``: two workers, each with its own transcript store, sharing one
    state store, after the first (the eraser) has had two turns on thread "th"."""

    def build(on_error: str) -> tuple[Any, Any]:
        shared = InMemorySessionStateStore()
        eraser = make(migrated_store(transcript_url), shared)
        worker = make(migrated_store(transcript_url), shared, on_transcript_error=on_error)
        _two_turns(eraser)
        return eraser, worker

    return build


def _refused(worker: Any, on_error: str, call: Any) -> None:
    """``call()`` fails with ``ThreadDeleted`` (raise) or is logged and counted (degrade)."""
    before = worker.memory.stats.transcript_failures
    if on_error == "raise":
        with pytest.raises(ThreadDeleted):
            call()
    else:
        call()
        assert worker.memory.stats.transcript_failures == before + 1


@pytest.mark.parametrize("on_error", ["raise", "degrade"])
def test_a_turn_begun_before_delete_thread_writes_nothing_after_it(
    transcript: TranscriptStore, tenant: str, on_error: str,
    workers: Callable[[str], tuple[Any, Any]],
) -> None:
    eraser, worker = workers(on_error)
    worker.begin_turn("th", "Who's their rep?", today=TODAY)  # state only: nothing written
    eraser.delete_thread("th")
    _refused(worker, on_error, lambda: worker.record_model_input("th", CALL))
    worker.record_tool("th", "lookup_customer", {}, LOOKUP, call_id="c9")
    _refused(worker, on_error, lambda: worker.end_turn("th", answer="Dana Whitfield."))
    assert set(_rows(transcript, tenant).values()) == {0}  # the thread did not come back
    # the key is free again: a new conversation under it starts clean, in either worker
    worker.begin_turn("th", "Pull up Harbor Logistics.", today=TODAY, model_call=CALL)
    worker.end_turn("th", answer="Here it is.")
    tid = worker.transcript_thread_id("th")
    assert [m.text for m in worker.store("active_path", tenant, tid)] == [
        "Pull up Harbor Logistics.", "Here it is."]


@pytest.mark.parametrize("on_error", ["raise", "degrade"])
def test_a_turn_past_commit_point_one_cannot_finish_after_delete_thread(
    transcript: TranscriptStore, tenant: str, on_error: str,
    workers: Callable[[str], tuple[Any, Any]],
) -> None:
    eraser, worker = workers(on_error)
    clarified = worker.begin_turn("th", "Briefly, how is Harbor doing?", today=TODAY)
    eraser.delete_thread("th")  # a clarification: nothing written before end_turn
    _refused(worker, on_error, lambda: worker.end_turn("th", answer=clarified.text))
    assert set(_rows(transcript, tenant).values()) == {0}
    started = worker.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
    assert isinstance(started, TurnContext)  # commit point 1 written
    eraser.delete_thread("th")
    worker.record_tool("th", "lookup_customer", {}, LOOKUP, call_id="c1")
    _refused(worker, on_error, lambda: worker.end_turn("th", answer="Found it."))
    assert set(_rows(transcript, tenant).values()) == {0}


@pytest.mark.parametrize("on_error", ["raise", "degrade"])
def test_a_turn_ended_after_delete_thread_ends_nothing_but_itself(
    transcript: TranscriptStore, tenant: str, on_error: str,
    workers: Callable[[str], tuple[Any, Any]],
) -> None:
    """Issue 22, finding 7: the new conversation's open turn on the same key survives
    the old turn's ``end_turn`` (whose record is refused), and so do its questions."""
    eraser, worker = workers(on_error)
    worker.begin_turn("th", "Who's their rep?", today=TODAY, model_call=CALL)
    eraser.delete_thread("th")
    eraser.begin_turn("th", "Pull up Harbor Logistics.", today=TODAY, model_call=CALL)
    _refused(worker, on_error, lambda: worker.end_turn("th", answer="Dana Whitfield."))
    state = eraser.memory.get_state("th")
    assert state is not None and state.open_turn is not None
    assert state.open_turn.question == "Pull up Harbor Logistics."
    eraser.end_turn("th", answer="Here it is.")
    tid = eraser.transcript_thread_id("th")
    assert [m.text for m in eraser.store("active_path", tenant, tid)] == [
        "Pull up Harbor Logistics.", "Here it is."]


def test_a_question_redacted_elsewhere_while_a_turn_is_open_is_not_recorded_with_it(
    transcript: TranscriptStore, tenant: str, workers: Callable[[str], tuple[Any, Any]],
) -> None:
    """Issue 22, finding 2: another worker redacts a question the open turn's block
    quotes, before the turn's model input is recorded; the input is recorded (and
    what the caller goes on with is) without it, and the export does not hold it."""
    eraser, worker = workers("raise")
    secret = "What did they order last quarter?"
    started = worker.begin_turn("th", "Who's their rep?", today=TODAY)  # not recorded yet
    assert secret in started.block
    tid = eraser.transcript_thread_id("th")
    (asked,) = [m for m in eraser.store("active_path", tenant, tid) if m.text == secret]
    eraser.redact("th", asked.id, actor="dpo", reason="erasure request")
    record = worker.record_model_input("th", CALL)
    assert record is not None
    made = worker.store("reconstruct_model_input", tenant, tid, record.turn_id)
    assert secret not in made.rendered_block and secret not in repr(made.state_snapshot)
    assert secret not in repr(worker.store("export_thread", tenant, tid))
    assert secret not in worker.memory.block("th")
    worker.end_turn("th", answer="Dana Whitfield.")
    assert secret not in repr(worker.store("export_thread", tenant, tid))


def test_a_reimported_thread_is_not_the_one_a_turn_in_flight_began_on(
    tenant: str, workers: Callable[[str], tuple[Any, Any]]
) -> None:
    eraser, worker = workers("raise")
    tid = eraser.transcript_thread_id("th")
    worker.begin_turn("th", "Who's their rep?", today=TODAY, model_call=CALL)
    export = eraser.store("export_thread", tenant, tid)  # holds the turn's commit point 1
    eraser.delete_thread("th")
    eraser.store("import_thread", tenant, export)  # the same ids and key, back again
    with pytest.raises(ThreadDeleted):
        worker.end_turn("th", answer="Dana Whitfield.")
    assert eraser.store("export_thread", tenant, tid) == export  # nothing was added


def _statements(transcript: TranscriptStore, run: Callable[[], Any]) -> list[str]:
    """The SQL statements ``run()`` sends through ``transcript`` (first words, no BEGIN/COMMIT)."""
    seen: list[str] = []

    def count(_conn: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement.split()[0].upper())

    engines = [transcript.engine, transcript.async_engine.sync_engine,
               transcript._unpooled.sync_engine]
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", count)
    try:
        run()
    finally:
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", count)
    return [s for s in seen if s != "BEGIN" and s != "COMMIT"]


def test_binding_a_turn_is_one_read_at_most(
    make: Any, transcript: TranscriptStore, tenant: str
) -> None:
    """What binding costs: nothing when this process ended the thread's last turn and
    the state is still the one it saved; else one statement (on PostgreSQL one
    autocommit round trip), read with the state."""
    shared = InMemorySessionStateStore()
    t = make(transcript, shared)
    other = make(transcript, shared)
    t.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY, model_call=CALL)
    t.end_turn("th", answer="Found it.")
    # state only: the binding kept from the last turn, no statement
    assert _statements(transcript, lambda: t.begin_turn("th", "Who's their rep?", today=TODAY)) == []
    t.end_turn("th", answer="Dana.")
    other.begin_turn("th", "And their phone?", today=TODAY)  # the state moved elsewhere
    other.end_turn("th", answer="555-0100.")
    seen = _statements(transcript, lambda: t.begin_turn("th", "Their email?", today=TODAY))
    assert seen == ["SELECT"]


def test_model_call_block_of_its_own_leaves_links_unknown(
    make: Any, transcript: TranscriptStore, tenant: str
) -> None:
    """An adapter that sends a block of its own: the record cannot say what it quotes,
    so redaction scans it (links ``NULL``)."""
    t = make(transcript)
    _two_turns(t)
    t.begin_turn("th", "Who's their rep?", today=TODAY,
                 model_call=ModelCall(system_prompt="s", block="Ask which account they mean."))
    assert _quoted_raw(transcript, tenant)[-1] is None


def _quoted_raw(store: TranscriptStore, tenant: str) -> list[Any]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT quoted_message_ids FROM convmem_turns WHERE tenant = :t "
                    "ORDER BY created_at"), {"t": tenant}
        ).all()
    return [None if r[0] in (None, "null") else r[0] for r in rows]
