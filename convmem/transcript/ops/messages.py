"""Steps most operations share: the thread lock, the path read, attachment refs, message inserts."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.transcript.errors import RecordCorrupt, ThreadDeleted, ThreadNotFound
from convmem.transcript.ids import new_id
from convmem.transcript.models import (
    ATTACHMENTS,
    INDEX_QUEUE,
    MESSAGES,
    SEARCH,
    THREADS,
)
from convmem.transcript.ops.base import (
    MSG_COLS,
    ActiveLeaf,
    Alone,
    Ctx,
    Op,
    clean_message,
    edge,
    search_body,
    sha256_of,
    tenant_join,
    to_message,
)
from convmem.transcript.records import (
    AttachmentPart,
    JSONDict,
    Message,
    NewMessage,
    Part,
    naive_utc,
    part_to_json,
)

# ---------------------------------------------------------------- shared steps


# Hot-path statements built once: their cache keys are memoized on the objects, so
# executing them skips SQLAlchemy's per-call statement building and key generation.
_THREAD_WHERE = (
    THREADS.c.id == sa.bindparam("b_thread_id"),
    THREADS.c.tenant == sa.bindparam("b_tenant"),
)
_LOCK_THREAD = {
    bound: sa.select(THREADS)
    .where(
        *_THREAD_WHERE,
        *([THREADS.c.incarnation == sa.bindparam("b_incarnation")] if bound else []),
    )
    .with_for_update()
    for bound in (False, True)
}
_TAKE_SEQ = {
    move: sa.update(THREADS)
    .where(*_THREAD_WHERE)
    .values(
        next_seq=THREADS.c.next_seq + sa.bindparam("b_n"),
        updated_at=sa.bindparam("b_now"),
        open_leaf=sa.bindparam("b_open_leaf"),
        open_segment=sa.bindparam("b_open_segment"),
        **({"active_leaf": sa.bindparam("b_leaf")} if move else {}),
    )
    .returning(THREADS.c.next_seq)
    for move in (False, True)
}
_INSERT_MESSAGES = sa.insert(MESSAGES)
_INSERT_SEARCH = sa.insert(SEARCH)
_INSERT_QUEUED = sa.insert(INDEX_QUEUE)


def missing_thread(tenant: str, thread_id: str, incarnation: str | None = None) -> ThreadNotFound:
    """``ThreadNotFound``, or ``ThreadDeleted`` for a write bound to an incarnation."""
    if incarnation is not None:
        return ThreadDeleted(
            f"thread {thread_id!r} of tenant {tenant!r} was deleted after this turn began "
            "(a turn that began before a deletion never writes afterwards); nothing was written"
        )
    return ThreadNotFound(f"thread {thread_id!r} not found for tenant {tenant!r}")


def lock_thread(
    tenant: str, thread_id: str, incarnation: str | None = None
) -> Op[Mapping[str, Any]]:
    """Lock the thread row (PostgreSQL ``FOR UPDATE``) and return it; with
    ``incarnation``, only that incarnation of it (else ``ThreadDeleted``)."""
    params = {"b_thread_id": thread_id, "b_tenant": tenant}
    if incarnation is not None:
        params["b_incarnation"] = incarnation
    res = yield (_LOCK_THREAD[incarnation is not None], params)
    row = res.mappings().first()
    if row is None:
        raise missing_thread(tenant, thread_id, incarnation)
    return dict(row)


def read_thread(tenant: str, thread_id: str) -> Op[Mapping[str, Any]]:
    """The thread row without a lock."""
    res = yield sa.select(THREADS).where(THREADS.c.id == thread_id, THREADS.c.tenant == tenant)
    row = res.mappings().first()
    if row is None:
        raise missing_thread(tenant, thread_id)
    return dict(row)


def get_message(tenant: str, thread_id: str, message_id: str) -> Op[Message]:
    """One message of the thread, or ``ThreadNotFound``."""
    res = yield sa.select(MESSAGES).where(
        MESSAGES.c.id == message_id,
        MESSAGES.c.thread_id == thread_id,
        MESSAGES.c.tenant == tenant,
    )
    row = res.mappings().first()
    if row is None:
        raise ThreadNotFound(f"message {message_id!r} not found in thread {thread_id!r}")
    return to_message(row)


def _path_statement(from_active_leaf: bool) -> sa.Select[Any]:
    """ONE statement: the path from a message (or the active leaf) to the root.

    A recursive CTE whose anchor is the thread row left-joined to its start message,
    so the single result also tells "no such thread" (no row) from "empty path" (one
    row of NULLs). Each step is a primary-key lookup of the parent *in the same
    tenant and thread* (a parent id naming another tenant's or thread's message ends
    the path instead of leaving it), and the walk stops after ``next_seq`` steps, as
    no path in a thread is longer than the thread: cost grows with depth, never
    without bound. Parameters: ``b_thread_id``, ``b_tenant`` and, unless it starts
    at the active leaf, ``b_from``.
    """
    t, m = THREADS, MESSAGES
    start = t.c.active_leaf if from_active_leaf else sa.bindparam("b_from", type_=sa.String)
    anchor = (
        sa.select(
            t.c.archived_seq.label("archived_seq"),
            t.c.next_seq.label("path_limit"),
            sa.literal(1, sa.Integer).label("depth"),
            *[m.c[c] for c in MSG_COLS],
        )
        .select_from(tenant_join(t, m, m.c.thread_id == t.c.id, m.c.id == start, outer=True))
        .where(*_THREAD_WHERE)
    )
    path = anchor.cte("convmem_path", recursive=True)
    step = m.alias("step")
    path = path.union_all(
        sa.select(
            path.c.archived_seq, path.c.path_limit, path.c.depth + 1,
            *[step.c[c] for c in MSG_COLS],
        )
        .select_from(
            tenant_join(
                step, path, step.c.thread_id == path.c.thread_id, step.c.id == path.c.parent_id
            )
        )
        .where(path.c.depth < path.c.path_limit)
    )
    return sa.select(path).order_by(path.c.depth.desc())


# Built once (see _LOCK_THREAD): building this CTE cost more than running it.
_PATH_FROM_LEAF = _path_statement(from_active_leaf=True)
_PATH_FROM_MESSAGE = _path_statement(from_active_leaf=False)


def corrupt_links(thread_id: str, message_id: str | None) -> RecordCorrupt:
    """The error for parent links that loop (or run longer than the thread)."""
    return RecordCorrupt(
        f"thread {thread_id!r}: the parent links from message {message_id!r} loop or run "
        "longer than the thread; the record is corrupt (imports refuse such threads)"
    )


def read_path(
    tenant: str, thread_id: str, from_message: str | None = None, *, include_archived: bool = True
) -> Op[list[Message]]:
    """The path as records (root first)."""
    edge(tenant, thread_id=thread_id, from_message=from_message)
    params = {"b_thread_id": thread_id, "b_tenant": tenant}
    if from_message is None:
        res = yield (_PATH_FROM_LEAF, params)
    else:
        res = yield (_PATH_FROM_MESSAGE, {**params, "b_from": from_message})
    rows = res.mappings().all()
    if not rows:
        raise missing_thread(tenant, thread_id)
    deepest = rows[0]
    if deepest["depth"] >= deepest["path_limit"] and deepest["parent_id"] is not None:
        raise corrupt_links(thread_id, rows[-1]["id"])
    msgs = [to_message(r) for r in rows if r["id"] is not None]
    if not include_archived:
        watermark = rows[0]["archived_seq"]
        msgs = [msg for msg in msgs if msg.seq > watermark]
    return msgs


def _prepare_parts(
    tenant: str, parts: Sequence[Part], now: datetime
) -> tuple[list[JSONDict], list[JSONDict]]:
    """Message-part JSON plus the attachment rows to upsert (bytes leave the message)."""
    out: list[JSONDict] = []
    blobs: list[JSONDict] = []
    for part in parts:
        if isinstance(part, AttachmentPart) and part.data is not None:
            data = part.data
            sha = sha256_of(data)
            if part.sha256 and part.sha256 != sha:
                raise ConfigError(f"attachment {part.name!r}: sha256 does not match its data")
            part = AttachmentPart(
                media_type=part.media_type, name=part.name, sha256=sha, size=len(data)
            )
            blobs.append(
                {
                    "tenant": tenant,
                    "sha256": sha,
                    "media_type": part.media_type,
                    "size": len(data),
                    "data": data,
                    "refcount": 0,
                    "created_at": now,
                }
            )
        elif isinstance(part, AttachmentPart) and not part.sha256:
            raise ConfigError(f"attachment {part.name!r}: give data or a stored sha256")
        out.append(part_to_json(part))
    return out, blobs


def add_attachment_refs(
    ctx: Ctx, tenant: str, refs: Counter[str], blobs: Mapping[str, JSONDict]
) -> Op[None]:
    """Count new references; insert bytes the tenant does not hold yet."""
    for sha, n in sorted(refs.items()):
        blob = blobs.get(sha)
        if blob is None:
            res = yield (
                sa.update(ATTACHMENTS)
                .where(ATTACHMENTS.c.tenant == tenant, ATTACHMENTS.c.sha256 == sha)
                .values(refcount=ATTACHMENTS.c.refcount + n)
            )
            if res.rowcount != 1:
                raise ConfigError(f"attachment {sha}: not stored for tenant {tenant!r}; give data")
            continue
        stmt = ctx.insert(ATTACHMENTS).values(**{**blob, "refcount": n})
        yield stmt.on_conflict_do_update(
            index_elements=["tenant", "sha256"], set_={"refcount": ATTACHMENTS.c.refcount + n}
        )


def drop_attachment_refs(tenant: str, refs: Counter[str]) -> Op[int]:
    """Release references; delete bytes nobody references any more. Returns rows deleted."""
    if not refs:
        return 0
    for sha, n in sorted(refs.items()):
        yield (
            sa.update(ATTACHMENTS)
            .where(ATTACHMENTS.c.tenant == tenant, ATTACHMENTS.c.sha256 == sha)
            .values(refcount=ATTACHMENTS.c.refcount - n)
        )
    res = yield sa.delete(ATTACHMENTS).where(
        ATTACHMENTS.c.tenant == tenant,
        ATTACHMENTS.c.sha256.in_(sorted(refs)),
        ATTACHMENTS.c.refcount <= 0,
    )
    return int(res.rowcount)


def attachment_refs(parts_lists: Iterable[Sequence[Mapping[str, Any]]]) -> Counter[str]:
    """How many references each sha256 gets from these messages."""
    refs: Counter[str] = Counter()
    for parts in parts_lists:
        for p in parts:
            if p.get("kind") == "attachment_ref" and p.get("sha256"):
                refs[str(p["sha256"])] += 1
    return refs


def insert_message_rows(ctx: Ctx, rows: Sequence[JSONDict]) -> Op[None]:
    """Insert message rows and their search text (indexed), or their keys (queued), as
    ``Ctx.search_index`` says."""
    # one row: a plain execute (psycopg's executemany pipelines, slower for one row)
    if rows:
        yield (_INSERT_MESSAGES, rows[0] if len(rows) == 1 else list(rows))
    search = _search_rows(rows)
    if not search:
        return
    insert = _INSERT_SEARCH
    if ctx.search_index == "deferred":  # the keys: the text is read when indexed
        insert = _INSERT_QUEUED
        search = [{k: s[k] for k in ("tenant", "thread_id", "message_id")} for s in search]
    yield (insert, search[0] if len(search) == 1 else search)


#: The chain's CTEs after the lock: ``{src}`` names the CTE holding the locked
#: thread row (``id``, ``active_leaf``, ``open_leaf``, ``open_segment``); ``under``
#: says where the chain goes, ``th`` hands out the numbers and the segment (the open
#: leaf's when the chain goes under it, else a new one named by the chain's first
#: message: see ``models``), ``msg`` and ``search`` insert. Commit points 1 and 2 add their own CTEs to the same statement.
#: The search text goes to the index (``:search``), or the message's key to the queue
#: (``:search_queue``, its text read from the message when it is indexed):
#: ``pg_chain_params`` fills the one ``Ctx.search_index`` names and leaves the other
#: ``[]``, so both modes share one statement text (and one prepared plan).
PG_CHAIN_CTES = """
under AS (
    SELECT {src}.id, {src}.open_leaf, {src}.open_segment,
        CASE WHEN :follow_leaf THEN {src}.active_leaf ELSE :parent_id END AS parent_id
    FROM {src}
), th AS (
    UPDATE convmem_threads AS t
    SET next_seq = t.next_seq + :n,
        updated_at = :now,
        active_leaf = CASE WHEN :move_leaf THEN :last_id ELSE t.active_leaf END,
        open_leaf = CASE WHEN :move_leaf OR under.parent_id = under.open_leaf
            THEN :last_id ELSE t.open_leaf END,
        open_segment = CASE WHEN under.parent_id = under.open_leaf THEN under.open_segment
            WHEN :move_leaf THEN :first_id ELSE t.open_segment END
    FROM under
    WHERE t.tenant = :tenant AND t.id = under.id
    RETURNING t.next_seq - :n AS first_seq, under.parent_id,
        CASE WHEN under.parent_id = under.open_leaf THEN under.open_segment
            ELSE :first_id END AS segment
), msg AS (
    INSERT INTO convmem_messages (id, thread_id, tenant, parent_id, seq, role, author,
        parts, extra, received_at, client_ts, visibility, copy_of, turn_id, redacted_at,
        segment)
    SELECT r.id, :thread_id, :tenant,
        CASE WHEN r.i = 0 THEN th.parent_id ELSE r.parent_id END,
        th.first_seq + r.i, r.role, r.author, r.parts, r.extra, :now, r.client_ts,
        r.visibility, r.copy_of, :turn_id, NULL, th.segment
    FROM th CROSS JOIN json_to_recordset(CAST(:rows AS json)) AS r(
        i integer, id text, parent_id text, role text, author text, parts json,
        extra json, client_ts timestamp, visibility text, copy_of text)
), search AS (
    INSERT INTO convmem_search (body, message_id, tenant, thread_id)
    SELECT s.body, s.message_id, :tenant, :thread_id
    FROM th CROSS JOIN json_to_recordset(CAST(:search AS json)) AS s(
        message_id text, body text)
), search_queue AS (
    INSERT INTO convmem_index_queue (tenant, thread_id, message_id)
    SELECT :tenant, :thread_id, q.id
    FROM th CROSS JOIN json_array_elements_text(CAST(:search_queue AS json)) AS q(id)
)"""

#: Lock the thread row (only the bound incarnation of it, when there is one).
PG_LOCK_CTE = """
locked AS (
    SELECT id, active_leaf, open_leaf, open_segment FROM convmem_threads
    WHERE id = :thread_id AND tenant = :tenant
        AND (CAST(:incarnation AS text) IS NULL OR incarnation = :incarnation)
    FOR UPDATE
)"""

# PostgreSQL takes a whole chain in ONE statement (one round trip): lock the thread
# row and read its active leaf (``FOR UPDATE``), take the sequence numbers and move
# the pointer (``UPDATE ... RETURNING``; under READ COMMITTED a writer that waited
# for the lock re-reads the row its predecessor committed), then insert the
# messages and their search-index rows. No row comes back when the thread is not
# the tenant's (or, for a bound turn, no longer the incarnation it began on), and
# then nothing was written. The rows travel as one JSON
# parameter, so the text (and psycopg's prepared plan) never changes with the
# batch size.
_PG_INSERT_CHAIN = sa.text(
    "WITH" + PG_LOCK_CTE + "," + PG_CHAIN_CTES.format(src="locked")
    + "\nSELECT first_seq, parent_id, segment FROM th\n"
)


def chain_rows(
    tenant: str,
    thread_id: str,
    messages: Sequence[NewMessage],
    now: datetime,
    turn_id: str | None,
    copy_of: Sequence[str | None] | None,
) -> tuple[list[JSONDict], dict[str, JSONDict]]:
    """Rows of a chain and the new attachment bytes it brings.

    Each row is linked to the one before; the first row's parent is still ``None``
    and ``seq`` holds the position in the chain until the thread row hands out
    the numbers (``insert_chain``).
    """
    rows: list[JSONDict] = []
    blobs: dict[str, JSONDict] = {}
    parent: str | None = None
    for i, given in enumerate(messages):
        msg = clean_message(given)
        parts_json, new_blobs = _prepare_parts(tenant, msg.parts(), now)
        for b in new_blobs:
            blobs[b["sha256"]] = b
        mid = new_id()
        rows.append(
            {
                "id": mid,
                "thread_id": thread_id,
                "tenant": tenant,
                "parent_id": parent,
                "seq": i,
                "role": msg.role,
                "author": msg.author,
                "parts": parts_json,
                "extra": dict(msg.extra or {}),
                "received_at": now,
                "client_ts": None if msg.client_ts is None else naive_utc(msg.client_ts),
                "visibility": msg.resolved_visibility(),
                "copy_of": None if copy_of is None else copy_of[i],
                "turn_id": turn_id,
                "redacted_at": None,
                "segment": None,  # numbered with the chain (``number_chain``)
            }
        )
        parent = mid
    return rows, blobs


def _search_rows(rows: Sequence[Mapping[str, Any]]) -> list[JSONDict]:
    """Search-index rows for message rows (redacted or text-less messages have none)."""
    return [
        {"body": body, "message_id": r["id"], "tenant": r["tenant"], "thread_id": r["thread_id"]}
        for r in rows
        if r["redacted_at"] is None and (body := search_body(r["parts"]))
    ]


def pg_chain_params(
    tenant: str,
    thread_id: str,
    parent_id: str | ActiveLeaf | None,
    rows: Sequence[JSONDict],
    now: datetime,
    *,
    move_leaf: bool,
    turn_id: str | None,
    incarnation: str | None,
    search_index: str,
) -> dict[str, Any]:
    """The parameters of ``PG_LOCK_CTE`` + ``PG_CHAIN_CTES`` for a chain's rows (search
    text for the index or its queue, as ``search_index`` says)."""
    payload = [
        {
            "i": r["seq"],
            "id": r["id"],
            "parent_id": r["parent_id"],
            "role": r["role"],
            "author": r["author"],
            "parts": r["parts"],
            "extra": r["extra"],
            "client_ts": None if r["client_ts"] is None else r["client_ts"].isoformat(),
            "visibility": r["visibility"],
            "copy_of": r["copy_of"],
        }
        for r in rows
    ]
    searched = _search_rows(rows)
    queued = search_index == "deferred"
    search = json.dumps([s["message_id"] for s in searched] if queued else
                        [{"message_id": s["message_id"], "body": s["body"]} for s in searched])
    follow = isinstance(parent_id, ActiveLeaf)
    return {
        "thread_id": thread_id,
        "tenant": tenant,
        "n": len(rows),
        "now": now,
        "move_leaf": move_leaf,
        "last_id": rows[-1]["id"],
        "first_id": rows[0]["id"],
        "follow_leaf": follow,
        "parent_id": None if follow else parent_id,
        "turn_id": turn_id,
        "incarnation": incarnation,
        "rows": json.dumps(payload),
        "search": "[]" if queued else search,
        "search_queue": search if queued else "[]",
    }


def number_chain(
    rows: Sequence[JSONDict], first_seq: int, parent: str | None, segment: str
) -> list[Message]:
    """The chain's rows numbered from ``first_seq`` under ``parent``, in ``segment``,
    as records."""
    rows[0]["parent_id"] = parent
    for i, r in enumerate(rows):
        r["seq"] = first_seq + i
        r["segment"] = segment
    return [to_message(r) for r in rows]


def chain_segment(
    th: Mapping[str, Any], parent: str | None, rows: Sequence[JSONDict], *, move_leaf: bool
) -> tuple[str, str | None, str | None]:
    """A chain under ``parent`` in the locked thread row ``th``: its segment, and the
    thread's ``(open_leaf, open_segment)`` after it. Under the open leaf it continues
    that segment and its last message is the open leaf; anywhere else it starts its own
    segment, and its last message is the open leaf only when it becomes the active leaf
    (the old open leaf, still childless, is forgotten: a later chain under it starts a
    segment, which is always correct). ``PG_CHAIN_CTES`` says the same in SQL."""
    if parent is not None and parent == th["open_leaf"]:
        return th["open_segment"], rows[-1]["id"], th["open_segment"]
    segment = rows[0]["id"]
    if move_leaf:
        return segment, rows[-1]["id"], segment
    return segment, th["open_leaf"], th["open_segment"]


#: Split a thread's messages into segments when they were written without them (an
#: import): a message continues its parent's segment when it is the parent's first
#: child (lowest ``seq``) and newer than its parent; any other message (a root, a later
#: sibling, a link to a message not older) keeps its own id, as the rows were written.
_FILL_SEGMENTS = sa.text("""
WITH RECURSIVE seg(id, seq, segment) AS (
    SELECT h.id, h.seq, h.id FROM convmem_messages AS h
    WHERE h.tenant = :tenant AND h.thread_id = :thread_id AND (NOT EXISTS (
        SELECT 1 FROM convmem_messages AS p
        WHERE p.tenant = h.tenant AND p.id = h.parent_id AND p.thread_id = h.thread_id
            AND p.seq < h.seq
    ) OR EXISTS (
        SELECT 1 FROM convmem_messages AS o
        WHERE o.tenant = h.tenant AND o.parent_id = h.parent_id AND o.thread_id = h.thread_id
            AND o.seq < h.seq
    ))
    UNION ALL
    SELECT c.id, c.seq, seg.segment
    FROM seg JOIN convmem_messages AS c
        ON c.tenant = :tenant AND c.parent_id = seg.id AND c.thread_id = :thread_id
            AND c.seq > seg.seq
    WHERE NOT EXISTS (
        SELECT 1 FROM convmem_messages AS o
        WHERE o.tenant = c.tenant AND o.parent_id = c.parent_id AND o.thread_id = c.thread_id
            AND o.seq < c.seq
    )
)
UPDATE convmem_messages SET segment = seg.segment
FROM seg WHERE convmem_messages.tenant = :tenant AND convmem_messages.id = seg.id
    AND seg.segment <> seg.id
""")


def fill_segments(tenant: str, thread_id: str) -> Op[None]:
    """Give the thread's messages their segments (see ``_FILL_SEGMENTS``); each row must
    have been written as its own segment (``segment = id``)."""
    yield (_FILL_SEGMENTS, {"tenant": tenant, "thread_id": thread_id})


def insert_chain(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    parent_id: str | ActiveLeaf | None,
    messages: Sequence[NewMessage],
    *,
    move_leaf: bool,
    turn_id: str | None = None,
    copy_of: Sequence[str | None] | None = None,
    whole_op: bool = False,
    incarnation: str | None = None,
) -> Op[list[Message]]:
    """Append ``messages`` as a chain under ``parent_id`` (``ACTIVE``: the active leaf).

    Locks the thread row itself (a caller holding the lock already may call it too),
    only the given ``incarnation`` of it when there is one. An explicit ``parent_id``
    must have been checked by the caller. ``whole_op``: nothing precedes or follows
    in the operation, so on PostgreSQL a chain without attachments is one ``Alone``
    statement.
    """
    if not messages:
        yield from lock_thread(tenant, thread_id, incarnation)
        return []
    now = ctx.now()
    rows, blobs = chain_rows(tenant, thread_id, messages, now, turn_id, copy_of)
    refs = attachment_refs(r["parts"] for r in rows)
    if ctx.dialect == "postgresql":
        params = pg_chain_params(
            tenant, thread_id, parent_id, rows, now,
            move_leaf=move_leaf, turn_id=turn_id, incarnation=incarnation,
            search_index=ctx.search_index,
        )
        alone = whole_op and not refs
        res = yield (Alone(_PG_INSERT_CHAIN, params) if alone else (_PG_INSERT_CHAIN, params))
        row = res.first()
        if row is None:
            raise missing_thread(tenant, thread_id, incarnation)
        # the first message's seq and parent, and the chain's segment
        first_seq, parent, segment = int(row[0]), row[1], str(row[2])
    else:
        # SQLite: the write transaction (BEGIN IMMEDIATE) is the lock; statements are cheap.
        th = yield from lock_thread(tenant, thread_id, incarnation)
        parent = th["active_leaf"] if isinstance(parent_id, ActiveLeaf) else parent_id
        segment, open_leaf, open_segment = chain_segment(th, parent, rows, move_leaf=move_leaf)
        res = yield (
            _TAKE_SEQ[move_leaf],
            {
                "b_thread_id": thread_id,
                "b_tenant": tenant,
                "b_n": len(rows),
                "b_now": now,
                "b_leaf": rows[-1]["id"],
                "b_open_leaf": open_leaf,
                "b_open_segment": open_segment,
            },
        )
        next_seq = res.scalar()
        if next_seq is None:
            raise missing_thread(tenant, thread_id)
        first_seq = int(next_seq) - len(rows)
    out = number_chain(rows, first_seq, parent, segment)
    yield from add_attachment_refs(ctx, tenant, refs, blobs)
    if ctx.dialect != "postgresql":
        yield from insert_message_rows(ctx, rows)
    return out
