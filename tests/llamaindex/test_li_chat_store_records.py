"""Every ``ChatMessage`` role and content-block kind round-trips through the record.

Run through both stores, sync and async, on SQLite and PostgreSQL. Bytes become
transcript attachments (content-addressed, never inside the message JSON); tool
calls and tool results become typed parts an investigator can read.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import pytest
from llama_index.core.base.llms.types import (
    AudioBlock,
    CacheControl,
    CachePoint,
    ChatMessage,
    CitableBlock,
    CitationBlock,
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    VideoBlock,
)

from convmem.transcript import (
    AttachmentPart,
    NewMessage,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    TranscriptStore,
)
from llamaindex_convmem import ConvMemChatStore, ConvMemDBChatStore
from llamaindex_convmem._records import to_new_message
from tests.llamaindex.li_chat_store_api import store_api

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(16)
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n"
LOOKS_LIKE_BASE64 = b"abcd"  # LlamaIndex takes valid base64 as already encoded


def every_block() -> list[ContentBlock]:
    return [
        TextBlock(text="look at these"),
        ImageBlock(image=PNG, detail="high"),
        ImageBlock(image=LOOKS_LIKE_BASE64, image_mimetype="image/png"),
        ImageBlock(url="https://example.com/cat.png"),
        AudioBlock(audio=WAV, format="wav"),
        AudioBlock(url="https://example.com/a.mp3"),
        VideoBlock(video=b"\x00\x00\x00\x18ftypmp42", video_mimetype="video/mp4", fps=24),
        DocumentBlock(data=PDF, title="report.pdf"),
        DocumentBlock(url="https://example.com/spec.pdf"),
        CachePoint(cache_control=CacheControl(type="ephemeral", ttl="1h")),
        CitableBlock(title="src", source="kb://1", content=[TextBlock(text="quote"), ImageBlock(image=PNG)]),
        CitationBlock(
            cited_content=TextBlock(text="cited"),
            source="kb://2",
            title="t",
            additional_location_info={"page": 3},
        ),
        ThinkingBlock(content="let me think", num_tokens=4, additional_information={"sig": "x"}),
        ToolCallBlock(tool_call_id="c1", tool_name="lookup", tool_kwargs={"q": "x", "n": 2}),
        ToolCallBlock(tool_name="raw", tool_kwargs='{"broken": '),
    ]


def every_message() -> list[ChatMessage]:
    out = [
        ChatMessage(role=role, content=f"{role.value} says hi", additional_kwargs={"n": i})
        for i, role in enumerate(MessageRole)
    ]
    out += [
        ChatMessage(role="user", blocks=every_block()),
        ChatMessage(
            role="assistant",
            blocks=[ToolCallBlock(tool_call_id="c9", tool_name="f", tool_kwargs={"x": [1, 2.5]})],
            additional_kwargs={"usage": {"in": 3, "out": 4}, "tool_calls": [{"id": "c9"}]},
        ),
        ChatMessage(role="tool", content="42", additional_kwargs={"tool_call_id": "c9", "name": "f"}),
        ChatMessage(role="tool", content="no id"),
        ChatMessage(role="assistant", blocks=[]),
        ChatMessage(role="assistant", content=""),
        ChatMessage(role="user", content="ハロー héllo 🚀", additional_kwargs={"nested": {"a": None}}),
    ]
    return out


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_message_round_trips(transcript: TranscriptStore, tenant: str, mode: str) -> None:
    store = ConvMemChatStore(transcript, tenant=tenant)
    messages = every_message()
    with store_api(store, mode) as api:
        for m in messages:
            api.add_message("k", m)
        assert api.get_messages("k") == messages
        api.set_messages("k", messages)  # the same list: nothing new
        assert len(transcript.tree(tenant, store.thread_id("k")).messages) == len(messages)


async def test_every_message_round_trips_through_the_db_store(
    transcript: TranscriptStore, tenant: str
) -> None:
    store = ConvMemDBChatStore(transcript, tenant=tenant)
    messages = every_message()
    await store.add_messages("k", messages)
    assert await store.get_messages("k") == messages
    await store.archive_oldest_messages("k", 3)
    assert await store.get_messages("k", status=None) == messages


def test_bytes_become_attachments_and_parts_are_typed(
    transcript: TranscriptStore, tenant: str
) -> None:
    store = ConvMemChatStore(transcript, tenant=tenant)
    multimodal, call, result = every_message()[-7:-4]
    store.add_message("k", multimodal)
    store.add_message("k", call)
    store.add_message("k", result)
    records = transcript.active_path(tenant, store.thread_id("k"))

    attachments = [p for p in records[0].parts if isinstance(p, AttachmentPart)]
    digests = {p.sha256 for p in attachments}
    # the attachment holds the content as LlamaIndex reads it: valid base64 is decoded
    assert {transcript.get_attachment(tenant, d) for d in digests} == {
        PNG, WAV, PDF, base64.b64decode(LOOKS_LIKE_BASE64), b"\x00\x00\x00\x18ftypmp42",
    }
    assert len(attachments) == 6  # the PNG twice (top level and inside the citable block)
    assert len(digests) == 5  # stored once
    stored_json = json.dumps(records[0].extra)
    assert base64.b64encode(PNG).decode() not in stored_json
    assert isinstance(records[0].parts[0], TextPart)

    assert records[1].parts == (ToolCallPart(call_id="c9", name="f", arguments={"x": [1, 2.5]}),)
    assert records[1].visibility == "execution"
    assert records[2].parts == (ToolResultPart(call_id="c9", content="42"),)
    assert records[2].role == "tool"


def test_roles_outside_the_transcript_map_to_the_nearest(
    transcript: TranscriptStore, tenant: str
) -> None:
    store = ConvMemChatStore(transcript, tenant=tenant)
    for role in MessageRole:
        store.add_message("k", ChatMessage(role=role, content="x"))
    records = transcript.active_path(tenant, store.thread_id("k"))
    assert [r.role for r in records] == [
        "system", "system", "user", "assistant", "tool", "tool", "assistant", "assistant",
    ]
    assert [m.role for m in store.get_messages("k")] == list(MessageRole)


def test_nul_and_lone_surrogates_are_normalised_on_every_backend(
    transcript: TranscriptStore, tenant: str
) -> None:
    """``convmem.identity.clean_text``: stored as U+FFFD (PostgreSQL cannot store a NUL)."""
    store = ConvMemChatStore(transcript, tenant=tenant)
    store.add_messages("k", [
        ChatMessage(role="user", content="a\x00b\ud800"),
        ChatMessage(role="tool", content="x\x00", additional_kwargs={"tool_call_id": "c1"}),
    ])
    got = store.get_messages("k")
    assert [m.content for m in got] == ["a\ufffdb\ufffd", "x\ufffd"]
    store.delete_thread("k")


def test_records_written_before_the_namespace_carried_a_version_still_read(
    transcript: TranscriptStore, tenant: str
) -> None:
    """``extra["llama_index"]`` gained ``"v"``; what the previous release wrote (the same
    payload, no version) reads back the same (``set_messages`` gives the path a versioned
    row, as ``rebase_path`` compares ``extra`` exactly); a version this code does not know
    reads as the plain record of its role."""
    store = ConvMemChatStore(transcript, tenant=tenant)
    message = ChatMessage(role="developer", content="be brief", additional_kwargs={"k": 1})
    payload = {"role": "developer", "additional_kwargs": {"k": 1}}
    new = to_new_message(message)
    assert new.extra == {"llama_index": {"v": 1, **payload}}
    tid = store.thread_id("k")
    transcript.append(tenant, tid, replace(new, extra={"llama_index": payload}))
    assert store.get_messages("k") == [message]
    store.set_messages("k", [message])
    (old, again) = transcript.tree(tenant, tid).messages  # the old row stays in the tree
    assert old.extra == {"llama_index": payload} and again.extra == new.extra
    assert store.get_messages("k") == [message]
    transcript.append(tenant, tid, NewMessage("system", "later", extra={"llama_index": {"v": 99, **payload}}))
    assert store.get_messages("k")[-1] == ChatMessage(role="system", content="later")
