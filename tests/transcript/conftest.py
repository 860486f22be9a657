"""TEMPORARY database fixtures for the transcript tests.

The shared pytest plugin (``convmem.testing.pytest_plugin``, built in parallel)
will provide ``sqlite_url`` and ``postgres_url`` with the same contract; delete
this file when it lands. Until then: ``sqlite_url`` is a tmp file, and
``postgres_url`` is a database this session CREATES on ``DATABASE_URL`` (default
the machine's PostgreSQL) under a unique name and drops at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file."""
    return f"sqlite:///{tmp_path / 'transcript.db'}"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A database created for this run (and dropped after it)."""
    base = sa.make_url(
        os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    ).set(drivername="postgresql+psycopg")
    name = f"convmem_transcript_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()
