"""The tool-result contract as the core reads it (``convmem.tools``, ``docs/tool-results.md``):
plain values only, an envelope whose ``ok`` is not ``true`` is a failure, and a failure
never sets focus or filters."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest

from convmem import Clarification, ConfigError, SessionMemory, ToolResult
from convmem.tools import as_plain
from tests.core.conftest import TODAY

RECORD = {"id": "C-1080", "name": "Brightwater Farms"}


@dataclass
class Row:
    id: str
    name: str


@pytest.mark.parametrize(
    ("value", "ok", "data"),
    [
        ({"ok": True, "data": RECORD}, True, RECORD),
        ({"ok": False, "data": RECORD}, False, RECORD),
        ({"ok": False, "error": "timeout"}, False, None),
        ({"ok": "false", "data": RECORD}, False, RECORD),  # bool("false") would be True
        ({"ok": 0, "data": RECORD}, False, RECORD),
        ({"ok": None}, False, None),
        ({"ok": True, "data": Row(**RECORD)}, True, RECORD),  # the caller's own record object
        (RECORD, True, RECORD),
        ([RECORD], True, [RECORD]),
        ((RECORD,), True, [RECORD]),
        (json.dumps({"ok": True, "data": RECORD}), True, RECORD),
        (json.dumps({"ok": False, "data": RECORD}), False, RECORD),
        (json.dumps([RECORD]), True, [RECORD]),
        ("Brightwater Farms, Fresno.", True, None),
        ("[not json", True, None),
        (ToolResult(False, RECORD), False, RECORD),
    ],
)
def test_plain_forms(value: Any, ok: bool, data: Any) -> None:
    result = ToolResult.parse(value)
    assert (result.ok, result.data) == (ok, data)


def test_ok_that_is_not_a_boolean_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="convmem.tools"):
        assert not ToolResult.parse({"ok": "yes", "data": RECORD}).ok
    assert "not a JSON boolean" in caplog.text


def test_objects_are_refused_with_the_way_out() -> None:
    with pytest.raises(ConfigError, match=r"got Row.*as_plain"):
        ToolResult.parse(Row(**RECORD))
    assert ToolResult.parse(as_plain(Row(**RECORD))).data == RECORD
    with pytest.raises(ConfigError, match="got int"):
        ToolResult.parse(3)


def test_record_text() -> None:
    text = json.dumps({"ok": True, "data": RECORD})
    assert ToolResult.parse(text).record_text() == text  # JSON text is kept as written
    assert ToolResult.parse(RECORD).record_text() == json.dumps({"ok": True, "data": RECORD})
    assert ToolResult.parse(RECORD, text="shown").record_text() == "shown"


def test_envelope_sets_the_focus_and_a_failure_sets_nothing(memory: SessionMemory) -> None:
    memory.begin_turn("th", "Find the farm account in Fresno.", today=TODAY)
    memory.record_tool("th", "lookup_customer", {}, {"ok": True, "data": RECORD})
    memory.end_turn("th")
    memory.begin_turn("th", "What's on their order list?", today=TODAY)
    failed = {"ok": False, "error": "timeout", "data": {"id": "C-1094", "name": "Pinecrest"}}
    memory.record_tool("th", "lookup_customer", {}, failed)
    memory.record_tool("th", "list_orders", {"status": "overdue"}, {"ok": False})
    memory.record_tool("th", "list_orders", {"status": "overdue"}, '{"ok": "false"}')
    state = memory.end_turn("th")
    assert state.focus is not None and state.focus.id == "C-1080"
    assert dict(state.filters) == {}
    memory.begin_turn("th", "Any overdue ones?", today=TODAY)
    memory.record_tool("th", "list_orders", {"status": "overdue"}, {"ok": True, "data": []})
    state = memory.end_turn("th")
    assert state.filter_values() == {"status": "overdue"}


def test_a_list_in_the_envelope_asks_which_one(memory: SessionMemory) -> None:
    memory.begin_turn("th", "Find the logistics customer up north.", today=TODAY)
    candidates = [{"id": "C-1050", "name": "Harbor Logistics", "city": "Seattle"},
                  {"id": "C-1044", "name": "Northline Logistics", "city": "Vancouver"}]
    asked = memory.record_tool("th", "search_customers", {}, json.dumps(
        {"ok": True, "data": candidates}))
    assert isinstance(asked, Clarification)
    assert [o.id for o in asked.options] == ["C-1050", "C-1044"]
