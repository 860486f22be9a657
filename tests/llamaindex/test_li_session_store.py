"""The session view of both chat stores, on SQLite and PostgreSQL: what reads return,
how writes drive the state and the record, and what the record view's guarantees
(tenancy, erasure, export, redaction) become.

Ports of upstream tests that apply to a view (``test_simple_chat_store.py``,
``test_sql.py``, ``test_memory_custom_chat_store.py``) are marked "port:" with the
upstream name; the record-view ports are in ``test_li_chat_store*.py``.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from llama_index.core.base.llms.types import ImageBlock, TextBlock, ToolCallBlock
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer, Memory, StaticMemoryBlock
from llama_index.core.storage.chat_store.base_db import MessageStatus

from convmem.domain import Domain
from convmem.errors import ConfigError, TranscriptUnavailable
from convmem.session import SessionMemory
from convmem.transcript import RetentionPolicy, ThreadNotFound, TranscriptStore
from llamaindex_convmem import ConvMemChatStore, ConvMemDBChatStore, SessionStateBlock
from llamaindex_convmem.session_store import tool_result
from tests.llamaindex.conftest import TODAY
from tests.llamaindex.li_helpers import CapturingLLM, bot, roles_and_text, system, texts, user
from tests.recorded_inputs import record

ACTIVE, ARCHIVED = MessageStatus.ACTIVE, MessageStatus.ARCHIVED
SYSTEM = "You are a CRM assistant."
OPEN1 = '## Session context\nCurrently discussing: customer "Brightwater Farms" (C-1080)'
BLOCK1 = OPEN1 + '\nEarlier in this session: "Pull up Brightwater Farms."'
Q1, Q2, Q2R = "Pull up Brightwater Farms.", "Who's their rep?", "Who's Brightwater Farms's rep?"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def tool_turn(call_id: str = "call-1") -> list[ChatMessage]:
    """A tool round as ``FunctionAgent`` stores it (``FunctionTool`` keeps ``str(dict)``)."""
    return [
        user("Look up our newest customer."),
        ChatMessage(role="assistant", blocks=[
            ToolCallBlock(tool_call_id=call_id, tool_name="lookup_customer",
                          tool_kwargs={"name": "newest"})]),
        ChatMessage(role="tool", content="{'id': 'C-2001', 'name': 'Zephyr Mills'}",
                    additional_kwargs={"tool_call_id": call_id}),
    ]


@pytest.fixture
def store(recorded: SessionMemory) -> ConvMemChatStore:
    return ConvMemChatStore(recorded, view="session", system_prompt=SYSTEM)


@pytest.fixture
def db_store(recorded: SessionMemory) -> ConvMemDBChatStore:
    return ConvMemDBChatStore(recorded, view="session", system_prompt=SYSTEM)


def record_view(memory: SessionMemory) -> ConvMemChatStore:
    """The record view over the same transcript and tenant."""
    assert memory.transcript is not None
    return ConvMemChatStore(memory.transcript, tenant=memory.tenant)


def rows(memory: SessionMemory, key: str) -> int:
    assert memory.transcript is not None
    tid = memory.transcript_thread_id(key)
    return len(memory.transcript.tree(memory.tenant, tid).messages)


# ---------------------------------------------------------------- reads


def test_reads_are_the_block_and_the_current_turn(store: ConvMemChatStore) -> None:
    assert store.get_messages("k") == []
    store.add_message("k", user(Q1))
    assert roles_and_text(store.get_messages("k")) == [("system", OPEN1), ("user", Q1)]
    store.add_message("k", bot("Loaded."))
    assert store.get_messages("k") == [system(BLOCK1)]  # between turns: the block alone
    store.add_message("k", user(Q2))
    assert roles_and_text(store.get_messages("k")) == [("system", BLOCK1), ("user", Q2R)]
    store.add_message("k", bot("Dana Whitfield."))
    shown = store.get_messages("k")
    assert len(shown) == 1 and Q2 in (shown[0].content or "")  # the question, never the answer
    assert "Dana" not in (shown[0].content or "")


def test_rewrite_false_shows_the_question_as_typed(recorded: SessionMemory) -> None:
    plain = ConvMemChatStore(recorded, view="session", rewrite=False)
    plain.add_messages("k", [user(Q1), bot("Loaded."), user(Q2)])
    assert roles_and_text(plain.get_messages("k")) == [("system", BLOCK1), ("user", Q2)]


def test_a_question_keeps_its_image_when_rewritten(store: ConvMemChatStore) -> None:
    store.add_messages("k", [user(Q1), bot("Loaded.")])
    asked = ChatMessage(role="user", blocks=[
        TextBlock(text=Q2), ImageBlock(image=PNG, image_mimetype="image/png")])
    store.add_message("k", asked)
    shown = store.get_messages("k")[-1]
    assert [type(b) for b in shown.blocks] == [TextBlock, ImageBlock]
    assert shown.content == Q2R
    image = shown.blocks[1]
    assert isinstance(image, ImageBlock) and base64.b64decode(image.image or b"") == PNG
    store.add_message("k", bot("Dana."))
    assert store.history("k")[2] == asked  # the record keeps the message as it was added


def test_clarification_is_the_verbatim_relay_instruction(store: ConvMemChatStore) -> None:
    store.add_message("k", user("How is Summit doing?"))
    instruction, question = store.get_messages("k")
    assert (instruction.content or "").startswith(
        "Reply to the user with exactly this question and nothing else:\n"
        'Two customers match "Summit". Which one?\n1. Summit Outdoor Co.'
    )
    assert question.content == "How is Summit doing?"
    store.add_messages("k", [bot("Which one? 1. Summit Outdoor Co. 2. Summit Outdoor GmbH"),
                             user("Munich.")])
    assert store.get_messages("k")[-1].content == "How is Summit Outdoor GmbH doing?"


# ---------------------------------------------------------------- writes drive the state


async def test_tool_steps_are_shown_and_go_through_the_tool_rule(
    db_store: ConvMemDBChatStore, recorded: SessionMemory
) -> None:
    steps = tool_turn()
    await db_store.add_messages("k", steps)
    shown = await db_store.get_messages("k")
    assert 'customer "Zephyr Mills" (C-2001)' in (shown[0].content or "")  # the rule, at once
    assert shown[1:] == steps  # the question and this turn's tool call and result
    answer = bot("Zephyr Mills, since Monday.")
    await db_store.add_message("k", answer)
    state = await recorded.aget_state("k")
    assert state is not None and state.open_turn is None and state.focus is not None
    assert state.focus.id == "C-2001"
    assert [m.role.value for m in await db_store.get_messages("k")] == ["system"]
    assert await db_store.ahistory("k") == [*steps, answer]  # lossless, in order


def test_openai_style_tool_calls_are_read_too(store: ConvMemChatStore, recorded: SessionMemory) -> None:
    store.add_messages("k", [
        user("Look up our newest customer."),
        ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
            {"id": "c9", "type": "function",
             "function": {"name": "lookup_customer", "arguments": '{"name": "newest"}'}}]}),
        ChatMessage(role="tool", content='{"id": "C-2001", "name": "Zephyr Mills"}',
                    additional_kwargs={"tool_call_id": "c9"}),
        bot("Zephyr Mills."),
    ])
    state = recorded.get_state("k")
    assert state is not None and state.focus is not None and state.focus.id == "C-2001"


@pytest.mark.parametrize(("text", "data"), [
    ('{"id": "C-1", "name": "A"}', {"id": "C-1", "name": "A"}),
    ("[{'id': 'C-1'}, {'id': 'C-2'}]", [{"id": "C-1"}, {"id": "C-2"}]),
    ("{'id': 'C-1', 'when': datetime.date(2026, 1, 1)}", None),  # not a literal: no data
    ("__import__('os').system('echo hi')", None),
    ("Error: tool failed", None),
    ("[" * 5000 + "]" * 5000, None),
    ("{'id': 'C-1'" + " " * 1_000_001 + "}", None),
])
def test_tool_text_is_parsed_as_data_only(text: str, data: Any) -> None:
    result = tool_result(ChatMessage(role="tool", content=text))
    assert result.ok and result.data == data


def test_a_user_message_begins_a_turn_the_record_can_name(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    store.add_message("k", user(Q1))
    state = recorded.get_state("k")
    assert state is not None and state.open_turn is not None
    store.get_messages("k")  # the read before the model call writes the user message
    (question,) = record_view(recorded).transcript.active_path(
        recorded.tenant, store.thread_id("k"))
    assert question.extra["convmem"]["message_id"] == state.open_turn.message_id


def test_nul_and_lone_surrogates_never_fail_a_turn(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    store.add_messages("k", [user("Pull up\x00 Brightwater Farms.\ud800"), bot("ok\x00")])
    state = recorded.get_state("k")
    assert state is not None and state.recent_questions == ("Pull up\ufffd Brightwater Farms.\ufffd",)
    assert texts(store.history("k")) == ["Pull up\ufffd Brightwater Farms.\ufffd", "ok\ufffd"]


# ---------------------------------------------------------------- the record


def test_the_read_before_the_model_call_is_what_the_record_holds(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    store.add_messages("k", [user(Q1), bot("Loaded.")])  # no read: no model saw this turn
    store.add_message("k", user(Q2))
    shown = store.get_messages("k")
    store.get_messages("k")  # later reads of the turn record nothing more
    store.add_message("k", bot("Dana Whitfield."))
    (turn,), path = record(recorded, "k")
    assert [m.text for m in path] == [Q1, "Loaded.", Q2, "Dana Whitfield."]
    assert path[0].turn_id is None  # appended whole: no model input
    assert turn.system_prompt == SYSTEM and turn.rendered_block == shown[0].content
    assert turn.user_message.extra["convmem"]["sent_as"] == Q2R
    assert turn.completed_at is not None and turn.answer_message_id == path[-1].id
    assert turn.state_snapshot["open_turn"]["question"] == Q2


def test_a_read_before_the_question_is_what_the_record_holds(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    """An engine that reads before it writes (``ContextChatEngine``) sent the model the
    view as it was before the question: one turn stale, and recorded as such."""
    store.add_messages("k", [user(Q1), bot("Loaded.")])
    assert store.get_messages("k") == [system(BLOCK1)]  # the engine reads ...
    store.add_messages("k", [user(Q2), bot("Dana Whitfield.")])  # ... then writes both
    (turn,), _ = record(recorded, "k")
    assert turn.rendered_block == BLOCK1 and turn.user_message.text == Q2
    assert "sent_as" not in turn.user_message.extra["convmem"]  # it got the raw question


def test_an_unanswered_question_is_recorded_when_the_next_one_comes(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    store.add_message("k", user(Q1))  # the model call failed; no read, no answer
    store.add_messages("k", [user("Pull up Pinecrest Clinics."), bot("Loaded.")])
    assert [m.text for m in store.transcript.active_path(recorded.tenant, store.thread_id("k"))] \
        == [Q1, "Pull up Pinecrest Clinics.", "Loaded."]


# ---------------------------------------------------------------- ids, tenancy, erasure, export


async def test_thread_id_is_the_memory_s_transcript_thread(
    store: ConvMemChatStore, db_store: ConvMemDBChatStore, recorded: SessionMemory
) -> None:
    expected = await recorded.atranscript_thread_id("key/with:separators")
    assert await store.athread_id("key/with:separators") == expected
    assert await db_store.athread_id("key/with:separators") == expected
    assert store.tenant == db_store.tenant == recorded.tenant


def test_sync_thread_id_on_both_stores(
    store: ConvMemChatStore, db_store: ConvMemDBChatStore, recorded: SessionMemory
) -> None:
    assert store.thread_id("k") == db_store.thread_id("k") == recorded.transcript_thread_id("k")


def test_tenants_never_see_each_other(
    crm: Domain, transcript: TranscriptStore, tenant: str
) -> None:
    """port: test_simple_chat_store / test_sql get_keys, per tenant."""
    mine = SessionMemory(crm, transcript=transcript, clock=lambda: TODAY, tenant=tenant)
    theirs = SessionMemory(crm, transcript=transcript, clock=lambda: TODAY, tenant=tenant + "-b")
    a = ConvMemChatStore(mine, view="session")
    b = ConvMemChatStore(theirs, view="session")
    a.add_messages("shared", [user(Q1), bot("Loaded.")])
    b.add_messages("shared", [user("Pull up Pinecrest Clinics."), bot("Loaded.")])
    assert a.thread_id("shared") != b.thread_id("shared")
    assert texts(a.history("shared")) == [Q1, "Loaded."]
    assert "Brightwater" not in (b.get_messages("shared")[0].content or "")
    assert a.get_keys() == ["shared"] == b.get_keys()
    with pytest.raises(ConfigError, match="tenant is the SessionMemory's"):
        ConvMemChatStore(mine, view="session", tenant=tenant + "-b")


def test_delete_thread_erases_the_record_and_the_state(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    store.add_messages("k", [user(Q1), bot("Loaded.")])
    store.add_message("k", user(Q2))  # a turn in flight
    old = store.thread_id("k")
    receipt = store.delete_thread("k")
    assert receipt is not None and receipt.thread_id == old
    assert recorded.get_state("k") is None
    with pytest.raises(ThreadNotFound):
        store.transcript.get_thread(recorded.tenant, old)
    assert store.get_messages("k") == []
    store.add_messages("k", [user("Pull up Pinecrest Clinics."), bot("Loaded.")])
    assert store.thread_id("k") != old and texts(store.history("k")) == [
        "Pull up Pinecrest Clinics.", "Loaded."]


async def test_adelete_thread_on_the_db_store(
    db_store: ConvMemDBChatStore, recorded: SessionMemory
) -> None:
    await db_store.add_messages("k", [user(Q1), bot("Loaded.")])
    old = await db_store.athread_id("k")
    await db_store.adelete_thread("k")
    assert await recorded.aget_state("k") is None
    assert await db_store.get_messages("k") == []
    assert await db_store.athread_id("k") != old


def test_export_and_redaction_reach_the_live_state(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    store.add_messages("k", [user(Q1), bot("Loaded."), user(Q2)])
    store.get_messages("k")
    store.add_message("k", bot("Dana Whitfield."))
    exported = store.transcript.export_thread(recorded.tenant, store.thread_id("k"))
    assert Q2 in exported and "Dana Whitfield." in exported
    question = store.transcript.active_path(recorded.tenant, store.thread_id("k"))[2]
    recorded.redact("k", question.id, actor="dpo", reason="test")
    state = recorded.get_state("k")
    assert state is not None and state.recent_questions == (Q1,)  # typed form and rewrite gone
    assert Q2R not in (store.get_messages("k")[0].content or "")
    assert Q2R not in store.transcript.export_thread(recorded.tenant, store.thread_id("k"))


def test_delete_messages_resets_the_state_and_keeps_the_record(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    """port: test_delete_messages (test_simple_chat_store): one key only."""
    store.add_messages("k", [user(Q1), bot("Loaded.")])
    store.add_messages("other", [user(Q1), bot("Loaded.")])
    assert store.delete_messages("k") == [system(BLOCK1)]  # what the model was shown
    assert store.get_messages("k") == [] and recorded.get_state("k") is None
    assert store.delete_messages("k") is None
    assert store.get_keys() == ["other"]
    assert rows(recorded, "k") == 2
    assert store.get_messages("other") == [system(BLOCK1)]


def test_positional_edits_of_a_history_are_refused(store: ConvMemChatStore) -> None:
    store.add_messages("k", [user(Q1), bot("Loaded.")])
    for call in (lambda: store.delete_message("k", 0), lambda: store.delete_last_message("k"),
                 lambda: store.add_message("k", user("x"), idx=0)):
        with pytest.raises(ConfigError, match=r"view='session'.*record view"):
            call()
    assert store.get_messages("k") == [system(BLOCK1)]


async def test_db_store_refusals(db_store: ConvMemDBChatStore) -> None:
    with pytest.raises(ConfigError, match="delete_oldest_messages"):
        await db_store.delete_oldest_messages("k", 1)
    with pytest.raises(ConfigError, match="ARCHIVED"):
        await db_store.add_message("k", user(Q1), status=ARCHIVED)
    with pytest.raises(ConfigError, match="ARCHIVED"):
        await db_store.set_messages("k", [user(Q1)], status=ARCHIVED)
    with pytest.raises(ConfigError, match="delete_message"):
        await db_store.delete_message("k", 0)


# ---------------------------------------------------------------- set_messages


def test_set_messages_seeds_the_record_and_rebuilds_the_state(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    seed = [user(Q1), bot("Loaded.")]
    store.set_messages("k", seed)
    assert store.history("k") == seed and store.get_messages("k") == [system(BLOCK1)]
    version = recorded.get_state("k")
    store.set_messages("k", seed)  # the same history: nothing happens
    store.set_messages("k", store.get_messages("k"))  # the view handed back: nothing either
    assert rows(recorded, "k") == 2 and recorded.get_state("k") == version

    store.set_messages("k", [*seed, user(Q2), bot("Dana.")])  # an extension
    state = recorded.get_state("k")
    assert state is not None and state.turn == 2 and rows(recorded, "k") == 4

    store.set_messages("k", [user("Pull up Pinecrest Clinics."), bot("Loaded.")])  # another
    state = recorded.get_state("k")
    assert state is not None and state.turn == 1 and state.focus is not None
    assert state.focus.label == "Pinecrest Clinics"
    assert rows(recorded, "k") == 6  # the old branch stays in the record


def test_set_messages_with_an_unanswered_question_opens_the_turn(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    store.set_messages("k", [user(Q1), bot("Loaded."), user(Q2)])
    assert roles_and_text(store.get_messages("k")) == [("system", BLOCK1), ("user", Q2R)]
    store.add_message("k", bot("Dana."))
    (turn,), path = record(recorded, "k")
    assert [m.text for m in path] == [Q1, "Loaded.", Q2, "Dana."]
    assert turn.user_message.text == Q2 and turn.rendered_block == BLOCK1


async def test_memory_from_defaults_with_chat_history(
    db_store: ConvMemDBChatStore, recorded: SessionMemory
) -> None:
    """port: test_from_defaults_with_our_store (test_memory_custom_chat_store)."""
    memory = Memory.from_defaults(
        session_id="seeded", token_limit=1000, chat_history=[user(Q1), bot("Loaded.")],
        chat_store=db_store,
    )
    assert memory.sql_store is db_store
    assert await memory.aget() == [system(BLOCK1)]
    assert texts(await db_store.ahistory("seeded")) == [Q1, "Loaded."]


# ---------------------------------------------------------------- Memory's machinery


async def test_archive_hides_the_current_turn_s_oldest_and_never_a_past_turn(
    db_store: ConvMemDBChatStore, recorded: SessionMemory
) -> None:
    """port: test_archive_oldest_messages / test_get_messages_with_limit_and_offset /
    test_delete_by_status (test_sql), on the view."""
    await db_store.add_messages("k", [user(Q1), bot("Loaded.")])
    assert await db_store.archive_oldest_messages("k", 5) == []  # between turns: nothing
    steps = tool_turn()
    await db_store.add_messages("k", steps)
    block = (await db_store.get_messages("k"))[0]
    assert await db_store.archive_oldest_messages("k", 2) == steps[:1]  # the block is skipped
    assert await db_store.get_messages("k", status=ACTIVE) == [block, *steps[1:]]
    assert await db_store.get_messages("k", status=ARCHIVED) == steps[:1]
    assert await db_store.get_messages("k", status=None) == [block, *steps]
    assert await db_store.get_messages("k", status=None, limit=2, offset=1) == steps[:2]
    assert await db_store.count_messages("k", status=ARCHIVED) == 1
    assert await db_store.count_messages("k") == 3
    await db_store.delete_messages("k", status=ARCHIVED)
    assert await db_store.get_messages("k", status=ARCHIVED) == []
    await db_store.add_message("k", bot("Zephyr Mills."))
    assert len(await db_store.get_messages("k", status=None)) == 1
    thread = await db_store.transcript.aget_thread(recorded.tenant, await db_store.athread_id("k"))
    assert thread.archived_seq == 0  # the record's watermark is the record view's
    assert len(await db_store.ahistory("k")) == 6


async def test_memory_token_flush_on_the_view_never_replays(
    db_store: ConvMemDBChatStore, recorded: SessionMemory
) -> None:
    """``Memory``'s waterfall with a small limit: the record view would archive the
    history turn by turn; the session view has none to archive (the prompt stays block +
    question), and a turn over the limit is kept whole (``Memory`` keeps the latest
    complete turn; its bid to archive the block is a no-op)."""
    memory = Memory(token_limit=200, token_flush_size=60, chat_history_token_ratio=0.5,
                    session_id="w", sql_store=db_store)
    llm = CapturingLLM(answers=["word " * 150] * 6)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for q in (Q1, Q2, "Any open orders?", "And last year?"):
        await engine.achat(q)
    assert all(len(sent) <= 2 for sent in llm.received)  # block + question, every turn
    tid = await db_store.athread_id("w")
    assert (await db_store.transcript.aget_thread(recorded.tenant, tid)).archived_seq == 0
    assert len(await db_store.ahistory("w")) == 8

    turn = [user("List every order."), ChatMessage(role="assistant", blocks=[
        ToolCallBlock(tool_call_id="c1", tool_name="list_orders", tool_kwargs={})]),
        ChatMessage(role="tool", content="row " * 400, additional_kwargs={"tool_call_id": "c1"})]
    await memory.aput_messages(turn)
    assert await db_store.get_messages("w", status=ARCHIVED) == []
    assert (await memory.aget())[1:] == turn
    await memory.aput(bot("There are 400 rows."))
    assert (await db_store.ahistory("w"))[-4:] == [*turn, bot("There are 400 rows.")]
    assert [m.role.value for m in await memory.aget()] == ["system"]


async def test_memory_blocks_compose_with_the_view(
    db_store: ConvMemDBChatStore, recorded: SessionMemory
) -> None:
    memory = Memory.from_defaults(session_id="mb", chat_store=db_store, memory_blocks=[
        StaticMemoryBlock(name="policy", static_content="Answer in English."),
        SessionStateBlock(recorded),
    ])
    llm = CapturingLLM()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for q in (Q1, Q2):
        await engine.achat(q)
    sent = llm.received[-1]
    assert [r for r, _ in sent] == ["system", "user"] and sent[-1] == ("user", Q2R)
    assert "Answer in English." in sent[0][1] and BLOCK1 in sent[0][1]
    state = await recorded.aget_state("mb")
    assert state is not None and state.turn == 2 and state.open_turn is None  # one turn each


# ---------------------------------------------------------------- buffer, degrade, identity


def test_chat_memory_buffer_reset_is_delete_messages(
    store: ConvMemChatStore, recorded: SessionMemory
) -> None:
    buffer = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="b")
    engine = SimpleChatEngine.from_defaults(llm=CapturingLLM(), memory=buffer)
    engine.chat(Q1)
    assert engine.chat_history == [system(BLOCK1)]  # what the model would see next
    engine.reset()
    assert store.get_messages("b") == [] and recorded.get_state("b") is None
    assert rows(recorded, "b") == 2


@pytest.mark.parametrize("mode", ["raise", "degrade"])
def test_an_unreachable_record(crm: Domain, mode: str) -> None:
    down = TranscriptStore("postgresql://nobody@127.0.0.1:1/none",
                           retention=RetentionPolicy(max_age=None, owner="t"))
    memory = SessionMemory(crm, transcript=down, clock=lambda: TODAY,
                           on_transcript_error=mode)  # type: ignore[arg-type]
    store = ConvMemChatStore(memory, view="session")
    store.add_message("k", user(Q1))
    if mode == "raise":  # the turn fails before the model is called
        with pytest.raises(TranscriptUnavailable):
            store.get_messages("k")
        return
    assert roles_and_text(store.get_messages("k")) == [("system", OPEN1), ("user", Q1)]
    store.add_message("k", bot("Loaded."))
    assert memory.stats.transcript_failures == 2  # both commit points, logged and counted
    state = memory.get_state("k")
    assert state is not None and state.open_turn is None and state.turn == 1
    down.close()


def test_serialization_and_rebuilding(recorded: SessionMemory) -> None:
    store = ConvMemChatStore(recorded, view="session", rewrite=False, system_prompt=SYSTEM)
    dumped = store.to_dict()
    assert dumped["view"] == "session" and dumped["rewrite"] is False
    assert dumped["tenant"] == recorded.tenant and dumped["system_prompt"] == SYSTEM
    assert "password" not in repr(dumped)
    again = ConvMemChatStore.from_dict(dumped, store=recorded)
    assert again.view == "session" and again.rewrite is False and again.tenant == recorded.tenant
    with pytest.raises(ConfigError, match="give the SessionMemory"):
        ConvMemChatStore.from_dict(dumped)
    db = ConvMemDBChatStore(recorded, view="session")
    assert db.to_dict()["view"] == "session" and db.to_dict()["class_name"] == "ConvMemDBChatStore"
    assert record_view(recorded).to_dict().keys() == {"tenant", "database", "class_name"}


def test_bad_arguments_are_named(recorded: SessionMemory, crm: Domain) -> None:
    assert recorded.transcript is not None
    with pytest.raises(ConfigError, match=r"needs a convmem\.SessionMemory"):
        ConvMemChatStore(recorded.transcript, view="session")
    with pytest.raises(ConfigError, match=r"for view='session'.*memory\.transcript"):
        ConvMemChatStore(recorded)  # a memory without view="session" would silently replay
    with pytest.raises(ConfigError, match="no transcript"):
        ConvMemDBChatStore(SessionMemory(crm), view="session")
    with pytest.raises(ConfigError, match="view must be"):
        ConvMemChatStore(recorded, view="block")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rewrite"):
        ConvMemChatStore(recorded, view="session", rewrite="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="belong to view='session'"):
        ConvMemChatStore(recorded.transcript, rewrite=False)
    store = ConvMemChatStore(recorded, view="session")
    for key in ("", "bad\x00key"):
        with pytest.raises(ConfigError, match="chat store key"):
            store.get_messages(key)
    with pytest.raises(ConfigError, match="ChatMessage"):
        store.add_message("k", "not a message")  # type: ignore[arg-type]
