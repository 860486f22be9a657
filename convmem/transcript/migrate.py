"""Run the transcript's Alembic migrations programmatically.

The scripts ship inside the package (``convmem/transcript/migrations``), so
``convmem threads migrate`` and ``TranscriptStore.migrate()`` work from an
installed wheel with no ``alembic.ini``. Revisions are applied on a connection the
caller owns, and recorded in ``convmem_alembic_version``.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "convmem_alembic_version"


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An in-memory Alembic config pointing at the shipped scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (default: the newest)."""
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at (``None``: never migrated)."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


def head_revision() -> str:
    """The newest revision shipped with this convmem."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head
