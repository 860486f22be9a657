"""``ChatMessage`` ↔ transcript record: the one place the two shapes meet.

A message becomes typed parts plus ``extra["llama_index"]`` for what the parts do
not model, so the record stays readable by an investigator and the round trip is
lossless:

* top-level ``TextBlock`` → ``TextPart``; ``ToolCallBlock`` → ``ToolCallPart``;
* a ``tool`` message of one text block with a ``tool_call_id`` → ``ToolResultPart``;
* a block carrying bytes (image, audio, video, document; also nested in a citable
  or citation block) → an ``AttachmentPart`` holding the decoded bytes, stored once
  per tenant under its sha256; its other fields (mimetype, detail, url, ...) go to
  the layout;
* every other block (thinking, cache point, citable, citation, url- or path-only
  media) is kept as its JSON dump in the layout;
* roles the transcript does not have (developer, function, chatbot, model) map to
  the nearest one and the original is kept; ``additional_kwargs`` is kept as
  LlamaIndex itself serializes it (``model_dump(mode="json")``: bytes as base64);
* text is normalised by ``convmem.identity.clean_text`` (a NUL or a lone surrogate
  becomes U+FFFD, which every backend can store), so it reads back so normalised.

The layout (``extra["llama_index"]["blocks"]``) lists the blocks in order, each
either ``{"p": i}`` (part ``i``, plus any fields the part cannot hold) or
``{"block": {...}}``; it is omitted when the blocks are exactly the parts.

``extra["llama_index"]`` is a versioned namespace (payloads written before it carried
a version read as version 1), and the attachment and stored-form rules are the ones
every adapter follows (``convmem.transcript.framework_records``): a redacted
attachment reads back as a ``TextBlock`` of its replacement.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    AudioBlock,
    ChatMessage,
    CitableBlock,
    CitationBlock,
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
    ToolCallBlock,
    VideoBlock,
)
from pydantic import TypeAdapter

from convmem.errors import ConfigError
from convmem.identity import clean_text
from convmem.session.recall import recorded_recall
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
    same_record,
)
from convmem.transcript.records import JSONDict, Role

#: Version 0: what this module wrote before the namespace carried a version (same layout).
NAMESPACE = FrameworkNamespace("llama_index", version=1, reads=frozenset({0, 1}))

_ROLES: dict[MessageRole, Role] = {
    MessageRole.SYSTEM: "system",
    MessageRole.DEVELOPER: "system",
    MessageRole.USER: "user",
    MessageRole.ASSISTANT: "assistant",
    MessageRole.CHATBOT: "assistant",
    MessageRole.MODEL: "assistant",
    MessageRole.TOOL: "tool",
    MessageRole.FUNCTION: "tool",
}

#: Media blocks and the field holding their bytes / their media type.
_BINARY: dict[type[Any], tuple[str, str]] = {
    ImageBlock: ("image", "image_mimetype"),
    AudioBlock: ("audio", "format"),
    VideoBlock: ("video", "video_mimetype"),
    DocumentBlock: ("data", "document_mimetype"),
}
_BY_TYPE: dict[str, type[Any]] = {
    "image": ImageBlock,
    "audio": AudioBlock,
    "video": VideoBlock,
    "document": DocumentBlock,
}
_BLOCK: TypeAdapter[Any] = TypeAdapter(ContentBlock)


class _Encoder:
    """Collects the parts of one message while its blocks are described."""

    def __init__(self) -> None:
        self.parts: list[Part] = []

    def add(self, part: Part) -> int:
        self.parts.append(part)
        return len(self.parts) - 1

    def binary(self, block: Any) -> JSONDict | None:
        """A media block with bytes → attachment part + the rest of its fields."""
        spec = _BINARY.get(type(block))
        if spec is None:
            return None
        field, mime_field = spec
        raw = block.model_dump(mode="python").get(field)
        if not raw:
            return None
        data = base64.b64decode(raw)  # the block holds base64 after validation
        media = getattr(block, mime_field, None)
        media_type = str(media) if media and "/" in str(media) else "application/octet-stream"
        name = str(getattr(block, "title", "") or "")
        index = self.add(AttachmentPart(media_type=media_type, name=name, data=data))
        rest = block.model_dump(mode="json", exclude={field})
        return {"p": index, "block": rest}

    def nested(self, block: Any) -> JSONDict:
        """Any block as JSON, with bytes anywhere inside moved to attachments."""
        found = self.binary(block)
        if found is not None:
            return found
        if isinstance(block, CitableBlock):
            dump = block.model_dump(mode="json", exclude={"content"})
            dump["content"] = [self.nested(b) for b in block.content]
            return {"block": dump}
        if isinstance(block, CitationBlock):
            dump = block.model_dump(mode="json", exclude={"cited_content"})
            dump["cited_content"] = self.nested(block.cited_content)
            return {"block": dump}
        return {"block": block.model_dump(mode="json")}

    def top(self, block: Any) -> tuple[JSONDict, bool]:
        """A top-level block's layout entry, and whether it is exactly its part."""
        if isinstance(block, TextBlock):
            return {"p": self.add(TextPart(clean_text(block.text)))}, True
        if isinstance(block, ToolCallBlock):
            kwargs = block.tool_kwargs
            part = ToolCallPart(
                call_id=block.tool_call_id or "",
                name=block.tool_name,
                arguments=dict(kwargs) if isinstance(kwargs, dict) else {},
            )
            entry: JSONDict = {"p": self.add(part)}
            exact = block.tool_call_id is not None and isinstance(kwargs, dict)
            if block.tool_call_id is None:
                entry["tool_call_id"] = None
            if not isinstance(kwargs, dict):
                entry["tool_kwargs"] = kwargs
            return entry, exact
        return self.nested(block), False


def to_new_message(message: ChatMessage) -> NewMessage:
    """A ``ChatMessage`` as a transcript message to append."""
    if not isinstance(message, ChatMessage):
        raise ConfigError(f"chat store: expected a ChatMessage, got {type(message).__name__}")
    role = _ROLES[MessageRole(message.role)]
    try:
        kwargs: JSONDict = message.model_dump(mode="json", include={"additional_kwargs"})[
            "additional_kwargs"
        ]
    except Exception as exc:  # pydantic raises its own serialization errors
        raise ConfigError(
            f"ChatMessage.additional_kwargs: not JSON-serializable ({exc}); "
            "convert provider objects to dicts before storing"
        ) from exc
    meta: JSONDict = {}
    if role != message.role.value:
        meta["role"] = message.role.value
    blocks = list(message.blocks)
    call_id = kwargs.get("tool_call_id")
    if (
        role == "tool"
        and isinstance(call_id, str)
        and len(blocks) == 1
        and isinstance(blocks[0], TextBlock)
    ):
        kwargs = {k: v for k, v in kwargs.items() if k != "tool_call_id"}
        # a recall's result keeps its links, not its copies (convmem.session.recall)
        content = recorded_recall(clean_text(blocks[0].text))
        parts: list[Part] = [ToolResultPart(call_id=call_id, content=content)]
    else:
        enc = _Encoder()
        layout = []
        exact = True
        for block in blocks:
            entry, same = enc.top(block)
            layout.append(entry)
            exact = exact and same
        if not exact:
            meta["blocks"] = layout
        parts = enc.parts
    if kwargs:
        meta["additional_kwargs"] = kwargs
    return NewMessage(role=role, content=parts, extra=NAMESPACE.pack(meta) if meta else None)


def _block_from(entry: Mapping[str, Any], parts: Sequence[Part], blobs: Mapping[str, bytes]) -> Any:
    """Inverse of ``_Encoder.nested`` / ``_Encoder.top`` for one layout entry."""
    dump = dict(entry.get("block") or {})
    if "p" in entry:
        part = parts[int(entry["p"])]
        if isinstance(part, TextPart):
            return TextBlock(text=part.text)
        if isinstance(part, ToolCallPart):
            return ToolCallBlock(
                tool_call_id=entry.get("tool_call_id", part.call_id),
                tool_name=part.name,
                tool_kwargs=entry.get("tool_kwargs", dict(part.arguments)),
            )
        if isinstance(part, AttachmentPart):
            data = attachment_bytes(part, blobs)
            if data is None:  # redacted: the block is gone, its place says so
                return TextBlock(text=part.name)
            cls = _BY_TYPE[str(dump.get("block_type"))]
            field = _BINARY[cls][0]
            dump[field] = base64.b64encode(data)
            return cls.model_validate(dump)
        raise ConfigError(f"chat store: layout entry points at a {part.kind} part")
    if dump.get("block_type") == "citable":
        dump["content"] = [_block_from(e, parts, blobs) for e in dump["content"]]
    elif dump.get("block_type") == "citation":
        dump["cited_content"] = _block_from(dump["cited_content"], parts, blobs)
    return _BLOCK.validate_python(dump)


def to_chat_message(message: Message, blobs: Mapping[str, bytes]) -> ChatMessage:
    """A transcript record as the ``ChatMessage`` that was stored.

    ``blobs`` maps each attachment digest of the record to its bytes.
    """
    meta: Mapping[str, Any] = NAMESPACE.unpack(message.extra) or {}
    role = MessageRole(meta.get("role", message.role))
    kwargs = dict(meta.get("additional_kwargs") or {})
    parts = message.parts
    if len(parts) == 1 and isinstance(parts[0], ToolResultPart):
        kwargs = {"tool_call_id": parts[0].call_id, **kwargs}
        return ChatMessage(
            role=role, blocks=[TextBlock(text=parts[0].content)], additional_kwargs=kwargs
        )
    layout = meta.get("blocks")
    if layout is None:
        layout = [{"p": i} for i in range(len(parts))]
    blocks = [_block_from(entry, parts, blobs) for entry in layout]
    return ChatMessage(role=role, blocks=blocks, additional_kwargs=kwargs)


__all__ = ["NAMESPACE", "same_record", "to_chat_message", "to_new_message"]
