"""Commit point 2 where the active leaf moved after point 1, and raced by a second writer.

On PostgreSQL point 2 is one statement when the turn's user message is still the
active leaf, and otherwise the general path (path walk under the thread lock): both
must place the answer as before, on SQLite and PostgreSQL, sync and async.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from convmem.errors import ConfigError
from convmem.testing.transcript_spec import bot, user
from convmem.transcript import ModelInput, TranscriptStore


@pytest.fixture
def store(transcript: TranscriptStore) -> TranscriptStore:
    """tests/conftest.py's migrated store, on SQLite and on PostgreSQL."""
    return transcript


def complete(store: TranscriptStore, api: str, *args: object) -> list[str]:
    """``complete_turn`` or its async twin; the texts of what it wrote."""
    if api == "sync":
        out = store.complete_turn(*args)  # type: ignore[arg-type]
    else:
        out = asyncio.run(store.acomplete_turn(*args))  # type: ignore[arg-type]
    return [m.text for m in out]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_another_device_appended_meanwhile(store: TranscriptStore, tenant: str, api: str) -> None:
    th = store.create_thread(tenant)
    tr = store.begin_turn_record(tenant, th.id, user("q1"), ModelInput())
    (other,) = store.append(tenant, th.id, user("from the phone"))
    assert complete(store, api, tenant, th.id, tr.turn_id, [bot("a1")]) == ["a1"]
    path = store.active_path(tenant, th.id)
    assert [(m.seq, m.text) for m in path] == [(1, "q1"), (2, "from the phone"), (3, "a1")]
    assert path[2].parent_id == other.id
    rec = store.reconstruct_model_input(tenant, th.id, tr.turn_id)
    assert rec.answer_message_id == path[2].id and rec.completed_at is not None


@pytest.mark.parametrize("api", ["sync", "async"])
def test_user_moved_to_another_branch(store: TranscriptStore, tenant: str, api: str) -> None:
    th = store.create_thread(tenant)
    (hello,) = store.append(tenant, th.id, user("hello"))
    tr = store.begin_turn_record(tenant, th.id, user("q1"), ModelInput())
    (edited,) = store.append(tenant, th.id, user("q1, edited"), parent_id=hello.id)
    assert complete(store, api, tenant, th.id, tr.turn_id, [bot("a1")]) == ["a1"]
    assert [m.text for m in store.active_path(tenant, th.id)] == ["hello", "q1, edited"]
    answer = store.reconstruct_model_input(tenant, th.id, tr.turn_id).answer_message_id
    tree = store.tree(tenant, th.id)
    placed = next(m for m in tree.messages if m.id == answer)
    assert placed.parent_id == tr.user_message.id and placed.seq == 4
    assert edited.seq == 3


def test_racing_completions_write_once(store: TranscriptStore, tenant: str) -> None:
    th = store.create_thread(tenant)
    tr = store.begin_turn_record(tenant, th.id, user("q1"), ModelInput())
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [
            pool.submit(store.complete_turn, tenant, th.id, tr.turn_id, [bot(f"a{i}")])
            for i in range(4)
        ]
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result(timeout=60))
            except ConfigError as exc:
                assert "already complete" in str(exc)
                outcomes.append(None)
    written = [o for o in outcomes if o is not None]
    assert len(written) == 1
    path = store.active_path(tenant, th.id)
    assert [m.seq for m in path] == [1, 2] and path[1].id == written[0][0].id
    assert store.reconstruct_model_input(tenant, th.id, tr.turn_id).answer_message_id == path[1].id
