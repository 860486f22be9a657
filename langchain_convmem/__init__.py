"""LangChain adapters for convmem: the agent middleware (the main surface), a Runnable
wrapper for chains that used ``RunnableWithMessageHistory``, and a chat-message history
backed by the durable transcript."""

from langchain_convmem.history import ConvMemChatMessageHistory
from langchain_convmem.middleware import SessionMemoryMiddleware
from langchain_convmem.resolver import LLMResolver
from langchain_convmem.runnable import RunnableWithSessionMemory

__all__ = [
    "ConvMemChatMessageHistory",
    "LLMResolver",
    "RunnableWithSessionMemory",
    "SessionMemoryMiddleware",
]
