"""Full-text search index over message text, backfilled from existing messages.

SQLite: an FTS5 virtual table. PostgreSQL: a table with a GIN index on
``to_tsvector('simple', body)`` (language-neutral: no stemming, no stop words).

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _body(parts: Any) -> str:
    if isinstance(parts, str):
        parts = json.loads(parts)
    out = [str(p["text"]) for p in parts or [] if p.get("kind") == "text"]
    out += [str(p["content"]) for p in parts or [] if p.get("kind") == "tool_result"]
    return "\n".join(s for s in out if s)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE convmem_search USING fts5("
            "body, message_id UNINDEXED, tenant UNINDEXED, thread_id UNINDEXED)"
        )
    else:
        op.create_table(
            "convmem_search",
            sa.Column("message_id", sa.String(64), primary_key=True),
            sa.Column("tenant", sa.String(200), nullable=False),
            sa.Column("thread_id", sa.String(64), nullable=False, index=True),
            sa.Column("body", sa.Text, nullable=False),
        )
        op.execute(
            "CREATE INDEX ix_convmem_search_body ON convmem_search "
            "USING gin (to_tsvector('simple'::regconfig, body))"
        )
    search = sa.table(
        "convmem_search",
        sa.column("body"),
        sa.column("message_id"),
        sa.column("tenant"),
        sa.column("thread_id"),
    )
    rows = bind.execute(
        sa.text(
            "SELECT id, tenant, thread_id, parts FROM convmem_messages "
            "WHERE redacted_at IS NULL ORDER BY thread_id, seq"
        )
    ).all()
    batch = [
        {"body": body, "message_id": r.id, "tenant": r.tenant, "thread_id": r.thread_id}
        for r in rows
        if (body := _body(r.parts))
    ]
    if batch:
        op.bulk_insert(search, batch)


def downgrade() -> None:
    op.execute("DROP TABLE convmem_search")
