"""Segments: the active path found without walking it.

- ``convmem_messages.segment``: the id of the first message of the message's
  segment, a chain in which each member is the child of the one before. The
  messages of a segment on the active path are exactly those with ``seq`` up to
  where the path leaves the segment, so a read finds the path in one step per
  branch point instead of one per message (recall on a long thread).
- ``convmem_threads.open_leaf`` / ``open_segment``: the newest message known to
  have no child yet, and its segment. A chain appended under it continues the
  segment; any other chain starts one. Both are read and moved under the thread
  row's lock. ``NULL`` (every thread here) means "none known": the next chain
  starts a segment, which is always correct, only one step longer to read.

Existing messages are split into the longest such chains: a message continues its
parent's segment when it is the parent's first child (lowest ``seq``) and newer
than its parent in the same thread; any other message (a root, a later sibling, a
broken link) starts one. The column is ``NOT NULL``: a writer that does not know
about segments fails loudly rather than writing rows the path cannot find. SQLite
adds such a column only with a default, and keeps it (dropping a default rebuilds
the table); every writer of this version gives the value.

The fill is this revision's own SQL, frozen here (the import has its own copy in
``convmem.transcript.ops.messages``, which may change later; a migration may not).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_FILL = """
WITH RECURSIVE seg(tenant, thread_id, id, seq, segment) AS (
    SELECT h.tenant, h.thread_id, h.id, h.seq, h.id FROM convmem_messages AS h
    WHERE NOT EXISTS (
        SELECT 1 FROM convmem_messages AS p
        WHERE p.tenant = h.tenant AND p.id = h.parent_id AND p.thread_id = h.thread_id
            AND p.seq < h.seq
    ) OR EXISTS (
        SELECT 1 FROM convmem_messages AS o
        WHERE o.tenant = h.tenant AND o.parent_id = h.parent_id AND o.thread_id = h.thread_id
            AND o.seq < h.seq
    )
    UNION ALL
    SELECT c.tenant, c.thread_id, c.id, c.seq, seg.segment
    FROM seg JOIN convmem_messages AS c
        ON c.tenant = seg.tenant AND c.parent_id = seg.id AND c.thread_id = seg.thread_id
            AND c.seq > seg.seq
    WHERE NOT EXISTS (
        SELECT 1 FROM convmem_messages AS o
        WHERE o.tenant = c.tenant AND o.parent_id = c.parent_id AND o.thread_id = c.thread_id
            AND o.seq < c.seq
    )
)
UPDATE convmem_messages SET segment = seg.segment
FROM seg WHERE convmem_messages.tenant = seg.tenant AND convmem_messages.id = seg.id
"""


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.add_column("convmem_threads", sa.Column("open_leaf", sa.String(64), nullable=True))
    op.add_column("convmem_threads", sa.Column("open_segment", sa.String(64), nullable=True))
    op.add_column(
        "convmem_messages",
        sa.Column("segment", sa.String(64), nullable=False, server_default=""),
    )
    # every message its own segment first (what a link the fill cannot follow keeps)
    op.execute("UPDATE convmem_messages SET segment = id")
    op.execute(_FILL)
    if not sqlite:
        op.alter_column("convmem_messages", "segment", server_default=None)


def downgrade() -> None:
    op.drop_column("convmem_messages", "segment")
    op.drop_column("convmem_threads", "open_segment")
    op.drop_column("convmem_threads", "open_leaf")
