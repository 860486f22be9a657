"""``SessionStateBlock``: the session block as a ``Memory`` memory block.

For apps that keep LlamaIndex's ``Memory`` (its windowed history stays as it is), the
block adds the rendered session state. ``Memory`` hands a block's ``_aput`` only the
messages it flushes out of the window (thousands of tokens later), so the state is
updated on the *get* path instead: ``_aget`` receives the active history plus the new
input on every ``get``, and begins the turn for the latest user message there (the
façade is idempotent per question while a turn is open, so repeated gets in one run
change nothing). Priority 0: ``Memory`` never truncates it. ``SESSION_BLOCK_TEMPLATE``
drops the ``<memory><name>`` wrapper (about ten tokens) and inserts the block as is.

The thread is ``thread_id`` when given, else the ``session_id`` ``Memory`` passes to its
blocks. Limit: a question repeated word for word right after itself counts as the same
turn, because ``Memory`` gives blocks no message ids. The latest user message is matched
against the open turn's question and its rewrite, so the block composes with a
session-view chat store on the same thread (which shows the rewrite): one turn, not two.
There it adds nothing the store's own block lacks; other memory blocks compose as usual.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.prompts import RichPromptTemplate

from convmem.errors import ConfigError
from convmem.session import Clarification, SessionMemory
from llamaindex_convmem._component import get_dispatcher, unpicklable
from llamaindex_convmem.memory import CLARIFY_INSTRUCTION, message_text

dispatcher = get_dispatcher(__name__)  # a span per get: see llamaindex_convmem._component

#: ``Memory(memory_blocks_template=...)``: each block's text, without the XML wrapper.
SESSION_BLOCK_TEMPLATE = RichPromptTemplate(
    "{% for (block_name, block_content) in memory_blocks %}"
    "{% for block in block_content %}{% if block.block_type == 'text' %}{{ block.text }}\n"
    "{% endif %}{% endfor %}{% endfor %}"
)


@unpicklable("Build it again: SessionStateBlock(session_memory, ...).")
class SessionStateBlock(BaseMemoryBlock[str]):
    """The convmem session block inside a LlamaIndex ``Memory``."""

    name: str = "session_state"
    description: str | None = "convmem session state: focus, filters, format, recent questions"
    priority: int = 0
    accept_short_term_memory: bool = False
    thread_id: str | None = None

    _facade: SessionMemory = PrivateAttr()

    def __init__(self, memory: SessionMemory, **data: Any) -> None:
        if not isinstance(memory, SessionMemory):
            raise ConfigError(
                "SessionStateBlock: memory must be a convmem.SessionMemory, "
                f"got {type(memory).__name__}"
            )
        super().__init__(**data)
        self._facade = memory

    def _thread(self, block_kwargs: dict[str, Any]) -> str:
        thread = self.thread_id or block_kwargs.get("session_id")
        if not isinstance(thread, str) or not thread:
            raise ConfigError("SessionStateBlock: pass thread_id= or use it inside a Memory")
        return thread

    @dispatcher.span
    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """Begin the turn for the latest user message; return the block (or the question)."""
        thread = self._thread(block_kwargs)
        question = next(
            (message_text(m) for m in reversed(messages or []) if m.role == MessageRole.USER), ""
        )
        if not question.strip():
            return await self._facade.ablock(thread)
        state = await self._facade.aget_state(thread)
        ot = state.open_turn if state is not None else None
        if ot is not None and question in (ot.question, ot.rewritten):
            # the open turn's question, maybe as a session-view store shows it (rewritten)
            started = await self._facade.abegin_turn(thread, ot.question, message_id=ot.message_id)
        else:
            started = await self._facade.abegin_turn(thread, question)
        if isinstance(started, Clarification):
            return CLARIFY_INSTRUCTION + started.text
        return started.block

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Flushed history carries nothing the state needs (answers never enter it)."""
        return None
