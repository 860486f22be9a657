"""``recall_tool``: the model looks up what was said earlier in its thread.

The model gets the session block and the current question, never an old answer; when
the user refers to one ("what was the total you gave me?") it calls
``recall_conversation(query)``, answered by ``SessionMemory.recall`` from the record
(``convmem.session.recall``) for the one thread the tool was made for. The answer is
short text: one line per hit (role, turn, snippet), or a "no match" line.
``ConvMemMemory(..., recall=True)`` names the tool in its block and hands it out
(``ConvMemMemory.recall_tool()``).
"""

from __future__ import annotations

from llama_index.core.tools import FunctionTool

from convmem.errors import ConfigError
from convmem.identity import check_thread_id
from convmem.session import SessionMemory
from convmem.session.recall import RECALL_DESCRIPTION, RECALL_TOOL, recall_text


def recall_tool(memory: SessionMemory, *, thread_id: str) -> FunctionTool:
    """The ``recall_conversation`` tool over ``memory``'s record for ``thread_id``
    (sync and async). ``memory`` needs a transcript: a call without one fails with
    ``ConfigError``."""
    if not isinstance(memory, SessionMemory):
        raise ConfigError(
            f"recall_tool: memory must be a convmem.SessionMemory, got {type(memory).__name__}"
        )
    check_thread_id(thread_id)

    def recall_conversation(query: str) -> str:
        return recall_text(memory.recall(thread_id, query))

    async def arecall_conversation(query: str) -> str:
        return recall_text(await memory.arecall(thread_id, query))

    return FunctionTool.from_defaults(
        fn=recall_conversation,
        async_fn=arecall_conversation,
        name=RECALL_TOOL,
        description=RECALL_DESCRIPTION,
    )
