"""Tool results in one shape, whatever produced them.

``ToolResult.from_any`` accepts the fixture form ``{"ok": ..., "data": ...}``, a
LangChain ``ToolMessage`` (error when ``status == "error"``; data = ``artifact`` when
set, else the content parsed as JSON when it is an object or a list) and a LlamaIndex
``ToolOutput`` (``is_error``, ``raw_output``) — recognised by their attributes, so
the core imports neither framework.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolResult:
    """Whether a tool call succeeded and the structured data it returned."""

    ok: bool
    data: Any = None

    @classmethod
    def from_any(cls, obj: Any) -> ToolResult:
        if isinstance(obj, ToolResult):
            return obj
        if isinstance(obj, Mapping):
            if "ok" in obj:
                return cls(bool(obj["ok"]), obj.get("data"))
            return cls(True, dict(obj))
        if hasattr(obj, "tool_call_id") and hasattr(obj, "content"):  # LangChain ToolMessage
            if getattr(obj, "status", "success") == "error":
                return cls(False, None)
            artifact = getattr(obj, "artifact", None)
            if artifact is not None:
                return cls(True, artifact)
            return cls(True, _json_container(obj.content))
        if hasattr(obj, "raw_output") and hasattr(obj, "tool_name"):  # LlamaIndex ToolOutput
            if getattr(obj, "is_error", False):
                return cls(False, None)
            raw = obj.raw_output
            if isinstance(raw, str):
                raw = _json_container(raw)
            return cls(True, raw)
        if isinstance(obj, list):
            return cls(True, obj)
        if isinstance(obj, str):
            return cls(True, _json_container(obj))
        raise TypeError(
            f"ToolResult.from_any: cannot read a tool result from {type(obj).__name__}; expected "
            "{'ok', 'data'}, a LangChain ToolMessage or a LlamaIndex ToolOutput"
        )


def _json_container(content: Any) -> Any:
    """Content parsed as JSON when it is an object or a list; otherwise no data."""
    if isinstance(content, (dict, list)):
        return content
    if not isinstance(content, str):
        return None
    text = content.strip()
    if not text or text[0] not in "[{":
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, (dict, list)) else None
