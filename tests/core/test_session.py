"""The façade: turns, idempotency, clarification, tools, compare-and-set, async twins."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from convmem import (
    Clarification,
    ConfigError,
    Domain,
    InMemorySessionStateStore,
    SessionMemory,
    TurnContext,
)
from tests.core.conftest import TODAY

LOOKUP = {"ok": True, "data": {"id": "C-1080", "name": "Brightwater Farms"}}


def test_pronoun_follow_up_and_flat_block(memory: SessionMemory) -> None:
    ctx = memory.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY)
    assert isinstance(ctx, TurnContext) and ctx.block.startswith("## Session context")
    memory.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP)
    memory.end_turn("th", answer="x" * 10_000)
    ctx2 = memory.begin_turn("th", "Who's their rep?", today=TODAY)
    assert isinstance(ctx2, TurnContext)
    assert ctx2.rewritten == "Who's Brightwater Farms's rep?"
    assert "x" * 20 not in ctx2.block  # answers never reach the block
    assert '"Pull up Brightwater Farms."' in ctx2.block
    assert "Who's their rep?" not in ctx2.block  # the current question is the turn itself


def test_begin_turn_is_idempotent_per_message(memory: SessionMemory) -> None:
    a = memory.begin_turn("th", "Pull up Brightwater Farms.", message_id="m1", today=TODAY)
    b = memory.begin_turn("th", "Pull up Brightwater Farms.", message_id="m1", today=TODAY)
    c = memory.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY)  # same open question
    assert isinstance(a, TurnContext) and isinstance(b, TurnContext) and isinstance(c, TurnContext)
    assert a.turn == b.turn == 1 and c.turn == 2  # a different message id is a new message
    state = memory.get_state("th")
    assert state is not None and state.turn == 2


def test_same_question_without_ids_while_open_is_one_turn(memory: SessionMemory) -> None:
    for _ in range(4):
        memory.begin_turn("th", "Who is Ben Carter?", today=TODAY)
    state = memory.get_state("th")
    assert state is not None and state.turn == 1


def test_clarification_and_answer(memory: SessionMemory) -> None:
    clar = memory.begin_turn("th", "Briefly, how is Harbor doing?", today=TODAY)
    assert isinstance(clar, Clarification)
    assert [o.id for o in clar.options] == ["C-1050", "C-1051"]
    assert "Harbor Logistics — Seattle" in clar.text
    again = memory.begin_turn("th", "Briefly, how is Harbor doing?", today=TODAY)
    assert isinstance(again, Clarification)  # idempotent: still the same question
    memory.end_turn("th")
    ans = memory.begin_turn("th", "Boston.", today=TODAY)
    assert isinstance(ans, TurnContext)
    assert ans.rewritten == "Briefly, how is Harbor Health Partners doing?"
    state = ans.state
    assert state.focus is not None and (state.focus.id, state.focus.source) == ("C-1051", "confirmed")
    assert state.format == "short"
    assert state.recent_questions == ("Briefly, how is Harbor doing?",)


def test_tool_candidates_clarify_and_restore_the_turn(memory: SessionMemory) -> None:
    memory.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY)
    memory.record_tool("th", "lookup_customer", {}, LOOKUP)
    memory.end_turn("th")
    memory.begin_turn("th", "Find the logistics customer in the north, in a table.", today=TODAY)
    clar = memory.record_tool("th", "search_customers", {}, {"ok": True, "data": [
        {"id": "C-1050", "name": "Harbor Logistics", "city": "Seattle"},
        {"id": "C-1044", "name": "Northline Logistics", "city": "Vancouver"}]})
    assert isinstance(clar, Clarification) and [o.id for o in clar.options] == ["C-1050", "C-1044"]
    state = memory.get_state("th")
    assert state is not None
    assert state.focus is not None and state.focus.id == "C-1080"  # unchanged
    assert state.format is None  # the turn's cues went with it
    assert memory.record_tool("th", "lookup_customer", {}, LOOKUP) is None  # turn is over
    memory.end_turn("th")
    ctx = memory.begin_turn("th", "The second one.", today=TODAY)
    assert isinstance(ctx, TurnContext)
    assert ctx.state.focus is not None and ctx.state.focus.id == "C-1044"
    assert ctx.state.format == "table"


def test_tool_argument_that_does_not_parse_is_ignored(memory: SessionMemory) -> None:
    memory.begin_turn("th", "List orders.", today=TODAY)
    memory.record_tool("th", "list_orders", {"period": "last quarter", "status": "exploded"},
                       {"ok": True, "data": []})
    state = memory.get_state("th")
    assert state is not None and state.filters == {}


def test_failed_tool_and_unknown_tool_change_nothing(memory: SessionMemory) -> None:
    memory.begin_turn("th", "Hello.", today=TODAY)
    assert memory.record_tool("th", "lookup_customer", {}, {"ok": False}) is None
    assert memory.record_tool("th", "no_such_tool", {}, LOOKUP) is None
    state = memory.get_state("th")
    assert state is not None and state.focus is None


def test_filters_decay_after_two_turns(memory: SessionMemory) -> None:
    memory.begin_turn("th", "What shipped last quarter?", today=TODAY)
    memory.end_turn("th")
    for q in ("Which of it is big?", "Who bought it?"):
        memory.begin_turn("th", q, today=TODAY)
        memory.end_turn("th")
        state = memory.get_state("th")
        assert state is not None and "period" in state.filters
    memory.begin_turn("th", "Why is it late?", today=TODAY)
    state = memory.get_state("th")
    assert state is not None and state.filters == {}


def test_topic_change_drops_focus_but_not_filters(memory: SessionMemory) -> None:
    memory.begin_turn("th", "What did Brightwater Farms order last quarter?", today=TODAY)
    memory.end_turn("th")
    memory.begin_turn("th", "Unrelated: how do I export a report to PDF?", today=TODAY)
    state = memory.get_state("th")
    assert state is not None and state.focus is None and state.filter_values() == {"period": "2026-Q3"}


def test_bad_input_is_a_clear_error(memory: SessionMemory) -> None:
    with pytest.raises(ConfigError, match="thread_id"):
        memory.begin_turn("", "hi")
    with pytest.raises(ConfigError, match="question must be a string"):
        memory.begin_turn("th", 42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="limit"):
        memory.begin_turn("th", "x" * 5000)
    with pytest.raises(ConfigError, match=r"a tool result must be .* got float"):
        memory.record_tool("th", "lookup_customer", {}, 3.5)


def test_tenants_do_not_share_state(crm: Domain) -> None:
    store = InMemorySessionStateStore()
    a = SessionMemory(crm, store=store, tenant="a")
    b = SessionMemory(crm, store=store, tenant="b")
    a.begin_turn("same", "Pull up Brightwater Farms.", today=TODAY)
    assert b.get_state("same") is None


def test_concurrent_writers_lose_no_turn(crm: Domain) -> None:
    store = InMemorySessionStateStore()
    mems = [SessionMemory(crm, store=store) for _ in range(8)]
    barrier = threading.Barrier(8)

    def run(i: int) -> None:
        barrier.wait()
        for j in range(5):
            mems[i].begin_turn("shared", f"question {i}-{j} about quotas", message_id=f"{i}-{j}", today=TODAY)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state = mems[0].get_state("shared")
    # Every turn either landed or, after three conflicts, was logged and went on unsaved.
    assert state is not None and 8 <= state.turn <= 40
    assert state.version == state.turn


def test_sync_and_async_agree(crm: Domain) -> None:
    script = [
        ("Pull up Brightwater Farms.", [("lookup_customer", LOOKUP)]),
        ("What did they order last quarter?", []),
        ("How is Northline doing?", []),
        ("The Toronto one.", []),
        ("Put that in a table.", []),
    ]

    def run_sync() -> list[Any]:
        mem = SessionMemory(crm)
        out = []
        for q, tools in script:
            r = mem.begin_turn("t", q, today=TODAY)
            for name, res in tools:
                mem.record_tool("t", name, {}, res)
            out.append((type(r).__name__, getattr(r, "rewritten", None), mem.end_turn("t")))
        return out

    async def run_async() -> list[Any]:
        mem = SessionMemory(crm)
        out = []
        for q, tools in script:
            r = await mem.abegin_turn("t", q, today=TODAY)
            for name, res in tools:
                await mem.arecord_tool("t", name, {}, res)
            out.append((type(r).__name__, getattr(r, "rewritten", None), await mem.aend_turn("t")))
        return out

    assert run_sync() == asyncio.run(run_async())


async def test_async_turn_does_not_block(memory: SessionMemory) -> None:
    ctx = await memory.abegin_turn("th", "Pull up Brightwater Farms.", today=TODAY)
    assert isinstance(ctx, TurnContext)
    assert await memory.arecord_tool("th", "lookup_customer", {}, LOOKUP) is None
    state = await memory.aend_turn("th")
    assert state.focus is not None and state.focus.source == "tool"


# --------------------------------------------------------------------------- round trips


class CountingStore(InMemorySessionStateStore):
    """Counts the loads a SessionMemory asks its store for (``aload`` calls ``load``)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load(self, tenant: str, thread_id: str) -> Any:
        self.loads += 1
        return super().load(tenant, thread_id)


def _tool_turn(memory: SessionMemory, message_id: str, mode: str) -> None:
    """A turn as an agent's tool loop drives it: begin, tool, begin again, end."""
    steps = [
        ("begin_turn", ("th", "Pull up Brightwater Farms."), {"message_id": message_id, "today": TODAY}),
        ("record_tool", ("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP), {}),
        ("begin_turn", ("th", "Pull up Brightwater Farms."), {"message_id": message_id, "today": TODAY}),
        ("end_turn", ("th",), {"answer": "Fresno."}),
    ]
    for name, args, kwargs in steps:
        if mode == "sync":
            getattr(memory, name)(*args, **kwargs)
        else:
            asyncio.run(getattr(memory, "a" + name)(*args, **kwargs))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_turn_loads_its_state_once(crm: Domain, mode: str) -> None:
    store = CountingStore()
    memory = SessionMemory(crm, store=store, tenant="t1")
    _tool_turn(memory, "m1", mode)
    assert store.loads == 1  # later steps start from this process's own last save
    _tool_turn(memory, "m2", mode)
    assert store.loads == 2  # a new turn reads the store again: another process may have written
    state = memory.get_state("th")
    assert state is not None and state.turn == 2 and state.open_turn is None
    assert state.focus is not None and state.focus.id == "C-1080"


def test_a_write_from_elsewhere_mid_turn_is_not_lost(crm: Domain) -> None:
    store = CountingStore()
    here = SessionMemory(crm, store=store, tenant="t1")
    elsewhere = SessionMemory(crm, store=store, tenant="t1")  # another process, same thread
    here.begin_turn("th", "Pull up Brightwater Farms.", message_id="m1", today=TODAY)
    elsewhere.begin_turn("th", "Who is Ben Carter?", message_id="m2", today=TODAY)
    loads = store.loads
    # ``here`` still holds its own save, now stale: the compare-and-set refuses it, and
    # the tool's rule is applied again to what the store holds.
    here.record_tool("th", "lookup_customer", {"name": "Brightwater Farms"}, LOOKUP)
    assert store.loads == loads + 1 and store.stats.conflicts >= 1
    state = store.load("t1", "th")
    assert state is not None and state.open_turn is not None
    assert state.open_turn.message_id == "m2"  # the other process's turn survived
    assert state.focus is not None and state.focus.id == "C-1080"  # and the tool's focus landed
