"""The façade's one compare-and-set loop, made to conflict on purpose, sync and async:
a conflict reloads and re-applies the turn over the other writer's state (resolving
again only when the state changed), and a turn that keeps conflicting goes on unsaved
with a WARNING after three tries."""

from __future__ import annotations

import asyncio
import logging
from datetime import date

import pytest

from convmem import (
    Domain,
    InMemorySessionStateStore,
    Resolution,
    RuleResolver,
    SessionMemory,
    TurnContext,
)
from convmem.errors import VersionConflict
from convmem.state import SessionState
from tests.core.conftest import TODAY


class Interleaving(InMemorySessionStateStore):
    """A store where, before each of the first ``conflicts`` saves, another writer saves
    (``other``: a state of its own) or merely makes the save fail (``other=None``)."""

    def __init__(self, conflicts: int, other: SessionMemory | None = None) -> None:
        super().__init__()
        self.conflicts = conflicts
        self.other = other
        self.saves = 0

    def save(
        self, tenant: str, thread_id: str, state: SessionState, *, expected_version: int
    ) -> int:
        if self.conflicts > 0:
            self.conflicts -= 1
            if self.other is None:
                self.saves += 1
                raise VersionConflict(thread_id, expected_version, expected_version + 1)
            self.other.end_turn(thread_id)  # saves the other writer's turn-closing state
        self.saves += 1  # (the other writer's save counted too)
        return super().save(tenant, thread_id, state, expected_version=expected_version)


class Counting(RuleResolver):
    def __init__(self) -> None:
        self.calls = 0

    def resolve(self, question: str, state: SessionState, domain: Domain, today: date) -> Resolution:
        self.calls += 1
        return super().resolve(question, state, domain, today)

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        self.calls += 1
        return super().resolve(question, state, domain, today)


def run(memory: SessionMemory, mode: str, question: str) -> TurnContext:
    if mode == "sync":
        started = memory.begin_turn("th", question, today=TODAY)
    else:
        started = asyncio.run(memory.abegin_turn("th", question, today=TODAY))
    assert isinstance(started, TurnContext)
    return started


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_conflict_reapplies_the_turn_over_the_other_writers_state(
    crm: Domain, mode: str
) -> None:
    store = Interleaving(conflicts=0)
    writer = SessionMemory(crm, store=store)
    writer.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY)  # an open turn
    resolver = Counting()
    memory = SessionMemory(crm, store=store, resolver=resolver)
    store.conflicts, store.other, store.saves = 1, writer, 0

    started = run(memory, mode, "Who's their rep?")
    state = memory.get_state("th")
    assert state is not None and store.saves == 3  # ours, the other's, ours again
    # the first try's state (version 1) lost to the other writer's save (version 2): the
    # turn was resolved again over the new state and saved on top of it
    assert resolver.calls == 2 and state.version == 3
    assert started.state == state and state.open_turn is not None
    assert state.turn == 2 and state.open_turn.rewritten == "Who's Brightwater Farms's rep?"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_turn_that_keeps_conflicting_goes_on_unsaved_after_three_tries(
    crm: Domain, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = Interleaving(conflicts=10)
    resolver = Counting()
    memory = SessionMemory(crm, store=store, resolver=resolver)
    with caplog.at_level(logging.DEBUG, logger="convmem.session"):
        started = run(memory, mode, "Pull up Brightwater Farms.")
    assert store.saves == 3 and memory.get_state("th") is None
    assert resolver.calls == 1  # the state never changed: one resolution, reused
    assert started.state.turn == 1 and started.state.version == 0  # the unsaved state
    gave_up = [r for r in caplog.records if "gave up" in r.getMessage()]
    assert len(gave_up) == 1 and gave_up[0].levelno == logging.WARNING
    assert "begin_turn th" in gave_up[0].getMessage()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("literal", [b"-3", b"1e300", b"5.5", b'"5"', b"true"])
def test_a_stored_version_outside_the_rule_costs_one_turn_nothing(
    crm: Domain, mode: str, literal: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 22, finding 6, through the façade: a turn over a stored state whose version
    the decoder refuses starts from an empty state (one WARNING) and its save lands.
    Before, ``-3`` raised ``ConfigError`` on every turn, ``1e300`` a raw encoding
    error, and the others were never saved (compare-and-set read another number)."""
    store = InMemorySessionStateStore()
    memory = SessionMemory(crm, store=store)
    memory.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY)
    raw = store.raw("default", "th")
    assert raw is not None and raw.startswith(b'{"v":2,"version":1,')
    store.put_raw("default", "th", raw.replace(b'"version":1,', b'"version":' + literal + b",", 1))
    with caplog.at_level(logging.WARNING, logger="convmem.stores"):
        started = run(memory.state_only(), mode, "How is Brightwater Farms doing?")
    assert [r.levelno for r in caplog.records if r.name == "convmem.stores"] == [logging.WARNING]
    state = memory.get_state("th")
    assert state is not None and state.version == 1 and state.turn == 1
    assert state == started.state
