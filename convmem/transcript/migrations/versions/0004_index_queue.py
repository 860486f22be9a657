"""The search index's queue: message text waiting to be indexed.

``TranscriptStore(..., search_index="deferred")`` writes a message's search text
here, a plain table with no full-text index, instead of into ``convmem_search``
(whose GIN index costs ~1 ms per long answer on PostgreSQL); the next search of the
tenant or thread, or ``index_pending``, moves the rows into the index. Keyed by
``(tenant, thread_id, message_id)``: a search, a deletion and a redaction all find
a thread's rows by that key. Downgrading indexes what is still queued first.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "convmem_index_queue",
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "thread_id", "message_id",
                                name="pk_convmem_index_queue"),
    )


def downgrade() -> None:
    op.execute(
        "INSERT INTO convmem_search (body, message_id, tenant, thread_id) "
        "SELECT body, message_id, tenant, thread_id FROM convmem_index_queue"
    )
    op.drop_table("convmem_index_queue")
