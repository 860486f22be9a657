"""Two façade rules the adapters rely on: what the model is sent on the turn that
answers a clarification (``TurnContext.sent_question``), and one view per tenant
(``SessionMemory.for_tenant``, ``docs/tenancy.md``)."""

from __future__ import annotations

import pytest

from convmem import (
    Clarification,
    ConfigError,
    Domain,
    InMemorySessionStateStore,
    SessionMemory,
    TurnContext,
)
from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import TranscriptStore
from tests.core.conftest import TODAY


def _started(memory: SessionMemory, question: str) -> TurnContext:
    started = memory.begin_turn("th", question, today=TODAY)
    assert isinstance(started, TurnContext)
    return started


def test_the_answer_turn_sends_the_resolved_question_whatever_rewrite(
    memory: SessionMemory,
) -> None:
    normal = _started(memory, "Pull up Brightwater Farms.")
    assert not normal.answers_clarification
    assert normal.sent_question(False) is None  # the user's words, as typed
    memory.end_turn("th")
    follow = _started(memory, "Who's their rep?")
    assert follow.sent_question(True) == "Who's Brightwater Farms's rep?"
    assert follow.sent_question(False) is None
    memory.end_turn("th")

    asked = memory.begin_turn("th", "How is Northline doing on payments?", today=TODAY)
    assert isinstance(asked, Clarification)
    memory.end_turn("th", answer=asked.text)
    answer = _started(memory, "The Toronto one.")
    assert answer.answers_clarification
    resolved = "How is Northline Foods doing on payments?"
    assert answer.sent_question(False) == answer.sent_question(True) == resolved
    # idempotent: the same message again is the same answer turn
    assert _started(memory, "The Toronto one.").sent_question(False) == resolved


def test_the_answer_to_a_tool_clarification_carries_the_original_question(
    memory: SessionMemory,
) -> None:
    _started(memory, "Find the logistics customer up in the Pacific Northwest.")
    asked = memory.record_tool("th", "search_customers", {}, [
        {"id": "C-1050", "name": "Harbor Logistics", "city": "Seattle"},
        {"id": "C-1044", "name": "Northline Logistics", "city": "Vancouver"},
    ])
    assert isinstance(asked, Clarification)
    memory.end_turn("th", answer=asked.text)
    answer = _started(memory, "Seattle.")
    sent = answer.sent_question(False)
    assert sent is not None and answer.answers_clarification
    assert "Find the logistics customer" in sent and "Harbor Logistics" in sent


def test_a_new_question_after_a_clarification_is_not_an_answer(memory: SessionMemory) -> None:
    memory.begin_turn("th", "How is Northline doing on payments?", today=TODAY)
    memory.end_turn("th")
    other = _started(memory, "Pull up Brightwater Farms.")
    assert not other.answers_clarification and other.sent_question(False) is None


def test_for_tenant_is_one_view_per_tenant(crm: Domain) -> None:
    store = InMemorySessionStateStore()
    memory = SessionMemory(crm, store=store)
    acme = memory.for_tenant("acme")
    assert acme is memory.for_tenant("acme") and acme.tenant == "acme"
    assert memory.for_tenant("default") is memory and acme.for_tenant("default") is memory
    assert acme.store is store and acme.stats is memory.stats

    acme.begin_turn("thread-42", "Pull up Brightwater Farms.", today=TODAY)
    assert memory.get_state("thread-42") is None  # another tenant's namespace ...
    state = memory.for_tenant("acme").get_state("thread-42")  # ... read through its view
    assert state is not None and state.focus is not None and state.focus.id == "C-1080"


@pytest.mark.parametrize("bad", ["", "  ", "a\x00b", 42])
def test_for_tenant_refuses_what_no_store_keeps(memory: SessionMemory, bad: object) -> None:
    with pytest.raises(ConfigError, match="tenant"):
        memory.for_tenant(bad)  # type: ignore[arg-type]


@pytest.mark.sqlite
def test_a_state_only_view_stays_state_only_per_tenant(crm: Domain, sqlite_url: str) -> None:
    memory = SessionMemory(crm, transcript=TranscriptStore(sqlite_url, retention=FOREVER))
    view = memory.state_only()
    assert view.for_tenant("acme").transcript is None
    assert memory.for_tenant("acme").transcript is memory.transcript
