"""The search queue holds keys, not text.

``convmem_index_queue.body`` goes: a deferred write lists the message's key, and the
indexer reads the text from the message when it indexes it. The turn writes the text
once (the queue's copy was as large as the message: about half a long answer's WAL),
and erasure has no second copy to find.

Upgrading indexes what is queued (its text is only in the column that goes).
Downgrading indexes what is queued too, reading each message's text as this revision
does (frozen here: ``convmem.transcript.ops.base.search_body`` may change later; a
migration may not), then restores the column, so 0004's code finds a queue it knows.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "INSERT INTO convmem_search (body, message_id, tenant, thread_id) "
        "SELECT body, message_id, tenant, thread_id FROM convmem_index_queue"
    )
    op.execute("DELETE FROM convmem_index_queue")
    op.drop_column("convmem_index_queue", "body")


def _body(parts: Any) -> str:
    """A message's search text as of this revision: its text and tool-result content."""
    if isinstance(parts, str):  # SQLite hands JSON back as text here
        parts = json.loads(parts)
    out = [str(p["text"]) for p in parts or () if p.get("kind") == "text"]
    out += [str(p["content"]) for p in parts or () if p.get("kind") == "tool_result"]
    return "\n".join(s for s in out if s)


def downgrade() -> None:
    conn = op.get_bind()
    queued = conn.execute(sa.text(
        "SELECT q.tenant, q.thread_id, q.message_id, m.parts, m.redacted_at "
        "FROM convmem_index_queue AS q JOIN convmem_messages AS m "
        "ON m.tenant = q.tenant AND m.id = q.message_id AND m.thread_id = q.thread_id"
    )).all()
    rows = [{"body": body, "message_id": r.message_id, "tenant": r.tenant, "thread_id": r.thread_id}
            for r in queued if r.redacted_at is None and (body := _body(r.parts))]
    if rows:
        conn.execute(sa.text(
            "INSERT INTO convmem_search (body, message_id, tenant, thread_id) "
            "VALUES (:body, :message_id, :tenant, :thread_id)"), rows)
    op.execute("DELETE FROM convmem_index_queue")
    op.add_column("convmem_index_queue",
                  sa.Column("body", sa.Text, nullable=False, server_default=""))
    if conn.dialect.name != "sqlite":  # as 0004 made it (SQLite keeps a harmless default)
        op.alter_column("convmem_index_queue", "body", server_default=None)
