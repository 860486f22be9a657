"""``ConvMemChatStore`` (a LlamaIndex ``BaseChatStore``) on SQLite and PostgreSQL.

Our ports of ``llama-index-core/tests/storage/chat_store/test_simple_chat_store.py``
(``SimpleChatStore`` semantics: positional ``idx``, ``None`` on a bad index or an
empty history, ``delete_messages`` returns what it removed), run through the sync
methods and through their async twins; plus what the record adds: deletions keep
the rows, ``set_messages`` reuses the shared prefix, tenants are isolated, and the
sync and async twins leave the same record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer

from convmem.errors import ConfigError
from convmem.testing.transcript_driver import FOREVER
from convmem.transcript import TranscriptStore
from llamaindex_convmem import ConvMemChatStore
from tests.llamaindex.li_chat_store_api import StoreApi, store_api
from tests.llamaindex.li_helpers import CountingLLM


def user(text: str, **kw: Any) -> ChatMessage:
    return ChatMessage(role="user", content=text, **kw)


def bot(text: str, **kw: Any) -> ChatMessage:
    return ChatMessage(role="assistant", content=text, **kw)


@pytest.fixture
def chat_store(transcript: TranscriptStore, tenant: str) -> ConvMemChatStore:
    return ConvMemChatStore(transcript, tenant=tenant)


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, chat_store: ConvMemChatStore) -> Iterator[StoreApi]:
    with store_api(chat_store, request.param) as a:
        yield a


def rows(store: ConvMemChatStore, key: str) -> int:
    """Every message row of the key's thread, on any branch."""
    return len(store.transcript.tree(store.tenant, store.thread_id(key)).messages)


# ---------------------------------------------------------------- ports of test_simple_chat_store


def test_add_messages_per_key_in_order_and_insert_at_idx(api: StoreApi) -> None:
    for key in ("user1", "user2"):
        api.add_message(key, user("hello"))
        api.add_message(key, user("world"))
    assert api.get_messages("user1") == [user("hello"), user("world")]
    assert api.get_messages("user2") == [user("hello"), user("world")]
    assert api.get_keys() == ["user1", "user2"]

    api.add_message("user1", user("hello"), idx=0)
    assert api.get_messages("user1") == [user("hello"), user("hello"), user("world")]


def test_delete_messages_empties_one_key_only(api: StoreApi) -> None:
    for key in ("user1", "user2"):
        api.add_message(key, user("hello"))
        api.add_message(key, user("world"))

    assert api.delete_messages("user1") == [user("hello"), user("world")]

    assert api.get_messages("user1") == []
    assert api.get_messages("user2") == [user("hello"), user("world")]
    assert api.get_keys() == ["user2"]
    assert api.delete_messages("user1") is None
    # the record keeps what the active path dropped
    assert rows(api.store, "user1") == 2


def test_delete_last_message(api: StoreApi) -> None:
    api.add_message("user1", user("hello"))
    api.add_message("user1", user("world"))

    assert api.delete_last_message("user1") == user("world")

    assert api.get_messages("user1") == [user("hello")]
    assert rows(api.store, "user1") == 2


def test_delete_message_at_position(api: StoreApi) -> None:
    api.add_message("user1", user("hello"))
    api.add_message("user1", user("world"))

    assert api.delete_message("user1", 0) == user("hello")

    assert api.get_messages("user1") == [user("world")]


@pytest.mark.parametrize("idx", [-2, -1, 1, 5])
def test_delete_message_out_of_bounds_is_none(api: StoreApi, idx: int) -> None:
    api.add_message("user1", user("hello"))

    assert api.delete_message("user1", idx) is None
    assert api.get_messages("user1") == [user("hello")]


def test_delete_last_message_from_an_emptied_history_is_none(api: StoreApi) -> None:
    api.add_message("user1", user("hello"))

    assert api.delete_last_message("user1") == user("hello")
    assert api.delete_last_message("user1") is None
    assert api.delete_last_message("never-used") is None


def test_non_ascii_survives_a_new_store_instance(api: StoreApi) -> None:
    """The port of the persist test: our persistence is the database itself."""
    api.add_message("user1", user("ハロー héllo"))
    fresh = ConvMemChatStore(api.store.transcript, tenant=api.store.tenant)
    assert fresh.get_messages("user1") == [user("ハロー héllo")]
    exported = fresh.transcript.export_thread(fresh.tenant, fresh.thread_id("user1"))
    assert "ハロー héllo" in exported


# ---------------------------------------------------------------- what the record adds


def test_set_messages_reuses_the_shared_prefix_and_the_same_list_is_a_no_op(
    api: StoreApi,
) -> None:
    first = [user("q1"), bot("a1"), user("q2")]
    api.set_messages("k", first)
    api.set_messages("k", first)
    assert rows(api.store, "k") == 3

    second = [user("q1"), bot("a1 edited")]
    api.set_messages("k", second)
    assert api.get_messages("k") == second
    assert rows(api.store, "k") == 4  # only the edited answer is new
    api.set_messages("k", [])
    assert api.get_messages("k") == []
    assert rows(api.store, "k") == 4


def test_set_messages_sees_a_change_in_additional_kwargs(api: StoreApi) -> None:
    api.set_messages("k", [bot("same text", additional_kwargs={"v": 1})])
    api.set_messages("k", [bot("same text", additional_kwargs={"v": 2})])
    assert api.get_messages("k") == [bot("same text", additional_kwargs={"v": 2})]


def test_delete_message_keeps_the_rest_in_order_and_the_old_branch(api: StoreApi) -> None:
    for text in ("m0", "m1", "m2", "m3"):
        api.add_message("k", user(text))
    assert api.delete_message("k", 1) == user("m1")
    assert [m.content for m in api.get_messages("k")] == ["m0", "m2", "m3"]
    tree = api.store.transcript.tree(api.store.tenant, api.store.thread_id("k"))
    copies = [m for m in tree.messages if m.copy_of is not None]
    assert [m.text for m in copies] == ["m2", "m3"]
    assert len(tree.messages) == 6


def test_tenants_never_see_each_other(transcript: TranscriptStore, tenant: str) -> None:
    mine = ConvMemChatStore(transcript, tenant=tenant)
    theirs = ConvMemChatStore(transcript, tenant=tenant + "-other")
    mine.add_message("shared-key", user("mine"))
    theirs.add_message("shared-key", user("theirs"))
    assert mine.get_messages("shared-key") == [user("mine")]
    assert theirs.get_messages("shared-key") == [user("theirs")]
    assert mine.thread_id("shared-key") != theirs.thread_id("shared-key")
    assert mine.get_keys() == ["shared-key"] == theirs.get_keys()


def test_a_deleted_thread_is_recreated_for_its_key(api: StoreApi) -> None:
    api.add_message("k", user("before"))
    old = api.store.thread_id("k")
    api.store.transcript.delete_thread(api.store.tenant, old)
    api.add_message("k", user("after"))
    assert api.get_messages("k") == [user("after")]
    assert api.store.thread_id("k") != old


def test_add_messages_is_one_batch(api: StoreApi) -> None:
    api.add_messages("k", [user("a"), bot("b"), user("c")])
    api.add_messages("k", [])
    assert [m.content for m in api.get_messages("k")] == ["a", "b", "c"]


def test_reads_are_one_select_each(api: StoreApi) -> None:
    """``get_keys``: one query over the tenant's threads; ``get_messages``: the path."""
    for key in ("a", "b", "c"):
        api.add_messages(key, [user("q"), bot("a")])
    api.delete_messages("b")
    transcript = api.store.transcript
    statements: list[str] = []

    def count(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        statements.append(statement)

    engines = [transcript.engine, transcript.async_engine.sync_engine]
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", count)
    try:
        keys = api.get_keys()
        messages = api.get_messages("a")
    finally:
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", count)
    assert keys == ["a", "c"]
    assert messages == [user("q"), bot("a")]
    queries = [s for s in statements if not s.startswith("BEGIN")]  # SQLite's BEGIN
    assert len(queries) == 2, statements
    assert "WHERE convmem_threads.tenant = " in queries[0]


# ---------------------------------------------------------------- parity


def _script(api: StoreApi) -> list[Any]:
    """One sequence of every method; what each returned and what the record looks like."""
    seen: list[Any] = []
    api.add_message("a", user("q1"))
    api.add_message("a", bot("a1"))
    api.add_message("a", user("q0"), idx=0)
    api.add_message("b", user("other"))
    seen.append(api.get_messages("a"))
    seen.append(api.delete_message("a", 0))
    seen.append(api.delete_message("a", 9))
    seen.append(api.delete_last_message("a"))
    api.set_messages("a", [user("q1"), bot("a2"), user("q3")])
    seen.append(api.get_messages("a"))
    seen.append(api.get_keys())
    seen.append(api.delete_messages("b"))
    seen.append(api.delete_messages("b"))
    seen.append(api.get_keys())
    tree = api.store.transcript.tree(api.store.tenant, api.store.thread_id("a"))
    index = {m.id: i for i, m in enumerate(tree.messages)}
    seen.append(
        [
            (m.role, m.text, index.get(m.parent_id or ""), index.get(m.copy_of or ""))
            for m in tree.messages
        ]
    )
    seen.append([index[i] for i in tree.active_path_ids])
    return seen


def test_sync_and_async_leave_the_same_record(transcript: TranscriptStore, tenant: str) -> None:
    results = {}
    for mode in ("sync", "async"):
        store = ConvMemChatStore(transcript, tenant=f"{tenant}-{mode}")
        with store_api(store, mode) as api:
            results[mode] = _script(api)
    assert results["sync"] == results["async"]
    assert results["sync"][1] == user("q0")


# ---------------------------------------------------------------- buffer over several turns


def test_chat_memory_buffer_over_several_turns(chat_store: ConvMemChatStore) -> None:
    memory = ChatMemoryBuffer.from_defaults(chat_store=chat_store, chat_store_key="session-7")
    llm = CountingLLM()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for i in range(4):
        engine.chat(f"question {i}")
        sent = llm.last_chat_messages
        assert sent is not None
        assert [m.content for m in sent if m.role.value == "user"] == [
            f"question {j}" for j in range(i + 1)
        ]
    stored = chat_store.get_messages("session-7")
    assert [m.role.value for m in stored] == ["user", "assistant"] * 4
    assert stored == memory.get_all()
    engine.reset()  # the buffer's reset is the store's delete_messages
    assert chat_store.get_messages("session-7") == []
    assert rows(chat_store, "session-7") == 8


async def test_chat_memory_buffer_async_turns(chat_store: ConvMemChatStore) -> None:
    memory = ChatMemoryBuffer.from_defaults(chat_store=chat_store, chat_store_key="s")
    engine = SimpleChatEngine.from_defaults(llm=CountingLLM(), memory=memory)
    for i in range(3):
        await engine.achat(f"q{i}")
    stored = await chat_store.aget_messages("s")
    assert [m.content for m in stored if m.role.value == "user"] == ["q0", "q1", "q2"]


# ---------------------------------------------------------------- identity and serialization


def test_class_name_and_serialization_hide_the_password(tmp_path: Any) -> None:
    store = TranscriptStore(
        "postgresql://app:s3cr3t-pw@db.example:5432/chat?password=q-s3cr3t", retention=FOREVER
    )
    chat = ConvMemChatStore(store, tenant="acme")
    assert ConvMemChatStore.class_name() == "ConvMemChatStore"
    dumped = chat.to_dict()
    text = json.dumps(dumped) + chat.to_json() + repr(chat) + str(chat)
    assert "s3cr3t" not in text
    assert dumped["class_name"] == "ConvMemChatStore"
    assert dumped["tenant"] == "acme"
    assert dumped["database"] == "postgresql+psycopg://app:***@db.example:5432/chat"
    buffer = ChatMemoryBuffer.from_defaults(chat_store=chat, chat_store_key="k")
    assert buffer.to_dict()["chat_store"] == dumped
    again = ConvMemChatStore.from_dict(dumped, store=store)
    assert again.tenant == "acme" and again.transcript is store
    with pytest.raises(ConfigError, match="give the TranscriptStore"):
        ConvMemChatStore.from_dict(dumped)
    store.close()


def test_bad_arguments_are_named(tmp_path: Any) -> None:
    store = TranscriptStore(f"sqlite:///{tmp_path / 'x.db'}", retention=FOREVER)
    with pytest.raises(ConfigError, match="TranscriptStore"):
        ConvMemChatStore("sqlite:///x.db")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tenant"):
        ConvMemChatStore(store, tenant="")
    chat = ConvMemChatStore(store)
    with pytest.raises(ConfigError, match="key"):
        chat.get_messages("")
    with pytest.raises(ConfigError, match="ChatMessage"):
        chat.add_message("k", "not a message")  # type: ignore[arg-type]
    store.close()
