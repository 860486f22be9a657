"""``ConvMemChatMessageHistory`` on SQLite and PostgreSQL: lossless round trips of every
LangChain message type (sync and async), one transaction per batch, ``clear`` keeping the
record, tenants apart, and both views inside ``RunnableWithMessageHistory``."""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from langchain_core._api import LangChainDeprecationWarning
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    HumanMessageChunk,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    ToolMessageChunk,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable
from langchain_core.runnables.history import RunnableWithMessageHistory
from lc_fakes import ScriptedChatModel, shape

from convmem.domain import Domain
from convmem.errors import ConfigError
from convmem.session import SessionMemory
from convmem.transcript import (
    AttachmentPart,
    NewMessage,
    TextPart,
    ThreadNotFound,
    ToolCallPart,
    TranscriptStore,
)
from langchain_convmem import ConvMemChatMessageHistory

PNG = bytes(range(256)) * 4 + b"\x89PNG\r\n\x1a\n"
PDF = b"%PDF-1.7\n" + bytes(reversed(range(256))) * 3
WAV = b"RIFF" + bytes(range(7, 250)) * 2
B64_PNG = base64.b64encode(PNG).decode()
B64_PDF = base64.b64encode(PDF).decode()
B64_WAV = base64.b64encode(WAV).decode()

MESSAGES: list[Any] = [
    pytest.param(HumanMessage("Pull up Brightwater Farms."), id="human"),
    pytest.param(
        HumanMessage(
            "hi", id="h-1", name="ann", additional_kwargs={"k": [1, {"x": None}]},
            response_metadata={"source": "web"},
        ),
        id="human-fields",
    ),
    pytest.param(HumanMessage(""), id="human-empty"),
    pytest.param(
        AIMessage(
            "",
            id="a-1",
            name="bot",
            tool_calls=[
                {"name": "lookup", "args": {"q": "Brightwater", "n": 2}, "id": "call-1"},
                {"name": "orders", "args": {}, "id": "call-2"},
            ],
            invalid_tool_calls=[
                {"name": "bad", "args": "{oops", "id": "call-3", "error": "not JSON",
                 "type": "invalid_tool_call"}
            ],
            usage_metadata={
                "input_tokens": 31, "output_tokens": 7, "total_tokens": 38,
                "input_token_details": {"cache_read": 4},
            },
            response_metadata={"model_name": "fake-1", "finish_reason": "tool_calls"},
            additional_kwargs={"refusal": None},
        ),
        id="ai-tool-calls",
    ),
    pytest.param(
        AIMessage("Partly.", tool_calls=[{"name": "f", "args": {"a": [1, 2]}, "id": None}]),
        id="ai-call-without-id",
    ),
    pytest.param(
        AIMessageChunk(
            content="chunk",
            tool_call_chunks=[{"name": "f", "args": '{"a": 1}', "id": "c-9", "index": 0}],
        ),
        id="ai-chunk",
    ),
    pytest.param(
        ToolMessageChunk(content="partial", tool_call_id="call-1", artifact={"n": 1}),
        id="tool-chunk",
    ),
    pytest.param(HumanMessageChunk(content="typing"), id="human-chunk"),
    pytest.param(
        ToolMessage("No rows.", tool_call_id="call-1", artifact={"rows": [], "sql": "select 1"},
                    status="error", name="lookup", id="t-1"),
        id="tool-error-artifact",
    ),
    pytest.param(
        ToolMessage(
            [{"type": "text", "text": "chart:"},
             {"type": "image", "base64": B64_PNG, "mime_type": "image/png"}],
            tool_call_id="call-2",
            artifact=[1, "two", {"three": 3.5}],
        ),
        id="tool-multimodal",
    ),
    pytest.param(SystemMessage("You are a CRM assistant.", id="s-1"), id="system"),
    pytest.param(
        SystemMessage([{"type": "text", "text": "Rules:", "cache_control": {"type": "ephemeral"}}]),
        id="system-blocks",
    ),
    pytest.param(ChatMessage(content="Looks wrong.", role="critic", name="c"), id="chat-own-role"),
    pytest.param(ChatMessage(content="Hello", role="user"), id="chat-user"),
    pytest.param(FunctionMessage(content='{"ok": true}', name="legacy_fn"), id="function"),
    pytest.param(
        HumanMessage([
            "plain string item",
            {"type": "text", "text": "What is in this image?", "id": "blk-1"},
            {"type": "image_url",
             "image_url": {"url": f"data:image/png;base64,{B64_PNG}", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ]),
        id="human-legacy-image-url",
    ),
    pytest.param(
        HumanMessage([
            {"type": "text", "text": "Three files."},
            {"type": "image", "base64": B64_PNG, "mime_type": "image/png", "id": "img-1"},
            {"type": "file", "base64": B64_PDF, "mime_type": "application/pdf",
             "filename": "q3.pdf", "extras": {"cite": True}},
            {"type": "audio", "base64": B64_WAV, "mime_type": "audio/wav"},
        ]),
        id="human-v1-blocks",
    ),
    pytest.param(
        HumanMessage([
            {"type": "image", "source_type": "base64", "data": B64_PNG, "mime_type": "image/png"},
            {"type": "input_audio", "input_audio": {"data": B64_WAV, "format": "wav"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": B64_PNG}},
        ]),
        id="human-v0-openai-anthropic-blocks",
    ),
    pytest.param(
        AIMessage(
            [{"type": "reasoning", "reasoning": "think"},
             {"type": "text", "text": "Done.", "annotations": [{"type": "citation"}]},
             {"type": "tool_call", "id": "call-7", "name": "f", "args": {}}],
            tool_calls=[{"name": "f", "args": {}, "id": "call-7"}],
            response_metadata={"output_version": "v1"},
        ),
        id="ai-v1-content",
    ),
]


# ------------------------------------------------------------------------- fixtures


@pytest.fixture
def store(
    transcript_url: str, migrated_store: Callable[[str], TranscriptStore]
) -> Iterator[TranscriptStore]:
    store = migrated_store(transcript_url)
    yield store
    store.engine.dispose()


@pytest.fixture
async def astore(store: TranscriptStore) -> AsyncIterator[TranscriptStore]:
    """The same store for coroutine tests; its async pool is closed on the test's loop."""
    yield store
    await store.async_engine.dispose()


def _stored_once(store: TranscriptStore, tenant: str, history: ConvMemChatMessageHistory) -> None:
    """Binary blocks left the message for content-addressed attachments."""
    (record,) = store.active_path(tenant, history.thread_id())
    extra = json.dumps(record.extra)
    assert B64_PNG not in extra and B64_PDF not in extra and B64_WAV not in extra
    shas = [p.sha256 for p in record.parts if isinstance(p, AttachmentPart)]
    assert shas
    for sha in shas:
        assert store.get_attachment(tenant, sha) in (PNG, PDF, WAV)


# ------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("message", MESSAGES)
def test_every_message_type_round_trips(
    store: TranscriptStore, tenant: str, message: BaseMessage
) -> None:
    ConvMemChatMessageHistory(store, "s-1", tenant=tenant).add_messages([message])
    fresh = ConvMemChatMessageHistory(store, "s-1", tenant=tenant)  # reads from the database
    (back,) = fresh.messages
    assert type(back) is type(message)
    assert back == message
    assert back.model_dump() == message.model_dump()
    if any(b in repr(message.content) for b in (B64_PNG, B64_PDF, B64_WAV)):
        _stored_once(store, tenant, fresh)


@pytest.mark.parametrize("message", MESSAGES)
async def test_every_message_type_round_trips_async(
    astore: TranscriptStore, tenant: str, message: BaseMessage
) -> None:
    await ConvMemChatMessageHistory(astore, "s-1", tenant=tenant).aadd_messages([message])
    (back,) = await ConvMemChatMessageHistory(astore, "s-1", tenant=tenant).aget_messages()
    assert type(back) is type(message)
    assert back.model_dump() == message.model_dump()


def test_a_conversation_round_trips_in_order(store: TranscriptStore, tenant: str) -> None:
    conversation = [p.values[0] for p in MESSAGES]
    history = ConvMemChatMessageHistory(store, "conv", tenant=tenant)
    history.add_messages(conversation[:5])
    history.add_message(conversation[5])
    history.add_messages(conversation[6:])
    assert history.messages == conversation
    # the record's own view: the parts the transcript models, in order
    path = store.active_path(tenant, history.thread_id())
    assert [m.role for m in path[:4]] == ["user", "user", "user", "assistant"]
    assert [p.kind for p in path[3].parts] == ["tool_call", "tool_call"]
    assert path[3].visibility == "execution" and path[0].visibility == "conversation"
    assert store.search(tenant, "Brightwater", thread_id=history.thread_id())


def test_records_written_by_others_read_as_plain_messages(
    store: TranscriptStore, tenant: str
) -> None:
    history = ConvMemChatMessageHistory(store, "plain", tenant=tenant)
    tid = history.thread_id()
    store.append(tenant, tid, [
        NewMessage("user", [TextPart("Look:"), AttachmentPart("image/png", data=PNG)]),
        NewMessage("assistant", [ToolCallPart("c-1", "lookup", {"q": "x"})]),
        NewMessage("assistant", "Found it."),
    ])
    human, call, answer = history.messages
    assert isinstance(human, HumanMessage)
    assert human.content == [
        {"type": "text", "text": "Look:"},
        {"type": "image", "base64": B64_PNG, "mime_type": "image/png"},
    ]
    assert isinstance(call, AIMessage)
    assert call.tool_calls == [{"name": "lookup", "args": {"q": "x"}, "id": "c-1",
                                "type": "tool_call"}]
    assert isinstance(answer, AIMessage) and answer.content == "Found it."


def test_redacted_image_reads_back_as_its_redaction(store: TranscriptStore, tenant: str) -> None:
    message = HumanMessage([
        {"type": "text", "text": "my passport scan"},
        {"type": "image", "base64": B64_PNG, "mime_type": "image/png"},
    ])
    history = ConvMemChatMessageHistory(store, "redact", tenant=tenant)
    history.add_messages([message])
    (record,) = store.active_path(tenant, history.thread_id())
    store.redact(tenant, history.thread_id(), record.id, actor="dpo", reason="request")
    (back,) = history.messages
    assert back.content == [{"type": "text", "text": "[redacted]"},
                            {"type": "text", "text": "[redacted]"}]


# ------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("message", "named"),
    [
        (RemoveMessage(id="m-1"), "RemoveMessage"),
        (ToolMessage("x", tool_call_id="c", artifact=object()), "ToolMessage.artifact"),
        (ToolMessage("x", tool_call_id="c", artifact=(1, 2)), "artifact"),
        (AIMessage("x", response_metadata={1: "int key"}), "response_metadata"),
    ],
    ids=["remove", "artifact-not-json", "artifact-tuple", "int-keys"],
)
def test_what_cannot_come_back_equal_is_refused_before_writing(
    store: TranscriptStore, tenant: str, message: BaseMessage, named: str
) -> None:
    history = ConvMemChatMessageHistory(store, "refuse", tenant=tenant)
    with pytest.raises(ConfigError, match=named):
        history.add_messages([HumanMessage("kept?"), message])
    assert history.messages == []  # the whole batch was refused, nothing half-written


def test_a_custom_subclass_is_refused(store: TranscriptStore, tenant: str) -> None:
    class Shouting(HumanMessage):
        pass

    history = ConvMemChatMessageHistory(store, "sub", tenant=tenant)
    with pytest.raises(ConfigError, match="Shouting would not come back equal"):
        history.add_messages([Shouting("HI")])


def test_bad_arguments_are_named(store: TranscriptStore, crm: Domain) -> None:
    with pytest.raises(ConfigError, match="key must be a non-empty string"):
        ConvMemChatMessageHistory(store, " ")
    with pytest.raises(ConfigError, match="view must be"):
        ConvMemChatMessageHistory(store, "k", view="replay")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"needs a convmem\.SessionMemory"):
        ConvMemChatMessageHistory(store, "k", view="session")
    with pytest.raises(ConfigError, match="has no transcript"):
        ConvMemChatMessageHistory(SessionMemory(crm), "k", view="session")
    with pytest.raises(ConfigError, match="store must be"):
        ConvMemChatMessageHistory("sqlite:///x.db", "k")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="BaseMessage"):
        ConvMemChatMessageHistory(store, "k").add_messages(["text"])  # type: ignore[list-item]


# ------------------------------------------------------------------------- transactions


def _count_begins(engine: sa.Engine) -> Callable[[], int]:
    seen: list[int] = []
    sa.event.listen(engine, "begin", lambda conn: seen.append(1))
    return lambda: len(seen)


def test_add_messages_is_one_transaction(store: TranscriptStore, tenant: str) -> None:
    history = ConvMemChatMessageHistory(store, "bulk", tenant=tenant)
    history.thread_id()  # the key is resolved once, on first use
    begins = _count_begins(store.engine)
    history.add_messages([p.values[0] for p in MESSAGES])
    assert begins() == 1
    history.add_messages([HumanMessage("one more")])
    # one message on PostgreSQL: one autocommitted statement on psycopg's connection,
    # which SQLAlchemy does not see begin; on SQLite a transaction of its own
    assert begins() == (1 if store.engine.dialect.name == "postgresql" else 2)
    assert len(history.messages) == len(MESSAGES) + 1


async def test_aadd_messages_is_one_transaction(astore: TranscriptStore, tenant: str) -> None:
    history = ConvMemChatMessageHistory(astore, "bulk", tenant=tenant)
    await history.athread_id()
    begins = _count_begins(astore.async_engine.sync_engine)
    await history.aadd_messages([p.values[0] for p in MESSAGES])
    assert begins() == 1
    assert len(await history.aget_messages()) == len(MESSAGES)


# ------------------------------------------------------------------------- clear, delete, tenants


def test_clear_empties_the_view_and_keeps_the_record(store: TranscriptStore, tenant: str) -> None:
    history = ConvMemChatMessageHistory(store, "c", tenant=tenant)
    history.add_messages([HumanMessage("first"), AIMessage("one")])
    history.clear()
    assert history.messages == []
    assert ConvMemChatMessageHistory(store, "c", tenant=tenant).messages == []
    history.add_messages([HumanMessage("second")])
    assert history.messages == [HumanMessage("second")]
    tree = store.tree(tenant, history.thread_id())
    assert [m.text for m in tree.messages] == ["first", "one", "second"]
    assert tree.children(None)[1].text == "second"  # a new root: the old path is intact
    assert '"first"' in store.export_thread(tenant, history.thread_id())


async def test_aclear_keeps_the_record(astore: TranscriptStore, tenant: str) -> None:
    history = ConvMemChatMessageHistory(astore, "c", tenant=tenant)
    await history.aadd_messages([HumanMessage("first"), AIMessage("one")])
    await history.aclear()
    assert await history.aget_messages() == []
    tree = await astore.atree(tenant, await history.athread_id())
    assert [m.text for m in tree.messages] == ["first", "one"]


def test_delete_thread_erases(store: TranscriptStore, tenant: str) -> None:
    history = ConvMemChatMessageHistory(store, "gone", tenant=tenant)
    history.add_messages([HumanMessage("secret", id="x")])
    tid = history.thread_id()
    receipt = history.delete_thread()
    assert receipt.messages == 1
    with pytest.raises(ThreadNotFound):
        store.get_thread(tenant, tid)
    assert history.messages == []  # the key now names a fresh thread
    assert history.thread_id() != tid


async def test_adelete_thread_erases(astore: TranscriptStore, tenant: str) -> None:
    history = ConvMemChatMessageHistory(astore, "gone", tenant=tenant)
    await history.aadd_messages([HumanMessage("secret")])
    tid = await history.athread_id()
    assert (await history.adelete_thread()).messages == 1
    assert tid not in [t.id for t in await astore.alist_threads(tenant)]


def test_tenants_with_the_same_key_have_different_threads(
    store: TranscriptStore, tenant: str
) -> None:
    mine = ConvMemChatMessageHistory(store, "shared-key", tenant=tenant)
    theirs = ConvMemChatMessageHistory(store, "shared-key", tenant=tenant + "-other")
    mine.add_messages([HumanMessage("mine only")])
    assert theirs.messages == []
    assert mine.thread_id() != theirs.thread_id()
    with pytest.raises(ThreadNotFound):
        store.active_path(tenant + "-other", mine.thread_id())
    theirs.add_messages([HumanMessage("theirs")])
    assert mine.messages == [HumanMessage("mine only")]
    # the same key and tenant is the same thread
    assert ConvMemChatMessageHistory(store, "shared-key", tenant=tenant).thread_id() == (
        mine.thread_id()
    )


def test_tenant_defaults_to_the_memory_s(store: TranscriptStore, crm: Domain) -> None:
    memory = SessionMemory(crm, transcript=store, tenant="acme")
    assert ConvMemChatMessageHistory(memory, "k").tenant == "acme"
    other = ConvMemChatMessageHistory(memory, "k", tenant="other").memory
    assert other is not None and other is not memory and other.tenant == "other"
    assert memory.tenant == "acme"
    assert ConvMemChatMessageHistory(store, "k").tenant == "default"


# ------------------------------------------------------------------------- RWMH


def _rwmh(runnable: Runnable[Any, Any], factory: Callable[[str], ConvMemChatMessageHistory],
          **kw: Any) -> RunnableWithMessageHistory:
    with warnings.catch_warnings():  # RWMH warns on every construction (the app's own call)
        warnings.simplefilter("ignore", LangChainDeprecationWarning)
        return RunnableWithMessageHistory(runnable, factory, **kw)  # type: ignore[arg-type]


PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You are a CRM assistant."),
    MessagesPlaceholder("history"),
    ("human", "{question}"),
])
ANSWERS = [
    AIMessage("Loaded.", id="r-1", usage_metadata={"input_tokens": 9, "output_tokens": 2,
                                                   "total_tokens": 11}),
    AIMessage("Ben Carter.", id="r-2", response_metadata={"model_name": "fake"}),
    AIMessage("Three open.", id="r-3"),
]
QUESTIONS = ["Pull up Brightwater Farms.", "Who's their rep?", "Any open orders?"]


def _cfg(session: str) -> Any:
    return {"configurable": {"session_id": session}}


def test_record_view_inside_rwmh_replays_the_record(store: TranscriptStore, tenant: str) -> None:
    model = ScriptedChatModel(responses=list(ANSWERS))
    chain = _rwmh(
        PROMPT | model,
        lambda sid: ConvMemChatMessageHistory(store, sid, tenant=tenant),
        input_messages_key="question", history_messages_key="history",
    )
    outs = [chain.invoke({"question": q}, _cfg("rw")) for q in QUESTIONS]
    assert shape(model.received[2]) == [
        ("system", "You are a CRM assistant."),
        ("human", QUESTIONS[0]), ("ai", "Loaded."),
        ("human", QUESTIONS[1]), ("ai", "Ben Carter."),
        ("human", QUESTIONS[2]),
    ]
    recorded = ConvMemChatMessageHistory(store, "rw", tenant=tenant).messages
    assert recorded[1::2] == outs  # the model's messages exactly as returned
    assert [m.text for m in recorded[0::2]] == QUESTIONS
    assert recorded[1].usage_metadata == ANSWERS[0].usage_metadata


async def test_record_view_inside_rwmh_async(astore: TranscriptStore, tenant: str) -> None:
    model = ScriptedChatModel(responses=list(ANSWERS))
    chain = _rwmh(model, lambda sid: ConvMemChatMessageHistory(astore, sid, tenant=tenant))
    for q in QUESTIONS:
        await chain.ainvoke([HumanMessage(q)], _cfg("rw-async"))
    assert shape(model.received[2]) == [
        ("human", QUESTIONS[0]), ("ai", "Loaded."),
        ("human", QUESTIONS[1]), ("ai", "Ben Carter."),
        ("human", QUESTIONS[2]),
    ]
    history = ConvMemChatMessageHistory(astore, "rw-async", tenant=tenant)
    recorded = await history.aget_messages()
    assert shape(recorded) == [*shape(model.received[2]), ("ai", "Three open.")]


BLOCK1 = ('## Session context\nCurrently discussing: customer "Brightwater Farms" (C-1080)\n'
          'Earlier in this session: "Pull up Brightwater Farms."')


def _session_chain(memory: SessionMemory, model: ScriptedChatModel) -> RunnableWithMessageHistory:
    return _rwmh(model, lambda sid: ConvMemChatMessageHistory(memory, sid, view="session"))


def test_session_view_inside_rwmh_shows_the_block_and_records_turns(
    store: TranscriptStore, tenant: str, crm: Domain
) -> None:
    memory = SessionMemory(crm, transcript=store, tenant=tenant)
    model = ScriptedChatModel(responses=list(ANSWERS))
    chain = _session_chain(memory, model)
    blocks = []
    for q in QUESTIONS:
        blocks.append(memory.block("sv"))
        chain.invoke([HumanMessage(q)], _cfg("sv"))
    # turn 1: empty state, no system message; later turns: the block as of the turn before
    assert shape(model.received[0]) == [("human", QUESTIONS[0])]
    assert blocks[1] == BLOCK1
    assert shape(model.received[1]) == [("system", BLOCK1), ("human", QUESTIONS[1])]
    assert shape(model.received[2]) == [("system", blocks[2]), ("human", QUESTIONS[2])]
    assert QUESTIONS[1] in blocks[2]
    # every turn is in the record, exactly
    record = ConvMemChatMessageHistory(memory, "sv")  # record view over the same thread
    assert shape(record.messages) == [
        ("human", QUESTIONS[0]), ("ai", "Loaded."),
        ("human", QUESTIONS[1]), ("ai", "Ben Carter."),
        ("human", QUESTIONS[2]), ("ai", "Three open."),
    ]
    state = memory.get_state("sv")
    assert state is not None and state.open_turn is None and state.turn == 3
    # a turn still open names the transcript message that began it
    ConvMemChatMessageHistory(memory, "sv", view="session").add_user_message("And last year?")
    opened = memory.get_state("sv")
    assert opened is not None and opened.open_turn is not None
    assert opened.open_turn.message_id == store.active_path(tenant, record.thread_id())[-1].id


async def test_session_view_inside_rwmh_async(
    astore: TranscriptStore, tenant: str, crm: Domain
) -> None:
    memory = SessionMemory(crm, transcript=astore, tenant=tenant)
    model = ScriptedChatModel(responses=list(ANSWERS[:2]))
    chain = _session_chain(memory, model)
    for q in QUESTIONS[:2]:
        await chain.ainvoke([HumanMessage(q)], _cfg("sv-async"))
    assert shape(model.received[1]) == [("system", BLOCK1), ("human", QUESTIONS[1])]
    view = ConvMemChatMessageHistory(memory, "sv-async", view="session")
    assert await view.aget_messages() == [SystemMessage(await memory.ablock("sv-async"))]
    record = await ConvMemChatMessageHistory(memory, "sv-async").aget_messages()
    assert [m.text for m in record] == [QUESTIONS[0], "Loaded.", QUESTIONS[1], "Ben Carter."]


def test_session_view_tool_results_apply_the_domain_rule(
    store: TranscriptStore, tenant: str, crm: Domain
) -> None:
    memory = SessionMemory(crm, transcript=store, tenant=tenant)
    history = ConvMemChatMessageHistory(memory, "tools", view="session")
    history.add_messages([
        HumanMessage("Look up our newest customer."),
        AIMessage("", tool_calls=[{"name": "lookup_customer", "args": {"name": "newest"},
                                   "id": "call-1"}]),
        ToolMessage('{"id": "C-2001", "name": "Zephyr Mills"}', tool_call_id="call-1"),
        AIMessage("Zephyr Mills, since Monday."),
    ])
    state = memory.get_state("tools")
    assert state is not None and state.open_turn is None
    assert 'customer "Zephyr Mills" (C-2001)' in history.messages[0].text
    assert len(ConvMemChatMessageHistory(memory, "tools").messages) == 4


def test_session_view_clear_resets_the_state_and_keeps_the_record(
    store: TranscriptStore, tenant: str, crm: Domain
) -> None:
    memory = SessionMemory(crm, transcript=store, tenant=tenant)
    history = ConvMemChatMessageHistory(memory, "sc", view="session")
    history.add_messages([HumanMessage(QUESTIONS[0]), AIMessage("Loaded.")])
    assert history.messages == [SystemMessage(BLOCK1)]
    history.clear()
    assert history.messages == []
    assert memory.get_state("sc") is None
    assert len(store.tree(tenant, history.thread_id()).messages) == 2


# ------------------------------------------------------------------------- assignment, equality


def test_assigning_messages_replaces_the_path_in_one_transaction(
    store: TranscriptStore, tenant: str
) -> None:
    history = ConvMemChatMessageHistory(store, "trim", tenant=tenant)
    history.add_messages([HumanMessage("q1"), AIMessage("a1"), HumanMessage("q2"), AIMessage("a2")])
    begins = _count_begins(store.engine)
    history.messages = [HumanMessage("q1"), AIMessage("a1"), HumanMessage("q3")]
    assert begins() == 1
    assert history.messages == [HumanMessage("q1"), AIMessage("a1"), HumanMessage("q3")]
    tree = store.tree(tenant, history.thread_id())
    assert [m.text for m in tree.messages] == ["q1", "a1", "q2", "a2", "q3"]  # nothing lost
    assert len(tree.children(None)) == 1  # the common prefix is reused, q3 branches off a1
    history.messages = history.messages[-1:]  # the usual trim: keep the last messages
    assert history.messages == [HumanMessage("q3")]
    history.messages = []
    assert history.messages == []
    assert len(store.tree(tenant, history.thread_id()).messages) == 6


async def test_areplace_messages(astore: TranscriptStore, tenant: str) -> None:
    history = ConvMemChatMessageHistory(astore, "trim", tenant=tenant)
    await history.aadd_messages([HumanMessage("q1"), AIMessage("a1")])
    await history.areplace_messages([HumanMessage("only")])
    assert await history.aget_messages() == [HumanMessage("only")]
    tree = await astore.atree(tenant, await history.athread_id())
    assert [m.text for m in tree.messages] == ["q1", "a1", "only"]


def test_assigning_refuses_what_cannot_come_back_and_writes_nothing(
    store: TranscriptStore, tenant: str
) -> None:
    history = ConvMemChatMessageHistory(store, "bad", tenant=tenant)
    history.add_messages([HumanMessage("kept")])
    with pytest.raises(ConfigError, match="RemoveMessage"):
        history.messages = [HumanMessage("new"), RemoveMessage(id="x")]
    assert history.messages == [HumanMessage("kept")]


def test_assigning_in_the_session_view_is_refused(
    store: TranscriptStore, tenant: str, crm: Domain
) -> None:
    memory = SessionMemory(crm, transcript=store, tenant=tenant)
    history = ConvMemChatMessageHistory(memory, "sv", view="session")
    history.add_messages([HumanMessage(QUESTIONS[0]), AIMessage("Loaded.")])
    with pytest.raises(ConfigError, match="view='session'"):
        history.messages = history.messages
    assert len(store.tree(tenant, history.thread_id()).messages) == 2


def test_equality_is_the_value_of_messages(store: TranscriptStore, tenant: str) -> None:
    def history(key: str, *messages: BaseMessage, **kw: Any) -> ConvMemChatMessageHistory:
        made = ConvMemChatMessageHistory(store, key, **{"tenant": tenant, **kw})
        made.add_messages(list(messages))
        return made

    one = history("one", HumanMessage("hi"), AIMessage("hello"))
    assert one == history("two", HumanMessage("hi"), AIMessage("hello"))  # another thread
    assert one == ConvMemChatMessageHistory(store, "one", tenant=tenant)  # the same thread
    assert one == history("other-tenant", HumanMessage("hi"), AIMessage("hello"),
                          tenant=tenant + "-b")
    assert one != history("three", HumanMessage("hi"))
    assert one != history("four", HumanMessage("hi"), AIMessage("hello!"))
    assert history("e1") == history("e2")
    one.add_messages([HumanMessage("more")])
    assert one != history("five", HumanMessage("hi"), AIMessage("hello"))
    with pytest.raises(TypeError, match="unhashable"):
        hash(one)


def test_equality_needs_the_same_class_and_view(
    store: TranscriptStore, tenant: str, crm: Domain
) -> None:
    from langchain_core.chat_history import InMemoryChatMessageHistory

    record = ConvMemChatMessageHistory(store, "k", tenant=tenant)
    assert record.messages == []
    with warnings.catch_warnings():  # the in-memory class is deprecated (and warns) itself
        warnings.simplefilter("ignore", LangChainDeprecationWarning)
        in_memory = InMemoryChatMessageHistory()
    assert record != in_memory and in_memory != record  # as pydantic: another class
    assert record != []
    session = ConvMemChatMessageHistory(
        SessionMemory(crm, transcript=store, tenant=tenant), "k", view="session")
    assert session.messages == record.messages == []
    assert session != record
