"""Recall on demand: ``SessionMemory.recall`` / ``arecall`` over the durable record.

Every test runs on SQLite and PostgreSQL, through the sync method and its async twin
(``Turns`` from ``test_session_record``). What recall must never return: another
thread's, another tenant's or an abandoned branch's messages, tool internals unless
asked, redacted or deleted text.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from convmem import ConfigError, Domain, ModelCall, RecallHit, SessionMemory
from convmem.session.recall import NO_MATCH, recall_text, snippet
from convmem.text import search_terms
from convmem.transcript.models import SEARCH
from tests.transcript import test_session_record as recorded
from tests.transcript.test_session_record import TODAY, Turns

# The façade driven sync or async on each backend: test_session_record's fixtures.
make, mode, t, transcript = recorded.make, recorded.mode, recorded.t, recorded.transcript

TOTAL = "what was the total you gave me?"


def _turn(t: Turns, thread: str, question: str, answer: str) -> None:
    t.begin_turn(thread, question, today=TODAY, model_call=ModelCall())
    t.end_turn(thread, answer=answer)


def _conversation(t: Turns, thread: str = "th") -> None:
    _turn(t, thread, "Which customers are in Toronto?", "Harbor Foods and Northline are in Toronto.")
    _turn(t, thread, "How much do I owe on invoice 42?", "The total on invoice 42 is $4,200.")
    _turn(t, thread, "When is the renewal meeting?", "The renewal meeting is on March 3.")


def test_recall_puts_the_answer_first(t: Turns) -> None:
    _conversation(t)
    hits = t.recall("th", TOTAL)
    assert hits and all(isinstance(h, RecallHit) for h in hits)
    assert hits[0].role == "assistant" and hits[0].text == "The total on invoice 42 is $4,200."
    assert hits[0].turn == 4  # its seq: the second turn's answer
    assert t.recall("th", "Where are the renewal dates?")[0].text.startswith("The renewal")
    assert t.recall("th", "zebra giraffe") == []
    assert t.recall("th", "what was it?") == []  # stopwords only: no query at all


def test_recall_ranks_the_right_answer_in_the_top_three(t: Turns) -> None:
    """Among answers sharing words, the one sharing the question's content words wins."""
    _turn(t, "th", "How many orders does Harbor have?", "Harbor has 12 open orders.")
    _turn(t, "th", "What did Harbor pay last month?", "Harbor paid $900 in total last month.")
    _turn(t, "th", "Sum the Toronto invoices.", "The invoice total for Toronto is $4,200.")
    _turn(t, "th", "Any overdue orders?", "Two orders are overdue.")
    hits = t.recall("th", "What was the Toronto invoice total you gave me?")
    assert "The invoice total for Toronto is $4,200." in [h.text for h in hits[:3]]
    assert hits[0].text == "The invoice total for Toronto is $4,200."


def test_recall_stays_in_its_thread_and_tenant(t: Turns) -> None:
    _turn(t, "th", "Hello there.", "Hi, how can I help?")
    _turn(t, "other", "How much do I owe?", "The total is $99 on the other thread.")
    elsewhere = Turns(t.memory.for_tenant(t.memory.tenant + "-b"), t.mode, t.api)
    _turn(elsewhere, "th", "How much do I owe?", "The total is $55 for the other tenant.")
    assert t.recall("th", TOTAL) == []
    assert [h.text for h in t.recall("other", TOTAL)] == ["The total is $99 on the other thread."]
    assert [h.text for h in elsewhere.recall("th", TOTAL)] == [
        "The total is $55 for the other tenant."
    ]


def test_recall_skips_an_abandoned_branch(t: Turns, tenant: str) -> None:
    _turn(t, "th", "What is the total of invoice 42?", "The total of invoice 42 is $4,200.")
    tid = t.transcript_thread_id("th")
    original, _answer = t.store("active_path", tenant, tid)
    # the user edits the question: the original question and its answer are abandoned
    t.edit_turn("th", original.id, "What is the total of invoice 43?", today=TODAY,
                model_call=ModelCall())
    t.end_turn("th", answer="The total of invoice 43 is $310.")
    texts = [h.text for h in t.recall("th", "total invoice")]
    assert sorted(texts) == ["The total of invoice 43 is $310.", "What is the total of invoice 43?"]
    # a regenerated answer abandons the one it replaces
    new_answer = t.store("active_path", tenant, tid)[-1]
    t.regenerate("th", new_answer.id, "Invoice 43 comes to a total of $311.")
    texts = [h.text for h in t.recall("th", "total invoice")]
    assert "Invoice 43 comes to a total of $311." in texts
    assert "The total of invoice 43 is $310." not in texts


def test_recall_leaves_tool_internals_out_unless_asked(t: Turns) -> None:
    t.begin_turn("th", "Look up Brightwater Farms.", today=TODAY, model_call=ModelCall())
    t.record_tool("th", "lookup_customer", {"name": "Brightwater"},
                  {"ok": True, "data": {"id": "C-1080", "name": "Brightwater Farms",
                                        "balance": "total 777"}}, call_id="c1")
    t.end_turn("th", answer="Found Brightwater Farms.")
    assert all(h.role != "tool" for h in t.recall("th", "total balance"))
    assert t.recall("th", "total balance") == []
    with_tools = t.recall("th", "total balance", include_tools=True)
    assert [h.role for h in with_tools] == ["tool"] and "777" in with_tools[0].text


def test_recall_never_returns_redacted_text(t: Turns) -> None:
    _conversation(t)
    (hit,) = [h for h in t.recall("th", TOTAL) if "4,200" in h.text]
    t.redact("th", hit.message_id, actor="dpo", reason="request 7", replacement="[gone]")
    after = t.recall("th", TOTAL)
    assert all("4,200" not in h.text and h.message_id != hit.message_id for h in after)
    assert t.recall("th", "gone") == []  # the replacement is not indexed either


def test_recall_after_deletion_finds_nothing_and_creates_nothing(t: Turns, tenant: str) -> None:
    _conversation(t)
    assert t.recall("th", TOTAL)
    t.delete_thread("th")
    assert t.recall("th", TOTAL) == []
    assert t.store("find_thread", tenant, "th") is None  # recall did not bring it back
    assert t.recall("never-used", TOTAL) == []
    assert t.store("find_thread", tenant, "never-used") is None


def test_recall_needs_a_transcript(crm: Domain, mode: str) -> None:
    memory = SessionMemory(crm)
    with pytest.raises(ConfigError, match="no transcript"):
        memory.recall("th", TOTAL)
    for bad in ({"limit": 0}, {"limit": 21}, {"limit": "5"}):
        with pytest.raises(ConfigError, match="limit"):
            memory.recall("th", TOTAL, **bad)
    with pytest.raises(ConfigError, match="query must be a string"):
        memory.recall("th", None)  # type: ignore[arg-type]


def test_search_any_words_active_path_is_one_statement(t: Turns, tenant: str) -> None:
    """The store's side: one statement, and the arguments it refuses."""
    _conversation(t)
    store = t.memory.transcript
    assert store is not None
    tid = t.transcript_thread_id("th")
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        hits = store.search(tenant, TOTAL, thread_id=tid, match="any",
                            roles=["assistant"], active_path=True, limit=2)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)
    assert [h.role for h in hits] == ["assistant"] and hits[0].rank is not None
    # one statement searches (before it, the deferred index's queue is drained: read,
    # indexed, deleted)
    reads = [s for s in statements if SEARCH.name in s and "convmem_index_queue" not in s
             and not s.lstrip().startswith("INSERT")]
    assert len(reads) == 1, reads
    with pytest.raises(ConfigError, match="active_path=True needs thread_id"):
        store.search(tenant, TOTAL, match="any", active_path=True)
    with pytest.raises(ConfigError, match="roles"):
        store.search(tenant, TOTAL, roles=["robot"])
    with pytest.raises(ConfigError, match="match"):
        store.search(tenant, TOTAL, match="some")


def test_search_terms_and_the_text_the_model_reads() -> None:
    assert search_terms(TOTAL) == [("total", True), ("gave", True)]
    assert ("companies", False) in search_terms("the companies") and \
        ("company", True) in search_terms("the companies")
    assert search_terms("order 4478") == [("order", True), ("4478", False)]
    long = "word " * 100 + "the total is $4,200 " + "filler " * 100
    cut = snippet(long, TOTAL)
    assert "total is $4,200" in cut and len(cut) <= 240 and cut.startswith("…")
    assert recall_text([]) == NO_MATCH

