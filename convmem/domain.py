"""The application's domain: configuration, not code (spec §1, §7).

A domain names entity types only through its data (entities, tool rules); the core
never names one. ``load_domain`` reads the §7 JSON file and validates it, raising
``ConfigError`` with the file, the JSON path (``$.filters.region.values``) and what
was expected. ``Domain`` is the same thing as typed objects, for applications that
build it in code. A domain with no entities works: focus then comes from tool rules.

The optional ``types`` (spec §10) declares, per entity type, the pronouns and nouns that
can refer to an entity of that type; it switches on typed references and the ``salient``
slot. A domain without it behaves exactly as one written before the key existed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from convmem.errors import ConfigError
from convmem.state import FORMATS, Format

if TYPE_CHECKING:
    from convmem.catalog import Catalog

#: Cue phrases used when a domain declares no ``formats`` (spec §1's examples).
DEFAULT_FORMAT_CUES: Mapping[Format, tuple[str, ...]] = {
    "short": ("briefly", "tl;dr", "short answer", "in one line", "keep it short", "in short"),
    "table": ("in a table", "as a table", "tabulate", "table format"),
    "detailed": ("in detail", "break it down", "detailed", "full breakdown", "walk me through"),
}


@dataclass(frozen=True, slots=True)
class Entity:
    """One thing the conversation can be about."""

    type: str
    id: str
    label: str
    aliases: tuple[str, ...] = ()
    attrs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PeriodFilter:
    """A filter whose values are time periods, normalised against the session clock."""

    kind: Literal["period"] = "period"


@dataclass(frozen=True, slots=True)
class VocabFilter:
    """A closed-vocabulary filter: normalised value → the phrases that mean it."""

    values: Mapping[str, tuple[str, ...]]
    kind: Literal["vocab"] = "vocab"

    def accepts(self, value: str) -> bool:
        return value in self.values


FilterSpec = PeriodFilter | VocabFilter


@dataclass(frozen=True, slots=True)
class ToolFocusRule:
    """Which fields of a tool result's ``data`` hold the entity id and label."""

    type: str
    id_field: str = "id"
    label_field: str = "name"


@dataclass(frozen=True, slots=True)
class TypeWords:
    """The words that can refer to an entity of one type (spec §10): pronouns ("they")
    alone, nouns after "that", "this" or "the" ("that account"). Stored lower-case."""

    pronouns: tuple[str, ...] = ()
    nouns: tuple[str, ...] = ()

    def declares(self, word: str, *, noun: bool) -> bool:
        return word in (self.nouns if noun else self.pronouns)

    @property
    def declares_nothing(self) -> bool:
        return not self.pronouns and not self.nouns


#: How many other entities ``salient`` keeps in a domain that declares ``types`` (spec §10).
SALIENT_SIZE = 2


@dataclass(frozen=True, slots=True)
class ToolRule:
    """What a tool's result and arguments do to the state (the seed's ``afterTool``, as data)."""

    name: str
    focus: ToolFocusRule | None = None
    filters: Mapping[str, str] = field(default_factory=dict)  # filter key -> argument name


@dataclass(frozen=True, eq=False)
class Domain:
    """Typed domain configuration; ``catalog`` defaults to an index over ``entities``."""

    name: str
    entities: tuple[Entity, ...] = ()
    filters: Mapping[str, FilterSpec] = field(default_factory=dict)
    clear_phrases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    formats: Mapping[Format, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_FORMAT_CUES))
    tools: Mapping[str, ToolRule] = field(default_factory=dict)
    custom_catalog: Catalog | None = None
    types: Mapping[str, TypeWords] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for tname, words in self.types.items():
            if not isinstance(tname, str) or not tname or not isinstance(words, TypeWords):
                raise ConfigError(
                    f"Domain.types[{tname!r}]: expected a convmem.domain.TypeWords, "
                    f"got {type(words).__name__}"
                )

    @property
    def salient_size(self) -> int:
        """Spec §10: two other entities when ``types`` is declared; none otherwise, so a
        domain without types keeps exactly the state (and block) it always had."""
        return SALIENT_SIZE if self.types else 0

    @cached_property
    def catalog(self) -> Catalog:
        if self.custom_catalog is not None:
            return self.custom_catalog
        from convmem.catalog import InMemoryCatalog

        return InMemoryCatalog(self.entities)

    def with_catalog(self, catalog: Catalog) -> Domain:
        """The same domain resolving names through an application's own catalog."""
        return replace(self, custom_catalog=catalog)

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<domain>") -> Domain:
        return _parse(data, source)

    @classmethod
    def load(cls, path: str | Path) -> Domain:
        return load_domain(path)


def load_domain(path: str | Path) -> Domain:
    """Read and validate a §7 domain file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read domain file ({exc.strerror})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    return _parse(data, str(p))


# --------------------------------------------------------------------------- validation


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, expected: str, got: Any) -> ConfigError:
        shown = json.dumps(got)[:60] if not isinstance(got, _Missing) else "nothing"
        return ConfigError(f"{self.source}: {path}: expected {expected}, got {shown}")

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, "an object", value)
        return value

    def arr(self, value: Any, path: str) -> Sequence[Any]:
        if not isinstance(value, list):
            raise self.fail(path, "an array", value)
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(path, "a non-empty string", value)
        return value

    def strings(self, value: Any, path: str) -> tuple[str, ...]:
        return tuple(self.string(v, f"{path}[{i}]") for i, v in enumerate(self.arr(value, path)))

    def keys(self, value: Mapping[str, Any], path: str, allowed: set[str]) -> None:
        for key in value:
            if key not in allowed:
                raise ConfigError(
                    f"{self.source}: {path}.{key}: unknown key; expected one of {sorted(allowed)}"
                )


class _Missing:
    pass


_MISSING = _Missing()


def _parse(data: Any, source: str) -> Domain:
    c = _Checker(source)
    root = c.obj(data, "$")
    c.keys(root, "$", {"name", "entities", "filters", "clear_phrases", "formats", "tools", "types"})
    name = c.string(root.get("name", _MISSING), "$.name")

    entities: list[Entity] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(c.arr(root.get("entities", []), "$.entities")):
        path = f"$.entities[{i}]"
        e = c.obj(raw, path)
        c.keys(e, path, {"type", "id", "label", "aliases", "attrs"})
        etype = c.string(e.get("type", _MISSING), f"{path}.type")
        eid = c.string(e.get("id", _MISSING), f"{path}.id")
        if (etype, eid) in seen:
            raise ConfigError(f"{source}: {path}.id: duplicate entity {etype}/{eid}")
        seen.add((etype, eid))
        attrs_raw = c.obj(e.get("attrs", {}), f"{path}.attrs")
        attrs = {}
        for k, v in attrs_raw.items():
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise c.fail(f"{path}.attrs.{k}", "a string or number", v)
            attrs[k] = str(v)
        entities.append(Entity(
            type=etype,
            id=eid,
            label=c.string(e.get("label", _MISSING), f"{path}.label"),
            aliases=c.strings(e.get("aliases", []), f"{path}.aliases"),
            attrs=attrs,
        ))

    filters: dict[str, FilterSpec] = {}
    for key, raw in c.obj(root.get("filters", {}), "$.filters").items():
        path = f"$.filters.{key}"
        spec = c.obj(raw, path)
        kind = spec.get("kind", _MISSING)
        if kind == "period":
            c.keys(spec, path, {"kind"})
            filters[key] = PeriodFilter()
        elif kind == "vocab":
            c.keys(spec, path, {"kind", "values"})
            values = c.obj(spec.get("values", _MISSING), f"{path}.values")
            if not values:
                raise c.fail(f"{path}.values", "at least one value", values)
            filters[key] = VocabFilter({
                str(v): c.strings(aliases, f"{path}.values.{v}") for v, aliases in values.items()
            })
        else:
            raise c.fail(f"{path}.kind", '"period" or "vocab"', kind)

    clears: dict[str, tuple[str, ...]] = {}
    for key, raw in c.obj(root.get("clear_phrases", {}), "$.clear_phrases").items():
        if key not in filters:
            raise ConfigError(
                f"{source}: $.clear_phrases.{key}: no filter named {key!r}; "
                f"expected one of {sorted(filters)}"
            )
        clears[key] = c.strings(raw, f"$.clear_phrases.{key}")

    formats: dict[Format, tuple[str, ...]] = dict(DEFAULT_FORMAT_CUES)
    if "formats" in root:
        formats = {}
        for key, raw in c.obj(root["formats"], "$.formats").items():
            if key not in FORMATS:
                raise ConfigError(
                    f"{source}: $.formats.{key}: unknown format; expected one of {list(FORMATS)}"
                )
            formats[key] = c.strings(raw, f"$.formats.{key}")

    tools: dict[str, ToolRule] = {}
    for i, raw in enumerate(c.arr(root.get("tools", []), "$.tools")):
        path = f"$.tools[{i}]"
        t = c.obj(raw, path)
        c.keys(t, path, {"name", "focus", "filters"})
        tname = c.string(t.get("name", _MISSING), f"{path}.name")
        focus = None
        if "focus" in t:
            f = c.obj(t["focus"], f"{path}.focus")
            c.keys(f, f"{path}.focus", {"type", "id", "label"})
            focus = ToolFocusRule(
                type=c.string(f.get("type", _MISSING), f"{path}.focus.type"),
                id_field=c.string(f.get("id", "id"), f"{path}.focus.id"),
                label_field=c.string(f.get("label", "name"), f"{path}.focus.label"),
            )
        tfilters: dict[str, str] = {}
        for fkey, arg in c.obj(t.get("filters", {}), f"{path}.filters").items():
            if fkey not in filters:
                raise ConfigError(
                    f"{source}: {path}.filters.{fkey}: no filter named {fkey!r}; "
                    f"expected one of {sorted(filters)}"
                )
            tfilters[fkey] = c.string(arg, f"{path}.filters.{fkey}")
        tools[tname] = ToolRule(tname, focus, tfilters)

    types = _parse_types(c, root.get("types", {}), entities, tools)

    return Domain(
        name=name,
        entities=tuple(entities),
        filters=filters,
        clear_phrases=clears,
        formats=formats,
        tools=tools,
        types=types,
    )


def _parse_types(
    c: _Checker, raw: Any, entities: Sequence[Entity], tools: Mapping[str, ToolRule]
) -> dict[str, TypeWords]:
    """``$.types`` (spec §10): ``{type: {"pronouns": [word, ...], "nouns": [phrase, ...]}}``.

    A declared type must be one the file can produce (an entity's type or a tool rule's
    focus type) whenever the file names any: a misspelt type would otherwise silently
    never match. Pronouns are single words; words are compared lower-case.
    """
    known = {e.type for e in entities} | {t.focus.type for t in tools.values() if t.focus}
    types: dict[str, TypeWords] = {}
    for tname, spec in c.obj(raw, "$.types").items():
        path = f"$.types.{tname}"
        if known and tname not in known:
            raise ConfigError(
                f"{c.source}: {path}: no entity or tool rule has type {tname!r}; "
                f"expected one of {sorted(known)}"
            )
        words = c.obj(spec, path)
        c.keys(words, path, {"pronouns", "nouns"})
        pronouns = c.strings(words.get("pronouns", []), f"{path}.pronouns")
        for i, p in enumerate(pronouns):
            if len(p.split()) != 1:
                raise c.fail(f"{path}.pronouns[{i}]", "a single word", p)
        nouns = c.strings(words.get("nouns", []), f"{path}.nouns")
        types[tname] = TypeWords(
            pronouns=tuple(dict.fromkeys(p.strip().lower() for p in pronouns)),
            nouns=tuple(dict.fromkeys(" ".join(n.lower().split()) for n in nouns)),
        )
    return types
