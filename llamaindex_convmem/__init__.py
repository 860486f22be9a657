"""LlamaIndex adapters for convmem: memory, memory block, engine wrapper, tools, resolver."""

from llamaindex_convmem.engine import ConvMemChatEngine
from llamaindex_convmem.memory import ConvMemMemory

__all__ = ["ConvMemChatEngine", "ConvMemMemory"]
