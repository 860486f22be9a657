"""The published JSON Schema (``convmem domain schema``) agrees with the loader.

Editors check a domain file against ``convmem/data/domain.schema.json``; the loader
checks it in ``convmem.domain``. Every bundled domain validates under both; a set of
bad files fails under both; what only the loader can see (cross-references,
uniqueness) is listed here and named in the schema's description.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

jsonschema = pytest.importorskip("jsonschema")

from convmem import ConfigError, examples  # noqa: E402
from convmem.demo import demo_script  # noqa: E402
from convmem.domain import Domain, domain_schema  # noqa: E402
from tests.core.conftest import DATA  # noqa: E402

SCHEMA: dict[str, Any] = json.loads(domain_schema())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def _bundled() -> list[tuple[str, Any]]:
    docs = [(name, json.loads(examples.read_bytes(name))) for name in examples.names()]
    docs.append(("tests/data/domains/crm.json", json.loads((DATA / "domains" / "crm.json").read_text())))
    docs.append(("demo_session.json", demo_script()["domain"]))
    for name in ("crm_typed", "estates", "clinic", "fleet"):  # spec §10's dev-set domains
        docs.append((f"tests/data/domains/{name}.json",
                     json.loads((DATA / "domains" / f"{name}.json").read_text())))
    return docs


@pytest.mark.parametrize(("name", "doc"), _bundled(), ids=[n for n, _ in _bundled()])
def test_every_bundled_domain_validates_under_schema_and_loader(name: str, doc: Any) -> None:
    assert list(VALIDATOR.iter_errors(doc)) == []
    Domain.from_dict(doc, source=name)


VALID_VARIANTS: list[dict[str, Any]] = [
    {"name": "x"},
    {"name": "x", "$schema": "./domain.schema.json", "$comment": ["a", "b"]},
    {"name": "x", "entities": [{"type": "t", "id": "1", "label": "A", "attrs": {"n": 3, "$comment": "c"}}]},
    {"name": "x", "filters": {"$comment": "c", "p": {"kind": "period", "$comment": "c"}}},
    {"name": "x", "filters": {"r": {"kind": "vocab", "values": {"$comment": "c", "a": ["A"]}}},
     "clear_phrases": {"r": ["any r"], "$comment": "c"}},
    {"name": "x", "formats": {"short": ["briefly"], "$comment": "c"}},
    {"name": "x", "filters": {"r": {"kind": "vocab", "values": {"a": ["A"]}}},
     "tools": [{"name": "t", "$comment": "c", "focus": {"type": "t", "id": "key", "label": "title"},
                "filters": {"r": "region", "$comment": "c"}}]},
    {"name": "x", "entities": [{"type": "t", "id": "1", "label": "A"}],
     "types": {"$comment": "c", "t": {"$comment": "c", "pronouns": ["it", " its "], "nouns": ["big thing"]}}},
    {"name": "x", "tools": [{"name": "t", "focus": {"type": "rep"}}], "types": {"rep": {}}},
]


@pytest.mark.parametrize("doc", VALID_VARIANTS)
def test_valid_variants_pass_both(doc: dict[str, Any]) -> None:
    assert list(VALIDATOR.iter_errors(doc)) == []
    Domain.from_dict(doc)


BAD: list[dict[str, Any] | list[Any] | str] = [
    [],
    "crm",
    {},
    {"name": ""},
    {"name": "   "},
    {"name": 3},
    {"name": "x", "colour": 1},
    {"name": "x", "$comment": 1},
    {"name": "x", "entities": {}},
    {"name": "x", "entities": [{"type": "c", "id": "1"}]},
    {"name": "x", "entities": [{"type": "c", "id": "1", "label": "a", "aliases": "A"}]},
    {"name": "x", "entities": [{"type": "c", "id": "1", "label": "a", "aliases": [""]}]},
    {"name": "x", "entities": [{"type": "c", "id": "1", "label": "a", "attrs": {"vip": True}}]},
    {"name": "x", "entities": [{"type": "c", "id": "1", "label": "a", "attrs": {"a": [1]}}]},
    {"name": "x", "entities": [{"type": "c", "id": "1", "label": "a", "colour": "red"}]},
    {"name": "x", "filters": []},
    {"name": "x", "filters": {"region": {"kind": "list"}}},
    {"name": "x", "filters": {"region": {}}},
    {"name": "x", "filters": {"region": {"kind": "vocab", "values": []}}},
    {"name": "x", "filters": {"region": {"kind": "vocab", "values": {}}}},
    {"name": "x", "filters": {"region": {"kind": "vocab"}}},
    {"name": "x", "filters": {"region": {"kind": "vocab", "values": {"a": "A"}}}},
    {"name": "x", "filters": {"p": {"kind": "period", "values": {"a": ["A"]}}}},
    {"name": "x", "formats": {"haiku": ["in verse"]}},
    {"name": "x", "formats": {"short": "briefly"}},
    {"name": "x", "clear_phrases": {"p": "all"}},
    {"name": "x", "tools": {}},
    {"name": "x", "tools": [{"focus": {"type": "t"}}]},
    {"name": "x", "tools": [{"name": "t", "focus": {"id": "id"}}]},
    {"name": "x", "tools": [{"name": "t", "focus": {"type": "t", "field": "x"}}]},
    {"name": "x", "tools": [{"name": "t", "focus": "customer"}]},
    {"name": "x", "tools": [{"name": "t", "colour": 1}]},
    {"name": "x", "filters": {"p": {"kind": "period"}}, "tools": [{"name": "t", "filters": {"p": 1}}]},
    {"name": "x", "types": []},
    {"name": "x", "types": {"t": []}},
    {"name": "x", "types": {"t": {"pronouns": "it"}}},
    {"name": "x", "types": {"t": {"pronouns": ["that one"]}}},
    {"name": "x", "types": {"t": {"pronouns": [" "]}}},
    {"name": "x", "types": {"t": {"nouns": [""]}}},
    {"name": "x", "types": {"t": {"noun": ["thing"]}}},
]


@pytest.mark.parametrize("doc", BAD, ids=[json.dumps(d)[:60] for d in BAD])
def test_bad_files_fail_under_both(tmp_path: Path, doc: Any) -> None:
    assert list(VALIDATOR.iter_errors(doc)), "the schema accepted a file the loader refuses"
    with pytest.raises(ConfigError, match=r"\$"):
        Domain.from_dict(doc)


LOADER_ONLY: list[tuple[dict[str, Any], str]] = [
    ({"name": "x", "clear_phrases": {"region": ["all"]}}, "no filter named 'region'"),
    ({"name": "x", "tools": [{"name": "t", "filters": {"region": "r"}}]}, "no filter named 'region'"),
    ({"name": "x", "entities": [{"type": "c", "id": "1", "label": "a"},
                                {"type": "c", "id": "1", "label": "b"}]}, "duplicate entity c/1"),
    ({"name": "x", "tools": [{"name": "t"}, {"name": "t"}]}, "duplicate tool 't'"),
    ({"name": "x", "entities": [{"type": "c", "id": "1", "label": "a"}], "types": {"k": {}}},
     "no entity or tool rule has type 'k'"),
]


@pytest.mark.parametrize(("doc", "message"), LOADER_ONLY)
def test_what_only_the_loader_checks_is_named_in_the_schema(doc: dict[str, Any], message: str) -> None:
    assert list(VALIDATOR.iter_errors(doc)) == []  # a schema cannot see cross-references
    with pytest.raises(ConfigError, match=message):
        Domain.from_dict(doc)
    description = SCHEMA["description"]
    assert "must name a declared filter" in description and "unique" in description
    assert "a type under \"types\" must be" in description
