"""LlamaIndex ``ToolOutput`` → ``convmem.ToolResult`` (the contract: ``docs/tool-results.md``).

This module only takes the result out of the ``ToolOutput``; what it means (envelope,
bare record, list, an ``ok`` that is not ``true``) is read once, by
``ToolResult.parse`` in the core:

1. ``is_error`` — a failure (the agent sets it when the tool raised); nothing else
   is read.
2. ``raw_output`` — what the tool function returned — when it is a record, a list,
   JSON text, a pydantic model or a dataclass.
3. otherwise ``content`` (the text the model reads), as JSON text or plain text.

The record keeps ``content``, the text LlamaIndex made of the output.
"""

from __future__ import annotations

from llama_index.core.tools import ToolOutput

from convmem.tools import ToolResult, as_plain


def tool_result(output: ToolOutput) -> ToolResult:
    """The ``ToolResult`` a ``ToolOutput`` carries (see the module docstring)."""
    text = output.content
    if output.is_error:
        return ToolResult(False, None, text)
    raw = output.raw_output
    if isinstance(raw, str):
        return ToolResult.parse(raw, text=text)
    plain = as_plain(raw)
    return ToolResult.parse(text if plain is None else plain, text=text)
