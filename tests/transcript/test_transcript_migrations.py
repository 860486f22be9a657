"""Migrations: fill an older revision with data, upgrade to head, read it back.

0001 → head: the search index (0002) is backfilled from messages written under 0001.
0002 → 0003: tables rebuilt with per-tenant keys keep every row, threads get an
incarnation, and a model input written without quote links is still erased by the
renderer's forms of the question. 0003 → 0004: the search index's queue, which a
deferred store writes to and a downgrade indexes before it goes. 0004 → 0005: segments
split a branched thread so that search's active path is the tree's, for every leaf.
0005 → 0006: the queue keeps keys, not text; both ways index what is queued. Keep
them all when adding revisions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest
import sqlalchemy as sa

from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import NewMessage, TranscriptStore
from convmem.transcript.migrate import current_revision, head_revision


def _fill_first_revision(store: TranscriptStore, tenant: str) -> str:
    store.migrate("0001")
    assert current_revision(store.engine) == "0001"
    tid = str(uuid.uuid4())
    now = datetime(2024, 5, 1, 12, 0, 0, 123456)
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO convmem_threads (id, tenant, key, metadata, created_at, updated_at,"
                " active_leaf, next_seq, archived_seq) VALUES (:id, :tenant, 'legacy', '{}',"
                " :now, :now, :leaf, 3, 0)"
            ),
            {"id": tid, "tenant": tenant, "now": now, "leaf": f"{tid}-2"},
        )
        for seq, (role, text) in enumerate([("user", "legacy zebra"), ("assistant", "ok")], 1):
            conn.execute(
                sa.text(
                    "INSERT INTO convmem_messages (id, thread_id, tenant, parent_id, seq, role,"
                    " parts, extra, received_at, visibility) VALUES (:id, :tid, :tenant, :parent,"
                    " :seq, :role, :parts, '{}', :now, 'conversation')"
                ),
                {
                    "id": f"{tid}-{seq}",
                    "tid": tid,
                    "tenant": tenant,
                    "parent": f"{tid}-{seq - 1}" if seq > 1 else None,
                    "seq": seq,
                    "role": role,
                    "parts": json.dumps([{"kind": "text", "text": text}]),
                    "now": now,
                },
            )
    return tid


def _check_head(store: TranscriptStore, tenant: str, tid: str) -> None:
    store.migrate()
    assert current_revision(store.engine) == head_revision() == "0006"
    path = store.active_path(tenant, tid)
    assert [m.text for m in path] == ["legacy zebra", "ok"]
    assert path[0].received_at.isoformat() == "2024-05-01T12:00:00.123456+00:00"
    assert [h.message_id for h in store.search(tenant, "zebra")] == [f"{tid}-1"]
    (new,) = store.append(tenant, tid, store_message("after upgrade"))
    assert new.seq == 3 and new.parent_id == f"{tid}-2"


def store_message(text: str) -> NewMessage:
    return NewMessage(role="user", content=text)


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.sqlite),
                        pytest.param("postgres", marks=pytest.mark.postgres)])
def unmigrated_store(request: pytest.FixtureRequest) -> Iterator[TranscriptStore]:
    """A store on an empty database of this test's own (the session's PostgreSQL database
    is already at head: a new one beside it, dropped after the test)."""
    if request.param == "sqlite":
        store = TranscriptStore(request.getfixturevalue("sqlite_url"), retention=FOREVER)
        yield store
        store.engine.dispose()
        return
    base = sa.make_url(request.getfixturevalue("postgres_url"))
    name = f"{base.database}_mig_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    store = TranscriptStore(base.set(database=name), retention=FOREVER)
    try:
        yield store
    finally:
        store.engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


def test_first_revision_upgrades_to_head(unmigrated_store: TranscriptStore) -> None:
    tid = _fill_first_revision(unmigrated_store, "mig")
    _check_head(unmigrated_store, "mig", tid)


# ------------------------------------------------------------------ revision 0003


def _fill_second_revision(store: TranscriptStore, tenant: str, question: str) -> tuple[str, str]:
    """A thread at 0002 whose second turn's block quotes the first question the way the
    renderer does (shortened, ``"`` and ``#`` mapped): rows written before the links."""
    from convmem.render import QUESTION_TOKENS, inert

    tid = _fill_first_revision(store, tenant)
    store.migrate("0002")
    q_id = f"{tid}-q"
    now = datetime(2024, 5, 1, 12, 0, 1)
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO convmem_messages (id, thread_id, tenant, parent_id, seq, role,"
                " parts, extra, received_at, visibility) VALUES (:id, :tid, :tenant, :parent,"
                " 3, 'user', :parts, '{}', :now, 'conversation')"
            ),
            {"id": q_id, "tid": tid, "tenant": tenant, "parent": f"{tid}-2",
             "parts": json.dumps([{"kind": "text", "text": question}]), "now": now},
        )
        conn.execute(
            sa.text(
                "INSERT INTO convmem_turns (id, thread_id, tenant, user_message_id,"
                " rendered_block, state_snapshot, sent_message_ids, tool_schemas,"
                " model_params, created_at) VALUES (:id, :tid, :tenant, :q, :block, :snap,"
                " '[]', '[]', '{}', :now)"
            ),
            {"id": f"{tid}-turn", "tid": tid, "tenant": tenant, "q": f"{tid}-1",
             "block": f'Earlier in this session: "{inert(question, max_tokens=QUESTION_TOKENS)}"',
             "snap": json.dumps({"recent_questions": [question]}), "now": now},
        )
        conn.execute(
            sa.text("UPDATE convmem_threads SET next_seq = 4, active_leaf = :q WHERE id = :tid"),
            {"q": q_id, "tid": tid},
        )
    return tid, q_id


def _check_0003(store: TranscriptStore, tenant: str, tid: str, q_id: str, marker: str) -> None:
    store.migrate()
    assert current_revision(store.engine) == head_revision()
    thread = store.get_thread(tenant, tid)
    assert thread.incarnation  # every existing thread got one
    assert [m.text for m in store.active_path(tenant, tid)][:2] == ["legacy zebra", "ok"]
    # ids are per tenant now: another tenant may hold the same thread and message ids
    other = tenant + "-other"
    store.import_thread(other, store.export_thread(tenant, tid))
    assert store.get_thread(other, tid).incarnation != thread.incarnation
    # the legacy turn has no links: redaction finds the rendered copy by its forms
    with store.engine.connect() as conn:
        links = conn.execute(
            sa.text("SELECT quoted_message_ids FROM convmem_turns WHERE tenant = :t"),
            {"t": tenant},
        ).scalar_one()
    assert links is None
    receipt = store.redact(tenant, tid, q_id, actor="dpo", reason="legacy")
    assert receipt.turn_ids == (f"{tid}-turn",)
    seen = store.reconstruct_model_input(tenant, tid, f"{tid}-turn")
    assert marker not in seen.rendered_block and marker not in json.dumps(seen.state_snapshot)
    assert seen.rendered_block.startswith("Earlier in this session:")


_QUESTION = (
    'How did "zebra-{m}" #3 do\nlast quarter, and ' + "what about the quarter before that " * 8
)


def test_second_revision_upgrades_to_0003(unmigrated_store: TranscriptStore) -> None:
    marker = f"zebra-{uuid.uuid4().hex[:8]}"
    tid, q_id = _fill_second_revision(
        unmigrated_store, "mig3", _QUESTION.replace("zebra-{m}", marker))
    _check_0003(unmigrated_store, "mig3", tid, q_id, marker)


# ------------------------------------------------------------------ revision 0004


def test_third_revision_upgrades_to_0004_and_back(unmigrated_store: TranscriptStore) -> None:
    """0004 adds the queue: a deferred store writes to it and searches through it;
    going back to 0003 indexes what is still queued, so no message leaves search."""
    from alembic import command

    from convmem.transcript.migrate import alembic_config

    tid = _fill_first_revision(unmigrated_store, "mig4")
    unmigrated_store.migrate("0003")
    unmigrated_store.migrate()  # this code writes 0006's queue: the way back passes 0004
    assert current_revision(unmigrated_store.engine) == "0006"
    url = unmigrated_store.engine.url
    deferred = TranscriptStore(url, retention=FOREVER, search_index="deferred")
    try:
        (late,) = deferred.append("mig4", tid, store_message("queued yak"))
        (later,) = deferred.append("mig4", tid, store_message("queued yak again"))
        with deferred.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM convmem_index_queue")).scalar() == 2
        assert [h.message_id for h in deferred.search("mig4", "zebra")] == [f"{tid}-1"]
        assert [h.message_id for h in deferred.search("mig4", "again")] == [later.id]
        (last,) = deferred.append("mig4", tid, store_message("still queued gnu"))
    finally:
        deferred.engine.dispose()
    with unmigrated_store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0003")
    assert current_revision(unmigrated_store.engine) == "0003"
    with unmigrated_store.engine.connect() as conn:
        assert not sa.inspect(conn).has_table("convmem_index_queue")
        hits = conn.execute(
            sa.text("SELECT message_id FROM convmem_search WHERE tenant = 'mig4'")
        ).scalars()
        assert {late.id, later.id, last.id} <= set(hits)


# ------------------------------------------------------------------ revision 0005


def test_fourth_revision_upgrades_to_0005_and_back(unmigrated_store: TranscriptStore) -> None:
    """A branched thread (edits, regenerations, a branch under an old message, a cleared
    path) taken back to 0004, where no message has a segment, and up again: the fill's
    segments give search the tree's active path for every leaf, and writes continue."""
    from alembic import command

    from convmem.transcript.migrate import alembic_config

    store, tenant = unmigrated_store, "mig5"
    store.migrate()
    th = store.create_thread(tenant)
    q, a = store.append(tenant, th.id, [store_message("zebu q"), _bot("zebu a")])
    store.append(tenant, th.id, [store_message("zebu q2"), _bot("zebu a2")])
    store.regenerate(tenant, th.id, a.id, "zebu a again")
    store.edit(tenant, th.id, q.id, "zebu q edited")
    store.append(tenant, th.id, [_bot("zebu b"), store_message("zebu c")], parent_id=a.id,
                 activate=False)
    store.set_active_leaf(tenant, th.id, None)
    store.append(tenant, th.id, store_message("zebu root two"))
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0004")
    with store.engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("convmem_messages")}
    assert "segment" not in columns
    store.migrate()
    assert current_revision(store.engine) == "0006"
    with store.engine.connect() as conn:
        segments = conn.execute(sa.text(
            "SELECT count(DISTINCT segment), count(*) FROM convmem_messages WHERE tenant = :t"
        ), {"t": tenant}).one()
    # q a q2 a2 | a again | q edited | b c | root two: chains, not one per message
    assert segments == (5, 9)
    for m in store.tree(tenant, th.id).messages:
        store.set_active_leaf(tenant, th.id, m.id)
        _assert_search_sees_the_path(store, tenant, th.id)
    store.append(tenant, th.id, [store_message("zebu after"), _bot("zebu after a")])
    _assert_search_sees_the_path(store, tenant, th.id)


def _bot(text: str) -> NewMessage:
    return NewMessage(role="assistant", content=text)


def _assert_search_sees_the_path(store: TranscriptStore, tenant: str, tid: str) -> None:
    hits = store.search(tenant, "zebu", thread_id=tid, match="any", active_path=True, limit=100)
    assert sorted(h.message_id for h in hits) == sorted(m.id for m in store.active_path(tenant, tid))


# ------------------------------------------------------------------ revision 0006


def test_fifth_revision_upgrades_to_0006_and_back(unmigrated_store: TranscriptStore) -> None:
    """0006 queues keys, not text. Going back to 0005 indexes what is queued (not a
    redacted message), so 0005's code finds an empty queue with its ``body`` column;
    coming up again indexes what 0005's code queued with its text."""
    from alembic import command

    from convmem.transcript.migrate import alembic_config

    store, tenant = unmigrated_store, "mig6"
    store.migrate()
    deferred = TranscriptStore(store.engine.url, retention=FOREVER, search_index="deferred")
    try:
        th = deferred.create_thread(tenant)
        kept, gone = deferred.append(tenant, th.id, [store_message("queued okapi"),
                                                     _bot("secret okapi")])
        deferred.redact(tenant, th.id, gone.id, actor="test", reason="test")
        with deferred.engine.connect() as conn:
            queued = conn.execute(sa.text("SELECT message_id FROM convmem_index_queue "
                                          "WHERE tenant = :t"), {"t": tenant}).scalars().all()
        assert queued == [kept.id]  # the redaction took its row off the queue
    finally:
        deferred.engine.dispose()
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0005")
    with store.engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("convmem_index_queue")}
        assert "body" in columns
        assert conn.execute(sa.text("SELECT count(*) FROM convmem_index_queue")).scalar() == 0
        indexed = conn.execute(sa.text("SELECT message_id, body FROM convmem_search "
                                       "WHERE tenant = :t"), {"t": tenant}).all()
        assert [tuple(r) for r in indexed] == [(kept.id, "queued okapi")]
    inline = TranscriptStore(store.engine.url, retention=FOREVER, search_index="inline")
    try:
        (late,) = inline.append(tenant, th.id, _bot("late okapi"))
    finally:
        inline.engine.dispose()
    with store.engine.begin() as conn:  # queued as 0005's code queues it: the text itself
        conn.execute(sa.text("DELETE FROM convmem_search WHERE message_id = :m"),
                     {"m": late.id})
        conn.execute(sa.text("INSERT INTO convmem_index_queue (tenant, thread_id, message_id,"
                             " body) VALUES (:t, :th, :m, 'late okapi')"),
                     {"t": tenant, "th": th.id, "m": late.id})
    store.migrate()
    assert current_revision(store.engine) == "0006"
    with store.engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("convmem_index_queue")}
        assert "body" not in columns
        assert conn.execute(sa.text("SELECT count(*) FROM convmem_index_queue")).scalar() == 0
    hits = store.search(tenant, "okapi", match="any", limit=10)
    assert sorted(h.message_id for h in hits) == sorted([kept.id, late.id])
