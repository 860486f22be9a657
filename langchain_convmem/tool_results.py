"""LangChain tool output → ``convmem.ToolResult`` (the contract: ``docs/tool-results.md``).

What a LangChain tool produces reaches the middleware as a ``ToolMessage`` or as a
LangGraph ``Command`` whose update carries one. This module only takes the result out
of those objects; what it *means* (envelope, bare record, list, ``ok`` that is not
``true``) is read once, by ``ToolResult.parse`` in the core.

A ``ToolMessage`` is read in this order:

1. ``status="error"`` — a failure (LangChain's ``ToolNode`` sets it when the tool
   raised); nothing else is read.
2. ``artifact`` (``response_format="content_and_artifact"``) when it is a record, a
   list, JSON text of one, a pydantic model or a dataclass: the structured half is
   what a program reads; ``content`` is what the model reads. Any other artifact (a
   dataframe, plain text) is left alone and the content is read.
3. ``content``: a string (JSON or not), or content blocks — a ``{"type": "json"}``
   block's value, else the text blocks joined; a list of plain dicts without a
   ``type`` key is a list of records.

The record keeps the content as the tool produced it (a string as is, blocks as
JSON).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage

from convmem.errors import ConfigError
from convmem.tools import ToolResult, as_plain, json_container

if TYPE_CHECKING:
    from langgraph.types import Command


def tool_result(message: ToolMessage) -> ToolResult:
    """The ``ToolResult`` a ``ToolMessage`` carries (see the module docstring)."""
    content = message.content
    text = content if isinstance(content, str) else json.dumps(content, default=str)
    if message.status == "error":
        return ToolResult(False, None, text)
    artifact = message.artifact
    readable = json_container(artifact) if isinstance(artifact, str) else as_plain(artifact)
    if readable is not None:
        return ToolResult.parse(readable, text=text)
    if isinstance(content, str):
        return ToolResult.parse(content)
    return ToolResult.parse(_from_blocks(content, message), text=text)


def output_result(output: Any) -> ToolResult:
    """What a tool run ended with, as LangChain's ``on_tool_end`` callback sees it: a
    ``ToolMessage`` (the tool was called with a tool call), a ``Command``, or the tool's
    own return value. A value the contract cannot read (a number, an object) is a
    success with no data: the tool ran; nothing in it can set the focus."""
    if isinstance(output, ToolMessage):
        return tool_result(output)
    if _is_command(output):
        found = [m for m in _update_messages(output.update) if isinstance(m, ToolMessage)]
        return tool_result(found[0]) if found else ToolResult(True, None, "")
    try:
        return ToolResult.parse(output)
    except ConfigError:
        return ToolResult(True, None, str(output))


def command_results(
    result: ToolMessage | Command[Any], call_id: str | None
) -> list[ToolResult]:
    """The results of one tool call, whether the tool returned a message or a ``Command``.

    A ``Command`` contributes the ``ToolMessage`` in its update that answers
    ``call_id``; a ``Command`` without one carries no result and yields nothing.
    """
    if isinstance(result, ToolMessage):
        return [tool_result(result)]
    return [
        tool_result(m) for m in _update_messages(result.update)
        if isinstance(m, ToolMessage) and m.tool_call_id == call_id
    ]


def _is_command(value: Any) -> bool:
    """A LangGraph ``Command``, without importing LangGraph for code that never has one
    (the history, the Runnable): an instance exists only once its module is loaded."""
    types = sys.modules.get("langgraph.types")
    return types is not None and isinstance(value, types.Command)


def _update_messages(update: Any) -> list[Any]:
    """``messages`` of a ``Command.update``: a mapping, or a list of (key, value) pairs."""
    if isinstance(update, Mapping):
        found = update.get("messages", [])
    elif isinstance(update, Sequence) and not isinstance(update, str):
        found = [v for item in update
                 if isinstance(item, tuple) and len(item) == 2 and item[0] == "messages"
                 for v in (item[1] if isinstance(item[1], list) else [item[1]])]
    else:
        return []
    if isinstance(found, ToolMessage):
        return [found]
    return list(found) if isinstance(found, (list, tuple)) else []


def _from_blocks(blocks: list[Any], message: ToolMessage) -> Any:
    """The value content blocks hold: a JSON block's value, the text blocks joined, or
    (no block has a ``type``) the list itself as records."""
    for block in blocks:
        if isinstance(block, Mapping) and block.get("type") == "json":
            value = block.get("json")
            if isinstance(value, (Mapping, list)):
                return value
    if blocks and all(isinstance(b, Mapping) and "type" not in b for b in blocks):
        return list(blocks)
    return message.text
