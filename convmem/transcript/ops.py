"""Every transcript operation, written once as a sans-I/O generator.

An operation is a generator that *yields* SQLAlchemy statements (or a statement
and its parameter rows, for an executemany whose compiled form is cached) and is *sent* each
statement's (buffered) result; its return value is the operation's result. The
store runs the same generator on a sync ``Connection`` or an ``AsyncConnection``
inside one transaction, so the sync and async twins share every statement and
every decision and differ only in ``execute`` versus ``await execute``. Each
generator consumes a result before yielding the next statement.

Writers lock the thread row first (``SELECT ... FOR UPDATE`` on PostgreSQL; on
SQLite the store opens write transactions with ``BEGIN IMMEDIATE``), then take
their sequence numbers with one ``UPDATE ... RETURNING next_seq`` that also moves
the active leaf, so concurrent appends to one thread queue up and form one linear,
gapless path. On PostgreSQL ``insert_chain`` does the lock, the read of the active
leaf, the sequence numbers, the messages and their search rows in one statement;
an append to the active leaf is that statement alone (``Alone``: autocommit, one
round trip). Every statement filters on ``tenant``: a thread of another tenant is
indistinguishable from a missing one (``ThreadNotFound``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, Union

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.base import Executable

from convmem.errors import ConfigError
from convmem.transcript import export as ex
from convmem.transcript.errors import ThreadExists, ThreadNotFound
from convmem.transcript.ids import new_id
from convmem.transcript.models import (
    ATTACHMENTS,
    DERIVED,
    MESSAGES,
    REDACTIONS,
    SEARCH,
    TEMPLATES,
    THREADS,
    TURNS,
)
from convmem.transcript.records import (
    AttachmentPart,
    DeletionReceipt,
    DerivedMemory,
    JSONDict,
    Message,
    ModelInput,
    NewMessage,
    Part,
    ReconstructedInput,
    RedactionReceipt,
    RetentionPolicy,
    SearchHit,
    TextPart,
    Thread,
    ThreadTree,
    ToolCallPart,
    ToolResultPart,
    TurnRecord,
    naive_utc,
    part_to_json,
    parts_from_json,
    utc,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Alone:
    """A step that is the whole operation: its first and only statement.

    One statement is atomic on its own, so the store may run it outside an explicit
    transaction (PostgreSQL autocommit: one round trip instead of BEGIN, statement,
    COMMIT). The store refuses an operation that yields anything after it.
    """

    statement: Executable
    params: Mapping[str, Any]


# A step is a statement, or (statement, parameter rows) for a cached executemany, or
# an ``Alone`` statement.
Step = Union[  # noqa: UP007
    Executable,
    tuple[Executable, Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]],  # noqa: UP007
    Alone,
]
Op = Generator[Step, Any, T]

MSG_COLS: tuple[str, ...] = tuple(c.name for c in MESSAGES.columns)


class _Active:
    """Sentinel: "append to the active leaf"."""


ACTIVE = _Active()


@dataclass(frozen=True, slots=True)
class Ctx:
    """What statement building depends on besides the arguments."""

    dialect: str  # "sqlite" | "postgresql"
    clock: Callable[[], datetime]
    retention: RetentionPolicy

    def now(self) -> datetime:
        """The server time, naive UTC as stored."""
        return naive_utc(self.clock())

    def insert(self, table: sa.Table) -> Any:
        """A dialect insert (both have ``on_conflict_do_*``)."""
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)


# ---------------------------------------------------------------- row decoding


def to_message(row: Mapping[str, Any]) -> Message:
    """A message row (any select of ``MSG_COLS``) as a record."""
    return Message(
        id=row["id"],
        thread_id=row["thread_id"],
        parent_id=row["parent_id"],
        seq=row["seq"],
        role=row["role"],
        parts=parts_from_json(row["parts"] or []),
        author=row["author"],
        extra=dict(row["extra"] or {}),
        received_at=utc(row["received_at"]),
        client_ts=None if row["client_ts"] is None else utc(row["client_ts"]),
        visibility=row["visibility"],
        copy_of=row["copy_of"],
        turn_id=row["turn_id"],
        redacted=row["redacted_at"] is not None,
    )


def to_thread(row: Mapping[str, Any]) -> Thread:
    """A thread row as a record."""
    ret = row["retention"]
    return Thread(
        id=row["id"],
        tenant=row["tenant"],
        key=row["key"],
        owner=row["owner"],
        title=row["title"],
        metadata=dict(row["metadata"] or {}),
        created_at=utc(row["created_at"]),
        updated_at=utc(row["updated_at"]),
        retention=None if ret is None else RetentionPolicy.from_json(ret),
        active_leaf=row["active_leaf"],
        archived_seq=row["archived_seq"],
        forked_from=row["forked_from"],
    )


def to_derived(row: Mapping[str, Any]) -> DerivedMemory:
    """A derived-memory row as a record."""
    return DerivedMemory(
        id=row["id"],
        thread_id=row["thread_id"],
        kind=row["kind"],
        content=row["content"],
        source_message_ids=tuple(row["source_message_ids"] or ()),
        created_at=utc(row["created_at"]),
        tombstoned_at=None if row["tombstoned_at"] is None else utc(row["tombstoned_at"]),
    )


def search_body(parts: Sequence[Mapping[str, Any]]) -> str:
    """What the search index holds for a message: its text and tool-result content."""
    out = [str(p["text"]) for p in parts if p.get("kind") == "text"]
    out += [str(p["content"]) for p in parts if p.get("kind") == "tool_result"]
    return "\n".join(s for s in out if s)


def content_key(
    role: str, parts: Sequence[Mapping[str, Any]], extra: Mapping[str, Any] | None
) -> str:
    """Equality key used by ``rebase_path`` (role, parts and ``extra``; not ids or times).

    ``extra`` counts: a framework's fields (tool-call ids, kwargs) are part of what
    a message says, so a list differing only there is a different list.
    """
    return json.dumps([role, list(parts), dict(extra or {})], sort_keys=True, separators=(",", ":"))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- shared steps


# Hot-path statements built once: their cache keys are memoized on the objects, so
# executing them skips SQLAlchemy's per-call statement building and key generation.
_THREAD_WHERE = (
    THREADS.c.id == sa.bindparam("b_thread_id"),
    THREADS.c.tenant == sa.bindparam("b_tenant"),
)
_LOCK_THREAD = sa.select(THREADS).where(*_THREAD_WHERE).with_for_update()
_TAKE_SEQ = {
    move: sa.update(THREADS)
    .where(*_THREAD_WHERE)
    .values(
        next_seq=THREADS.c.next_seq + sa.bindparam("b_n"),
        updated_at=sa.bindparam("b_now"),
        **({"active_leaf": sa.bindparam("b_leaf")} if move else {}),
    )
    .returning(THREADS.c.next_seq)
    for move in (False, True)
}
_INSERT_MESSAGES = sa.insert(MESSAGES)
_INSERT_SEARCH = sa.insert(SEARCH)


def lock_thread(tenant: str, thread_id: str) -> Op[Mapping[str, Any]]:
    """Lock the thread row (PostgreSQL ``FOR UPDATE``) and return it."""
    res = yield (_LOCK_THREAD, {"b_thread_id": thread_id, "b_tenant": tenant})
    row = res.mappings().first()
    if row is None:
        raise ThreadNotFound(f"thread {thread_id!r} not found for tenant {tenant!r}")
    return dict(row)


def read_thread(tenant: str, thread_id: str) -> Op[Mapping[str, Any]]:
    """The thread row without a lock."""
    res = yield sa.select(THREADS).where(THREADS.c.id == thread_id, THREADS.c.tenant == tenant)
    row = res.mappings().first()
    if row is None:
        raise ThreadNotFound(f"thread {thread_id!r} not found for tenant {tenant!r}")
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
    row of NULLs). Each step is a primary-key lookup, so cost grows with depth and
    not with the size of the tree. Parameters: ``b_thread_id``, ``b_tenant`` and,
    unless it starts at the active leaf, ``b_from``.
    """
    t, m = THREADS, MESSAGES
    start = t.c.active_leaf if from_active_leaf else sa.bindparam("b_from", type_=sa.String)
    anchor = (
        sa.select(t.c.archived_seq.label("archived_seq"), *[m.c[c] for c in MSG_COLS])
        .select_from(t.outerjoin(m, sa.and_(m.c.id == start, m.c.thread_id == t.c.id)))
        .where(*_THREAD_WHERE)
    )
    path = anchor.cte("convmem_path", recursive=True)
    step = m.alias("step")
    path = path.union_all(
        sa.select(path.c.archived_seq, *[step.c[c] for c in MSG_COLS]).select_from(
            step.join(path, step.c.id == path.c.parent_id)
        )
    )
    return sa.select(path).order_by(path.c.seq)


# Built once (see _LOCK_THREAD): building this CTE cost more than running it.
_PATH_FROM_LEAF = _path_statement(from_active_leaf=True)
_PATH_FROM_MESSAGE = _path_statement(from_active_leaf=False)


def read_path(
    tenant: str, thread_id: str, from_message: str | None = None, *, include_archived: bool = True
) -> Op[list[Message]]:
    """The path as records (root first)."""
    params = {"b_thread_id": thread_id, "b_tenant": tenant}
    if from_message is None:
        res = yield (_PATH_FROM_LEAF, params)
    else:
        res = yield (_PATH_FROM_MESSAGE, {**params, "b_from": from_message})
    rows = res.mappings().all()
    if not rows:
        raise ThreadNotFound(f"thread {thread_id!r} not found for tenant {tenant!r}")
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
            sha = _sha256(data)
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
    """Insert message rows and their search-index rows."""
    # one row: a plain execute (psycopg's executemany pipelines, slower for one row)
    if rows:
        yield (_INSERT_MESSAGES, rows[0] if len(rows) == 1 else list(rows))
    search = _search_rows(rows)
    if search:
        yield (_INSERT_SEARCH, search[0] if len(search) == 1 else search)


# PostgreSQL takes a whole chain in ONE statement (one round trip): lock the thread
# row and read its active leaf (``FOR UPDATE``), take the sequence numbers and move
# the pointer (``UPDATE ... RETURNING``; under READ COMMITTED a writer that waited
# for the lock re-reads the row its predecessor committed), then insert the
# messages and their search-index rows. No row comes back when the thread is not
# the tenant's, and then nothing was written. The rows travel as one JSON
# parameter, so the text (and psycopg's prepared plan) never changes with the
# batch size.
_PG_INSERT_CHAIN = sa.text(
    """
WITH locked AS (
    SELECT id, active_leaf FROM convmem_threads
    WHERE id = :thread_id AND tenant = :tenant
    FOR UPDATE
), th AS (
    UPDATE convmem_threads AS t
    SET next_seq = t.next_seq + :n,
        updated_at = :now,
        active_leaf = CASE WHEN :move_leaf THEN :last_id ELSE t.active_leaf END
    FROM locked
    WHERE t.id = locked.id
    RETURNING t.next_seq - :n AS first_seq,
        CASE WHEN :follow_leaf THEN locked.active_leaf ELSE :parent_id END AS parent_id
), msg AS (
    INSERT INTO convmem_messages (id, thread_id, tenant, parent_id, seq, role, author,
        parts, extra, received_at, client_ts, visibility, copy_of, turn_id, redacted_at)
    SELECT r.id, :thread_id, :tenant,
        CASE WHEN r.i = 0 THEN th.parent_id ELSE r.parent_id END,
        th.first_seq + r.i, r.role, r.author, r.parts, r.extra, :now, r.client_ts,
        r.visibility, r.copy_of, :turn_id, NULL
    FROM th CROSS JOIN json_to_recordset(CAST(:rows AS json)) AS r(
        i integer, id text, parent_id text, role text, author text, parts json,
        extra json, client_ts timestamp, visibility text, copy_of text)
), search AS (
    INSERT INTO convmem_search (body, message_id, tenant, thread_id)
    SELECT s.body, s.message_id, :tenant, :thread_id
    FROM th CROSS JOIN json_to_recordset(CAST(:search AS json)) AS s(
        message_id text, body text)
)
SELECT first_seq, parent_id FROM th
"""
)


def _chain_rows(
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
    for i, msg in enumerate(messages):
        if msg.role not in ("system", "user", "assistant", "tool"):
            raise ConfigError(f"message role {msg.role!r}: want system, user, assistant or tool")
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


def _pg_insert_chain(
    tenant: str,
    thread_id: str,
    parent_id: str | _Active | None,
    rows: Sequence[JSONDict],
    now: datetime,
    *,
    move_leaf: bool,
    turn_id: str | None,
    alone: bool,
) -> Op[tuple[int, str | None]]:
    """Run ``_PG_INSERT_CHAIN`` (as an ``Alone`` step if ``alone``).

    Returns (first seq, parent of the first message).
    """
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
    search = [{"message_id": s["message_id"], "body": s["body"]} for s in _search_rows(rows)]
    follow = isinstance(parent_id, _Active)
    params = {
        "thread_id": thread_id,
        "tenant": tenant,
        "n": len(rows),
        "now": now,
        "move_leaf": move_leaf,
        "last_id": rows[-1]["id"],
        "follow_leaf": follow,
        "parent_id": None if follow else parent_id,
        "turn_id": turn_id,
        "rows": json.dumps(payload),
        "search": json.dumps(search),
    }
    res = yield (Alone(_PG_INSERT_CHAIN, params) if alone else (_PG_INSERT_CHAIN, params))
    row = res.first()
    if row is None:
        raise ThreadNotFound(f"thread {thread_id!r} not found for tenant {tenant!r}")
    return int(row[0]), row[1]


def insert_chain(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    parent_id: str | _Active | None,
    messages: Sequence[NewMessage],
    *,
    move_leaf: bool,
    turn_id: str | None = None,
    copy_of: Sequence[str | None] | None = None,
    whole_op: bool = False,
) -> Op[list[Message]]:
    """Append ``messages`` as a chain under ``parent_id`` (``ACTIVE``: the active leaf).

    Locks the thread row itself (a caller holding the lock already may call it too).
    An explicit ``parent_id`` must have been checked by the caller. ``whole_op``:
    nothing precedes or follows in the operation, so on PostgreSQL a chain without
    attachments is one ``Alone`` statement.
    """
    if not messages:
        yield from lock_thread(tenant, thread_id)
        return []
    now = ctx.now()
    rows, blobs = _chain_rows(tenant, thread_id, messages, now, turn_id, copy_of)
    refs = attachment_refs(r["parts"] for r in rows)
    if ctx.dialect == "postgresql":
        first_seq, parent = yield from _pg_insert_chain(
            tenant,
            thread_id,
            parent_id,
            rows,
            now,
            move_leaf=move_leaf,
            turn_id=turn_id,
            alone=whole_op and not refs,
        )
    else:
        # SQLite: the write transaction (BEGIN IMMEDIATE) is the lock; statements are cheap.
        if isinstance(parent_id, _Active):
            parent = (yield from lock_thread(tenant, thread_id))["active_leaf"]
        else:
            parent = parent_id
        res = yield (
            _TAKE_SEQ[move_leaf],
            {
                "b_thread_id": thread_id,
                "b_tenant": tenant,
                "b_n": len(rows),
                "b_now": now,
                "b_leaf": rows[-1]["id"],
            },
        )
        next_seq = res.scalar()
        if next_seq is None:
            raise ThreadNotFound(f"thread {thread_id!r} not found for tenant {tenant!r}")
        first_seq = int(next_seq) - len(rows)
    rows[0]["parent_id"] = parent
    for i, r in enumerate(rows):
        r["seq"] = first_seq + i
    yield from add_attachment_refs(ctx, tenant, refs, blobs)
    if ctx.dialect != "postgresql":
        yield from insert_message_rows(ctx, rows)
    return [to_message(r) for r in rows]


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
        "owner": owner,
        "title": title,
        "metadata": dict(metadata or {}),
        "created_at": now,
        "updated_at": now,
        "retention": None if retention is None else retention.to_json(),
        "active_leaf": None,
        "next_seq": 1,
        "archived_seq": 0,
        "forked_from": None,
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
    """Insert a thread; an id or key already taken raises ``ThreadExists``."""
    if not tenant:
        raise ConfigError("tenant: must be a non-empty string")
    values = _thread_values(
        tenant, thread_id or new_id(), ctx.now(), key, owner, title, metadata, retention
    )
    res = (
        yield ctx.insert(THREADS).values(**values).on_conflict_do_nothing().returning(THREADS.c.id)
    )
    if res.first() is None:
        raise ThreadExists(f"thread id {values['id']!r} or key {key!r} already exists")
    return to_thread(values)


def get_or_create_thread(
    ctx: Ctx,
    tenant: str,
    key: str,
    *,
    owner: str | None,
    title: str | None,
    metadata: Mapping[str, Any] | None,
) -> Op[Thread]:
    """The tenant's thread for ``key``, created on first use (race-free upsert)."""
    if not tenant or not key:
        raise ConfigError("get_or_create_thread: tenant and key must be non-empty strings")
    values = _thread_values(tenant, new_id(), ctx.now(), key, owner, title, metadata, None)
    yield (
        ctx.insert(THREADS)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["tenant", "key"])
    )
    res = yield sa.select(THREADS).where(THREADS.c.tenant == tenant, THREADS.c.key == key)
    return to_thread(res.mappings().one())


def get_thread(tenant: str, thread_id: str) -> Op[Thread]:
    """One thread."""
    return to_thread((yield from read_thread(tenant, thread_id)))


def list_threads(tenant: str, limit: int | None) -> Op[list[Thread]]:
    """The tenant's threads, most recently active first."""
    stmt = (
        sa.select(THREADS)
        .where(THREADS.c.tenant == tenant)
        .order_by(THREADS.c.updated_at.desc(), THREADS.c.id)
    )
    if limit is not None:
        stmt = stmt.limit(limit)
    res = yield stmt
    return [to_thread(r) for r in res.mappings().all()]


def set_retention(tenant: str, thread_id: str, policy: RetentionPolicy | None) -> Op[None]:
    """Per-thread override (``None``: back to the store default)."""
    yield from lock_thread(tenant, thread_id)
    yield (
        sa.update(THREADS)
        .where(THREADS.c.id == thread_id)
        .values(retention=None if policy is None else policy.to_json())
    )


# ---------------------------------------------------------------- appends


def append(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    messages: Sequence[NewMessage],
    parent_id: str | _Active | None,
    activate: bool,
) -> Op[list[Message]]:
    """Append to the active leaf (one linear path under concurrency) or under a parent."""
    if isinstance(parent_id, _Active):
        return (
            yield from insert_chain(
                ctx, tenant, thread_id, ACTIVE, messages, move_leaf=True, whole_op=True
            )
        )
    yield from lock_thread(tenant, thread_id)
    if parent_id is not None:
        yield from get_message(tenant, thread_id, parent_id)
    return (
        yield from insert_chain(ctx, tenant, thread_id, parent_id, messages, move_leaf=activate)
    )


def begin_turn_record(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    user_message: NewMessage,
    model_input: ModelInput,
    parent_id: str | _Active | None = ACTIVE,
) -> Op[TurnRecord]:
    """Commit point 1: the user message and what the model is about to receive.

    The message follows the active leaf, or goes under ``parent_id`` (an edit: a
    sibling of the edited question); either way it becomes the active leaf."""
    if not isinstance(parent_id, _Active):
        yield from lock_thread(tenant, thread_id)
        if parent_id is not None:
            yield from get_message(tenant, thread_id, parent_id)
    turn_id = new_id()
    (msg,) = yield from insert_chain(
        ctx, tenant, thread_id, parent_id, [user_message], move_leaf=True, turn_id=turn_id
    )
    sha: str | None = None
    if model_input.system_prompt is not None:
        sha = _sha256(model_input.system_prompt.encode("utf-8"))
        yield (
            ctx.insert(TEMPLATES)
            .values(tenant=tenant, sha256=sha, text=model_input.system_prompt)
            .on_conflict_do_nothing()
        )
    yield sa.insert(TURNS).values(
        id=turn_id,
        thread_id=thread_id,
        tenant=tenant,
        user_message_id=msg.id,
        rendered_block=model_input.rendered_block,
        state_snapshot=dict(model_input.state_snapshot),
        sent_message_ids=list(model_input.sent_message_ids),
        template_sha256=sha,
        tool_schemas=[dict(s) for s in model_input.tool_schemas],
        model=model_input.model,
        model_params=dict(model_input.model_params),
        created_at=ctx.now(),
        completed_at=None,
        answer_message_id=None,
    )
    return TurnRecord(turn_id=turn_id, thread_id=thread_id, user_message=msg)


def complete_turn(
    ctx: Ctx, tenant: str, thread_id: str, turn_id: str, messages: Sequence[NewMessage]
) -> Op[list[Message]]:
    """Commit point 2: tool calls, results and the answer, linked to the turn.

    They follow the active leaf when the turn's user message is still on the active
    path (another device may have appended meanwhile); if the user has since moved
    to another branch, they go under the user message and the pointer stays put.
    """
    th = yield from lock_thread(tenant, thread_id)
    res = yield sa.select(TURNS).where(
        TURNS.c.id == turn_id, TURNS.c.thread_id == thread_id, TURNS.c.tenant == tenant
    )
    turn = res.mappings().first()
    if turn is None:
        raise ThreadNotFound(f"turn {turn_id!r} not found in thread {thread_id!r}")
    if turn["completed_at"] is not None:
        raise ConfigError(f"turn {turn_id!r} is already complete")
    path = yield from read_path(tenant, thread_id)
    on_path = any(m.id == turn["user_message_id"] for m in path)
    parent = th["active_leaf"] if on_path else turn["user_message_id"]
    out = yield from insert_chain(
        ctx, tenant, thread_id, parent, messages, move_leaf=on_path, turn_id=turn_id
    )
    answer = next((m.id for m in reversed(out) if m.role == "assistant"), None)
    yield (
        sa.update(TURNS)
        .where(TURNS.c.id == turn_id)
        .values(completed_at=ctx.now(), answer_message_id=answer or (out[-1].id if out else None))
    )
    return out


def sibling(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    message_id: str,
    make: Callable[[Message], NewMessage],
    require_role: str | None,
    keep_turn: bool = False,
) -> Op[Message]:
    """A new sibling of ``message_id`` made active (edit, regenerate). ``keep_turn``: it
    answers the same model input (a regeneration), so it carries the old ``turn_id``."""
    yield from lock_thread(tenant, thread_id)
    old = yield from get_message(tenant, thread_id, message_id)
    if require_role is not None and old.role != require_role:
        raise ConfigError(f"message {message_id!r} is a {old.role} message, not {require_role}")
    (new,) = yield from insert_chain(
        ctx, tenant, thread_id, old.parent_id, [make(old)], move_leaf=True,
        turn_id=old.turn_id if keep_turn else None,
    )
    return new


def branches(tenant: str, thread_id: str, message_id: str) -> Op[list[Message]]:
    """The message and its siblings (alternatives at that point), in seq order."""
    msg = yield from get_message(tenant, thread_id, message_id)
    parent_cond = (
        MESSAGES.c.parent_id.is_(None)
        if msg.parent_id is None
        else MESSAGES.c.parent_id == msg.parent_id
    )
    res = yield (
        sa.select(MESSAGES)
        .where(MESSAGES.c.thread_id == thread_id, MESSAGES.c.tenant == tenant, parent_cond)
        .order_by(MESSAGES.c.seq)
    )
    return [to_message(r) for r in res.mappings().all()]


def switch(tenant: str, thread_id: str, message_id: str) -> Op[Message]:
    """Make the branch through ``message_id`` active: its newest descendant becomes the leaf."""
    yield from lock_thread(tenant, thread_id)
    leaf = yield from get_message(tenant, thread_id, message_id)
    while True:
        res = yield (
            sa.select(MESSAGES)
            .where(MESSAGES.c.parent_id == leaf.id, MESSAGES.c.thread_id == thread_id)
            .order_by(MESSAGES.c.seq.desc())
            .limit(1)
        )
        row = res.mappings().first()
        if row is None:
            break
        leaf = to_message(row)
    yield sa.update(THREADS).where(THREADS.c.id == thread_id).values(active_leaf=leaf.id)
    return leaf


def set_active_leaf(tenant: str, thread_id: str, message_id: str | None) -> Op[None]:
    """Point the thread at ``message_id``; ``None`` empties the active path."""
    yield from lock_thread(tenant, thread_id)
    if message_id is not None:
        yield from get_message(tenant, thread_id, message_id)
    yield sa.update(THREADS).where(THREADS.c.id == thread_id).values(active_leaf=message_id)


def rebase_path(
    ctx: Ctx, tenant: str, thread_id: str, messages: Sequence[NewMessage]
) -> Op[list[Message]]:
    """Make the active path equal ``messages`` while changing as little as possible.

    The longest common prefix (same role, parts and ``extra``) is reused; the rest is appended
    as a branch from its end. A new row whose content equals a message of the old
    path carries ``copy_of`` (the original). The same list is a no-op; a shorter
    prefix of the path only moves the pointer back.
    """
    yield from lock_thread(tenant, thread_id)
    path = yield from read_path(tenant, thread_id)
    wanted = [
        content_key(m.role, [part_to_json(p) for p in _hashless(m.parts())], m.extra)
        for m in messages
    ]
    have = [content_key(m.role, [part_to_json(p) for p in m.parts], m.extra) for m in path]
    i = 0
    while i < len(wanted) and i < len(path) and wanted[i] == have[i]:
        i += 1
    if i == len(wanted):
        if i < len(path):
            leaf = path[i - 1].id if i else None
            yield sa.update(THREADS).where(THREADS.c.id == thread_id).values(active_leaf=leaf)
        return path[:i]
    originals: dict[str, list[Message]] = {}
    for msg, key in zip(path[i:], have[i:], strict=True):
        originals.setdefault(key, []).append(msg)
    copies: list[str | None] = []
    for key in wanted[i:]:
        pool = originals.get(key)
        src = pool.pop(0) if pool else None
        copies.append(None if src is None else (src.copy_of or src.id))
    parent = path[i - 1].id if i else None
    new = yield from insert_chain(
        ctx, tenant, thread_id, parent, messages[i:], move_leaf=True, copy_of=copies
    )
    return path[:i] + new


def _hashless(parts: Sequence[Part]) -> list[Part]:
    """Parts as they will be stored (attachment data replaced by its digest)."""
    out: list[Part] = []
    for p in parts:
        if isinstance(p, AttachmentPart) and p.data is not None:
            p = AttachmentPart(
                media_type=p.media_type, name=p.name, sha256=_sha256(p.data), size=len(p.data)
            )
        out.append(p)
    return out


def archive_through(tenant: str, thread_id: str, seq: int) -> Op[int]:
    """Raise the archive watermark (never lowers it); messages are untouched."""
    th = yield from lock_thread(tenant, thread_id)
    mark = max(int(th["archived_seq"]), seq)
    yield sa.update(THREADS).where(THREADS.c.id == thread_id).values(archived_seq=mark)
    return mark


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
    values.update(forked_from=thread_id, next_seq=len(path) + 1, active_leaf=ids[-1])
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
            }
        )
    yield from add_attachment_refs(ctx, tenant, attachment_refs(r["parts"] for r in rows), {})
    yield from insert_message_rows(ctx, rows)
    return to_thread(values)


# ---------------------------------------------------------------- reads


def tree(tenant: str, thread_id: str) -> Op[ThreadTree]:
    """Every message of the thread and the active path ids."""
    th = to_thread((yield from read_thread(tenant, thread_id)))
    res = yield (
        sa.select(MESSAGES)
        .where(MESSAGES.c.thread_id == thread_id, MESSAGES.c.tenant == tenant)
        .order_by(MESSAGES.c.seq)
    )
    msgs = tuple(to_message(r) for r in res.mappings().all())
    by_id = {m.id: m for m in msgs}
    path: list[str] = []
    cur = th.active_leaf
    while cur is not None and cur in by_id:
        path.append(cur)
        cur = by_id[cur].parent_id
    return ThreadTree(thread=th, messages=msgs, active_path_ids=tuple(reversed(path)))


def get_messages(tenant: str, thread_id: str, ids: Sequence[str]) -> Op[list[Message]]:
    """Messages by id (seq order); ids outside the thread are ignored."""
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


def reconstruct_model_input(tenant: str, thread_id: str, turn_id: str) -> Op[ReconstructedInput]:
    """Rebuild what the model received on a turn from the record."""
    res = yield (
        sa.select(TURNS, TEMPLATES.c.text.label("system_prompt"))
        .select_from(
            TURNS.outerjoin(
                TEMPLATES,
                sa.and_(
                    TEMPLATES.c.tenant == TURNS.c.tenant,
                    TEMPLATES.c.sha256 == TURNS.c.template_sha256,
                ),
            )
        )
        .where(TURNS.c.id == turn_id, TURNS.c.thread_id == thread_id, TURNS.c.tenant == tenant)
    )
    turn = res.mappings().first()
    if turn is None:
        raise ThreadNotFound(f"turn {turn_id!r} not found in thread {thread_id!r}")
    sent = list(turn["sent_message_ids"] or [])
    msgs = yield from get_messages(tenant, thread_id, [*sent, turn["user_message_id"]])
    by_id = {m.id: m for m in msgs}
    return ReconstructedInput(
        turn_id=turn_id,
        thread_id=thread_id,
        system_prompt=turn["system_prompt"],
        rendered_block=turn["rendered_block"],
        state_snapshot=dict(turn["state_snapshot"] or {}),
        messages=tuple(by_id[i] for i in sent if i in by_id),
        user_message=by_id[turn["user_message_id"]],
        tool_schemas=tuple(turn["tool_schemas"] or ()),
        model=turn["model"],
        model_params=dict(turn["model_params"] or {}),
        created_at=utc(turn["created_at"]),
        completed_at=None if turn["completed_at"] is None else utc(turn["completed_at"]),
        answer_message_id=turn["answer_message_id"],
    )


def fts_query(text: str) -> str:
    """User text as an FTS5 query: every word quoted (no operators), all required."""
    return " ".join(f'"{w}"' for w in re.findall(r"\w+", text))


_SIMPLE: sa.ColumnElement[Any] = sa.literal_column("'simple'::regconfig")


def search(
    ctx: Ctx, tenant: str, query: str, thread_id: str | None, limit: int
) -> Op[list[SearchHit]]:
    """Full-text search over the tenant's messages (FTS5 / PostgreSQL ``tsvector``)."""
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
        .select_from(s.join(MESSAGES, MESSAGES.c.id == s.c.message_id))
        .where(cond, s.c.tenant == tenant, MESSAGES.c.tenant == tenant)
        .order_by(order)
        .limit(limit)
    )
    if thread_id is not None:
        stmt = stmt.where(s.c.thread_id == thread_id)
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
    yield from read_thread(tenant, thread_id)
    res = yield (
        sa.select(DERIVED)
        .where(DERIVED.c.thread_id == thread_id, DERIVED.c.tenant == tenant)
        .order_by(DERIVED.c.created_at, DERIVED.c.id)
    )
    return [to_derived(r) for r in res.mappings().all()]


# ---------------------------------------------------------------- redaction and deletion


def _needles(parts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The strings a redaction hunts for in rendered blocks, snapshots and extras."""
    found: set[str] = set()

    def add(text: str) -> None:
        if len(text.strip()) >= 3:
            found.add(text)
            found.update(line for line in text.splitlines() if len(line.strip()) >= 3)

    for p in parts:
        if p.get("kind") == "text":
            add(str(p["text"]))
        elif p.get("kind") == "tool_result":
            add(str(p["content"]))
        elif p.get("kind") == "tool_call":
            for v in _strings(p.get("arguments")):
                add(v)
        elif p.get("kind") == "attachment_ref":
            add(str(p.get("name", "")))
    return sorted(found, key=len, reverse=True)


def _strings(obj: Any) -> Iterable[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def scrub(obj: Any, needles: Sequence[str], replacement: str) -> Any:
    """``obj`` with every needle inside every string replaced."""
    if isinstance(obj, str):
        for n in needles:
            obj = obj.replace(n, replacement)
        return obj
    if isinstance(obj, Mapping):
        return {k: scrub(v, needles, replacement) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub(v, needles, replacement) for v in obj]
    return obj


def _derived_needles(extra: Mapping[str, Any]) -> list[str]:
    """Text derived from a message that ``SessionMemory`` notes in its ``extra``
    (``convmem.rewritten`` / ``convmem.sent_as``): it quotes the message in other words,
    so it goes wherever the message's own text goes."""
    ours = extra.get("convmem")
    if not isinstance(ours, Mapping):
        return []
    found = (ours.get(k) for k in ("rewritten", "sent_as"))
    return [v for v in found if isinstance(v, str) and len(v.strip()) >= 3]


def redact_parts(parts: Sequence[Mapping[str, Any]], replacement: str) -> list[JSONDict]:
    """Content gone, structure kept: kinds, tool names and call ids stay."""
    out: list[JSONDict] = []
    for p in parts:
        kind = p.get("kind")
        if kind == "text":
            out.append({"kind": "text", "text": replacement})
        elif kind == "tool_call":
            out.append({**p, "arguments": {}})
        elif kind == "tool_result":
            out.append({**p, "content": replacement})
        else:
            out.append({**p, "name": replacement, "sha256": "", "size": 0})
    return out


def redact(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    message_id: str,
    actor: str,
    reason: str,
    replacement: str,
) -> Op[RedactionReceipt]:
    """Rewrite a message's content everywhere it was copied; keep ids, places and tree.

    Reaches the message, every row that is a copy of it or that it copies (across
    forks), the model-input records quoting it, attachments it referenced, the
    search index, and derived memories citing any of those rows (tombstoned); logs
    who, when and why.
    """
    if not actor.strip() or not reason.strip():
        raise ConfigError("redact: actor and reason are required (they go to the redaction log)")
    yield from lock_thread(tenant, thread_id)
    target = yield from get_message(tenant, thread_id, message_id)
    root = target.copy_of or target.id
    res = yield sa.select(MESSAGES).where(
        MESSAGES.c.tenant == tenant,
        sa.or_(MESSAGES.c.id == root, MESSAGES.c.copy_of == root),
    )
    rows = [dict(r) for r in res.mappings().all()]
    needles: list[str] = []
    for r in rows:
        needles.extend(_needles(r["parts"] or []))
        needles.extend(_derived_needles(r["extra"] or {}))
    needles = sorted(set(needles), key=len, reverse=True)
    now = ctx.now()
    ids = sorted(r["id"] for r in rows)
    threads = sorted({r["thread_id"] for r in rows})
    refs = attachment_refs(r["parts"] or [] for r in rows if r["redacted_at"] is None)
    for r in rows:
        yield (
            sa.update(MESSAGES)
            .where(MESSAGES.c.id == r["id"])
            .values(
                parts=redact_parts(r["parts"] or [], replacement),
                extra=scrub(r["extra"] or {}, needles, replacement),
                redacted_at=now,
            )
        )
    removed = yield from drop_attachment_refs(tenant, refs)
    yield sa.delete(SEARCH).where(SEARCH.c.message_id.in_(ids))
    res = yield sa.select(TURNS).where(TURNS.c.tenant == tenant, TURNS.c.thread_id.in_(threads))
    turn_ids: list[str] = []
    for t in res.mappings().all():
        block = scrub(t["rendered_block"], needles, replacement)
        snap = scrub(t["state_snapshot"] or {}, needles, replacement)
        if block != t["rendered_block"] or snap != (t["state_snapshot"] or {}):
            turn_ids.append(t["id"])
            yield (
                sa.update(TURNS)
                .where(TURNS.c.id == t["id"])
                .values(rendered_block=block, state_snapshot=snap)
            )
    res = yield sa.select(DERIVED).where(
        DERIVED.c.tenant == tenant, DERIVED.c.thread_id.in_(threads)
    )
    derived_ids = sorted(
        d["id"] for d in res.mappings().all() if set(d["source_message_ids"] or ()) & set(ids)
    )
    if derived_ids:
        yield (
            sa.update(DERIVED)
            .where(DERIVED.c.id.in_(derived_ids))
            .values(content="", tombstoned_at=now)
        )
    redaction_id = new_id()
    yield sa.insert(REDACTIONS).values(
        id=redaction_id,
        thread_id=thread_id,
        tenant=tenant,
        message_id=message_id,
        actor=actor,
        reason=reason,
        at=now,
        affected={"messages": ids, "turns": sorted(turn_ids), "derived": derived_ids},
    )
    if ctx.dialect == "sqlite":
        yield from optimize_search()
    return RedactionReceipt(
        redaction_id=redaction_id,
        message_ids=tuple(ids),
        turn_ids=tuple(sorted(turn_ids)),
        derived_ids=tuple(derived_ids),
        attachments_removed=removed,
    )


def optimize_search() -> Op[None]:
    """FTS5 keeps deleted terms in old segments until a merge; merge them all now."""
    yield sa.text("INSERT INTO convmem_search(convmem_search) VALUES('optimize')")


def delete_thread(ctx: Ctx, tenant: str, thread_id: str) -> Op[DeletionReceipt]:
    """Remove the thread and everything of it; release its attachment references."""
    yield from lock_thread(tenant, thread_id)
    res = yield sa.select(MESSAGES.c.parts).where(
        MESSAGES.c.thread_id == thread_id, MESSAGES.c.tenant == tenant
    )
    refs = attachment_refs(r.parts or [] for r in res.all())
    where_thread = {
        t: sa.and_(t.c.thread_id == thread_id, t.c.tenant == tenant)
        for t in (SEARCH, DERIVED, REDACTIONS, TURNS, MESSAGES)
    }
    yield sa.delete(SEARCH).where(where_thread[SEARCH])
    derived = (yield sa.delete(DERIVED).where(where_thread[DERIVED])).rowcount
    yield sa.delete(REDACTIONS).where(where_thread[REDACTIONS])
    turns = (yield sa.delete(TURNS).where(where_thread[TURNS])).rowcount
    messages = (yield sa.delete(MESSAGES).where(where_thread[MESSAGES])).rowcount
    yield sa.delete(THREADS).where(THREADS.c.id == thread_id, THREADS.c.tenant == tenant)
    removed = yield from drop_attachment_refs(tenant, refs)
    used = sa.select(TURNS.c.template_sha256).where(
        TURNS.c.tenant == tenant, TURNS.c.template_sha256.is_not(None)
    )
    yield sa.delete(TEMPLATES).where(TEMPLATES.c.tenant == tenant, TEMPLATES.c.sha256.not_in(used))
    if ctx.dialect == "sqlite":
        yield from optimize_search()
    return DeletionReceipt(
        thread_id=thread_id,
        messages=int(messages),
        turns=int(turns),
        derived=int(derived),
        attachments_removed=removed,
    )


def expired_threads(
    ctx: Ctx, tenant: str | None, now: datetime
) -> Op[tuple[list[tuple[str, str]], int]]:
    """Threads whose effective policy has expired, and how many are on legal hold."""
    stmt = sa.select(THREADS.c.id, THREADS.c.tenant, THREADS.c.updated_at, THREADS.c.retention)
    if tenant is not None:
        stmt = stmt.where(THREADS.c.tenant == tenant)
    res = yield stmt.order_by(THREADS.c.updated_at, THREADS.c.id)
    expired: list[tuple[str, str]] = []
    held = 0
    for r in res.all():
        policy = ctx.retention if r.retention is None else RetentionPolicy.from_json(r.retention)
        if policy.legal_hold:
            held += 1
        elif policy.max_age is not None and utc(r.updated_at) + policy.max_age <= utc(now):
            expired.append((r.tenant, r.id))
    return expired, held


# ---------------------------------------------------------------- export / import


def export_thread(tenant: str, thread_id: str) -> Op[dict[str, Any]]:
    """The whole thread as an export document (see ``convmem.transcript.export``)."""
    th = yield from read_thread(tenant, thread_id)
    res = yield (
        sa.select(MESSAGES)
        .where(MESSAGES.c.thread_id == thread_id, MESSAGES.c.tenant == tenant)
        .order_by(MESSAGES.c.seq)
    )
    msgs = [dict(r) for r in res.mappings().all()]
    shas = sorted(attachment_refs(m["parts"] or [] for m in msgs))
    atts: list[dict[str, Any]] = []
    if shas:
        res = yield (
            sa.select(ATTACHMENTS)
            .where(ATTACHMENTS.c.tenant == tenant, ATTACHMENTS.c.sha256.in_(shas))
            .order_by(ATTACHMENTS.c.sha256)
        )
        atts = [dict(r) for r in res.mappings().all()]
    res = yield (
        sa.select(TURNS, TEMPLATES.c.text.label("system_prompt"))
        .select_from(
            TURNS.outerjoin(
                TEMPLATES,
                sa.and_(
                    TEMPLATES.c.tenant == TURNS.c.tenant,
                    TEMPLATES.c.sha256 == TURNS.c.template_sha256,
                ),
            )
        )
        .where(TURNS.c.thread_id == thread_id, TURNS.c.tenant == tenant)
    )
    turns = [dict(r) for r in res.mappings().all()]
    res = yield sa.select(DERIVED).where(
        DERIVED.c.thread_id == thread_id, DERIVED.c.tenant == tenant
    )
    derived = [dict(r) for r in res.mappings().all()]
    res = yield sa.select(REDACTIONS).where(
        REDACTIONS.c.thread_id == thread_id, REDACTIONS.c.tenant == tenant
    )
    redactions = [dict(r) for r in res.mappings().all()]
    ts = ex.ts_to_str
    return {
        "format": ex.FORMAT,
        "version": ex.VERSION,
        "thread": {
            "id": th["id"],
            "key": th["key"],
            "owner": th["owner"],
            "title": th["title"],
            "metadata": th["metadata"] or {},
            "created_at": ts(th["created_at"]),
            "updated_at": ts(th["updated_at"]),
            "retention": th["retention"],
            "active_leaf": th["active_leaf"],
            "next_seq": th["next_seq"],
            "archived_seq": th["archived_seq"],
            "forked_from": th["forked_from"],
        },
        "messages": [
            {
                "id": m["id"],
                "parent_id": m["parent_id"],
                "seq": m["seq"],
                "role": m["role"],
                "author": m["author"],
                "parts": m["parts"] or [],
                "extra": m["extra"] or {},
                "received_at": ts(m["received_at"]),
                "client_ts": ts(m["client_ts"]),
                "visibility": m["visibility"],
                "copy_of": m["copy_of"],
                "turn_id": m["turn_id"],
                "redacted_at": ts(m["redacted_at"]),
            }
            for m in msgs
        ],
        "attachments": [
            {
                "sha256": a["sha256"],
                "media_type": a["media_type"],
                "size": a["size"],
                "data_base64": ex.b64(bytes(a["data"])),
            }
            for a in atts
        ],
        "model_inputs": ex.sort_by_time(
            [
                {
                    "id": t["id"],
                    "user_message_id": t["user_message_id"],
                    "rendered_block": t["rendered_block"],
                    "state_snapshot": t["state_snapshot"] or {},
                    "sent_message_ids": t["sent_message_ids"] or [],
                    "system_prompt": t["system_prompt"],
                    "system_prompt_sha256": t["template_sha256"],
                    "tool_schemas": t["tool_schemas"] or [],
                    "model": t["model"],
                    "model_params": t["model_params"] or {},
                    "created_at": ts(t["created_at"]),
                    "completed_at": ts(t["completed_at"]),
                    "answer_message_id": t["answer_message_id"],
                }
                for t in turns
            ],
            "created_at",
        ),
        "derived": ex.sort_by_time(
            [
                {
                    "id": d["id"],
                    "kind": d["kind"],
                    "content": d["content"],
                    "source_message_ids": d["source_message_ids"] or [],
                    "created_at": ts(d["created_at"]),
                    "tombstoned_at": ts(d["tombstoned_at"]),
                }
                for d in derived
            ],
            "created_at",
        ),
        "redactions": ex.sort_by_time(
            [
                {
                    "id": r["id"],
                    "message_id": r["message_id"],
                    "actor": r["actor"],
                    "reason": r["reason"],
                    "at": ts(r["at"]),
                    "affected": r["affected"] or {},
                }
                for r in redactions
            ],
            "at",
        ),
    }


def export_user_view(tenant: str, thread_id: str) -> Op[dict[str, Any]]:
    """What the user saw: the active path, conversation messages only."""
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


def _remap(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with fresh thread, message, turn, derived and redaction ids."""
    mapping: dict[str, str] = {doc["thread"]["id"]: new_id()}
    for section in ("messages", "model_inputs", "derived", "redactions"):
        for item in doc[section]:
            mapping[item["id"]] = new_id()

    def m(value: Any) -> Any:
        return mapping.get(value, value) if isinstance(value, str) else value

    out: dict[str, Any] = json.loads(json.dumps(doc))
    th = out["thread"]
    th.update(id=m(th["id"]), active_leaf=m(th["active_leaf"]), key=None)
    for msg in out["messages"]:
        for k in ("id", "parent_id", "copy_of", "turn_id"):
            msg[k] = m(msg[k])
    for t in out["model_inputs"]:
        for k in ("id", "user_message_id", "answer_message_id"):
            t[k] = m(t[k])
        t["sent_message_ids"] = [m(i) for i in t["sent_message_ids"]]
    for d in out["derived"]:
        d["id"] = m(d["id"])
        d["source_message_ids"] = [m(i) for i in d["source_message_ids"]]
    for r in out["redactions"]:
        r["id"], r["message_id"] = m(r["id"]), m(r["message_id"])
        r["affected"] = {k: [m(i) for i in v] for k, v in r["affected"].items()}
    return out


def _ts(value: Any) -> datetime | None:
    dt = ex.str_to_ts(value)
    return None if dt is None else naive_utc(dt)


def import_thread(ctx: Ctx, tenant: str, doc: dict[str, Any], new_ids: bool) -> Op[Thread]:
    """Insert an export document into ``tenant`` keeping ids, sequences and times."""
    if new_ids:
        doc = _remap(doc)
    th = doc["thread"]
    values = {
        "id": th["id"],
        "tenant": tenant,
        "key": th["key"],
        "owner": th["owner"],
        "title": th["title"],
        "metadata": th["metadata"],
        "created_at": _ts(th["created_at"]),
        "updated_at": _ts(th["updated_at"]),
        "retention": th["retention"],
        "active_leaf": th["active_leaf"],
        "next_seq": int(th["next_seq"]),
        "archived_seq": int(th["archived_seq"]),
        "forked_from": th["forked_from"],
    }
    res = (
        yield ctx.insert(THREADS).values(**values).on_conflict_do_nothing().returning(THREADS.c.id)
    )
    if res.first() is None:
        raise ThreadExists(
            f"thread {th['id']!r} (key {th['key']!r}) already exists; import with --new-id"
        )
    rows = [
        {
            "id": m["id"],
            "thread_id": th["id"],
            "tenant": tenant,
            "parent_id": m["parent_id"],
            "seq": int(m["seq"]),
            "role": m["role"],
            "author": m["author"],
            "parts": m["parts"],
            "extra": m["extra"],
            "received_at": _ts(m["received_at"]),
            "client_ts": _ts(m["client_ts"]),
            "visibility": m["visibility"],
            "copy_of": m["copy_of"],
            "turn_id": m["turn_id"],
            "redacted_at": _ts(m["redacted_at"]),
        }
        for m in doc["messages"]
    ]
    blobs: dict[str, JSONDict] = {}
    for a in doc["attachments"]:
        data = ex.unb64(a["data_base64"])
        if _sha256(data) != a["sha256"]:
            raise ConfigError(f"import: attachment {a['sha256']} does not match its data")
        blobs[a["sha256"]] = {
            "tenant": tenant,
            "sha256": a["sha256"],
            "media_type": a["media_type"],
            "size": int(a["size"]),
            "data": data,
            "refcount": 0,
            "created_at": ctx.now(),
        }
    yield from add_attachment_refs(
        ctx, tenant, attachment_refs(r["parts"] for r in rows if r["redacted_at"] is None), blobs
    )
    yield from insert_message_rows(ctx, rows)
    for t in doc["model_inputs"]:
        if t["system_prompt"] is not None:
            yield (
                ctx.insert(TEMPLATES)
                .values(tenant=tenant, sha256=t["system_prompt_sha256"], text=t["system_prompt"])
                .on_conflict_do_nothing()
            )
        yield sa.insert(TURNS).values(
            id=t["id"],
            thread_id=th["id"],
            tenant=tenant,
            user_message_id=t["user_message_id"],
            rendered_block=t["rendered_block"],
            state_snapshot=t["state_snapshot"],
            sent_message_ids=t["sent_message_ids"],
            template_sha256=t["system_prompt_sha256"],
            tool_schemas=t["tool_schemas"],
            model=t["model"],
            model_params=t["model_params"],
            created_at=_ts(t["created_at"]),
            completed_at=_ts(t["completed_at"]),
            answer_message_id=t["answer_message_id"],
        )
    for d in doc["derived"]:
        yield sa.insert(DERIVED).values(
            id=d["id"],
            thread_id=th["id"],
            tenant=tenant,
            kind=d["kind"],
            content=d["content"],
            source_message_ids=d["source_message_ids"],
            created_at=_ts(d["created_at"]),
            tombstoned_at=_ts(d["tombstoned_at"]),
        )
    for r in doc["redactions"]:
        yield sa.insert(REDACTIONS).values(
            id=r["id"],
            thread_id=th["id"],
            tenant=tenant,
            message_id=r["message_id"],
            actor=r["actor"],
            reason=r["reason"],
            at=_ts(r["at"]),
            affected=r["affected"],
        )
    return to_thread(values)


def get_attachment(tenant: str, sha256: str) -> Op[bytes]:
    """Attachment bytes by digest, within the tenant."""
    res = yield sa.select(ATTACHMENTS.c.data).where(
        ATTACHMENTS.c.tenant == tenant, ATTACHMENTS.c.sha256 == sha256
    )
    data = res.scalar_one_or_none()
    if data is None:
        raise ThreadNotFound(f"attachment {sha256} not found for tenant {tenant!r}")
    return bytes(data)


__all__ = ["ACTIVE", "Ctx", "Op", "TextPart", "ToolCallPart", "ToolResultPart"]
