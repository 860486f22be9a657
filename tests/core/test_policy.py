"""The update rules of ``convmem.policy``, one table per rule: each row is a case the spec
names (its section in the id), so a new case is a new row, not a new function.

The façade's tests (``test_session.py``) drive the same rules through turns; these call the
pure functions directly, with no store."""

from __future__ import annotations

from typing import Any

import pytest

from convmem import Domain
from convmem.policy import (
    Clarify,
    PolicyConfig,
    Proceed,
    apply_tool,
    match_option,
    move_focus,
    start_turn,
)
from convmem.state import FilterValue, Focus, Option, PendingClarification, SessionState
from convmem.tools import ToolResult

# --------------------------------------------------------------------------- §3.1 answers

OPTIONS = (
    Option("customer", "C-1050", "Harbor Logistics", {"city": "Seattle", "industry": "logistics"}),
    Option("customer", "C-1051", "Harbor Health Partners", {"city": "Boston", "industry": "health"}),
    Option("customer", "C-1052", "Harbor Dental Lab", {"city": "Austin", "industry": "dental"}),
)
PENDING = PendingClarification("How is Harbor doing?", "Which Harbor?", OPTIONS, mention="Harbor")

ANSWERS = [  # (answer, the option it picks or None)
    ("C-1051", "C-1051"),
    ("c-1052 please", "C-1052"),
    ("The second one.", "C-1051"),
    ("3rd", "C-1052"),
    ("2", "C-1051"),
    ("#1", "C-1050"),
    ("the last one", "C-1052"),
    ("Boston.", "C-1051"),
    ("The Seattle one", "C-1050"),
    ("Harbor Dental Lab", "C-1052"),
    ("The dental lab in Texas, I believe", "C-1052"),
    ("not the Boston one, not Seattle either", "C-1052"),  # excludes all but one
    ("not the Boston one", None),  # two left: still ambiguous
    ("7", None),  # no seventh option
    ("Harbor", None),  # every option says it
    ("whichever", None),
]


@pytest.mark.parametrize(("answer", "picked"), ANSWERS, ids=[a for a, _ in ANSWERS])
def test_match_option(answer: str, picked: str | None) -> None:
    chosen = match_option(PENDING, answer)
    assert (chosen.id if chosen is not None else None) == picked


# --------------------------------------------------------------------------- §3.2 decay

DECAY = [  # (turns already taken, the turn the filter was set at, kept after start_turn)
    (1, 1, True),  # t0 + 1
    (2, 1, True),  # t0 + 2: the last turn it lives through
    (3, 1, False),  # t0 + 3: gone
    (5, 4, True),  # refreshed at turn 4
    (0, 0, True),
]


@pytest.mark.parametrize(("turn", "set_at", "kept"), DECAY)
def test_start_turn_decays_filters(turn: int, set_at: int, kept: bool) -> None:
    state = SessionState(turn=turn, filters={"period": FilterValue("2026-Q3", set_at)})
    after = start_turn(state, PolicyConfig())
    assert after.turn == turn + 1 and after.open_turn is None
    assert ("period" in after.filters) is kept


def test_filter_turns_is_the_config_s() -> None:
    state = SessionState(turn=3, filters={"period": FilterValue("2026-Q3", 1)})
    assert "period" in start_turn(state, PolicyConfig(filter_turns=3)).filters


# --------------------------------------------------------------------------- §10 salient

ACME = Focus("customer", "C-1", "Acme")
BETA = Focus("customer", "C-2", "Beta")
ORDER = Focus("order", "O-1", "O-1")
REP = Focus("rep", "R-1", "Ana")

MOVES = [  # (focus, salient, new focus, size, salient after)
    (None, (), ACME, 2, ()),
    (ACME, (), BETA, 2, ()),  # same type: replaced, salient unchanged
    (ACME, (), ORDER, 2, (ACME,)),  # another type: the old focus becomes salient
    (ORDER, (ACME,), REP, 2, (ORDER, ACME)),  # most recent first
    (REP, (ORDER, ACME), BETA, 2, (REP, ORDER)),  # a salient of the new type leaves
    (ORDER, (ACME,), REP, 1, (ORDER,)),  # past the size the oldest leaves
    (ACME, (), ORDER, 0, ()),  # no types declared: size 0, nothing salient
]


@pytest.mark.parametrize(("focus", "salient", "new", "size", "after"), MOVES)
def test_move_focus(
    focus: Focus | None, salient: tuple[Focus, ...], new: Focus, size: int,
    after: tuple[Focus, ...],
) -> None:
    assert move_focus(focus, salient, new, size) == (new, after)


# --------------------------------------------------------------------------- §3 step 6 tools

BRIGHTWATER = {"id": "C-1080", "name": "Brightwater Farms"}
TOOLS: list[tuple[str, str, dict[str, Any], ToolResult, dict[str, Any]]] = [
    # (id, tool, args, result, what changes: focus id, filters, clarify options, notes)
    ("record-focus", "lookup_customer", {}, ToolResult(True, BRIGHTWATER), {"focus": "C-1080"}),
    ("one-of-a-list", "search_customers", {}, ToolResult(True, [BRIGHTWATER]), {"focus": "C-1080"}),
    ("failure", "lookup_customer", {}, ToolResult(False, BRIGHTWATER), {}),
    ("unknown-tool", "no_such_tool", {}, ToolResult(True, BRIGHTWATER), {}),
    ("no-data", "lookup_customer", {}, ToolResult(True, None), {}),
    ("record-without-id", "lookup_customer", {}, ToolResult(True, {"name": "x"}), {}),
    ("boolean-id", "lookup_customer", {}, ToolResult(True, {"id": True, "name": "x"}), {}),
    ("filters", "list_orders", {"period": "2026-Q3", "status": "overdue"}, ToolResult(True, []),
     {"filters": {"period": "2026-Q3", "status": "overdue"}}),
    ("bad-filters-ignored", "list_orders", {"period": "last quarter", "status": "exploded"},
     ToolResult(True, []), {"notes": 2}),
    ("a-synonym-is-not-a-value", "list_orders", {"status": "past due"}, ToolResult(True, []),
     {"notes": 1}),  # a tool's arguments carry canonical values; synonyms are the user's
    ("none-arg-skipped", "list_orders", {"region": None}, ToolResult(True, []), {}),
    ("several-clarify", "search_customers", {}, ToolResult(True, [
        {"id": "C-1050", "name": "Harbor Logistics", "city": "Seattle"},
        {"id": "C-1044", "name": "Northline Logistics", "city": "Vancouver"}]),
     {"clarify": ["C-1050", "C-1044"]}),
]


@pytest.mark.parametrize(("tool", "args", "result", "changes"), [t[1:] for t in TOOLS],
                         ids=[t[0] for t in TOOLS])
def test_apply_tool(
    crm: Domain, tool: str, args: dict[str, Any], result: ToolResult, changes: dict[str, Any]
) -> None:
    state = SessionState(turn=4)
    outcome = apply_tool(state, state, crm, tool, args, result)
    if "clarify" in changes:
        assert isinstance(outcome, Clarify)
        assert [o.id for o in outcome.pending.options] == changes["clarify"]
        assert outcome.pending.origin == "tool" and outcome.state.focus is None
        return
    assert isinstance(outcome, Proceed)
    focus = outcome.state.focus
    assert (focus.id if focus is not None else None) == changes.get("focus")
    if focus is not None:
        assert focus.source == "tool"
    assert outcome.state.filter_values() == changes.get("filters", {})
    assert all(f.set_at_turn == 4 for f in outcome.state.filters.values())
    assert len(outcome.notes) == changes.get("notes", 0)  # each ignored argument says why
