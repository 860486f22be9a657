"""Translation shared by the middleware and the Runnable wrapper.

Three things both adapters need and neither should own twice: where the thread and
the tenant come from in a LangChain ``RunnableConfig`` (and the ``ConfigError`` when
the thread id is missing), one ``SessionMemory`` per tenant derived from the one the
application gave us (a shallow copy that shares the store, domain, resolver and
policy config, so a per-call ``tenant_id`` never crosses tenants), reading a user
question or an answer out of LangChain messages, and translating what a chat model
is about to receive into the core's ``ModelCall`` for the record. No session policy
lives here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from convmem.errors import ConfigError
from convmem.session import MAX_QUESTION_CHARS, SessionMemory

M = TypeVar("M", bound=BaseMessage)


class TenantMemories:
    """``SessionMemory`` per tenant, all derived from one and sharing its store."""

    def __init__(self, memory: SessionMemory) -> None:
        if not isinstance(memory, SessionMemory):
            raise ConfigError(
                f"expected a convmem.SessionMemory, got {type(memory).__name__}"
            )
        self.base = memory
        self._by_tenant: dict[str, SessionMemory] = {memory.tenant: memory}

    def get(self, tenant: str) -> SessionMemory:
        """The memory for ``tenant``; derived once, then reused."""
        found = self._by_tenant.get(tenant)
        if found is not None:
            return found
        derived = copy.copy(self.base)
        derived.tenant = tenant
        # setdefault is atomic under the GIL: two racing callers share one instance.
        return self._by_tenant.setdefault(tenant, derived)


def scope(
    memories: TenantMemories, config: Mapping[str, Any] | None, id_key: str, who: str
) -> tuple[SessionMemory, str]:
    """The tenant's memory and the thread id named by ``configurable[id_key]``.

    The tenant comes from ``configurable["tenant_id"]``; without it, the tenant of the
    memory the application passed in (``"default"`` unless it set one).
    """
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get(id_key)
    if thread is None or (isinstance(thread, str) and not thread.strip()):
        raise ConfigError(
            f'{who} needs config["configurable"]["{id_key}"]: pass '
            f'config={{"configurable": {{"{id_key}": "<id>"}}}} to invoke/stream'
        )
    tenant = configurable.get("tenant_id", memories.base.tenant)
    if not isinstance(tenant, str) or not tenant:
        raise ConfigError(
            f'{who}: config["configurable"]["tenant_id"] must be a non-empty string, '
            f"got {tenant!r}"
        )
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
    return tuple(
        plain(t) if isinstance(t, Mapping) else plain(convert_to_openai_tool(t)) for t in tools
    )


def model_name(model: Any) -> str | None:
    """The model's name as its provider spells it, else its class name."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__ if model is not None else None
