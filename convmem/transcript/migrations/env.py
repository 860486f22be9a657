"""Alembic environment for the transcript schema.

Run only through ``convmem.transcript.migrate``, which hands over an open
connection in ``config.attributes["connection"]``; the version table is
``convmem_alembic_version`` so an application's own Alembic history is untouched.
"""

from __future__ import annotations

from alembic import context

VERSION_TABLE = "convmem_alembic_version"

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run transcript migrations through convmem.transcript.migrate")
context.configure(connection=connection, version_table=VERSION_TABLE, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
