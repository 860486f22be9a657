"""The transcript conformance suite on SQLite (sync and async)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from convmem.transcript import TranscriptStore
from tests.transcript.sql_backends import SQLTranscriptSpec, assert_export_imports_byte_identical

pytestmark = pytest.mark.sqlite


class TestSQLiteTranscript(SQLTranscriptSpec):
    backend_id = "sqlite"

    def residue(self, store: TranscriptStore) -> bytes:
        """Rows, the raw database and WAL files (freed pages included), and ``.dump``."""
        db = Path(str(store.engine.url.database))
        raw = b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())
        return super().residue(store) + raw + sqlite_dump(db)


class TestSQLiteTranscriptInlineSearch(TestSQLiteTranscript):
    """The suite again with search text indexed as it is written (``search_index="inline"``)."""

    store_options: ClassVar[Mapping[str, Any]] = {"search_index": "inline"}


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
    assert_export_imports_byte_identical(
        f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}", "demo", "demo"
    )
