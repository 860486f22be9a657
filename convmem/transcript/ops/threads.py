"""Thread operations: create, find by key, get, list, retention, fork."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from convmem.identity import clean_text
from convmem.transcript.errors import ThreadExists, ThreadNotFound
from convmem.transcript.ids import new_id
from convmem.transcript.models import (
    THREADS,
)
from convmem.transcript.ops.base import Alone, Ctx, Op, bounded, clean_json, edge, to_thread
from convmem.transcript.ops.messages import (
    add_attachment_refs,
    attachment_refs,
    insert_message_rows,
    lock_thread,
    read_path,
    read_thread,
)
from convmem.transcript.records import (
    JSONDict,
    RetentionPolicy,
    Thread,
    naive_utc,
    part_to_json,
)

# ---------------------------------------------------------------- threads


def _thread_values(
    tenant: str,
    thread_id: str,
    now: datetime,
    key: str | None,
    owner: str | None,
    title: str | None,
    metadata: Mapping[str, Any] | None,
    retention: RetentionPolicy | None,
) -> JSONDict:
    return {
        "id": thread_id,
        "tenant": tenant,
        "key": key,
        "owner": bounded(owner, "owner", 200),
        "title": None if title is None else clean_text(title),
        "metadata": clean_json(dict(metadata or {})),
        "created_at": now,
        "updated_at": now,
        "retention": None if retention is None else retention.to_json(),
        "active_leaf": None,
        "open_leaf": None,
        "open_segment": None,
        "next_seq": 1,
        "archived_seq": 0,
        "forked_from": None,
        "incarnation": new_id(),  # fresh for every row created: see ``models``
    }


def create_thread(
    ctx: Ctx,
    tenant: str,
    *,
    thread_id: str | None,
    key: str | None,
    owner: str | None,
    title: str | None,
    metadata: Mapping[str, Any] | None,
    retention: RetentionPolicy | None,
) -> Op[Thread]:
    """Insert a thread; an id or key already taken *in this tenant* raises
    ``ThreadExists`` (ids are per tenant: another tenant's id is free here)."""
    edge(tenant, key=key, thread_id=thread_id)
    values = _thread_values(
        tenant, thread_id or new_id(), ctx.now(), key, owner, title, metadata, retention
    )
    res = (
        yield ctx.insert(THREADS).values(**values).on_conflict_do_nothing().returning(THREADS.c.id)
    )
    if res.first() is None:
        raise ThreadExists(f"thread id {values['id']!r} or key {key!r} already exists")
    return to_thread(values)


_BY_KEY = sa.select(THREADS).where(
    THREADS.c.tenant == sa.bindparam("b_tenant"), THREADS.c.key == sa.bindparam("b_key")
)


def find_thread(tenant: str, key: str) -> Op[Thread | None]:
    """The tenant's thread for ``key``, if any: one read (``Alone`` on PostgreSQL)."""
    edge(tenant, key=key)
    res = yield Alone(_BY_KEY, {"b_tenant": tenant, "b_key": key})
    row = res.mappings().first()
    return None if row is None else to_thread(row)


#: Create the key's thread unless the tenant has one: its row, or none on a conflict.
#: Module constants (one compiled statement per dialect, every value a parameter), run
#: ``Alone``: one round trip on PostgreSQL where a transaction of an upsert and a read
#: took four.
_CREATE_KEYED = {
    dialect: insert(THREADS)
    .values({c.name: sa.bindparam(f"v_{c.name}", type_=c.type) for c in THREADS.c})
    .on_conflict_do_nothing(index_elements=["tenant", "key"])
    .returning(*THREADS.c)
    for dialect, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


def create_thread_for_key(
    ctx: Ctx,
    tenant: str,
    key: str,
    *,
    owner: str | None,
    title: str | None,
    metadata: Mapping[str, Any] | None,
) -> Op[Thread | None]:
    """A new thread for ``key`` unless the tenant already has one; ``None`` then (the
    caller reads that one: ``find_thread``). One statement."""
    edge(tenant, key=key)
    values = _thread_values(tenant, new_id(), ctx.now(), key, owner, title, metadata, None)
    res = yield Alone(_CREATE_KEYED[ctx.dialect], {f"v_{k}": v for k, v in values.items()})
    row = res.mappings().first()
    return None if row is None else to_thread(row)

def get_thread(tenant: str, thread_id: str) -> Op[Thread]:
    """One thread."""
    edge(tenant, thread_id=thread_id)
    return to_thread((yield from read_thread(tenant, thread_id)))


def list_threads(tenant: str, limit: int | None) -> Op[list[Thread]]:
    """The tenant's threads, most recently active first."""
    edge(tenant)
    stmt = (
        sa.select(THREADS)
        .where(THREADS.c.tenant == tenant)
        .order_by(THREADS.c.updated_at.desc(), THREADS.c.id)
    )
    if limit is not None:
        stmt = stmt.limit(limit)
    res = yield stmt
    return [to_thread(r) for r in res.mappings().all()]


def this_thread(tenant: str, thread_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    return (THREADS.c.tenant == tenant, THREADS.c.id == thread_id)


def set_retention(tenant: str, thread_id: str, policy: RetentionPolicy | None) -> Op[None]:
    """Per-thread override (``None``: back to the store default)."""
    edge(tenant, thread_id=thread_id)
    yield from lock_thread(tenant, thread_id)
    yield (
        sa.update(THREADS)
        .where(*this_thread(tenant, thread_id))
        .values(retention=None if policy is None else policy.to_json())
    )

def fork_thread(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    at_message_id: str,
    key: str | None,
    title: str | None,
) -> Op[Thread]:
    """A new thread holding copies of the path root → ``at_message_id``.

    Copies get new ids and sequence numbers and keep ``copy_of`` and the original
    server times; the source thread is untouched (a fork is a pointer into history,
    never a shared row).
    """
    edge(tenant, key=key, thread_id=thread_id, at_message_id=at_message_id)
    src = yield from lock_thread(tenant, thread_id)
    path = yield from read_path(tenant, thread_id, at_message_id)
    if not path:
        raise ThreadNotFound(f"message {at_message_id!r} not found in thread {thread_id!r}")
    now = ctx.now()
    values = _thread_values(
        tenant,
        new_id(),
        now,
        key,
        src["owner"],
        title if title is not None else src["title"],
        src["metadata"],
        None if src["retention"] is None else RetentionPolicy.from_json(src["retention"]),
    )
    ids = [new_id() for _ in path]
    # the copies are one chain: one segment, its last message the open leaf
    values.update(
        forked_from=thread_id, next_seq=len(path) + 1, active_leaf=ids[-1],
        open_leaf=ids[-1], open_segment=ids[0],
    )
    res = (
        yield ctx.insert(THREADS).values(**values).on_conflict_do_nothing().returning(THREADS.c.id)
    )
    if res.first() is None:
        raise ThreadExists(f"key {key!r} already exists for tenant {tenant!r}")
    rows = []
    for i, (mid, msg) in enumerate(zip(ids, path, strict=True)):
        rows.append(
            {
                "id": mid,
                "thread_id": values["id"],
                "tenant": tenant,
                "parent_id": ids[i - 1] if i else None,
                "seq": i + 1,
                "role": msg.role,
                "author": msg.author,
                "parts": [part_to_json(p) for p in msg.parts],
                "extra": msg.extra,
                "received_at": naive_utc(msg.received_at),
                "client_ts": None if msg.client_ts is None else naive_utc(msg.client_ts),
                "visibility": msg.visibility,
                "copy_of": msg.copy_of or msg.id,
                "turn_id": None,
                "redacted_at": now if msg.redacted else None,
                "segment": ids[0],
            }
        )
    yield from add_attachment_refs(ctx, tenant, attachment_refs(r["parts"] for r in rows), {})
    yield from insert_message_rows(ctx, rows)
    return to_thread(values)
