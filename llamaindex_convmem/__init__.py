"""LlamaIndex adapters for convmem: memory, memory block, engine wrapper, tools, resolver."""

from llamaindex_convmem.block import SESSION_BLOCK_TEMPLATE, SessionStateBlock
from llamaindex_convmem.engine import ConvMemChatEngine
from llamaindex_convmem.memory import ConvMemMemory
from llamaindex_convmem.resolver import LLMResolver
from llamaindex_convmem.tools import ConvMemTool, wrap_tools

__all__ = [
    "SESSION_BLOCK_TEMPLATE",
    "ConvMemChatEngine",
    "ConvMemMemory",
    "ConvMemTool",
    "LLMResolver",
    "SessionStateBlock",
    "wrap_tools",
]
