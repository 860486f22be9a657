"""The SQLModel tables are the migrated schema: Alembic's ``compare_metadata`` finds no
difference between ``convmem.transcript.models`` and a fresh database brought to head by
the shipped migrations, on SQLite and on PostgreSQL.

The search index is left out on purpose: it is an FTS5 virtual table on SQLite (with
shadow tables) and a plain table with a GIN index on PostgreSQL, declared as a Core
table of its own (``models.search_metadata``) and created only by the migrations.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

from convmem.transcript import models
from convmem.transcript.migrate import VERSION_TABLE, upgrade


def _ours(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Only convmem's own tables, minus the search index and the version table."""
    if type_ == "table":
        return bool(name) and str(name).startswith(models.PREFIX) and not (
            str(name).startswith("convmem_search") or name == VERSION_TABLE
        )
    return True


def _differences(engine: sa.Engine, metadata: sa.MetaData = SQLModel.metadata) -> list[Any]:
    upgrade(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"include_object": _ours, "compare_type": True,
                        "compare_server_default": False}
        )
        return list(compare_metadata(context, metadata))


def test_the_filter_keeps_every_model_table() -> None:
    tables = {t.name for t in SQLModel.metadata.sorted_tables if t.name.startswith(models.PREFIX)}
    assert {models.THREADS.name, models.MESSAGES.name, models.TURNS.name} <= tables
    assert all(_ours(None, name, "table", False, None) for name in tables)


@pytest.mark.sqlite
def test_sqlite_migrated_schema_matches_the_models(sqlite_url: str) -> None:
    engine = sa.create_engine(sqlite_url)
    try:
        assert _differences(engine) == []
    finally:
        engine.dispose()


@pytest.fixture
def fresh_postgres(postgres_url: str) -> Iterator[sa.URL]:
    """A database of its own, created empty and dropped after the test."""
    base = sa.make_url(postgres_url)
    name = f"{base.database}_schema_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.mark.postgres
def test_postgres_migrated_schema_matches_the_models(fresh_postgres: sa.URL) -> None:
    engine = sa.create_engine(fresh_postgres)
    try:
        assert _differences(engine) == []
    finally:
        engine.dispose()


@pytest.mark.sqlite
def test_a_model_the_migrations_do_not_have_is_a_difference(sqlite_url: str) -> None:
    """The comparison can fail: a column added to a model and to no revision shows up."""
    engine = sa.create_engine(sqlite_url)
    drifted = sa.MetaData()
    for table in SQLModel.metadata.tables.values():
        table.to_metadata(drifted)
    drifted.tables[models.THREADS.name].append_column(sa.Column("not_migrated", sa.Integer))
    try:
        diffs = _differences(engine, drifted)
    finally:
        engine.dispose()
    assert [d[0] for d in diffs] == ["add_column"] and d_name(diffs[0]) == "not_migrated", diffs


def d_name(diff: Any) -> str:
    return str(diff[3].name)
