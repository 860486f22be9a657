"""LangChain adapters for convmem: the agent middleware (the main surface) and a Runnable
wrapper for chains that used ``RunnableWithMessageHistory``."""

from langchain_convmem.middleware import SessionMemoryMiddleware

__all__ = ["SessionMemoryMiddleware"]
