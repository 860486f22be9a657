"""Ids namespaced by tenant, thread incarnations, quote links of model inputs.

- Every primary key becomes ``(tenant, id)`` and every link to a thread
  ``(tenant, thread_id)`` (threads, messages, turns, derived, redactions; the
  PostgreSQL search table's key becomes ``(tenant, message_id)``; a thread's
  sequence numbers are unique per ``(tenant, thread_id, seq)``). Another tenant's
  id is then another row: creating or importing it reveals nothing, and no join
  can cross tenants.
- ``convmem_threads.incarnation``: a fresh random token whenever a thread row is
  created (existing rows get one here); a turn binds to it, so a thread deleted and
  re-created under the same id or key is not the thread a turn in flight began on.
- ``convmem_turns.quoted_message_ids``: the messages a model input quotes (its
  block and state snapshot), written by the caller. Existing rows keep ``NULL``
  ("not known"): redaction then scans the thread's model inputs for every form the
  renderer gives the text (the documented fallback), so no back-fill is needed.

Tables are rebuilt (create the new shape, copy, drop, rename) on both backends:
SQLite cannot alter a primary key, and one code path is easier to trust.

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.sql.schema import SchemaItem

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_ID = sa.String(64)
_TENANT = sa.String(200)


def _key(table: str) -> list[SchemaItem]:
    return [
        sa.Column("tenant", _TENANT, nullable=False),
        sa.Column("id", _ID, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "id", name=f"pk_{table}"),
    ]


def _thread_link(table: str, new_threads: str) -> list[SchemaItem]:
    return [
        sa.Column("thread_id", _ID, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant", "thread_id"],
            [f"{new_threads}.tenant", f"{new_threads}.id"],
            name=f"fk_{table}_thread",
        ),
    ]


def _shapes(suffix: str) -> dict[str, list[SchemaItem]]:
    threads = "convmem_threads" + suffix
    return {
        "convmem_threads": [
            *_key("convmem_threads"),
            sa.Column("key", sa.String(500)),
            sa.Column("owner", sa.String(200)),
            sa.Column("title", sa.Text),
            sa.Column("metadata", sa.JSON),
            sa.Column("created_at", sa.DateTime, nullable=False),
            sa.Column("updated_at", sa.DateTime, nullable=False),
            sa.Column("retention", sa.JSON),
            sa.Column("active_leaf", _ID),
            sa.Column("next_seq", sa.Integer, nullable=False),
            sa.Column("archived_seq", sa.Integer, nullable=False),
            sa.Column("forked_from", _ID),
            sa.Column("incarnation", _ID),
        ],
        "convmem_messages": [
            *_key("convmem_messages"),
            *_thread_link("convmem_messages", threads),
            sa.Column("parent_id", _ID),
            sa.Column("seq", sa.Integer, nullable=False),
            sa.Column("role", sa.String(16), nullable=False),
            sa.Column("author", sa.String(200)),
            sa.Column("parts", sa.JSON),
            sa.Column("extra", sa.JSON),
            sa.Column("received_at", sa.DateTime, nullable=False),
            sa.Column("client_ts", sa.DateTime),
            sa.Column("visibility", sa.String(16), nullable=False),
            sa.Column("copy_of", _ID),
            sa.Column("turn_id", _ID),
            sa.Column("redacted_at", sa.DateTime),
        ],
        "convmem_turns": [
            *_key("convmem_turns"),
            *_thread_link("convmem_turns", threads),
            sa.Column("user_message_id", _ID, nullable=False),
            sa.Column("rendered_block", sa.Text, nullable=False),
            sa.Column("state_snapshot", sa.JSON),
            sa.Column("sent_message_ids", sa.JSON),
            sa.Column("template_sha256", _ID),
            sa.Column("tool_schemas", sa.JSON),
            sa.Column("model", sa.String(200)),
            sa.Column("model_params", sa.JSON),
            sa.Column("created_at", sa.DateTime, nullable=False),
            sa.Column("completed_at", sa.DateTime),
            sa.Column("answer_message_id", _ID),
            sa.Column("quoted_message_ids", sa.JSON),
        ],
        "convmem_derived": [
            *_key("convmem_derived"),
            *_thread_link("convmem_derived", threads),
            sa.Column("kind", sa.String(100), nullable=False),
            sa.Column("content", sa.Text, nullable=False),
            sa.Column("source_message_ids", sa.JSON),
            sa.Column("created_at", sa.DateTime, nullable=False),
            sa.Column("tombstoned_at", sa.DateTime),
        ],
        "convmem_redactions": [
            *_key("convmem_redactions"),
            *_thread_link("convmem_redactions", threads),
            sa.Column("message_id", _ID, nullable=False),
            sa.Column("actor", sa.String(200), nullable=False),
            sa.Column("reason", sa.Text, nullable=False),
            sa.Column("at", sa.DateTime, nullable=False),
            sa.Column("affected", sa.JSON),
        ],
    }


# (name, table, columns, unique) of the indexes, created after the rename (the old
# tables' index names are free again then; PostgreSQL's are per schema).
_INDEXES = (
    ("uq_convmem_threads_tenant_key", "convmem_threads", ("tenant", "key"), True),
    ("uq_convmem_messages_seq", "convmem_messages", ("tenant", "thread_id", "seq"), True),
    *(
        (f"ix_{table}_{'_'.join(cols)}", table, cols, False)
        for table, cols in (
            ("convmem_threads", ("updated_at",)),
            ("convmem_messages", ("tenant", "parent_id")),
            ("convmem_messages", ("tenant", "copy_of")),
            ("convmem_turns", ("tenant", "thread_id")),
            ("convmem_derived", ("tenant", "thread_id")),
            ("convmem_redactions", ("tenant", "thread_id")),
        )
    ),
)


def upgrade() -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    suffix = "_v3"
    shapes = _shapes(suffix)
    incarnation = (
        "lower(hex(randomblob(16)))"
        if sqlite
        else "md5(random()::text || clock_timestamp()::text || id)"
    )
    for name, items in shapes.items():
        op.create_table(name + suffix, *items)
        columns = [c.name for c in items if isinstance(c, sa.Column)]
        old = [c for c in columns if c not in ("incarnation", "quoted_message_ids")]
        values = [*old, *([incarnation] if name == "convmem_threads" else [])]
        target = [*old, *(["incarnation"] if name == "convmem_threads" else [])]
        op.execute(
            f"INSERT INTO {name}{suffix} ({', '.join(target)}) "
            f"SELECT {', '.join(values)} FROM {name}"
        )
    for name in reversed(list(shapes)):  # children first, the threads last
        op.drop_table(name)
    for name in shapes:  # the threads first: SQLite rewrites the children's references
        op.rename_table(name + suffix, name)
    for index, table, cols, unique in _INDEXES:
        op.create_index(index, table, list(cols), unique=unique)
    if not sqlite:
        op.execute(
            "ALTER TABLE convmem_search DROP CONSTRAINT convmem_search_pkey, "
            "ADD CONSTRAINT pk_convmem_search PRIMARY KEY (tenant, message_id)"
        )


def downgrade() -> None:
    raise NotImplementedError(
        "revision 0003 namespaces ids by tenant; going back would merge tenants' ids"
    )
