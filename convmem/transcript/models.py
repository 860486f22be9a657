"""SQL tables of the durable record (SQLModel), one schema for SQLite and PostgreSQL.

Messages form an append-only tree: ``parent_id`` is the only link (no child lists
to drift apart), ``seq`` is assigned by the server per thread under a lock on the
thread row (``next_seq``), and the thread holds the ``active_leaf`` pointer, so an
edit, a regeneration or a fork is a new row plus a moved pointer. Attachments and
system prompts are content-addressed per tenant (``sha256``); nothing else is, and
no message row is shared between threads. Every table carries ``tenant`` so every
query can be scoped without a join. The search index (``convmem_search``) is an
FTS5 virtual table on SQLite and a plain table with a GIN index on PostgreSQL, so it
is declared here as a Core table and created by the migrations, never by
``create_all``. With ``search_index="deferred"`` a message is listed in
``convmem_index_queue`` instead (a plain table of keys, no full-text index: revisions
0004 and 0006), and its search text, read from the message then, goes into the index
at the next search of its tenant or thread, or by ``index_pending``. The schema changes only through ``convmem/transcript/migrations``.

Ids are namespaced by tenant (revision 0003): every primary key is ``(tenant, id)``
and every link to a thread is ``(tenant, thread_id)``, so another tenant's id is
simply another row — taking it reveals nothing, and no join can cross tenants.
Each thread row has an ``incarnation`` (fresh whenever the row is created, never
exported): a turn binds to it when it begins, so a thread deleted and then
re-created under the same id or key is a different thread to a turn in flight.
A model-input record lists the messages it quotes (``quoted_message_ids``), so
redaction reaches the rendered copies of a message by that link; ``NULL`` (rows
written before 0003, or by a caller who did not say) means "unknown", and
redaction then scans the thread's records for the renderer's forms of the text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

PREFIX = "convmem_"


def _when(name: str, *, nullable: bool = False, index: bool = False) -> Any:
    """A naive-UTC timestamp column (SQLite has no time zones; records convert)."""
    return Field(
        default=None,
        sa_column=sa.Column(name, sa.DateTime(timezone=False), nullable=nullable, index=index),
    )


def _thread_fk(table: str) -> sa.ForeignKeyConstraint:
    """The link of a content row to its thread, tenant included."""
    return sa.ForeignKeyConstraint(
        ["tenant", "thread_id"],
        ["convmem_threads.tenant", "convmem_threads.id"],
        name=f"fk_{table}_thread",
    )


def _by_thread(table: str) -> tuple[sa.Index, sa.ForeignKeyConstraint]:
    """The table arguments of a content table read by thread: the index and the link."""
    return sa.Index(f"ix_{table}_tenant_thread_id", "tenant", "thread_id"), _thread_fk(table)


class _ThreadContent(SQLModel):
    """The key and the thread of a content row (a plain model: each table gets its own columns)."""

    tenant: str = Field(primary_key=True, max_length=200)
    id: str = Field(primary_key=True, max_length=64)
    thread_id: str = Field(max_length=64)


class ThreadRow(SQLModel, table=True):
    """A conversation and its pointers."""

    __tablename__ = "convmem_threads"
    # unique indexes, as revision 0003 rebuilt them (tests/transcript/test_transcript_schema.py)
    __table_args__ = (sa.Index("uq_convmem_threads_tenant_key", "tenant", "key", unique=True),)

    tenant: str = Field(primary_key=True, max_length=200)
    id: str = Field(primary_key=True, max_length=64)
    key: str | None = Field(default=None, max_length=500)
    owner: str | None = Field(default=None, max_length=200)
    title: str | None = Field(default=None, sa_type=sa.Text)
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=sa.Column("metadata", sa.JSON))
    created_at: datetime = _when("created_at")
    updated_at: datetime = _when("updated_at", index=True)  # ix_convmem_threads_updated_at
    retention: dict[str, Any] | None = Field(default=None, sa_column=sa.Column(sa.JSON))
    active_leaf: str | None = Field(default=None, max_length=64)
    next_seq: int = 1
    archived_seq: int = 0
    forked_from: str | None = Field(default=None, max_length=64)
    incarnation: str | None = Field(default=None, max_length=64)
    # The newest message known to have no child, and its segment (revision 0005):
    # a chain appended under it continues that segment. Read and moved only under
    # the thread row's lock, so a writer never reads it stale; ``NULL``: none known.
    open_leaf: str | None = Field(default=None, max_length=64)
    open_segment: str | None = Field(default=None, max_length=64)


class MessageRow(_ThreadContent, table=True):
    """One node of the tree; content changes only by redaction."""

    __tablename__ = "convmem_messages"
    __table_args__ = (
        sa.Index("uq_convmem_messages_seq", "tenant", "thread_id", "seq", unique=True),
        sa.Index("ix_convmem_messages_tenant_parent_id", "tenant", "parent_id"),
        sa.Index("ix_convmem_messages_tenant_copy_of", "tenant", "copy_of"),
        _thread_fk("convmem_messages"),
    )

    parent_id: str | None = Field(default=None, max_length=64)
    seq: int
    role: str = Field(max_length=16)
    author: str | None = Field(default=None, max_length=200)
    parts: list[dict[str, Any]] = Field(default_factory=list, sa_column=sa.Column(sa.JSON))
    extra: dict[str, Any] = Field(default_factory=dict, sa_column=sa.Column(sa.JSON))
    received_at: datetime = _when("received_at")
    client_ts: datetime | None = _when("client_ts", nullable=True)
    visibility: str = Field(max_length=16)
    copy_of: str | None = Field(default=None, max_length=64)
    turn_id: str | None = Field(default=None, max_length=64)
    redacted_at: datetime | None = _when("redacted_at", nullable=True)
    # The id of the first message of this message's segment (revision 0005).
    segment: str = Field(max_length=64)


class AttachmentRow(SQLModel, table=True):
    """Attachment bytes, stored once per (tenant, sha256), counted by referencing messages."""

    __tablename__ = "convmem_attachments"

    tenant: str = Field(primary_key=True, max_length=200)
    sha256: str = Field(primary_key=True, max_length=64)
    media_type: str = Field(max_length=200)
    size: int
    data: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))
    refcount: int = 0
    created_at: datetime = _when("created_at")


class TemplateRow(SQLModel, table=True):
    """A system prompt or template text, stored once per (tenant, sha256)."""

    __tablename__ = "convmem_templates"

    tenant: str = Field(primary_key=True, max_length=200)
    sha256: str = Field(primary_key=True, max_length=64)
    text: str = Field(sa_type=sa.Text)


class TurnRow(_ThreadContent, table=True):
    """What the model received on one turn (commit point 1) and its outcome (point 2)."""

    __tablename__ = "convmem_turns"
    __table_args__ = _by_thread("convmem_turns")

    user_message_id: str = Field(max_length=64)
    rendered_block: str = Field(default="", sa_type=sa.Text)
    state_snapshot: dict[str, Any] = Field(default_factory=dict, sa_column=sa.Column(sa.JSON))
    sent_message_ids: list[str] = Field(default_factory=list, sa_column=sa.Column(sa.JSON))
    template_sha256: str | None = Field(default=None, max_length=64)
    tool_schemas: list[dict[str, Any]] = Field(default_factory=list, sa_column=sa.Column(sa.JSON))
    model: str | None = Field(default=None, max_length=200)
    model_params: dict[str, Any] = Field(default_factory=dict, sa_column=sa.Column(sa.JSON))
    created_at: datetime = _when("created_at")
    completed_at: datetime | None = _when("completed_at", nullable=True)
    answer_message_id: str | None = Field(default=None, max_length=64)
    quoted_message_ids: list[str] | None = Field(default=None, sa_column=sa.Column(sa.JSON))


class DerivedRow(_ThreadContent, table=True):
    """A memory derived from a thread; tombstoned when a source message is redacted."""

    __tablename__ = "convmem_derived"
    __table_args__ = _by_thread("convmem_derived")

    kind: str = Field(max_length=100)
    content: str = Field(sa_type=sa.Text)
    source_message_ids: list[str] = Field(default_factory=list, sa_column=sa.Column(sa.JSON))
    created_at: datetime = _when("created_at")
    tombstoned_at: datetime | None = _when("tombstoned_at", nullable=True)


class RedactionRow(_ThreadContent, table=True):
    """Who redacted what, when and why (ids only: the log never holds the content)."""

    __tablename__ = "convmem_redactions"
    __table_args__ = _by_thread("convmem_redactions")

    message_id: str = Field(max_length=64)
    actor: str = Field(max_length=200)
    reason: str = Field(sa_type=sa.Text)
    at: datetime = _when("at")
    affected: dict[str, Any] = Field(default_factory=dict, sa_column=sa.Column(sa.JSON))


class IndexQueueRow(SQLModel, table=True):
    """A message whose search text is not indexed yet (``search_index="deferred"``):
    listed on the turn without the full-text index's cost, and indexed (its text read
    from the message then) by the next search of its tenant or thread, or by
    ``index_pending``. A key, not a copy of the text (revision 0006): the turn writes
    the text once, and erasure has no second copy to find. Keyed by thread, so a
    search, a deletion or a redaction finds a thread's rows by the key."""

    __tablename__ = "convmem_index_queue"

    tenant: str = Field(primary_key=True, max_length=200)
    thread_id: str = Field(primary_key=True, max_length=64)
    message_id: str = Field(primary_key=True, max_length=64)


def _table(model: type[SQLModel]) -> sa.Table:
    return cast(sa.Table, model.__table__)  # type: ignore[attr-defined]


THREADS = _table(ThreadRow)
MESSAGES = _table(MessageRow)
ATTACHMENTS = _table(AttachmentRow)
TEMPLATES = _table(TemplateRow)
TURNS = _table(TurnRow)
DERIVED = _table(DerivedRow)
REDACTIONS = _table(RedactionRow)
INDEX_QUEUE = _table(IndexQueueRow)

search_metadata = sa.MetaData()
SEARCH = sa.Table(
    "convmem_search",
    search_metadata,
    sa.Column("body", sa.Text),
    sa.Column("message_id", sa.String(64)),
    sa.Column("tenant", sa.String(200)),
    sa.Column("thread_id", sa.String(64)),
)

# Tables holding a thread's content, in deletion order (children first).
CONTENT_TABLES: tuple[str, ...] = (
    "convmem_index_queue",
    "convmem_search",
    "convmem_derived",
    "convmem_redactions",
    "convmem_turns",
    "convmem_messages",
    "convmem_attachments",
    "convmem_templates",
    "convmem_threads",
)
