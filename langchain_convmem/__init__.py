"""LangChain adapters for convmem: the agent middleware (the main surface) and a Runnable
wrapper for chains that used ``RunnableWithMessageHistory``."""

from langchain_convmem.middleware import SessionMemoryMiddleware
from langchain_convmem.resolver import LLMResolver
from langchain_convmem.runnable import RunnableWithSessionMemory

__all__ = ["LLMResolver", "RunnableWithSessionMemory", "SessionMemoryMiddleware"]
