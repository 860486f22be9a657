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
round trip). Every statement filters on ``tenant``, and ids are namespaced by tenant
(primary keys ``(tenant, id)``): a thread of another tenant is indistinguishable from
a missing one (``ThreadNotFound``), and taking its id creates an unrelated thread.

The edge: tenants, keys and ids go through ``convmem.identity`` (a ``ConfigError``
naming the field, the same on SQLite and PostgreSQL); free text and JSON written to
the record (message parts, ``extra``, model inputs, metadata, derived memories, the
redaction log) and search queries have NUL and lone surrogates replaced by U+FFFD
(``clean_text``), so neither database ever sees them. Reads that walk parent links
stay inside one tenant's thread at every step and stop after ``next_seq`` steps (no
path is longer than the thread), and a loop found in stored links is
``RecordCorrupt``, never a hang.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO, TypeVar, Union

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.base import Executable

from convmem.errors import ConfigError
from convmem.identity import check_id, check_tenant, check_thread_id, clean_text
from convmem.render import QUESTION_TOKENS, inert
from convmem.transcript import export as ex
from convmem.transcript.errors import RecordCorrupt, ThreadDeleted, ThreadExists, ThreadNotFound
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
    ROLES,
    VISIBILITIES,
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


@dataclass(frozen=True, slots=True)
class Read:
    """Not a statement: read up to ``size`` bytes of ``source`` (an import document).

    File I/O goes through the driver like a statement, so the async store reads on a
    worker thread and the operation stays sans-I/O (``convmem.transcript.exchange``).
    """

    source: BinaryIO
    size: int


@dataclass(frozen=True, slots=True)
class Rewind:
    """Not a statement: seek ``source`` back to its start (a second pass)."""

    source: BinaryIO


@dataclass(frozen=True, slots=True)
class Write:
    """Not a statement: write ``data`` to ``sink`` (an export, chunk by chunk)."""

    sink: BinaryIO
    data: bytes


# A step is a statement, or (statement, parameter rows) for a cached executemany, or
# an ``Alone`` statement, or file I/O (``Read``, ``Rewind``, ``Write``).
Step = Union[  # noqa: UP007
    Executable,
    tuple[Executable, Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]],  # noqa: UP007
    Alone,
    Read,
    Rewind,
    Write,
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
        incarnation=row.get("incarnation"),
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


# ---------------------------------------------------------------- the edge

#: Longest record id (thread, message, turn, ...): the id columns' width.
ID_CHARS = 64


def edge(tenant: Any, *, key: Any = None, **ids: Any) -> None:
    """The identity rule at the store's edge (``convmem.identity``): the tenant, the
    application's ``key`` and record ids; ``None`` ids are skipped. A ``ConfigError``
    naming the field, before any statement, on every backend."""
    check_tenant(tenant)
    if key is not None:
        check_thread_id(key, "key")
    for name, value in ids.items():
        if value is not None:
            check_id(value, name, ID_CHARS)


def bounded(value: Any, name: str, max_chars: int, *, blank: bool = True) -> Any:
    """A short text column (author, owner, model, ...): cleaned, within its width."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, got {type(value).__name__}")
    value = clean_text(value)
    if len(value) > max_chars:
        raise ConfigError(f"{name} is {len(value)} characters; the limit is {max_chars}")
    if not blank and not value.strip():
        raise ConfigError(f"{name} must not be blank")
    return value


#: JSON integers the record keeps: what every JSON reader (and the import) reads back.
JSON_INT = 2**63 - 1


def clean_json(obj: Any) -> Any:
    """``obj`` with NUL and lone surrogates replaced in every string (keys included);
    plain JSON data comes back unchanged. An integer beyond 64 bits is a
    ``ConfigError``: the export could not be imported again."""
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, int) and not isinstance(obj, bool) and not -JSON_INT <= obj <= JSON_INT:
        raise ConfigError(f"JSON integer {obj} is beyond 64 bits (±{JSON_INT}); store it as a string")
    if isinstance(obj, Mapping):
        return {(clean_text(k) if isinstance(k, str) else k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def clean_part(part: Part) -> Part:
    """A part with its text cleaned (``clean_text``)."""
    if isinstance(part, TextPart):
        return part if clean_text(part.text) is part.text else TextPart(clean_text(part.text))
    if isinstance(part, ToolCallPart):
        return ToolCallPart(
            clean_text(part.call_id), clean_text(part.name), clean_json(dict(part.arguments))
        )
    if isinstance(part, ToolResultPart):
        return ToolResultPart(clean_text(part.call_id), clean_text(part.content), part.is_error)
    return AttachmentPart(
        media_type=bounded(part.media_type, "attachment media_type", 200),
        name=clean_text(part.name),
        sha256=part.sha256,
        size=part.size,
        data=part.data,
    )


def clean_message(msg: NewMessage) -> NewMessage:
    """A message as the record keeps it: role and visibility checked, text cleaned."""
    if msg.role not in ROLES:
        raise ConfigError(f"message role {msg.role!r}: want system, user, assistant or tool")
    if msg.visibility is not None and msg.visibility not in VISIBILITIES:
        raise ConfigError(f"message visibility {msg.visibility!r}: want conversation or execution")
    content: str | list[Part]
    if isinstance(msg.content, str):
        content = clean_text(msg.content)
    else:
        content = [clean_part(p) for p in msg.content]
    return NewMessage(
        role=msg.role,
        content=content,
        author=bounded(msg.author, "author", 200),
        extra=None if msg.extra is None else clean_json(dict(msg.extra)),
        client_ts=msg.client_ts,
        visibility=msg.visibility,
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
        **({"active_leaf": sa.bindparam("b_leaf")} if move else {}),
    )
    .returning(THREADS.c.next_seq)
    for move in (False, True)
}
_INSERT_MESSAGES = sa.insert(MESSAGES)
_INSERT_SEARCH = sa.insert(SEARCH)


def missing_thread(tenant: str, thread_id: str, incarnation: str | None) -> ThreadNotFound:
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
        .select_from(
            t.outerjoin(
                m, sa.and_(m.c.tenant == t.c.tenant, m.c.thread_id == t.c.id, m.c.id == start)
            )
        )
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
            step.join(
                path,
                sa.and_(
                    step.c.tenant == path.c.tenant,
                    step.c.thread_id == path.c.thread_id,
                    step.c.id == path.c.parent_id,
                ),
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
        raise ThreadNotFound(f"thread {thread_id!r} not found for tenant {tenant!r}")
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
# the tenant's (or, for a bound turn, no longer the incarnation it began on), and
# then nothing was written. The rows travel as one JSON
# parameter, so the text (and psycopg's prepared plan) never changes with the
# batch size.
_PG_INSERT_CHAIN = sa.text(
    """
WITH locked AS (
    SELECT id, active_leaf FROM convmem_threads
    WHERE id = :thread_id AND tenant = :tenant
        AND (CAST(:incarnation AS text) IS NULL OR incarnation = :incarnation)
    FOR UPDATE
), th AS (
    UPDATE convmem_threads AS t
    SET next_seq = t.next_seq + :n,
        updated_at = :now,
        active_leaf = CASE WHEN :move_leaf THEN :last_id ELSE t.active_leaf END
    FROM locked
    WHERE t.tenant = :tenant AND t.id = locked.id
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
    incarnation: str | None,
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
        "incarnation": incarnation,
        "rows": json.dumps(payload),
        "search": json.dumps(search),
    }
    res = yield (Alone(_PG_INSERT_CHAIN, params) if alone else (_PG_INSERT_CHAIN, params))
    row = res.first()
    if row is None:
        raise missing_thread(tenant, thread_id, incarnation)
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
            incarnation=incarnation,
        )
    else:
        # SQLite: the write transaction (BEGIN IMMEDIATE) is the lock; statements are cheap.
        if isinstance(parent_id, _Active) or incarnation is not None:
            th = yield from lock_thread(tenant, thread_id, incarnation)
            parent = th["active_leaf"] if isinstance(parent_id, _Active) else parent_id
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
        "owner": bounded(owner, "owner", 200),
        "title": None if title is None else clean_text(title),
        "metadata": clean_json(dict(metadata or {})),
        "created_at": now,
        "updated_at": now,
        "retention": None if retention is None else retention.to_json(),
        "active_leaf": None,
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
    edge(tenant, key=key)
    values = _thread_values(tenant, new_id(), ctx.now(), key, owner, title, metadata, None)
    yield (
        ctx.insert(THREADS)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["tenant", "key"])
    )
    res = yield sa.select(THREADS).where(THREADS.c.tenant == tenant, THREADS.c.key == key)
    return to_thread(res.mappings().one())


_BIND = (
    sa.select(
        THREADS,
        MESSAGES.c.id.label("m_id"),
        MESSAGES.c.parts.label("m_parts"),
        MESSAGES.c.extra.label("m_extra"),
    )
    .select_from(
        THREADS.outerjoin(
            MESSAGES,
            sa.and_(
                MESSAGES.c.tenant == THREADS.c.tenant,
                MESSAGES.c.thread_id == THREADS.c.id,
                MESSAGES.c.role == "user",
            ),
        )
    )
    .where(THREADS.c.tenant == sa.bindparam("b_tenant"), THREADS.c.key == sa.bindparam("b_key"))
    .order_by(MESSAGES.c.seq.desc())
    .limit(sa.bindparam("b_recent"))
)


def bind_turn(tenant: str, key: str, recent: int) -> Op[tuple[Thread, list[JSONDict]] | None]:
    """What a turn binds to when it begins: the key's thread (its id and incarnation)
    and the ``id``, ``parts`` and ``extra`` of its last ``recent`` user messages, newest
    first (what the turn's block may quote). ``None`` when the key has no thread yet.
    ONE statement (``Alone``: one round trip on PostgreSQL)."""
    edge(tenant, key=key)
    if type(recent) is not int or recent < 0:
        raise ConfigError(f"bind_turn: recent must be a non-negative integer, got {recent!r}")
    res = yield Alone(_BIND, {"b_tenant": tenant, "b_key": key, "b_recent": max(recent, 1)})
    rows = res.mappings().all()
    if not rows:
        return None
    users = [
        {"id": r["m_id"], "parts": r["m_parts"] or [], "extra": r["m_extra"] or {}}
        for r in rows
        if r["m_id"] is not None
    ]
    return to_thread(rows[0]), users[:recent]


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


def _this_thread(tenant: str, thread_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    return (THREADS.c.tenant == tenant, THREADS.c.id == thread_id)


def set_retention(tenant: str, thread_id: str, policy: RetentionPolicy | None) -> Op[None]:
    """Per-thread override (``None``: back to the store default)."""
    edge(tenant, thread_id=thread_id)
    yield from lock_thread(tenant, thread_id)
    yield (
        sa.update(THREADS)
        .where(*_this_thread(tenant, thread_id))
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
    incarnation: str | None = None,
) -> Op[list[Message]]:
    """Append to the active leaf (one linear path under concurrency) or under a parent.
    ``incarnation``: only into that incarnation of the thread (a turn's binding)."""
    edge(tenant, thread_id=thread_id, parent_id=None if isinstance(parent_id, _Active) else parent_id)
    if isinstance(parent_id, _Active):
        return (
            yield from insert_chain(
                ctx, tenant, thread_id, ACTIVE, messages, move_leaf=True, whole_op=True,
                incarnation=incarnation,
            )
        )
    yield from lock_thread(tenant, thread_id, incarnation)
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
    incarnation: str | None = None,
) -> Op[TurnRecord]:
    """Commit point 1: the user message and what the model is about to receive.

    The message follows the active leaf, or goes under ``parent_id`` (an edit: a
    sibling of the edited question); either way it becomes the active leaf. With
    ``incarnation`` it is written only into that incarnation of the thread."""
    edge(tenant, thread_id=thread_id, parent_id=None if isinstance(parent_id, _Active) else parent_id)
    for i, sent in enumerate(model_input.sent_message_ids):
        check_id(sent, f"model_input.sent_message_ids[{i}]", ID_CHARS)
    quoted = model_input.quoted_message_ids
    for i, q in enumerate(quoted or ()):
        check_id(q, f"model_input.quoted_message_ids[{i}]", ID_CHARS)
    if not isinstance(parent_id, _Active):
        yield from lock_thread(tenant, thread_id, incarnation)
        if parent_id is not None:
            yield from get_message(tenant, thread_id, parent_id)
    turn_id = new_id()
    (msg,) = yield from insert_chain(
        ctx, tenant, thread_id, parent_id, [user_message], move_leaf=True, turn_id=turn_id,
        incarnation=incarnation,
    )
    sha: str | None = None
    prompt = None if model_input.system_prompt is None else clean_text(model_input.system_prompt)
    if prompt is not None:
        sha = _sha256(prompt.encode("utf-8"))
        yield (
            ctx.insert(TEMPLATES)
            .values(tenant=tenant, sha256=sha, text=prompt)
            .on_conflict_do_nothing()
        )
    yield sa.insert(TURNS).values(
        id=turn_id,
        thread_id=thread_id,
        tenant=tenant,
        user_message_id=msg.id,
        rendered_block=clean_text(model_input.rendered_block),
        state_snapshot=clean_json(dict(model_input.state_snapshot)),
        sent_message_ids=list(model_input.sent_message_ids),
        template_sha256=sha,
        tool_schemas=[clean_json(dict(s)) for s in model_input.tool_schemas],
        model=bounded(model_input.model, "model", 200),
        model_params=clean_json(dict(model_input.model_params)),
        created_at=ctx.now(),
        completed_at=None,
        answer_message_id=None,
        quoted_message_ids=None if quoted is None else list(quoted),
    )
    return TurnRecord(turn_id=turn_id, thread_id=thread_id, user_message=msg)


def complete_turn(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    turn_id: str,
    messages: Sequence[NewMessage],
    incarnation: str | None = None,
) -> Op[list[Message]]:
    """Commit point 2: tool calls, results and the answer, linked to the turn.

    They follow the active leaf when the turn's user message is still on the active
    path (another device may have appended meanwhile); if the user has since moved
    to another branch, they go under the user message and the pointer stays put.
    With ``incarnation``, only into that incarnation of the thread.
    """
    edge(tenant, thread_id=thread_id, turn_id=turn_id)
    th = yield from lock_thread(tenant, thread_id, incarnation)
    res = yield sa.select(TURNS).where(
        TURNS.c.id == turn_id, TURNS.c.thread_id == thread_id, TURNS.c.tenant == tenant
    )
    turn = res.mappings().first()
    if turn is None:
        raise ThreadNotFound(f"turn {turn_id!r} not found in thread {thread_id!r}")
    if turn["completed_at"] is not None:
        raise ConfigError(f"turn {turn_id!r} is already complete")
    if th["active_leaf"] == turn["user_message_id"]:
        on_path = True  # the usual case, nothing appended since point 1: no path walk
    else:
        path = yield from read_path(tenant, thread_id)
        on_path = any(m.id == turn["user_message_id"] for m in path)
    parent = th["active_leaf"] if on_path else turn["user_message_id"]
    out = yield from insert_chain(
        ctx, tenant, thread_id, parent, messages, move_leaf=on_path, turn_id=turn_id
    )
    answer = next((m.id for m in reversed(out) if m.role == "assistant"), None)
    yield (
        sa.update(TURNS)
        .where(TURNS.c.tenant == tenant, TURNS.c.thread_id == thread_id, TURNS.c.id == turn_id)
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
    edge(tenant, thread_id=thread_id, message_id=message_id)
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
    edge(tenant, thread_id=thread_id, message_id=message_id)
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
    """Make the branch through ``message_id`` active: its newest descendant becomes the
    leaf. The walk down stops after ``next_seq`` steps (``RecordCorrupt``: a loop)."""
    edge(tenant, thread_id=thread_id, message_id=message_id)
    th = yield from lock_thread(tenant, thread_id)
    leaf = yield from get_message(tenant, thread_id, message_id)
    for _ in range(int(th["next_seq"])):
        res = yield (
            sa.select(MESSAGES)
            .where(
                MESSAGES.c.tenant == tenant,
                MESSAGES.c.thread_id == thread_id,
                MESSAGES.c.parent_id == leaf.id,
            )
            .order_by(MESSAGES.c.seq.desc())
            .limit(1)
        )
        row = res.mappings().first()
        if row is None:
            break
        leaf = to_message(row)
    else:
        raise corrupt_links(thread_id, message_id)
    yield sa.update(THREADS).where(*_this_thread(tenant, thread_id)).values(active_leaf=leaf.id)
    return leaf


def set_active_leaf(tenant: str, thread_id: str, message_id: str | None) -> Op[None]:
    """Point the thread at ``message_id``; ``None`` empties the active path."""
    edge(tenant, thread_id=thread_id, message_id=message_id)
    yield from lock_thread(tenant, thread_id)
    if message_id is not None:
        yield from get_message(tenant, thread_id, message_id)
    yield sa.update(THREADS).where(*_this_thread(tenant, thread_id)).values(active_leaf=message_id)


def rebase_path(
    ctx: Ctx, tenant: str, thread_id: str, messages: Sequence[NewMessage]
) -> Op[list[Message]]:
    """Make the active path equal ``messages`` while changing as little as possible.

    The longest common prefix (same role, parts and ``extra``) is reused; the rest is appended
    as a branch from its end. A new row whose content equals a message of the old
    path carries ``copy_of`` (the original). The same list is a no-op; a shorter
    prefix of the path only moves the pointer back.
    """
    edge(tenant, thread_id=thread_id)
    messages = [clean_message(m) for m in messages]
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
            yield (
                sa.update(THREADS).where(*_this_thread(tenant, thread_id)).values(active_leaf=leaf)
            )
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
    edge(tenant, thread_id=thread_id)
    if type(seq) is not int or not 0 <= seq <= 2**31 - 1:
        raise ConfigError(f"archive_through: seq must be an integer from 0 to 2**31-1, got {seq!r}")
    th = yield from lock_thread(tenant, thread_id)
    mark = max(int(th["archived_seq"]), seq)
    yield sa.update(THREADS).where(*_this_thread(tenant, thread_id)).values(archived_seq=mark)
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


def reconstruct_model_input(tenant: str, thread_id: str, turn_id: str) -> Op[ReconstructedInput]:
    """Rebuild what the model received on a turn from the record."""
    edge(tenant, thread_id=thread_id, turn_id=turn_id)
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
        .select_from(
            s.join(MESSAGES, sa.and_(MESSAGES.c.tenant == s.c.tenant, MESSAGES.c.id == s.c.message_id))
        )
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


# ---------------------------------------------------------------- redaction and deletion


#: A stored string at least this long that is the start of a redacted text is that
#: text cut short (a session keeps questions cut to its limit): it is replaced whole.
PREFIX_MIN = 16


def text_forms(text: str) -> set[str]:
    """Every form of ``text`` a derived copy may hold: as written, each of its lines, and
    as the renderer quotes it in a session block (``convmem.render.inert``: one line,
    ``"`` and ``#`` mapped, cut to the question budget) with and without its ellipsis.
    Forms shorter than three characters are left alone (they would hit everything)."""
    forms = {text, *text.splitlines()}
    shown = inert(text, max_tokens=QUESTION_TOKENS)
    forms.add(shown)
    if shown.endswith("…"):
        forms.add(shown[:-1].rstrip())
    return {f for f in forms if len(f.strip()) >= 3}


def _needles(parts: Sequence[Mapping[str, Any]]) -> set[str]:
    """The forms of a message's content a redaction hunts for in derived copies."""
    found: set[str] = set()
    for p in parts:
        if p.get("kind") == "text":
            found |= text_forms(str(p["text"]))
        elif p.get("kind") == "tool_result":
            found |= text_forms(str(p["content"]))
        elif p.get("kind") == "tool_call":
            for v in _strings(p.get("arguments")):
                found |= text_forms(v)
        elif p.get("kind") == "attachment_ref":
            found |= text_forms(str(p.get("name", "")))
    return found


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
    """``obj`` with every needle inside every string replaced; a string that is the
    start of a needle (at least ``PREFIX_MIN`` characters: the text cut short) goes
    whole. ``needles`` longest first."""
    if isinstance(obj, str):
        if len(obj) >= PREFIX_MIN and any(n.startswith(obj) for n in needles):
            return replacement
        for n in needles:
            obj = obj.replace(n, replacement)
        return obj
    if isinstance(obj, Mapping):
        return {k: scrub(v, needles, replacement) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub(v, needles, replacement) for v in obj]
    return obj


def _derived_needles(extra: Mapping[str, Any]) -> set[str]:
    """Text derived from a message that ``SessionMemory`` notes in its ``extra``
    (``convmem.rewritten`` / ``convmem.sent_as``): it quotes the message in other words,
    so it goes wherever the message's own text goes, in all its forms."""
    ours = extra.get("convmem")
    if not isinstance(ours, Mapping):
        return set()
    found: set[str] = set()
    for k in ("rewritten", "sent_as"):
        v = ours.get(k)
        if isinstance(v, str):
            found |= text_forms(v)
    return found


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


def quotes(turn: Mapping[str, Any], ids: set[str]) -> bool:
    """Whether a model-input record may quote one of ``ids``: by its links (its own user
    message, ``quoted_message_ids``), or — links unknown (``NULL``: written before
    revision 0003 or by a caller who did not say) — possibly, so it is scanned."""
    quoted = turn["quoted_message_ids"]
    if quoted is None:
        return True
    return turn["user_message_id"] in ids or not ids.isdisjoint(quoted)


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

    Reaches, by link: the message and every row that is a copy of it or that it
    copies (``copy_of``, across forks), the search rows of those, the derived memories
    citing any of them (tombstoned), the attachments they referenced, and the
    model-input records quoting them (``quotes``), where every form of the text
    (``text_forms``: as written, per line, as the renderer quotes it) is replaced in
    the rendered block and the state snapshot. Logs who, when and why (ids only).
    """
    edge(tenant, thread_id=thread_id, message_id=message_id)
    actor = bounded(actor, "actor", 200, blank=False)
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError("redact: actor and reason are required (they go to the redaction log)")
    reason, replacement = clean_text(reason), clean_text(replacement)
    yield from lock_thread(tenant, thread_id)
    target = yield from get_message(tenant, thread_id, message_id)
    root = target.copy_of or target.id
    res = yield sa.select(MESSAGES).where(
        MESSAGES.c.tenant == tenant,
        sa.or_(MESSAGES.c.id == root, MESSAGES.c.copy_of == root),
    )
    rows = [dict(r) for r in res.mappings().all()]
    found: set[str] = set()
    for r in rows:
        found |= _needles(r["parts"] or [])
        found |= _derived_needles(r["extra"] or {})
    found.discard(replacement)
    needles = sorted(found, key=len, reverse=True)
    now = ctx.now()
    ids = sorted(r["id"] for r in rows)
    idset = set(ids)
    threads = sorted({r["thread_id"] for r in rows})
    refs = attachment_refs(r["parts"] or [] for r in rows if r["redacted_at"] is None)
    for r in rows:
        yield (
            sa.update(MESSAGES)
            .where(MESSAGES.c.tenant == tenant, MESSAGES.c.id == r["id"])
            .values(
                parts=redact_parts(r["parts"] or [], replacement),
                extra=scrub(r["extra"] or {}, needles, replacement),
                redacted_at=now,
            )
        )
    removed = yield from drop_attachment_refs(tenant, refs)
    yield sa.delete(SEARCH).where(SEARCH.c.tenant == tenant, SEARCH.c.message_id.in_(ids))
    res = yield sa.select(TURNS).where(TURNS.c.tenant == tenant, TURNS.c.thread_id.in_(threads))
    turn_ids: list[str] = []
    for t in res.mappings().all():
        if not quotes(t, idset):
            continue
        block = scrub(t["rendered_block"], needles, replacement)
        snap = scrub(t["state_snapshot"] or {}, needles, replacement)
        if block != t["rendered_block"] or snap != (t["state_snapshot"] or {}):
            turn_ids.append(t["id"])
            yield (
                sa.update(TURNS)
                .where(TURNS.c.tenant == tenant, TURNS.c.id == t["id"])
                .values(rendered_block=block, state_snapshot=snap)
            )
    res = yield sa.select(DERIVED).where(
        DERIVED.c.tenant == tenant, DERIVED.c.thread_id.in_(threads)
    )
    derived_ids = sorted(
        d["id"] for d in res.mappings().all() if set(d["source_message_ids"] or ()) & idset
    )
    if derived_ids:
        yield (
            sa.update(DERIVED)
            .where(DERIVED.c.tenant == tenant, DERIVED.c.id.in_(derived_ids))
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
    edge(tenant, thread_id=thread_id)
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
    if tenant is not None:
        edge(tenant)
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
        raise ThreadNotFound(f"attachment {sha256} not found for tenant {tenant!r}")
    return bytes(data)


__all__ = ["ACTIVE", "Ctx", "Op", "TextPart", "ToolCallPart", "ToolResultPart"]
