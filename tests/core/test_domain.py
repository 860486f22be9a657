"""Domain loading and validation (spec §1, §7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmem import ConfigError, Domain, SessionMemory, load_domain
from convmem.cli import main
from tests.core.conftest import DATA, TODAY


def write(tmp_path: Path, data: object) -> Path:
    p = tmp_path / "crm.json"
    p.write_text(json.dumps(data))
    return p


def test_loads_the_labelled_domain(crm: Domain) -> None:
    assert crm.name == "crm"
    assert len(crm.entities) == 70
    assert set(crm.filters) == {"period", "region", "status"}
    assert crm.tools["lookup_customer"].focus is not None
    assert crm.tools["list_orders"].filters == {"period": "period", "status": "status", "region": "region"}


@pytest.mark.parametrize(
    ("data", "path", "expected"),
    [
        ({"name": "x", "filters": {"region": {"kind": "vocab", "values": []}}}, "$.filters.region.values", "an object"),
        ({"name": "x", "filters": {"region": {"kind": "list"}}}, "$.filters.region.kind", '"period" or "vocab"'),
        ({"name": ""}, "$.name", "a non-empty string"),
        ({"name": "x", "entities": [{"type": "c", "id": "1"}]}, "$.entities[0].label", "a non-empty string"),
        ({"name": "x", "entities": {}}, "$.entities", "an array"),
        ({"name": "x", "formats": {"haiku": ["in verse"]}}, "$.formats.haiku", "unknown format"),
        ({"name": "x", "tools": [{"name": "t", "filters": {"nope": "a"}}]}, "$.tools[0].filters.nope", "no filter named"),
        ({"name": "x", "colour": 1}, "$.colour", "unknown key"),
    ],
)
def test_bad_file_names_file_path_and_expectation(tmp_path: Path, data: object, path: str, expected: str) -> None:
    p = write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_domain(p)
    msg = str(err.value)
    assert str(p) in msg and path in msg and expected in msg


def test_not_json(tmp_path: Path) -> None:
    p = tmp_path / "crm.json"
    p.write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON at line 1"):
        load_domain(p)


def test_eval_exits_2_on_a_bad_domain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"name": "crm", "filters": {"region": {"kind": "vocab", "values": []}}})
    code = main(["eval", str(DATA / "crm_dev.jsonl"), "--domains", str(tmp_path), "--json"])
    assert code == 2
    assert "$.filters.region.values" in capsys.readouterr().err


def test_eval_exits_2_on_a_missing_file(tmp_path: Path) -> None:
    assert main(["eval", str(tmp_path / "none.jsonl"), "--domains", str(tmp_path)]) == 2


def test_domain_without_entities_still_tracks_format_periods_and_questions() -> None:
    domain = Domain.from_dict({
        "name": "open",
        "filters": {"period": {"kind": "period"}},
        "tools": [{"name": "lookup_thing", "focus": {"type": "thing", "id": "id", "label": "name"}}],
    })
    mem = SessionMemory(domain)
    ctx = mem.begin_turn("t", "What happened last quarter, briefly?", today=TODAY)
    assert not isinstance(ctx, type(None))
    mem.record_tool("t", "lookup_thing", {}, {"ok": True, "data": {"id": "x1", "name": "Widget"}})
    mem.end_turn("t")
    state = mem.get_state("t")
    assert state is not None
    assert state.format == "short"
    assert state.filter_values() == {"period": "2026-Q3"}
    assert state.focus is not None and state.focus.id == "x1" and state.focus.source == "tool"
    assert state.recent_questions == ("What happened last quarter, briefly?",)
