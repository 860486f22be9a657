"""The transcript conformance suite on SQLite (sync and async)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from convmem.testing import TranscriptStoreSpec
from convmem.testing.transcript_driver import FOREVER, rich_thread
from convmem.transcript import TranscriptStore

pytestmark = pytest.mark.sqlite


class TestSQLiteTranscript(TranscriptStoreSpec):
    backend_id = "sqlite"

    @pytest.fixture
    def transcript_url(self, sqlite_url: str) -> str:
        return sqlite_url

    def residue(self, store: TranscriptStore) -> bytes:
        """Rows, the raw database and WAL files (freed pages included), and ``.dump``."""
        db = Path(str(store.engine.url.database))
        raw = b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())
        return super().residue(store) + raw + sqlite_dump(db)


def sqlite_dump(db: Path) -> bytes:
    """The ``.dump`` SQL text (``iterdump`` is its Python twin), blob literals decoded.

    The FTS5 index lives in blobs (``X'...'`` in the dump): decoded, a word it still
    holds is visible to a byte search.
    """
    con = sqlite3.connect(db)
    try:
        text = "\n".join(con.iterdump())
    finally:
        con.close()
    blobs = b"".join(bytes.fromhex(h) for h in re.findall(r"X'([0-9A-Fa-f]*)'", text))
    return text.encode() + blobs


def test_export_imports_into_a_fresh_sqlite_file_byte_identical(tmp_path: Path) -> None:
    a = TranscriptStore(f"sqlite:///{tmp_path / 'a.db'}", retention=FOREVER)
    b = TranscriptStore(f"sqlite:///{tmp_path / 'b.db'}", retention=FOREVER)
    a.migrate()
    b.migrate()
    try:
        tid = rich_thread(a, "demo")
        first = a.export_thread("demo", tid)
        b.import_thread("demo", first)
        assert b.export_thread("demo", tid) == first
    finally:
        a.engine.dispose()
        b.engine.dispose()
