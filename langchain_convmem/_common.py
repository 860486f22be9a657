"""Translation shared by the middleware and the Runnable wrapper.

Three things both adapters need and neither should own twice: where the thread and
the tenant come from in a LangChain ``RunnableConfig`` (and the ``ConfigError`` when
the thread id is missing), the tenant's view of the ``SessionMemory`` the application
gave us (``SessionMemory.for_tenant``: the same store, domain, resolver and policy, so
a per-call ``tenant_id`` never crosses tenants; ``docs/tenancy.md``), reading a user
question or an answer out of LangChain messages, and translating what a chat model
is about to receive into the core's ``ModelCall`` for the record. No session policy
lives here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from convmem.errors import ConfigError
from convmem.identity import check_tenant
from convmem.session import MAX_QUESTION_CHARS, SessionMemory

M = TypeVar("M", bound=BaseMessage)


class TenantMemories:
    """The application's ``SessionMemory`` and its per-tenant views (``for_tenant``)."""

    def __init__(self, memory: SessionMemory) -> None:
        if not isinstance(memory, SessionMemory):
            raise ConfigError(
                f"expected a convmem.SessionMemory, got {type(memory).__name__}"
            )
        self.base = memory

    def get(self, tenant: str) -> SessionMemory:
        """The memory for ``tenant`` (``SessionMemory.for_tenant``: one view, reused)."""
        return self.base.for_tenant(tenant)


def scope(
    memories: TenantMemories, config: Mapping[str, Any] | None, id_key: str, who: str
) -> tuple[SessionMemory, str]:
    """The tenant's memory and the thread id named by ``configurable[id_key]``.

    The tenant comes from ``configurable["tenant_id"]``; without it, the tenant of the
    memory the application passed in (``"default"`` unless it set one). What a call
    with ``tenant_id`` wrote is read through ``memory.for_tenant(tenant_id)``
    (``docs/tenancy.md``).
    """
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get(id_key)
    if thread is None or (isinstance(thread, str) and not thread.strip()):
        raise ConfigError(
            f'{who} needs config["configurable"]["{id_key}"]: pass '
            f'config={{"configurable": {{"{id_key}": "<id>"}}}} to invoke/stream'
        )
    tenant = configurable.get("tenant_id", memories.base.tenant)
    check_tenant(tenant, f'{who}: config["configurable"]["tenant_id"]')
    return memories.get(tenant), str(thread)


def question_text(message: BaseMessage) -> str:
    """The text of a user message, cut to what the façade accepts.

    A longer paste is still one turn: the first ``MAX_QUESTION_CHARS`` characters
    are what the resolver reads (the model still gets the whole message).
    """
    return message.text[:MAX_QUESTION_CHARS]


def last_human_index(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the last ``HumanMessage``: where the current turn starts."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i
    return None


def with_text(message: M, text: str) -> M:
    """The same message (id, name, metadata kept) carrying ``text``."""
    return message.model_copy(update={"content": text})


def with_block(system: SystemMessage | None, block: str) -> SystemMessage | None:
    """The system message with the session block appended; unchanged when empty."""
    if not block:
        return system
    if system is None:
        return SystemMessage(content=block)
    content = system.content
    if isinstance(content, str):
        return system.model_copy(update={"content": f"{content}\n\n{block}" if content else block})
    return system.model_copy(update={"content": [*content, {"type": "text", "text": block}]})


def answer_text(messages: Sequence[BaseMessage], start: int) -> str | None:
    """The final AI answer of the turn that starts at ``start``, if it gave one."""
    for message in reversed(messages[start:]):
        if isinstance(message, AIMessage):
            return message.text or None
    return None


def full_text(message: BaseMessage) -> str | None:
    """The whole user message for the record when ``question_text`` cut it."""
    text = message.text
    return text if len(text) > MAX_QUESTION_CHARS else None


def plain(value: Any) -> Any:
    """``value`` as plain JSON (what the record keeps); odd objects become strings."""
    return json.loads(json.dumps(value, default=str))


def tool_schemas(tools: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """Tools as OpenAI-style function schemas (dict tools are taken as they are)."""
    return tuple(plain(t) if isinstance(t, Mapping) else _tool_schema(t) for t in tools)


#: id(tool) -> (the tool, what its schema was made from, the schema as JSON text). A
#: model call converts the same tool objects on every call of every turn; converting
#: one is ~0.1 ms (pydantic's JSON schema), a cache hit a tuple compare and a
#: ``json.loads`` (a fresh copy each time). Held strongly, so an id is never reused
#: while cached; bounded, so tools made per call cost one conversion each, as before.
_SCHEMAS: dict[int, tuple[Any, tuple[Any, ...], str]] = {}
_SCHEMAS_KEPT = 256


def _tool_schema(tool: Any) -> dict[str, Any]:
    made_from = _schema_inputs(tool)
    hit = _SCHEMAS.get(id(tool)) if made_from is not None else None
    if hit is not None and hit[0] is tool and hit[1] == made_from:
        text = hit[2]
    else:
        text = json.dumps(convert_to_openai_tool(tool), default=str)
        if made_from is not None:
            if len(_SCHEMAS) >= _SCHEMAS_KEPT:
                _SCHEMAS.pop(next(iter(_SCHEMAS)), None)
            _SCHEMAS[id(tool)] = (tool, made_from, text)
    schema: dict[str, Any] = json.loads(text)
    return schema


def _schema_inputs(tool: Any) -> tuple[Any, ...] | None:
    """What ``convert_to_openai_tool`` reads from a ``BaseTool`` whose arguments are a
    class: its type, name, description and argument class; ``None`` (convert every
    time) for anything else, or a tool with metadata (a dict that may change)."""
    if not isinstance(tool, BaseTool) or tool.metadata:
        return None
    args = tool.args_schema
    if args is not None and not isinstance(args, type):
        return None
    return (type(tool), tool.name, tool.description, args)


def model_name(model: Any) -> str | None:
    """The model's name as its provider spells it, else its class name."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__ if model is not None else None
