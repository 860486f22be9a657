"""What the session view keeps per key, and how it reads the messages LlamaIndex stores.

``llamaindex_convmem.session_store`` drives turns (its module docstring says how); this
module holds what it drives them with: the open turn as this process has seen it
(``OpenTurn``), the view a read serves (``SessionView``, ``Served``), and the readers
of a ``ChatMessage`` the view needs — the tool result a tool message carries for the
domain's tool rules, the tool calls of an assistant step, the question the state is
asked. Nothing here does I/O.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.storage.chat_store.base_db import MessageStatus

from convmem.errors import ConfigError
from convmem.identity import clean_text
from convmem.session import MAX_QUESTION_CHARS, Clarification, TurnContext
from convmem.state import SessionState
from convmem.tools import ToolResult
from convmem.transcript import Message, NewMessage, TurnRecord
from llamaindex_convmem.memory import has_tool_calls, message_text

ACTIVE, ARCHIVED = MessageStatus.ACTIVE, MessageStatus.ARCHIVED
#: Tool output longer than this is not parsed for the tool rules (it still is recorded).
MAX_TOOL_TEXT = 1_000_000


def tool_result(message: ChatMessage) -> ToolResult:
    """A stored tool message as the result the domain's tool rules read.

    The one path from a tool *message* to ``record_tool``: agents store a tool's output
    as text only (``FunctionAgent``: the ``ToolOutput``'s blocks; ``raw_output`` never
    reaches a chat store). The text is JSON, or — ``FunctionTool`` stores ``str()`` of
    what the function returned — a Python literal (``ast.literal_eval``: literals only,
    nothing is executed); an object or a list is read under the tool-result contract
    (``ToolResult.parse``: the envelope, ``ok: false`` a failure), anything else
    carries no data.
    """
    text = message_text(message).strip()
    if not text or text[0] not in "[{" or len(text) > MAX_TOOL_TEXT:
        return ToolResult(True, None)
    try:
        value: Any = json.loads(text)
    except RecursionError:  # nested deeper than any record: no data
        return ToolResult(True, None)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return ToolResult(True, None)
    if not isinstance(value, (dict, list)):
        return ToolResult(True, None)
    return ToolResult.parse(value)  # the contract (docs/tool-results.md): ok: false fails


def tool_calls(message: ChatMessage) -> dict[str, tuple[str, dict[str, Any]]]:
    """``call id -> (tool name, arguments)`` of an assistant step (blocks or the
    OpenAI-style ``additional_kwargs["tool_calls"]``)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for block in message.blocks:
        if isinstance(block, ToolCallBlock) and block.tool_call_id:
            found[block.tool_call_id] = (block.tool_name, _arguments(block.tool_kwargs))
    for call in message.additional_kwargs.get("tool_calls") or ():
        call_id, function = _get(call, "id"), _get(call, "function")
        name = _get(function, "name")
        if isinstance(call_id, str) and isinstance(name, str):
            found[call_id] = (name, _arguments(_get(function, "arguments")))
    return found


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {}
        return dict(parsed) if isinstance(parsed, dict) else {}
    return {}


def with_text(message: ChatMessage, text: str) -> ChatMessage:
    """A copy of ``message`` saying ``text`` (its other blocks, e.g. images, kept)."""
    if message_text(message) == text:
        return message.model_copy(deep=True)
    blocks: list[Any] = []
    for block in message.blocks:
        if not isinstance(block, TextBlock):
            blocks.append(block.model_copy(deep=True))
        elif not any(isinstance(b, TextBlock) for b in blocks):
            blocks.append(TextBlock(text=text))
    if not any(isinstance(b, TextBlock) for b in blocks):
        blocks.insert(0, TextBlock(text=text))
    return message.model_copy(update={"blocks": blocks}, deep=True)


def state_question(text: str) -> str:
    """What the state is asked: the text, NUL-free, cut to what the façade accepts (the
    model and the record still get the whole message)."""
    return clean_text(text)[:MAX_QUESTION_CHARS]


def unmarked(message: Message) -> Message:
    """A record without our ``extra["convmem"]`` note (compared with what a caller hands in)."""
    if "convmem" not in message.extra:
        return message
    return replace(message, extra={k: v for k, v in message.extra.items() if k != "convmem"})


@dataclass(frozen=True)
class Served:
    """A view served while no turn was open: the block and the state it came from."""

    block: str
    state: SessionState | None


@dataclass
class OpenTurn:
    """The open turn of one key, as this process has seen it (see the module docstring)."""

    message: ChatMessage  # the user's message as recorded
    new: NewMessage  # its record form (checked when it was added)
    question: str  # what the state is asked
    message_id: str
    stored: bool  # the framework has added it, so the view shows it
    stale: Served | None  # the view served just before it was added
    started: Clarification | TurnContext
    aliases: set[str] = field(default_factory=set)
    record: TurnRecord | None = None  # commit point 1, once written
    input_done: bool = False  # commit point 1 written (or skipped under "degrade")
    steps: list[tuple[ChatMessage, NewMessage]] = field(default_factory=list)
    calls: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    read_back: bool = False  # the next read is Memory's own check after a write
    archived: int = 0  # leading view items (question, steps) Memory archived this turn
    dropped: int = 0  # leading archived items deleted (delete_messages(status=ARCHIVED))

    @property
    def text(self) -> str:
        return message_text(self.message)


@dataclass(frozen=True)
class SessionView:
    """What a read shows: the system message (block or clarification) and the turn's items."""

    system: ChatMessage | None
    items: list[ChatMessage]
    archived: int = 0
    dropped: int = 0

    def select(self, status: MessageStatus | None) -> list[ChatMessage]:
        if status == ARCHIVED:
            return self.items[self.dropped : self.archived]
        head = [self.system] if self.system is not None else []
        if status == ACTIVE:
            return head + self.items[self.archived :]
        return head + self.items[self.dropped :]


def refuse_edit(what: str) -> ConfigError:
    return ConfigError(
        f"chat store (view='session'): {what} edits a history, and the session view shows "
        "the session state instead of one; use the record view on the same transcript "
        "(ConvMemChatStore(memory.transcript, tenant=memory.tenant)) to edit the record"
    )


def engine_question(started: Clarification | TurnContext, text: str) -> str:
    """What the engine is asked: the state's rewrite when it made one, else the text."""
    if isinstance(started, TurnContext) and started.rewritten:
        return started.rewritten
    return text


def trailing_turn(messages: Sequence[ChatMessage]) -> int:
    """Where an unanswered last question (and its steps) starts; ``len`` when none."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == MessageRole.ASSISTANT and not has_tool_calls(m):
            return len(messages)
        if m.role == MessageRole.USER:
            return i
    return len(messages)
