"""Every statement of a turn's hot path stays inside the turn's thread (docs/scaling.md).

A distribution of the record by thread (Citus, distribution column = thread id) routes
a statement to one shard only when it names the thread, and a join is local only when
it joins rows of one thread. So the SQL the transcript executes during an agent-style
turn (bind, commit point 1, a tool-loop step, a tool, commit point 2) is captured with
SQLAlchemy's ``before_cursor_execute`` on SQLite and PostgreSQL, while a second thread
of the same tenant holds rows of its own, and checked: every statement on a
thread-keyed table carries this thread's id (or, to find it, its key) among its
parameters, never the other thread's, and every join onto a thread-keyed table
matches ``thread_id``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from convmem import Domain, ModelCall, SessionMemory, load_domain
from convmem.transcript import TranscriptStore

DATA = Path(__file__).resolve().parent.parent / "data"
TODAY = date(2026, 11, 30)
LOOKUP = {"ok": True, "data": {"id": "C-1080", "name": "Brightwater Farms"}}
CALL = ModelCall(system_prompt="You answer questions about the account book.", model="fake-1")
#: Tables whose rows belong to one thread (the templates and attachments tables are
#: per tenant, content-addressed: docs/scaling.md says how they distribute).
THREAD_TABLES = ("convmem_threads", "convmem_messages", "convmem_turns", "convmem_derived",
                 "convmem_redactions", "convmem_search", "convmem_index_queue")
_JOIN = re.compile(r"\bJOIN\s+(\w+)(?:\s+AS)?(?:\s+\w+)?\s+ON\b(.*?)(?=\bJOIN\b|\bWHERE\b|\bORDER\b"
                   r"|\bGROUP\b|\bLIMIT\b|\bUNION\b|$)", re.IGNORECASE | re.DOTALL)


# ``transcript`` (a migrated store on SQLite and on PostgreSQL) is tests/conftest.py's.


@pytest.fixture(scope="module")
def crm() -> Domain:
    return load_domain(DATA / "domains" / "crm.json")


def _values(params: Any) -> set[str]:
    """Every string bound to a statement (a dict, a sequence, or many of either)."""
    if isinstance(params, Mapping):
        return {v for v in params.values() if isinstance(v, str)}
    if isinstance(params, Sequence) and not isinstance(params, str | bytes):
        found: set[str] = set()
        for p in params:
            found |= _values(p) if isinstance(p, Mapping | list | tuple) else (
                {p} if isinstance(p, str) else set())
        return found
    return set()


def _turn(memory: SessionMemory, message_id: str) -> None:
    """One turn as the agent middleware drives it (a tool loop with two model calls)."""
    memory.begin_turn("th", "Pull up Brightwater Farms.", message_id=message_id, today=TODAY)
    memory.record_model_input("th", CALL)
    memory.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP)
    memory.begin_turn("th", "Pull up Brightwater Farms.", message_id=message_id, today=TODAY)
    memory.record_model_input("th", CALL)
    memory.end_turn("th", answer="Brightwater Farms, Fresno.")


def test_no_hot_path_statement_leaves_the_thread(transcript: TranscriptStore, crm: Domain) -> None:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    memory = SessionMemory(crm, transcript=transcript, tenant=tenant)
    other = memory.for_tenant(tenant)
    # The other thread: rows of its own, under a key the captured turn never names.
    other.begin_turn("other", "Who is Ben Carter?", message_id="o1", today=TODAY)
    other.record_model_input("other", CALL)
    other.end_turn("other", answer="A rep.")
    _turn(memory, "m1")  # the thread exists and has a turn: the steady state is measured
    ours, theirs = memory.transcript_thread_id("th"), memory.transcript_thread_id("other")

    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        seen.append((statement, params))

    event.listen(transcript.engine, "before_cursor_execute", capture)
    try:
        _turn(memory, "m2")
    finally:
        event.remove(transcript.engine, "before_cursor_execute", capture)

    touching = [(s, p) for s, p in seen if any(t in s for t in THREAD_TABLES)]
    assert touching, "the turn executed no statement on the record"
    for statement, params in touching:
        values = _values(params)
        assert ours in values or "th" in values, f"not constrained to the thread: {statement}"
        assert theirs not in values and "other" not in values, f"names another thread: {statement}"
        for table, condition in _JOIN.findall(statement):
            if table in THREAD_TABLES or table == "convmem_path":
                assert "thread_id" in condition, f"a join across threads: {statement}"
    # The turn is not bound by key at all: the binding of the thread's last turn is kept
    # (the state is the one this process saved; test_session_boundaries pins the read
    # when it is not), though begin_turn ran twice; commit point 2 needs no walk of the
    # path while nothing was appended between the commit points.
    by_key = [s for s, p in touching if "th" in _values(p) and ours not in _values(p)]
    assert by_key == []
    assert not any("RECURSIVE" in s.upper() for s, _ in touching)


def test_commit_point_two_walks_the_path_when_the_leaf_moved(
    transcript: TranscriptStore, crm: Domain
) -> None:
    """Another device appended between our commit points: the answer still follows the
    active leaf (the user message is on the path, found by walking it)."""
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    here = SessionMemory(crm, transcript=transcript, tenant=tenant)
    there = SessionMemory(crm, transcript=transcript, tenant=tenant)
    here.begin_turn("th", "Pull up Brightwater Farms.", message_id="m1", today=TODAY)
    here.record_model_input("th", CALL)
    tid = here.transcript_thread_id("th")
    from convmem.transcript import NewMessage

    transcript.append(tenant, tid, [NewMessage(role="user", content="(from the other device)")])
    assert there.transcript_thread_id("th") == tid
    here.end_turn("th", answer="Fresno.")
    path = transcript.active_path(tenant, tid)
    assert [m.text for m in path] == ["Pull up Brightwater Farms.", "(from the other device)", "Fresno."]


def test_the_statement_capture_sees_joins() -> None:
    """The join check is live: a join without ``thread_id`` is caught by the pattern."""
    bad = "SELECT * FROM convmem_messages m JOIN convmem_messages p ON p.id = m.parent_id WHERE m.id = ?"
    good = ("SELECT * FROM convmem_messages m JOIN convmem_messages p ON p.thread_id = m.thread_id "
            "AND p.id = m.parent_id WHERE m.id = ?")
    assert [("thread_id" in c) for _, c in _JOIN.findall(bad)] == [False]
    assert [("thread_id" in c) for _, c in _JOIN.findall(good)] == [True]
    assert _values({"a": "x", "b": 1}) == {"x"} and _values([("x", 1), ("y",)]) == {"x", "y"}
