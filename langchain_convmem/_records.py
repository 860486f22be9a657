"""LangChain messages ↔ transcript records, without loss.

The one place that knows both shapes. A LangChain message becomes a
``NewMessage`` whose typed parts carry what the record models — text, tool calls,
the tool result, binary content as content-addressed attachments — and whose
``extra["langchain"]`` carries everything else, so the message comes back equal:

- ``type``: LangChain's type tag (``human``, ``ai``, ``AIMessageChunk``, ...).
- ``fields``: ``model_dump()`` minus what the parts hold (``content``; an AI
  message's ``tool_calls``; a tool message's ``tool_call_id`` and ``status``) —
  ids, names, ``additional_kwargs``, ``response_metadata``, ``usage_metadata``,
  ``invalid_tool_calls``, ``artifact``, a chat message's ``role``.
- ``content``: ``None`` when the content is a string (the text part, or the tool
  result, holds it); for a list, the list with every moved value set to ``None``,
  and ``refs``: ``[path, part index, prefix]`` saying where each moved value goes
  back (``prefix`` re-attaches a data URL's ``data:<type>;base64,`` header).

Binary content is recognised by its shape: a ``data:...;base64,`` URL anywhere
(the legacy ``image_url`` form, OpenAI files), a v1 standard block's ``base64``,
a v0 data block's ``data`` (``source_type: base64``), an Anthropic source's
``data`` (``type: base64``) and OpenAI's ``input_audio.data``. Only canonical
base64 moves (it re-encodes to the same string), so the restored string is the
original byte for byte; anything else stays in ``extra`` as written.

``extra["langchain"]`` is a versioned namespace, and the attachment and stored-form
rules are the ones every adapter follows (``convmem.transcript.framework_records``):
a redacted attachment reads back as a text block of its replacement.

``to_record`` proves the round trip before anything is written: it rebuilds the
message from the JSON the database will hold and refuses (``ConfigError``, naming
the field) a message that would not come back equal — a custom subclass, an
``artifact`` that is not JSON. Nothing acknowledged is lost. Records written by
other writers (no ``extra["langchain"]``) read back as the plain message of their
role.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)

from convmem.errors import ConfigError
from convmem.transcript import (
    AttachmentPart,
    Message,
    NewMessage,
    Part,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from convmem.transcript.framework_records import (
    FrameworkNamespace,
    attachment_bytes,
    stored_parts,
)
from convmem.transcript.records import Role

NAMESPACE = FrameworkNamespace("langchain", version=1, reads=frozenset({1}))
OCTET = "application/octet-stream"
# Every type langchain-core's ``messages_from_dict`` rebuilds, except ``remove``
# (a LangGraph instruction, not a message).
TYPES = frozenset(
    {
        "human",
        "ai",
        "system",
        "chat",
        "function",
        "tool",
        "HumanMessageChunk",
        "AIMessageChunk",
        "SystemMessageChunk",
        "ChatMessageChunk",
        "FunctionMessageChunk",
        "ToolMessageChunk",
    }
)
_CHAT_ROLES: dict[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}
#: The record role of each message class (its chunk class is a subclass); a
#: ``ChatMessage`` says its role itself.
_CLASS_ROLES: tuple[tuple[type[BaseMessage], Role], ...] = (
    (HumanMessage, "user"),
    (AIMessage, "assistant"),
    (SystemMessage, "system"),
    (ToolMessage, "tool"),
    (FunctionMessage, "tool"),
)

Path = list[str | int]


# ---------------------------------------------------------------- message -> record


def to_record(message: BaseMessage) -> NewMessage:
    """The record of ``message``; ``ConfigError`` when it would not come back equal."""
    if not isinstance(message, BaseMessage):
        raise ConfigError(
            f"chat history: expected a LangChain BaseMessage, got {type(message).__name__}"
        )
    kind = message.type
    if kind not in TYPES:
        raise ConfigError(
            f"chat history: {type(message).__name__} (type {kind!r}) is not a message the "
            f"record can hold; supported types: {', '.join(sorted(TYPES))}"
        )
    fields = message.model_dump()
    fields.pop("type", None)
    content = fields.pop("content")
    parts: list[Part] = []
    lc: dict[str, Any] = {"type": kind}
    if isinstance(message, ToolMessage):
        fields.pop("tool_call_id")
        fields.pop("status")
        parts.append(
            ToolResultPart(
                call_id=message.tool_call_id,
                content=content if isinstance(content, str) else "",
                is_error=message.status == "error",
            )
        )
        lc["content"] = None
    elif isinstance(content, str):
        if content:
            parts.append(TextPart(content))
        lc["content"] = None
    if not isinstance(content, str):
        splitter = _Splitter(first=len(parts))
        lc["content"] = splitter.walk(content, [], None)
        lc["refs"] = splitter.refs
        parts.extend(splitter.parts)
    if isinstance(message, AIMessage):
        calls = fields.pop("tool_calls")
        call_parts = [
            ToolCallPart(call_id=c.get("id") or "", name=c["name"], arguments=dict(c["args"]))
            for c in calls
        ]
        if _calls_from_parts(call_parts) != calls:
            fields["tool_calls"] = calls  # the parts cannot say it exactly: keep it as given
        parts.extend(call_parts)
    lc["fields"] = fields
    record = NewMessage(
        role=_role(message),
        content=parts,
        author=message.name,
        extra=NAMESPACE.pack(_json_exact(lc, message)),
    )
    _prove_round_trip(message, record)
    return record


def _role(message: BaseMessage) -> Role:
    if isinstance(message, ChatMessage):
        # A role the record does not model (a second agent, a critic) is an
        # assistant row; the exact role comes back from ``extra``.
        return _CHAT_ROLES.get(message.role.lower(), "assistant")
    for cls, role in _CLASS_ROLES:
        if isinstance(message, cls):
            return role
    raise ConfigError(f"chat history: no record role for {type(message).__name__}")


class _Splitter:
    """Moves text and binary values out of list content into parts."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.parts: list[Part] = []
        self.refs: list[list[Any]] = []

    def move(self, part: Part, path: Path, prefix: str = "") -> None:
        self.refs.append([list(path), self.first + len(self.parts), prefix])
        self.parts.append(part)

    def walk(self, obj: Any, path: Path, parent_key: str | None) -> Any:
        if isinstance(obj, str) and parent_key is None and len(path) == 1:
            self.move(TextPart(obj), path)  # a bare string item of the content list
            return None
        if isinstance(obj, list):
            return [self.walk(v, [*path, i], None) for i, v in enumerate(obj)]
        if not isinstance(obj, dict):
            return obj
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if key == "text" and obj.get("type") == "text" and isinstance(value, str):
                self.move(TextPart(value), [*path, key])
                out[key] = None
                continue
            binary = _binary(obj, key, value, parent_key)
            if binary is not None:
                media_type, data, prefix = binary
                name = obj.get("filename")
                self.move(
                    AttachmentPart(
                        media_type=media_type,
                        name=name if isinstance(name, str) else "",
                        data=data,
                    ),
                    [*path, key],
                    prefix,
                )
                out[key] = None
                continue
            out[key] = self.walk(value, [*path, key], key)
        return out


def _binary(
    block: Mapping[str, Any], key: str, value: Any, parent_key: str | None
) -> tuple[str, bytes, str] | None:
    """(media type, bytes, prefix) when ``block[key]`` is canonical base64 content."""
    if not isinstance(value, str) or not value:
        return None
    prefix = ""
    media: Any = None
    payload = value
    if value.startswith("data:") and ";base64," in value:
        header, payload = value.split(",", 1)
        prefix = header + ","
        media = header[len("data:") :].split(";", 1)[0]
    elif key == "base64":  # v1 standard blocks
        media = block.get("mime_type")
    elif key == "data" and (block.get("source_type") == "base64" or block.get("type") == "base64"):
        media = block.get("mime_type") or block.get("media_type")  # v0 data block / Anthropic
    elif key == "data" and parent_key == "input_audio":  # OpenAI chat completions audio
        fmt = block.get("format")
        media = f"audio/{fmt}" if isinstance(fmt, str) and fmt else None
    else:
        return None
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not data or base64.b64encode(data).decode("ascii") != payload:
        return None  # not canonical: re-encoding would change the string, so it stays as is
    return (media if isinstance(media, str) and media else OCTET), data, prefix


def _calls_from_parts(parts: Iterable[ToolCallPart]) -> list[dict[str, Any]]:
    return [
        {"name": p.name, "args": dict(p.arguments), "id": p.call_id or None, "type": "tool_call"}
        for p in parts
    ]


def _json_exact(lc: dict[str, Any], message: BaseMessage) -> dict[str, Any]:
    """``lc`` as the database will return it; ``ConfigError`` naming a field that is not JSON."""
    try:
        text = json.dumps(lc, allow_nan=False)
    except (TypeError, ValueError) as exc:
        bad = [k for k, v in lc["fields"].items() if not _dumps_ok(v)] or ["content"]
        raise ConfigError(
            f"chat history: {type(message).__name__}.{bad[0]} cannot be recorded: the record "
            f"keeps JSON values only ({exc})"
        ) from exc
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _dumps_ok(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _prove_round_trip(message: BaseMessage, record: NewMessage) -> None:
    """Rebuild from exactly what will be stored; refuse what would not come back equal."""
    parts, blobs = stored_parts(record.parts())
    lc = NAMESPACE.unpack(record.extra)
    assert lc is not None
    rebuilt = _from_langchain_extra(parts, lc, blobs)
    if rebuilt != message:
        want, got = message.model_dump(), rebuilt.model_dump()
        diff = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        what = ", ".join(diff) if diff else f"class {type(message).__name__}"
        raise ConfigError(
            f"chat history: {type(message).__name__} would not come back equal from the "
            f"record (differs in: {what}); refusing to record it"
        )


# ---------------------------------------------------------------- record -> message


def from_record(record: Message, attachments: Mapping[str, bytes]) -> BaseMessage:
    """The LangChain message a record stands for (``attachments``: bytes by sha256)."""
    lc = NAMESPACE.unpack(record.extra)
    if lc is not None:
        return _from_langchain_extra(record.parts, lc, attachments)
    return _from_plain_record(record, attachments)


def _from_langchain_extra(
    parts: Sequence[Part], lc: Mapping[str, Any], attachments: Mapping[str, bytes]
) -> BaseMessage:
    kind = lc["type"]
    fields: dict[str, Any] = copy.deepcopy(dict(lc["fields"]))
    is_tool = kind in ("tool", "ToolMessageChunk")
    result = next((p for p in parts if isinstance(p, ToolResultPart)), None)
    content: Any
    if lc["content"] is None:
        if is_tool:
            content = result.content if result is not None else ""
        else:
            content = next((p.text for p in parts if isinstance(p, TextPart)), "")
    else:
        content = copy.deepcopy(lc["content"])
        for path, index, prefix in lc["refs"]:
            _put_back(content, path, parts[index], prefix, attachments)
    if is_tool and result is not None:
        fields["tool_call_id"] = result.call_id
        fields["status"] = "error" if result.is_error else "success"
    if kind in ("ai", "AIMessageChunk") and "tool_calls" not in fields:
        fields["tool_calls"] = _calls_from_parts(p for p in parts if isinstance(p, ToolCallPart))
    fields["content"] = content
    return messages_from_dict([{"type": kind, "data": fields}])[0]


def _put_back(
    content: list[Any], path: Sequence[Any], part: Part, prefix: str, blobs: Mapping[str, bytes]
) -> None:
    value: str
    if isinstance(part, TextPart):
        value = part.text
    elif isinstance(part, AttachmentPart):
        data = attachment_bytes(part, blobs)
        if data is None:  # redacted: the block is gone, its place says so
            content[path[0]] = {"type": "text", "text": part.name}
            return
        value = prefix + base64.b64encode(data).decode("ascii")
    else:
        raise ConfigError(f"chat history: a content reference points at a {part.kind} part")
    if len(path) == 1:
        content[path[0]] = value
        return
    target: Any = content
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value


def _from_plain_record(record: Message, attachments: Mapping[str, bytes]) -> BaseMessage:
    """A record another writer made: the plain message of its role."""
    blocks: list[str | dict[str, Any]] = []
    for part in record.parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, AttachmentPart):
            data = attachment_bytes(part, attachments)
            if data is None:  # redacted
                blocks.append({"type": "text", "text": part.name})
                continue
            family = part.media_type.split("/", 1)[0]
            blocks.append(
                {
                    "type": family if family in ("image", "audio", "video") else "file",
                    "base64": base64.b64encode(data).decode("ascii"),
                    "mime_type": part.media_type,
                }
            )
    text_only = all(isinstance(b, dict) and b["type"] == "text" for b in blocks)
    content: Any = record.text if text_only else blocks
    name = record.author
    if record.role == "user":
        return HumanMessage(content=content, name=name, id=record.id)
    if record.role == "system":
        return SystemMessage(content=content, name=name, id=record.id)
    if record.role == "tool":
        result = next((p for p in record.parts if isinstance(p, ToolResultPart)), None)
        return ToolMessage(
            content=result.content if result is not None and text_only else content,
            tool_call_id=result.call_id if result is not None else "",
            status="error" if result is not None and result.is_error else "success",
            name=name,
            id=record.id,
        )
    calls = _calls_from_parts(p for p in record.parts if isinstance(p, ToolCallPart))
    return AIMessage(content=content, tool_calls=calls, name=name, id=record.id)
