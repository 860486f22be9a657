"""Domain files a careless or hostile author writes, and the bundled examples (spec §7).

Every malformed file is a ``ConfigError`` naming the file and where in it; nothing is
decided last-wins; the examples load by name from the installed package.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from convmem import Clarification, ConfigError, SessionMemory, examples, load_domain
from convmem.domain import MAX_DEPTH
from tests.core.conftest import DATA

GOOD = {
    "name": "x",
    "filters": {"region": {"kind": "vocab", "values": {"emea": ["EMEA"]}}},
    "tools": [{"name": "lookup", "focus": {"type": "thing"}}],
}


def _write(tmp_path: Path, raw: bytes | str, name: str = "domain.json") -> Path:
    p = tmp_path / name
    p.write_bytes(raw.encode() if isinstance(raw, str) else raw)
    return p


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        load_domain(path)
    assert str(path) in str(err.value)
    return str(err.value)


# ----------------------------------------------------------------------------- bytes and syntax


def test_deep_nesting_is_a_config_error_with_position(tmp_path: Path) -> None:
    p = _write(tmp_path, '{"name": "x", "entities": ' + "[" * 200_000 + "]" * 200_000 + "}")
    msg = _error(p)
    assert f"nested more than {MAX_DEPTH} levels" in msg and "line 1 column" in msg


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path: Path) -> None:
    label = "[" * 100 + '\\"{' * 50
    doc = dict(GOOD, entities=[{"type": "t", "id": "1", "label": label}])
    assert load_domain(_write(tmp_path, json.dumps(doc))).entities[0].label.startswith("[[[")


def test_non_utf8_bytes_name_the_byte_and_line(tmp_path: Path) -> None:
    p = _write(tmp_path, b'{"name": "x",\n "entities": [{"type": "t", "id": "1", "label": "Caf\xe9"}]}')
    msg = _error(p)
    assert "not UTF-8" in msg and "line 2" in msg and "0xe9" in msg


def test_a_utf8_bom_is_accepted(tmp_path: Path) -> None:
    p = _write(tmp_path, b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    assert load_domain(p).name == "x"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(tmp_path: Path, constant: str) -> None:
    p = _write(tmp_path, '{"name": "x", "entities": [{"type": "t", "id": "1", "label": "a", '
               f'"attrs": {{"size": {constant}}}}}]}}')
    assert constant in _error(p)


def test_a_directory_is_not_a_domain_file(tmp_path: Path) -> None:
    assert "cannot read domain file" in _error(tmp_path)


# ----------------------------------------------------------------------------- duplicates


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ('{"name": "x", "name": "y"}', "$.name: duplicate key"),
        ('{"name": "x", "filters": {"region": {"kind": "period"}, "region": {"kind": "period"}}}',
         "$.filters.region: duplicate key"),
        ('{"name": "x", "filters": {"r": {"kind": "vocab", "values": {"a": ["A"], "a": ["B"]}}}}',
         "$.filters.r.values.a: duplicate key"),
        ('{"name": "x", "entities": [{"type": "t", "id": "1", "label": "a", "label": "b"}]}',
         "$.entities[0].label: duplicate key"),
        ('{"name": "x", "tools": [{"name": "t", "focus": {"type": "a", "type": "b"}}]}',
         "$.tools[0].focus.type: duplicate key"),
    ],
)
def test_duplicate_json_keys_are_refused_with_their_path(tmp_path: Path, raw: str, path: str) -> None:
    assert path in _error(_write(tmp_path, raw))


def test_duplicate_tool_names_are_refused(tmp_path: Path) -> None:
    doc = dict(GOOD, tools=[{"name": "lookup", "focus": {"type": "a"}},
                            {"name": "other"},
                            {"name": "lookup", "focus": {"type": "b"}}])
    msg = _error(_write(tmp_path, json.dumps(doc)))
    assert "$.tools[2].name: duplicate tool 'lookup' (first at $.tools[0])" in msg


def test_keys_that_are_not_identifiers_are_quoted_in_paths(tmp_path: Path) -> None:
    doc = dict(GOOD, clear_phrases={"sales.region": ["all"]})
    assert '$.clear_phrases["sales.region"]: no filter named' in _error(_write(tmp_path, json.dumps(doc)))


# ----------------------------------------------------------------------------- $comment and $schema


def test_comments_are_accepted_in_every_object_and_ignored(tmp_path: Path) -> None:
    c = "a comment"
    doc = {
        "$schema": "./domain.schema.json", "$comment": [c, c], "name": "x",
        "entities": [{"$comment": c, "type": "t", "id": "1", "label": "A",
                      "attrs": {"$comment": c, "city": "Lyon"}}],
        "filters": {"$comment": c, "period": {"$comment": c, "kind": "period"},
                    "r": {"kind": "vocab", "values": {"$comment": c, "a": ["A"]}}},
        "clear_phrases": {"$comment": c, "r": ["any r"]},
        "formats": {"$comment": c, "short": ["briefly"]},
        "tools": [{"$comment": c, "name": "t", "focus": {"$comment": c, "type": "t"},
                   "filters": {"$comment": c, "r": "r"}}],
    }
    d = load_domain(_write(tmp_path, json.dumps(doc)))
    assert set(d.filters) == {"period", "r"} and d.filters["r"].values == {"a": ("A",)}  # type: ignore[union-attr]
    assert dict(d.entities[0].attrs) == {"city": "Lyon"}
    assert set(d.formats) == {"short"} and dict(d.tools["t"].filters) == {"r": "r"}


def test_a_comment_must_be_text(tmp_path: Path) -> None:
    doc = dict(GOOD, tools=[{"$comment": {"nested": 1}, "name": "t"}])
    assert '$.tools[0]["$comment"]: expected a string or an array of strings' in _error(
        _write(tmp_path, json.dumps(doc)))


def test_schema_key_only_at_the_root(tmp_path: Path) -> None:
    doc = dict(GOOD, entities=[{"$schema": "x", "type": "t", "id": "1", "label": "a"}])
    assert '$.entities[0]["$schema"]: unknown key' in _error(_write(tmp_path, json.dumps(doc)))


# ----------------------------------------------------------------------------- bundled examples


def test_examples_are_listed_and_load_by_name() -> None:
    assert examples.names() == ("crm", "crm_typed", "helpdesk", "starter")
    for name in examples.names():
        assert load_domain(name).name == name


def test_the_crm_example_is_the_labelled_sets_domain_byte_for_byte() -> None:
    assert examples.read_bytes("crm") == (DATA / "domains" / "crm.json").read_bytes()
    # spec §10: the typed copy is the dev set's too, byte for byte
    assert examples.read_bytes("crm_typed") == (DATA / "domains" / "crm_typed.json").read_bytes()


def test_a_path_is_never_mistaken_for_an_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crm").write_text(json.dumps({"name": "mine"}))
    assert load_domain("./crm").name == "mine"
    assert load_domain(Path("crm")).name == "mine"
    assert load_domain("crm").name == "crm"


def test_an_unknown_name_lists_the_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="bundled examples: crm, crm_typed, helpdesk, starter"):
        load_domain("crn")


def test_the_helpdesk_example_tracks_focus_filters_and_clarifies_namesakes() -> None:
    mem = SessionMemory(load_domain("helpdesk"))
    today = date(2026, 11, 30)
    t = mem.begin_turn("h", "Is the VPN gateway still dropping connections?", today=today)
    assert not isinstance(t, Clarification)
    mem.end_turn("h")
    t = mem.begin_turn("h", "Show me its P1 tickets from last week", today=today)
    assert not isinstance(t, Clarification) and "VPN gateway" in t.rewritten
    mem.end_turn("h")
    state = mem.get_state("h")
    assert state is not None and state.focus is not None and state.focus.id == "D-120"
    assert state.filter_values() == {"priority": "p1", "period": "2026-11-23..2026-11-29"}
    clar = mem.begin_turn("h", "Is the front desk printer fixed?", today=today)
    assert isinstance(clar, Clarification) and [o.id for o in clar.options] == ["D-100", "D-101"]
    mem.end_turn("h")
    t = mem.begin_turn("h", "The Porto one.", today=today)
    assert not isinstance(t, Clarification)
    mem.record_tool("h", "lookup_employee", {},
                    {"ok": True, "data": {"employee_id": "E-201", "full_name": "Ines Duarte"}})
    mem.record_tool("h", "search_tickets", {"opened": "2026-11", "state": "open"}, {"ok": True, "data": []})
    mem.end_turn("h")
    state = mem.get_state("h")
    assert state is not None and state.focus is not None
    assert (state.focus.type, state.focus.id, state.focus.label) == ("employee", "E-201", "Ines Duarte")
    assert state.filter_values()["status"] == "open" and state.filter_values()["period"] == "2026-11"
