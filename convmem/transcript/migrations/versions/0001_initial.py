"""The record: threads, messages, attachments, templates, turns, derived, redactions.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _id(name: str, *, primary_key: bool = False, index: bool = False) -> sa.Column[str]:
    return sa.Column(name, sa.String(64), primary_key=primary_key, index=index)


def upgrade() -> None:
    op.create_table(
        "convmem_threads",
        _id("id", primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False, index=True),
        sa.Column("key", sa.String(500)),
        sa.Column("owner", sa.String(200)),
        sa.Column("title", sa.Text),
        sa.Column("metadata", sa.JSON),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False, index=True),
        sa.Column("retention", sa.JSON),
        _id("active_leaf"),
        sa.Column("next_seq", sa.Integer, nullable=False),
        sa.Column("archived_seq", sa.Integer, nullable=False),
        _id("forked_from"),
        sa.UniqueConstraint("tenant", "key", name="uq_convmem_threads_tenant_key"),
    )
    op.create_table(
        "convmem_messages",
        _id("id", primary_key=True),
        sa.Column("thread_id", sa.String(64), sa.ForeignKey("convmem_threads.id"), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        _id("parent_id", index=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("author", sa.String(200)),
        sa.Column("parts", sa.JSON),
        sa.Column("extra", sa.JSON),
        sa.Column("received_at", sa.DateTime, nullable=False),
        sa.Column("client_ts", sa.DateTime),
        sa.Column("visibility", sa.String(16), nullable=False),
        _id("copy_of", index=True),
        _id("turn_id"),
        sa.Column("redacted_at", sa.DateTime),
        sa.UniqueConstraint("thread_id", "seq", name="uq_convmem_messages_seq"),
    )
    op.create_table(
        "convmem_attachments",
        sa.Column("tenant", sa.String(200), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("media_type", sa.String(200), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("refcount", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "convmem_templates",
        sa.Column("tenant", sa.String(200), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("text", sa.Text, nullable=False),
    )
    op.create_table(
        "convmem_turns",
        _id("id", primary_key=True),
        sa.Column(
            "thread_id",
            sa.String(64),
            sa.ForeignKey("convmem_threads.id"),
            nullable=False,
            index=True,
        ),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("user_message_id", sa.String(64), nullable=False),
        sa.Column("rendered_block", sa.Text, nullable=False),
        sa.Column("state_snapshot", sa.JSON),
        sa.Column("sent_message_ids", sa.JSON),
        _id("template_sha256"),
        sa.Column("tool_schemas", sa.JSON),
        sa.Column("model", sa.String(200)),
        sa.Column("model_params", sa.JSON),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("completed_at", sa.DateTime),
        _id("answer_message_id"),
    )
    op.create_table(
        "convmem_derived",
        _id("id", primary_key=True),
        sa.Column(
            "thread_id",
            sa.String(64),
            sa.ForeignKey("convmem_threads.id"),
            nullable=False,
            index=True,
        ),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(100), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("source_message_ids", sa.JSON),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("tombstoned_at", sa.DateTime),
    )
    op.create_table(
        "convmem_redactions",
        _id("id", primary_key=True),
        sa.Column(
            "thread_id",
            sa.String(64),
            sa.ForeignKey("convmem_threads.id"),
            nullable=False,
            index=True,
        ),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("affected", sa.JSON),
    )


def downgrade() -> None:
    for name in (
        "convmem_redactions",
        "convmem_derived",
        "convmem_turns",
        "convmem_templates",
        "convmem_attachments",
        "convmem_messages",
        "convmem_threads",
    ):
        op.drop_table(name)
