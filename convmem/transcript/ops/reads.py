"""Reads: the tree, messages by id, search, derived memories, the user view, attachments."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.identity import check_id, clean_text
from convmem.transcript import export as ex
from convmem.transcript.errors import AttachmentNotFound, ThreadNotFound
from convmem.transcript.ids import new_id
from convmem.transcript.models import (
    ATTACHMENTS,
    DERIVED,
    MESSAGES,
    SEARCH,
)
from convmem.transcript.ops.base import (
    ID_CHARS,
    Ctx,
    Op,
    bounded,
    edge,
    tenant_join,
    to_derived,
    to_message,
    to_thread,
)
from convmem.transcript.ops.indexing import index_queued
from convmem.transcript.ops.messages import corrupt_links, lock_thread, read_path, read_thread
from convmem.transcript.records import (
    AttachmentPart,
    DerivedMemory,
    Message,
    SearchHit,
    ThreadTree,
)

# ---------------------------------------------------------------- reads


def tree(tenant: str, thread_id: str) -> Op[ThreadTree]:
    """Every message of the thread and the active path ids (walked iteratively, at most
    one step per message: a loop in stored links is ``RecordCorrupt``)."""
    edge(tenant, thread_id=thread_id)
    th = to_thread((yield from read_thread(tenant, thread_id)))
    res = yield (
        sa.select(MESSAGES)
        .where(MESSAGES.c.thread_id == thread_id, MESSAGES.c.tenant == tenant)
        .order_by(MESSAGES.c.seq)
    )
    msgs = tuple(to_message(r) for r in res.mappings().all())
    by_id = {m.id: m for m in msgs}
    path: list[str] = []
    seen: set[str] = set()
    cur = th.active_leaf
    while cur is not None and cur in by_id:
        if cur in seen:
            raise corrupt_links(thread_id, th.active_leaf)
        seen.add(cur)
        path.append(cur)
        cur = by_id[cur].parent_id
    return ThreadTree(thread=th, messages=msgs, active_path_ids=tuple(reversed(path)))


def get_messages(tenant: str, thread_id: str, ids: Sequence[str]) -> Op[list[Message]]:
    """Messages by id (seq order); ids outside the thread are ignored."""
    edge(tenant, thread_id=thread_id)
    for i, mid in enumerate(ids):
        check_id(mid, f"ids[{i}]", ID_CHARS)
    if not ids:
        return []
    res = yield (
        sa.select(MESSAGES)
        .where(
            MESSAGES.c.thread_id == thread_id,
            MESSAGES.c.tenant == tenant,
            MESSAGES.c.id.in_(list(ids)),
        )
        .order_by(MESSAGES.c.seq)
    )
    return [to_message(r) for r in res.mappings().all()]

def fts_query(text: str) -> str:
    """User text as an FTS5 query: every word quoted (no operators), all required."""
    return " ".join(f'"{w}"' for w in re.findall(r"\w+", text))


_SIMPLE: sa.ColumnElement[Any] = sa.literal_column("'simple'::regconfig")


def search(
    ctx: Ctx, tenant: str, query: str, thread_id: str | None, limit: int
) -> Op[list[SearchHit]]:
    """Full-text search over the tenant's messages (FTS5 / PostgreSQL ``tsvector``). It
    first indexes what is queued for the tenant or thread (``index_queued``; whatever
    this store's ``search_index``, as another store may have queued it), so its answer
    is complete: a write transaction (``BEGIN IMMEDIATE`` on SQLite)."""
    edge(tenant, thread_id=thread_id)
    if not isinstance(query, str):
        raise ConfigError(f"search: query must be a string, got {type(query).__name__}")
    if type(limit) is not int or limit < 0:
        raise ConfigError(f"search: limit must be a non-negative integer, got {limit!r}")
    query = clean_text(query)
    s = SEARCH
    if ctx.dialect == "sqlite":
        q = fts_query(query)
        if not q:
            return []
        cond = s.c.body.match(q)
        order: Any = sa.literal_column("rank")
    else:
        if not query.strip():
            return []
        cond = sa.func.to_tsvector(_SIMPLE, s.c.body).op("@@")(
            sa.func.plainto_tsquery(_SIMPLE, query)
        )
        order = MESSAGES.c.received_at.desc()
    stmt = (
        sa.select(s.c.message_id, s.c.thread_id, s.c.body, MESSAGES.c.seq)
        .select_from(tenant_join(s, MESSAGES, MESSAGES.c.id == s.c.message_id))
        .where(cond, s.c.tenant == tenant, MESSAGES.c.tenant == tenant)
        .order_by(order)
        .limit(limit)
    )
    if thread_id is not None:
        stmt = stmt.where(s.c.thread_id == thread_id)
    yield from index_queued(ctx, tenant, thread_id)
    res = yield stmt
    return [
        SearchHit(message_id=r.message_id, thread_id=r.thread_id, seq=r.seq, text=r.body)
        for r in res.all()
    ]


# ---------------------------------------------------------------- derived memories


def add_derived(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    kind: str,
    content: str,
    source_message_ids: Sequence[str],
) -> Op[DerivedMemory]:
    """Record a memory derived from the thread, citing its source messages."""
    edge(tenant, thread_id=thread_id)
    kind = bounded(kind, "kind", 100, blank=False)
    if not isinstance(content, str):
        raise ConfigError(f"add_derived: content must be a string, got {type(content).__name__}")
    content = clean_text(content)
    yield from lock_thread(tenant, thread_id)
    found = yield from get_messages(tenant, thread_id, source_message_ids)
    missing = set(source_message_ids) - {m.id for m in found}
    if missing:
        raise ThreadNotFound(f"source messages not in thread {thread_id!r}: {sorted(missing)}")
    values = {
        "id": new_id(),
        "thread_id": thread_id,
        "tenant": tenant,
        "kind": kind,
        "content": content,
        "source_message_ids": list(source_message_ids),
        "created_at": ctx.now(),
        "tombstoned_at": None,
    }
    yield sa.insert(DERIVED).values(**values)
    return to_derived(values)


def list_derived(tenant: str, thread_id: str) -> Op[list[DerivedMemory]]:
    """The thread's derived memories, tombstones included."""
    edge(tenant, thread_id=thread_id)
    yield from read_thread(tenant, thread_id)
    res = yield (
        sa.select(DERIVED)
        .where(DERIVED.c.thread_id == thread_id, DERIVED.c.tenant == tenant)
        .order_by(DERIVED.c.created_at, DERIVED.c.id)
    )
    return [to_derived(r) for r in res.mappings().all()]

# ---------------------------------------------------------------- user view, attachments


def export_user_view(tenant: str, thread_id: str) -> Op[dict[str, Any]]:
    """What the user saw: the active path, conversation messages only."""
    edge(tenant, thread_id=thread_id)
    th = yield from read_thread(tenant, thread_id)
    path = yield from read_path(tenant, thread_id)
    return {
        "format": ex.USER_VIEW_FORMAT,
        "version": ex.VERSION,
        "thread": {
            "id": th["id"],
            "title": th["title"],
            "created_at": ex.ts_to_str(th["created_at"]),
        },
        "messages": [
            {
                "id": m.id,
                "seq": m.seq,
                "role": m.role,
                "author": m.author,
                "text": m.text,
                "attachments": [
                    {"name": p.name, "media_type": p.media_type, "sha256": p.sha256}
                    for p in m.parts
                    if isinstance(p, AttachmentPart)
                ],
                "received_at": ex.ts_to_str(m.received_at),
                "redacted": m.redacted,
            }
            for m in path
            if m.visibility == "conversation"
        ],
    }


def get_attachment(tenant: str, sha256: str) -> Op[bytes]:
    """Attachment bytes by digest, within the tenant."""
    edge(tenant)
    if not isinstance(sha256, str) or len(sha256) > ID_CHARS:
        raise ConfigError(f"sha256 must be a digest string, got {sha256!r:.80}")
    res = yield sa.select(ATTACHMENTS.c.data).where(
        ATTACHMENTS.c.tenant == tenant, ATTACHMENTS.c.sha256 == sha256
    )
    data = res.scalar_one_or_none()
    if data is None:
        raise AttachmentNotFound(f"attachment {sha256!r} not found for tenant {tenant!r}")
    return bytes(data)
