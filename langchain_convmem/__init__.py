"""LangChain adapters for convmem: the agent middleware (the main surface), a Runnable
wrapper for chains that used ``RunnableWithMessageHistory``, and a chat-message history
backed by the durable transcript; ``tool_result`` reads a ``ToolMessage`` under the
tool-result contract, and ``langchain_convmem.testing`` has a scripted chat model."""

from langchain_convmem.history import ConvMemChatMessageHistory
from langchain_convmem.middleware import SessionMemoryMiddleware
from langchain_convmem.resolver import LLMResolver
from langchain_convmem.runnable import RunnableWithSessionMemory
from langchain_convmem.tool_results import tool_result

__all__ = [
    "ConvMemChatMessageHistory",
    "LLMResolver",
    "RunnableWithSessionMemory",
    "SessionMemoryMiddleware",
    "tool_result",
]
