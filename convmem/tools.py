"""Tool results: one contract, read in one place (``docs/tool-results.md``).

What a tool returns, as plain values (after a framework adapter has taken it out of
its ``ToolMessage`` or ``ToolOutput``):

- the envelope ``{"ok": <bool>, "data": <record | list of records | anything>}``
  (spec §6) — ``ok: false`` is a failure, whatever else it carries;
- a bare record (a JSON object without an ``"ok"`` key): a success carrying it;
- a list of records: a success carrying several candidates;
- JSON text holding any of these, read the same way; other text is a success
  with no data (focus cannot come from it; filters from the arguments still apply).

``ok`` must be a JSON boolean: ``"false"``, ``0`` or ``null`` would read as true
to ``bool()``, so anything but ``true`` counts as a failure (spec §8: a result
with ``ok: false`` changes nothing; a silent wrong focus is worse than none).
A failed result never sets focus or filters. A tool's own pydantic model or
dataclass counts as a record once an adapter (or the caller) has made it one
(``as_plain``).

Framework objects are not read here: ``langchain_convmem.tool_result`` reads a
``ToolMessage`` (or a ``Command`` update) and ``llamaindex_convmem.tool_result`` a
``ToolOutput``; both hand the core a ``ToolResult`` carrying the tool's own text
(``text``) for the record.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from convmem.errors import ConfigError

log = logging.getLogger("convmem.tools")


@dataclass(frozen=True, slots=True)
class ToolResult:
    """Whether a tool call succeeded, the structured data it returned, and its text.

    ``text`` is the tool's output as the framework produced it (a ``ToolMessage``'s
    content, a ``ToolOutput``'s ``content``); the record keeps it verbatim. ``None``:
    the record gets the result as JSON.
    """

    ok: bool
    data: Any = None
    text: str | None = None

    @classmethod
    def parse(cls, value: Any, *, text: str | None = None) -> ToolResult:
        """Read a plain value under the contract (see the module docstring).

        Raises ``ConfigError`` for anything that is not a plain value: a framework
        object goes through its adapter's ``tool_result`` first.
        """
        if isinstance(value, ToolResult):
            return value if text is None else dataclasses.replace(value, text=text)
        if isinstance(value, str):
            parsed = json_container(value)
            result = cls(True) if parsed is None else cls.parse(parsed)
            return dataclasses.replace(result, text=value if text is None else text)
        plain = list(value) if isinstance(value, (list, tuple)) else value
        if not isinstance(plain, (Mapping, list)):
            raise ConfigError(
                f"a tool result must be a ToolResult, the envelope {{'ok': ..., 'data': ...}}, "
                f"a record (dict), a list of records or JSON text; got {type(value).__name__}. "
                "Framework objects are read by the adapters: langchain_convmem.tool_result("
                "tool_message), llamaindex_convmem.tool_result(tool_output); a model or "
                "dataclass record: pass convmem.tools.as_plain(record)"
            )
        if isinstance(plain, Mapping) and "ok" in plain:
            ok = plain["ok"]
            if not isinstance(ok, bool):
                log.warning("tool result: 'ok' is %r, not a JSON boolean; counted as a failure",
                            ok)
            data = plain.get("data")
            if data is not None and not isinstance(data, (Mapping, list)):
                data = as_plain(data) or data  # a model or dataclass the caller put there
            return cls(ok is True, data, text)
        return cls(True, plain, text)

    def record_text(self) -> str:
        """The text the record keeps: the tool's own, else the result as JSON."""
        if self.text is not None:
            return self.text
        return json.dumps({"ok": self.ok, "data": self.data}, default=str)


def as_plain(value: Any) -> dict[str, Any] | list[Any] | None:
    """A record or a list as plain containers, a pydantic model or a dataclass instance
    as the record it holds; ``None`` for anything else. For the adapters, which know
    that a ``ToolOutput.raw_output`` or an ``artifact`` is the tool's own value (the
    core cannot tell a record object from a framework object, so ``parse`` refuses
    both)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            dumped = dump(mode="json")
        except TypeError:
            return None
        return dumped if isinstance(dumped, dict) else None
    return None


def json_container(text: str) -> dict[str, Any] | list[Any] | None:
    """``text`` parsed as JSON when it holds an object or an array; otherwise ``None``."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        parsed = json.loads(stripped)
    except ValueError:
        return None
    return parsed if isinstance(parsed, (dict, list)) else None
