"""One record mapping, two adapters: a message with an attachment written through either
adapter comes back equal, and after ``TranscriptStore.redact`` reads back as its redaction
(both the text and the attachment say ``[redacted]``), sync and async; the erased bytes
are an ``AttachmentNotFound``, not a missing thread. The mapping both
adapters share is ``convmem.transcript.framework_records``; each adapter below only says
how to write a text-plus-image message and how to see what it read back."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from convmem.transcript import AttachmentNotFound, ThreadNotFound, TranscriptStore

PNG = bytes(range(256)) * 4 + b"\x89PNG\r\n\x1a\n"
TEXT = "my passport scan"
#: What a reader sees: each block as its text, or as its bytes when it is an attachment.
Seen = list[str | bytes]


@dataclass(frozen=True)
class Adapter:
    """How one adapter writes the text-plus-image message and reads the key back."""

    name: str
    write: Callable[[TranscriptStore, str, str], None]
    read: Callable[[TranscriptStore, str, str], Seen]
    aread: Callable[[TranscriptStore, str, str], Seen]


def _langchain() -> Adapter:
    pytest.importorskip("langchain_core")
    from langchain_core.messages import BaseMessage, HumanMessage

    from langchain_convmem import ConvMemChatMessageHistory

    def history(store: TranscriptStore, tenant: str, key: str) -> ConvMemChatMessageHistory:
        return ConvMemChatMessageHistory(store, key, tenant=tenant)

    def write(store: TranscriptStore, tenant: str, key: str) -> None:
        history(store, tenant, key).add_messages([HumanMessage([
            {"type": "text", "text": TEXT},
            {"type": "image", "base64": base64.b64encode(PNG).decode(), "mime_type": "image/png"},
        ])])

    def seen(messages: list[BaseMessage]) -> Seen:
        (message,) = messages
        assert isinstance(message, HumanMessage) and isinstance(message.content, list)
        out: Seen = []
        for block in message.content:
            assert isinstance(block, dict)
            out.append(block["text"] if block["type"] == "text" else base64.b64decode(block["base64"]))
        return out

    return Adapter(
        "langchain",
        write,
        lambda store, tenant, key: seen(history(store, tenant, key).messages),
        lambda store, tenant, key: seen(asyncio.run(history(store, tenant, key).aget_messages())),
    )


def _llamaindex() -> Adapter:
    pytest.importorskip("llama_index.core")
    from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock

    from llamaindex_convmem import ConvMemChatStore

    def write(store: TranscriptStore, tenant: str, key: str) -> None:
        ConvMemChatStore(store, tenant=tenant).add_message(key, ChatMessage(
            role="user", blocks=[TextBlock(text=TEXT), ImageBlock(image=PNG, image_mimetype="image/png")]
        ))

    def seen(messages: list[ChatMessage]) -> Seen:
        (message,) = messages
        out: Seen = []
        for block in message.blocks:
            if isinstance(block, TextBlock):
                out.append(block.text)
            else:
                assert isinstance(block, ImageBlock)
                out.append(block.resolve_image().read())
        return out

    return Adapter(
        "llamaindex",
        write,
        lambda store, tenant, key: seen(ConvMemChatStore(store, tenant=tenant).get_messages(key)),
        lambda store, tenant, key: seen(
            asyncio.run(ConvMemChatStore(store, tenant=tenant).aget_messages(key))
        ),
    )


@pytest.fixture(params=[_langchain, _llamaindex], ids=["langchain", "llamaindex"])
def adapter(request: pytest.FixtureRequest) -> Adapter:
    make: Callable[[], Adapter] = request.param
    return make()


def test_round_trip_then_redact_then_read(adapter: Adapter, transcript: TranscriptStore) -> None:
    tenant, key = f"records-{uuid.uuid4().hex[:12]}", "passport"
    adapter.write(transcript, tenant, key)
    assert adapter.read(transcript, tenant, key) == [TEXT, PNG]
    thread = transcript.get_or_create_thread(tenant, key)
    (record,) = transcript.active_path(tenant, thread.id)
    transcript.redact(tenant, thread.id, record.id, actor="dpo", reason="erasure request")
    assert adapter.read(transcript, tenant, key) == ["[redacted]", "[redacted]"]
    assert adapter.aread(transcript, tenant, key) == ["[redacted]", "[redacted]"]
    with pytest.raises(AttachmentNotFound) as erased:
        transcript.get_attachment(tenant, hashlib.sha256(PNG).hexdigest())
    assert not isinstance(erased.value, ThreadNotFound)  # the thread is still there
