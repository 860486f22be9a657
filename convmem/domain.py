"""The application's domain: configuration, not code (spec §1, §7).

A domain names entity types only through its data (entities, tool rules); the core
never names one. ``load_domain`` reads the §7 JSON file and validates it, raising
``ConfigError`` with the file, the JSON path (``$.filters.region.values``) and what
was expected. ``Domain`` is the same thing as typed objects, for applications that
build it in code. A domain with no entities works: focus then comes from tool rules.

Files are parsed strictly: bytes that are not UTF-8, nesting deeper than a domain
needs, non-finite numbers, a key given twice in one object and a tool given two rules
are errors, never a last-wins guess. ``$comment`` may annotate any object and
``$schema`` the root (the loader ignores both); ``domain_schema()`` is the JSON Schema
editors use (package data, kept in step with this loader by the tests). Bare names
(``load_domain("crm")``) load the examples in ``convmem.examples``.

The optional ``types`` (spec §10) declares, per entity type, the pronouns and nouns that
can refer to an entity of that type; it switches on typed references and the ``salient``
slot. A domain without it behaves exactly as one written before the key existed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
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
    """Read and validate a §7 domain file, or a bundled example by name.

    A bare name (no path separator, no ``.json``) such as ``"crm"`` loads the example
    of that name shipped in ``convmem.examples``; anything else is a file path, so
    ``"./crm"`` reads a file called ``crm``. Every problem is a ``ConfigError`` naming
    the file and the JSON path (``$.tools[2].name``).
    """
    from convmem import examples

    if isinstance(path, str) and examples.is_name(path):
        return parse_domain_bytes(examples.read_bytes(path), examples.source(path))
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        hint = ""
        if isinstance(path, str) and examples.looks_like_name(path):
            hint = f"; bundled examples: {', '.join(examples.names())}"
        raise ConfigError(f"{p}: cannot read domain file ({exc.strerror}){hint}") from exc
    return parse_domain_bytes(raw, str(p))


def domain_schema() -> str:
    """The domain file's JSON Schema (draft 2020-12) as text; ``convmem init`` writes a copy."""
    return resources.files("convmem").joinpath("data/domain.schema.json").read_text("utf-8")


#: Deeper than any valid domain (root → filters → values → aliases is four levels);
#: checked before parsing so hostile nesting is an error, not a ``RecursionError``.
MAX_DEPTH = 32


def parse_domain_bytes(raw: bytes, source: str) -> Domain:
    """Decode, parse and validate the bytes of a domain file; ``source`` names it in errors."""
    try:
        text = raw.decode("utf-8-sig")  # a BOM (Windows editors) is not an error
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{source}: not UTF-8 text: byte {exc.start} (line {line}) is "
            f"0x{raw[exc.start]:02x}; save the file as UTF-8"
        ) from exc
    _check_depth(text, source)
    try:
        data = json.loads(text, object_pairs_hook=_JSONObject.from_pairs,
                          parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    except _NonFinite as exc:
        raise ConfigError(f"{source}: {exc.args[0]} is not a JSON number (numbers are finite)") from exc
    except RecursionError as exc:  # pragma: no cover - _check_depth stops this first
        raise ConfigError(f"{source}: nested too deeply to parse") from exc
    return _parse(data, source)


def _check_depth(text: str, source: str) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` before ``json`` recurses into it."""
    depth = 0
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, i) + 1
                column = i - (text.rfind("\n", 0, i) + 1) + 1
                raise ConfigError(
                    f"{source}: nested more than {MAX_DEPTH} levels deep at line {line} "
                    f"column {column}; a domain file needs four"
                )
        elif ch in "]}":
            depth -= 1


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


class _JSONObject(dict[str, Any]):
    """A parsed JSON object that remembers keys given twice (``json`` keeps the last)."""

    duplicates: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> _JSONObject:
        obj = cls(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            dups = []
            for key, _ in pairs:
                if key in seen:
                    dups.append(key)
                seen.add(key)
            obj.duplicates = tuple(dups)
        return obj


# --------------------------------------------------------------------------- validation

#: Annotations a domain file may carry: ``$comment`` in any object (a string or a list
#: of strings; JSON has no comments and JSON Schema names this keyword) and ``$schema``
#: at the root (where editors find ``domain.schema.json``). The loader ignores both.
COMMENT_KEY = "$comment"
SCHEMA_KEY = "$schema"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def member(path: str, key: str) -> str:
    """JSON path of ``key`` in the object at ``path``: ``$.filters.region``, ``$.attrs["a b"]``."""
    return f"{path}.{key}" if _IDENTIFIER.match(key) else f"{path}[{json.dumps(key)}]"


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, expected: str, got: Any) -> ConfigError:
        shown = json.dumps(got)[:60] if not isinstance(got, _Missing) else "nothing"
        return ConfigError(f"{self.source}: {path}: expected {expected}, got {shown}")

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        """An object, with duplicate keys refused and ``$comment`` dropped."""
        if not isinstance(value, dict):
            raise self.fail(path, "an object", value)
        for key in getattr(value, "duplicates", ()):
            raise ConfigError(
                f"{self.source}: {member(path, key)}: duplicate key (JSON keeps only the last "
                "silently; give each key once)"
            )
        if COMMENT_KEY not in value:
            return value
        comment = value[COMMENT_KEY]
        if not isinstance(comment, str) and not (
            isinstance(comment, list) and all(isinstance(c, str) for c in comment)
        ):
            raise self.fail(member(path, COMMENT_KEY), "a string or an array of strings", comment)
        return {k: v for k, v in value.items() if k != COMMENT_KEY}

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
                    f"{self.source}: {member(path, key)}: unknown key; "
                    f"expected one of {sorted(allowed)}"
                )


class _Missing:
    pass


_MISSING = _Missing()


def _parse(data: Any, source: str) -> Domain:
    c = _Checker(source)
    root = c.obj(data, "$")
    c.keys(root, "$", {SCHEMA_KEY, "name", "entities", "filters", "clear_phrases", "formats", "tools", "types"})
    if SCHEMA_KEY in root:
        c.string(root[SCHEMA_KEY], member("$", SCHEMA_KEY))
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
                raise c.fail(member(f"{path}.attrs", k), "a string or number", v)
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
        path = member("$.filters", key)
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
                str(v): c.strings(aliases, member(f"{path}.values", v))
                for v, aliases in values.items()
            })
        else:
            raise c.fail(f"{path}.kind", '"period" or "vocab"', kind)

    clears: dict[str, tuple[str, ...]] = {}
    for key, raw in c.obj(root.get("clear_phrases", {}), "$.clear_phrases").items():
        path = member("$.clear_phrases", key)
        if key not in filters:
            raise ConfigError(
                f"{source}: {path}: no filter named {key!r}; expected one of {sorted(filters)}"
            )
        clears[key] = c.strings(raw, path)

    formats: dict[Format, tuple[str, ...]] = dict(DEFAULT_FORMAT_CUES)
    if "formats" in root:
        formats = {}
        for key, raw in c.obj(root["formats"], "$.formats").items():
            path = member("$.formats", key)
            if key not in FORMATS:
                raise ConfigError(f"{source}: {path}: unknown format; expected one of {list(FORMATS)}")
            formats[key] = c.strings(raw, path)

    tools: dict[str, ToolRule] = {}
    tool_paths: dict[str, str] = {}
    for i, raw in enumerate(c.arr(root.get("tools", []), "$.tools")):
        path = f"$.tools[{i}]"
        t = c.obj(raw, path)
        c.keys(t, path, {"name", "focus", "filters"})
        tname = c.string(t.get("name", _MISSING), f"{path}.name")
        if tname in tool_paths:
            raise ConfigError(
                f"{source}: {path}.name: duplicate tool {tname!r} (first at {tool_paths[tname]}); "
                "give each tool one rule"
            )
        tool_paths[tname] = path
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
            fpath = member(f"{path}.filters", fkey)
            if fkey not in filters:
                raise ConfigError(
                    f"{source}: {fpath}: no filter named {fkey!r}; expected one of {sorted(filters)}"
                )
            tfilters[fkey] = c.string(arg, fpath)
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
        path = member("$.types", tname)
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
