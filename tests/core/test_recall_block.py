"""The block names the recall tool only when the model is offered it
(``SessionMemory.offering_recall``): one line, within the budget, in every block the
view renders (the turn's, ``block``, its tenant views')."""

from __future__ import annotations

from datetime import date

import pytest

from convmem import ConfigError, Domain, SessionMemory, TurnContext, count_tokens
from convmem.render import BLOCK_BUDGET, recall_line
from convmem.session import RECALL_TOOL

TODAY = date(2026, 11, 30)


def test_only_the_offering_view_names_the_tool(crm: Domain) -> None:
    memory = SessionMemory(crm)
    offering = memory.offering_recall()
    assert offering.offering_recall() is offering and memory.recall_tool is None
    started = offering.begin_turn("th", "Pull up Brightwater Farms.", today=TODAY)
    assert isinstance(started, TurnContext)
    assert started.block.split("\n")[-1] == recall_line(RECALL_TOOL)
    assert count_tokens(started.block) <= BLOCK_BUDGET
    offering.end_turn("th", answer="Here it is.")
    assert offering.block("th").endswith(recall_line(RECALL_TOOL))
    assert RECALL_TOOL not in memory.block("th")  # the same state, the tool not offered
    assert offering.for_tenant("acme").recall_tool == RECALL_TOOL
    assert memory.for_tenant("acme").recall_tool is None
    assert offering.offering_recall(None).recall_tool is None


def test_a_first_turn_with_an_empty_state_has_no_block(crm: Domain) -> None:
    offering = SessionMemory(crm).offering_recall()
    started = offering.begin_turn("th", "Hello.", today=TODAY)
    assert isinstance(started, TurnContext) and started.block == ""


@pytest.mark.parametrize("bad", ["", "two words", "x\ny", "a" * 65, 7])
def test_the_tool_name_is_an_identifier(crm: Domain, bad: object) -> None:
    with pytest.raises(ConfigError, match="recall tool name"):
        SessionMemory(crm).offering_recall(bad)  # type: ignore[arg-type]
