"""``recall_tool``: the model looks up what was said earlier in its thread.

The prompt holds the session block and the current turn, never an old answer; when
the user refers to one ("what was the total you gave me?") the model calls
``recall_conversation(query)``, answered by ``SessionMemory.recall`` from the record
(``convmem.session.recall``). The thread and the tenant come from the run's
``config["configurable"]`` (``thread_id``, ``tenant_id``) exactly as the middleware
takes them, so a tool call never reads another thread or tenant. The answer is short
text: one line per hit (role, turn, snippet), or a "no match" line.
``SessionMemoryMiddleware(memory, recall=True)`` offers it to the model by itself.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool

from convmem.session import SessionMemory
from convmem.session.recall import RECALL_DESCRIPTION, RECALL_TOOL, recall_text
from langchain_convmem._common import TenantMemories, scope


def recall_tool(memory: SessionMemory) -> BaseTool:
    """The ``recall_conversation`` tool over ``memory``'s record (sync and async).

    ``memory`` needs a transcript: a call without one fails with ``ConfigError``.
    """
    memories = TenantMemories(memory)

    def recall_conversation(query: str, config: RunnableConfig) -> str:
        found, thread = scope(memories, config, "thread_id", RECALL_TOOL)
        return recall_text(found.recall(thread, query))

    async def arecall_conversation(query: str, config: RunnableConfig) -> str:
        found, thread = scope(memories, config, "thread_id", RECALL_TOOL)
        return recall_text(await found.arecall(thread, query))

    return StructuredTool.from_function(
        func=recall_conversation,
        coroutine=arecall_conversation,
        name=RECALL_TOOL,
        description=RECALL_DESCRIPTION,
    )
