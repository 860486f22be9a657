"""LlamaIndex adapters for convmem: memory, memory block, engine wrapper, tools, resolver,
and the two chat stores over the durable record (``view="record"``: the history, replayed;
``view="session"``: the session block and the current turn, so that changing only the
chat store stops the replay), and ``tool_result`` (a ``ToolOutput`` read under the
tool-result contract)."""

from llamaindex_convmem.block import SESSION_BLOCK_TEMPLATE, SessionStateBlock
from llamaindex_convmem.chat_store import ConvMemChatStore, ConvMemDBChatStore
from llamaindex_convmem.engine import ConvMemChatEngine
from llamaindex_convmem.memory import ConvMemMemory
from llamaindex_convmem.resolver import LLMResolver
from llamaindex_convmem.tool_results import tool_result
from llamaindex_convmem.tools import ConvMemTool, wrap_tools

__all__ = [
    "SESSION_BLOCK_TEMPLATE",
    "ConvMemChatEngine",
    "ConvMemChatStore",
    "ConvMemDBChatStore",
    "ConvMemMemory",
    "ConvMemTool",
    "LLMResolver",
    "SessionStateBlock",
    "tool_result",
    "wrap_tools",
]
