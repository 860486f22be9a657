"""The transcript conformance suite on PostgreSQL, and SQLite → PostgreSQL round trips."""

from __future__ import annotations

import pytest

from convmem.testing.transcript_spec import FOREVER, Api, TranscriptStoreSpec
from convmem.transcript import TranscriptStore

pytestmark = pytest.mark.postgres


class TestPostgresTranscript(TranscriptStoreSpec):
    @pytest.fixture
    def transcript_url(self, postgres_url: str) -> str:
        return postgres_url


@pytest.mark.sqlite
def test_sqlite_export_imports_into_postgres_byte_identical(
    sqlite_url: str, postgres_url: str
) -> None:
    lite = TranscriptStore(sqlite_url, retention=FOREVER)
    pg = TranscriptStore(postgres_url, retention=FOREVER)
    lite.migrate()
    pg.migrate()
    try:
        api = Api(lite, "sync")
        tid = TranscriptStoreSpec()._rich_thread(api, "roundtrip")
        first = lite.export_thread("roundtrip", tid)
        pg.import_thread("roundtrip-pg", first)
        assert pg.export_thread("roundtrip-pg", tid) == first
        pg.delete_thread("roundtrip-pg", tid)
    finally:
        lite.engine.dispose()
        pg.engine.dispose()
