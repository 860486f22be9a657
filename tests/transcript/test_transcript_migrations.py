"""Migrations: fill the first revision with data, upgrade to head, read it back.

Meaningful from revision 0002 on (it adds the search index and backfills it from
messages written under 0001); keep it when adding revisions.
"""

from __future__ import annotations

import json
import uuid
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
    assert current_revision(store.engine) == head_revision() == "0003"
    path = store.active_path(tenant, tid)
    assert [m.text for m in path] == ["legacy zebra", "ok"]
    assert path[0].received_at.isoformat() == "2024-05-01T12:00:00.123456+00:00"
    assert [h.message_id for h in store.search(tenant, "zebra")] == [f"{tid}-1"]
    (new,) = store.append(tenant, tid, store_message("after upgrade"))
    assert new.seq == 3 and new.parent_id == f"{tid}-2"


def store_message(text: str) -> NewMessage:
    return NewMessage(role="user", content=text)


@pytest.mark.sqlite
def test_sqlite_first_revision_upgrades_to_head(sqlite_url: str) -> None:
    store = TranscriptStore(sqlite_url, retention=FOREVER)
    try:
        tid = _fill_first_revision(store, "mig")
        _check_head(store, "mig", tid)
    finally:
        store.engine.dispose()


@pytest.mark.postgres
def test_postgres_first_revision_upgrades_to_head(postgres_url: str) -> None:
    # a database of its own: the shared one is already at head
    base = sa.make_url(postgres_url)
    name = f"{base.database}_mig"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    store = TranscriptStore(base.set(database=name), retention=FOREVER)
    try:
        tid = _fill_first_revision(store, "mig")
        _check_head(store, "mig", tid)
    finally:
        store.engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()
