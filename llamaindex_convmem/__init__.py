"""LlamaIndex adapters for convmem: memory, memory block, engine wrapper, tools, resolver,
and the two chat stores over the durable record (``view="record"``: the history, replayed;
``view="session"``: the session block and the current turn, so that changing only the
chat store stops the replay), ``recall_tool`` (the model looks up what was said earlier)
and ``tool_result`` (a ``ToolOutput`` read under the
tool-result contract).

Each name is imported on first use (PEP 562): the memory, block, engine and tools do
not load the SQL stack (only the chat stores do), and ``import llamaindex_convmem``
loads no LlamaIndex module at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem._lazy import lazy_names

if TYPE_CHECKING:
    from llamaindex_convmem.block import SESSION_BLOCK_TEMPLATE, SessionStateBlock
    from llamaindex_convmem.chat_store import ConvMemChatStore, ConvMemDBChatStore
    from llamaindex_convmem.engine import ConvMemChatEngine
    from llamaindex_convmem.memory import ConvMemMemory
    from llamaindex_convmem.recall import recall_tool
    from llamaindex_convmem.resolver import LLMResolver
    from llamaindex_convmem.tool_results import tool_result
    from llamaindex_convmem.tools import ConvMemTool, wrap_tools

#: The public names each submodule defines.
_HOMES = {
    ".block": ("SESSION_BLOCK_TEMPLATE", "SessionStateBlock"),
    ".chat_store": ("ConvMemChatStore", "ConvMemDBChatStore"),
    ".engine": ("ConvMemChatEngine",),
    ".memory": ("ConvMemMemory",),
    ".recall": ("recall_tool",),
    ".resolver": ("LLMResolver",),
    ".tool_results": ("tool_result",),
    ".tools": ("ConvMemTool", "wrap_tools"),
}

__all__ = [
    "SESSION_BLOCK_TEMPLATE",
    "ConvMemChatEngine",
    "ConvMemChatStore",
    "ConvMemDBChatStore",
    "ConvMemMemory",
    "ConvMemTool",
    "LLMResolver",
    "SessionStateBlock",
    "recall_tool",
    "tool_result",
    "wrap_tools",
]


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
