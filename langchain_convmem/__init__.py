"""LangChain adapters for convmem: the agent middleware (the main surface), a Runnable
wrapper for chains that used ``RunnableWithMessageHistory``, and a chat-message history
backed by the durable transcript; ``recall_tool`` lets the model look up what was said
earlier (the middleware offers it with ``recall=True``); ``tool_result`` reads a ``ToolMessage`` under the
tool-result contract, and ``langchain_convmem.testing`` has a scripted chat model.

Each name is imported on first use (PEP 562): the middleware does not load the SQL
stack, the history does not load langgraph, and ``import langchain_convmem`` loads
neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem._lazy import lazy_names

if TYPE_CHECKING:
    from langchain_convmem.history import ConvMemChatMessageHistory
    from langchain_convmem.middleware import SessionMemoryMiddleware
    from langchain_convmem.recall import recall_tool
    from langchain_convmem.resolver import LLMResolver
    from langchain_convmem.runnable import RunnableWithSessionMemory
    from langchain_convmem.tool_results import tool_result
    from langchain_convmem.tracing import inline_untraced_spans

#: The public names each submodule defines.
_HOMES = {
    ".history": ("ConvMemChatMessageHistory",),
    ".middleware": ("SessionMemoryMiddleware",),
    ".recall": ("recall_tool",),
    ".resolver": ("LLMResolver",),
    ".runnable": ("RunnableWithSessionMemory",),
    ".tool_results": ("tool_result",),
    ".tracing": ("inline_untraced_spans",),
}

__all__ = [
    "ConvMemChatMessageHistory",
    "LLMResolver",
    "RunnableWithSessionMemory",
    "SessionMemoryMiddleware",
    "inline_untraced_spans",
    "recall_tool",
    "tool_result",
]


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
