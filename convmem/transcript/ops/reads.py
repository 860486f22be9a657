"""Reads: the tree, messages by id, search, derived memories, the user view, attachments."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.identity import check_id, clean_text
from convmem.text import search_terms
from convmem.transcript import export as ex
from convmem.transcript.errors import AttachmentNotFound, ThreadNotFound
from convmem.transcript.ids import new_id
from convmem.transcript.models import (
    ATTACHMENTS,
    DERIVED,
    MESSAGES,
    SEARCH,
    THREADS,
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
    ROLES,
    AttachmentPart,
    DerivedMemory,
    Message,
    SearchHit,
    ThreadTree,
    utc,
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


def fts_any_query(terms: Sequence[tuple[str, bool]]) -> str:
    """``search_terms`` as an FTS5 query: any of them (a prefix term ends in ``*``)."""
    return " OR ".join(f'"{w}"' + ("*" if prefix else "") for w, prefix in terms)


def ts_any_query(terms: Sequence[tuple[str, bool]]) -> str:
    """``search_terms`` as a PostgreSQL ``to_tsquery`` text: any of them (``:*`` prefixes)."""
    return " | ".join(f"'{w}'" + (":*" if prefix else "") for w, prefix in terms)


_SIMPLE: sa.ColumnElement[Any] = sa.literal_column("'simple'::regconfig")

#: What ``search(match=...)`` accepts: every word required, or any content word, ranked.
MATCHES = ("all", "any")


def search(
    ctx: Ctx,
    tenant: str,
    query: str,
    thread_id: str | None,
    limit: int,
    *,
    match: str = "all",
    roles: Sequence[str] | None = None,
    active_path: bool = False,
) -> Op[list[SearchHit]]:
    """Full-text search over the tenant's messages (FTS5 / PostgreSQL ``tsvector``).

    ``match="all"``: every word of ``query`` is required. ``match="any"``: the query's
    content words (``convmem.text.search_terms``), any of them, best first by the
    backend's rank (FTS5 ``bm25``, PostgreSQL ``ts_rank_cd``; an answer's counts
    double and it adds what its turn's question matched). ``roles`` keeps only
    messages of those roles; ``active_path`` (needs ``thread_id``) only the messages on
    the thread's active path, never an abandoned branch (by segment: ``_path_segments``). One statement either way,
    after indexing what is queued for the tenant or thread (``index_queued``; whatever
    this store's ``search_index``, as another store may have queued it), so its answer
    is complete: a write transaction (``BEGIN IMMEDIATE`` on SQLite).
    """
    edge(tenant, thread_id=thread_id)
    if not isinstance(query, str):
        raise ConfigError(f"search: query must be a string, got {type(query).__name__}")
    if type(limit) is not int or limit < 0:
        raise ConfigError(f"search: limit must be a non-negative integer, got {limit!r}")
    if match not in MATCHES:
        raise ConfigError(f"search: match must be 'all' or 'any', got {match!r}")
    if roles is not None and (isinstance(roles, str) or any(r not in ROLES for r in roles)):
        raise ConfigError(f"search: roles must be a list of {', '.join(ROLES)}; got {roles!r}")
    if active_path and thread_id is None:
        raise ConfigError("search: active_path=True needs thread_id (the path is a thread's)")
    query = clean_text(query)
    s, m = SEARCH, MESSAGES
    rank: Any
    if match == "any":
        terms = search_terms(query)
        if not terms:
            return []
        if ctx.dialect == "sqlite":
            cond = s.c.body.match(fts_any_query(terms))
            rank = sa.literal_column("rank")  # bm25: lower is better
        else:
            tsq = sa.func.to_tsquery(_SIMPLE, ts_any_query(terms))
            vector = sa.func.to_tsvector(_SIMPLE, s.c.body)
            cond = vector.op("@@")(tsq)
            rank = -sa.func.ts_rank_cd(vector, tsq)  # higher is better: negated
    elif ctx.dialect == "sqlite":
        q = fts_query(query)
        if not q:
            return []
        cond = s.c.body.match(q)
        rank = sa.literal_column("rank")
    else:
        if not query.strip():
            return []
        cond = sa.func.to_tsvector(_SIMPLE, s.c.body).op("@@")(
            sa.func.plainto_tsquery(_SIMPLE, query)
        )
        rank = sa.null()
    src: Any = s
    if ctx.dialect == "postgresql":
        # The match alone first (MATERIALIZED: through the GIN index, whatever the
        # statistics say), then its few rows by primary key. Left to itself the planner
        # may scan the thread's rows and compute every tsvector (200 ms at 10,000).
        src = (
            sa.select(s.c.message_id, s.c.tenant, s.c.thread_id, s.c.body, rank.label("raw"))
            .where(cond)
            .cte("convmem_fts")
            .prefix_with("MATERIALIZED")
        )
        cond, rank = sa.true(), src.c.raw
    if match == "any":
        # Both ranks are negative, lower better. An answer counts double: the block
        # already shows the recent questions, never an answer (what recall is for).
        rank = rank * sa.case((m.c.role == "assistant", 2.0), else_=1.0)
    hits = (
        sa.select(
            src.c.message_id, src.c.thread_id, src.c.body, m.c.seq, m.c.role, m.c.received_at,
            m.c.segment, m.c.turn_id, m.c.parent_id, rank.label("rank"),
        )
        .select_from(tenant_join(src, m, m.c.id == src.c.message_id))
        .where(cond, m.c.tenant == tenant, m.c.redacted_at.is_(None))
    )
    # Tenant and thread are matched on the message row (the join carries them to the
    # search row), which the rows of the match are looked up in by primary key.
    if thread_id is not None:
        hits = hits.where(m.c.thread_id == thread_id)
    if roles is not None:
        hits = hits.where(m.c.role.in_(list(roles)))
    found = hits.cte("convmem_hits")
    kept = sa.select(found)
    if active_path:
        assert thread_id is not None
        path = _path_segments(tenant, thread_id, lateral=ctx.dialect == "postgresql")
        kept = kept.join(path, sa.and_(
            path.c.segment == found.c.segment, found.c.seq <= path.c.upto
        ))
    score: Any = found.c.rank
    if match == "any":
        # A turn's answer also scores what its question matched: the words that found
        # the question found the exchange, and recall is for the answer.
        turn = sa.func.coalesce(found.c.turn_id, sa.case(
            (found.c.role == "user", found.c.message_id), else_=found.c.parent_id
        ))
        asked = sa.func.sum(
            sa.case((found.c.role == "user", found.c.rank), else_=0.0)
        ).over(partition_by=turn)
        score = found.c.rank + sa.case((found.c.role == "assistant", asked), else_=0.0)
    scored = kept.add_columns(score.label("score")).subquery("convmem_scored")
    order: list[Any]
    if match == "any" or active_path:
        order = [scored.c.score, scored.c.seq.desc()]
    elif ctx.dialect == "sqlite":
        order = [scored.c.score]
    else:
        order = [scored.c.received_at.desc()]
    stmt = sa.select(scored).order_by(*order).limit(limit)
    yield from index_queued(ctx, tenant, thread_id)
    res = yield stmt
    return [
        SearchHit(
            message_id=r.message_id, thread_id=r.thread_id, seq=r.seq, text=r.body,
            role=r.role, received_at=utc(r.received_at),
            rank=None if r.score is None else float(r.score),
        )
        for r in res.all()
    ]


def _path_segments(tenant: str, thread_id: str, *, lateral: bool) -> sa.CTE:
    """The thread's active path as ``(segment, upto)`` rows: a message is on it iff
    its segment is listed and its ``seq`` is at most ``upto`` (see ``models``).

    From the active leaf's segment, each step goes to the parent of the segment's
    first message: two primary-key probes per branch point, not one per message (no
    cut-off at the oldest hit: on SQLite it ran the match a second time, 7 ms of a
    10,000-message thread's 14). It stops whenever a parent is not older than its
    child, so a looping link ends the walk instead of running it forever.
    """
    t, m = THREADS, MESSAGES
    anchor = (
        sa.select(m.c.segment, m.c.seq.label("upto"))
        .select_from(tenant_join(t, m, m.c.thread_id == t.c.id, m.c.id == t.c.active_leaf))
        .where(t.c.tenant == tenant, t.c.id == thread_id)
        .cte("convmem_recall_path", recursive=True)
    )
    head, parent = MESSAGES.alias("head"), MESSAGES.alias("up")
    if not lateral:  # SQLite: its planner takes the primary key for these joins
        return anchor.union_all(
            sa.select(parent.c.segment, parent.c.seq)
            .select_from(
                anchor.join(head, sa.and_(
                    head.c.tenant == tenant, head.c.id == anchor.c.segment,
                    head.c.thread_id == thread_id,
                )).join(parent, sa.and_(
                    parent.c.tenant == tenant, parent.c.id == head.c.parent_id,
                    parent.c.thread_id == thread_id, parent.c.seq < head.c.seq,
                ))
            )
        )
    # PostgreSQL: primary-key probes only, whatever the planner makes of the table:
    # only (tenant, id) inside the LATERAL, so no other index (the thread's seq range,
    # per step: quadratic on tables without statistics yet) can look cheaper; thread
    # and order are checked on the rows found.
    step = (
        sa.select(parent.c.segment, parent.c.seq, parent.c.thread_id,
                  head.c.seq.label("head_seq"), head.c.thread_id.label("head_thread"))
        .select_from(head.join(parent, sa.and_(
            parent.c.tenant == tenant, parent.c.id == head.c.parent_id
        )))
        .where(head.c.tenant == tenant, head.c.id == anchor.c.segment)
        .limit(1)
        .lateral("step")
    )
    return anchor.union_all(
        sa.select(step.c.segment, step.c.seq)
        .select_from(anchor.join(step, sa.true()))
        .where(
            step.c.head_thread == thread_id,
            step.c.thread_id == thread_id,
            step.c.seq < step.c.head_seq,
        )
    )


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
