"""Physical erasure (issue 22, finding 11): ``convmem threads purge-physical``.

After ``delete_thread`` or ``redact`` the text is gone from every row, but not from
PostgreSQL's files: the plain ``VACUUM`` the store runs frees dead row versions
without rewriting their pages, the search index's GIN tree keeps every word it ever
held, and statistics an ``ANALYZE`` sampled keep the values it saw. The test writes
two unique secrets on its own embedded PostgreSQL (``throwaway_postgres``: its data
directory is ours to read), one in a thread it deletes and one in messages it
redacts (short ones, stored in the row, and long ones, stored in TOAST), lets
``ANALYZE`` sample them as autovacuum would, and reads the bytes of the files: each
secret is there after the deletion or redaction and in none of the convmem tables,
their TOAST tables, their indexes, the statistics, or any other file of the
database after ``purge-physical``. The WAL is out of reach and not checked.

SQLite: the store's own connections zero what they free (``secure_delete``) and
merge the search index after each erasure; a file whose rows were deleted by a
connection without ``secure_delete`` (an older writer, another tool) still holds
the text until ``purge-physical`` merges the index and rewrites the file.
"""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from convmem.testing.servers import EmbeddedPostgres, with_database
from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import NewMessage, TranscriptStore
from convmem.transcript.cli import main
from convmem.transcript.models import CONTENT_TABLES

TENANT = "erasure"

#: Every file of the convmem tables: the tables, their indexes, their TOAST tables
#: and the TOAST tables' indexes, by name.
RELATIONS = sa.text("""
WITH t AS (SELECT CAST(name AS regclass) AS oid FROM unnest(CAST(:tables AS text[])) AS name),
rels AS (
    SELECT oid FROM t
    UNION SELECT i.indexrelid FROM pg_index AS i JOIN t ON i.indrelid = t.oid
    UNION SELECT c.reltoastrelid FROM pg_class AS c JOIN t ON c.oid = t.oid
          WHERE c.reltoastrelid <> 0
    UNION SELECT i.indexrelid FROM pg_index AS i
          JOIN pg_class AS c ON i.indrelid = c.reltoastrelid JOIN t ON c.oid = t.oid
)
SELECT CAST(CAST(oid AS regclass) AS text) AS name, pg_relation_filepath(oid) AS path FROM rels
""")


def secret() -> str:
    """One lowercase word (the search index's ``simple`` lexeme is the word itself)."""
    return "zebra" + secrets.token_hex(8)


def with_secret(word: str) -> list[NewMessage]:
    """A short message (kept in the row) and a long incompressible one (kept in TOAST)."""
    long = secrets.token_hex(3000) + f" {word} " + secrets.token_hex(3000)
    return [NewMessage(role="user", content=f"my password is {word}, keep it safe"),
            NewMessage(role="assistant", content=long)]


class Files:
    """The bytes of the database's files, as the server last wrote them."""

    def __init__(self, store: TranscriptStore) -> None:
        self.store = store
        with store.engine.connect() as conn:
            self.data = Path(conn.exec_driver_sql("SHOW data_directory").scalar_one())
            self.db_dir = self.data / conn.exec_driver_sql(
                "SELECT 'base/' || oid FROM pg_database WHERE datname = current_database()"
            ).scalar_one()

    def _flushed(self) -> sa.Connection:
        conn = self.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("CHECKPOINT")  # shared buffers to the files
        return conn

    def relations_holding(self, word: str) -> set[str]:
        """Convmem relations (and ``pg_statistic``) with ``word`` in one of their files."""
        with self._flushed() as conn:
            rels = conn.execute(RELATIONS, {"tables": list(CONTENT_TABLES)}).all()
            rels.append(conn.execute(sa.text(
                "SELECT 'pg_statistic' AS name, pg_relation_filepath('pg_statistic') AS path"
            )).one())
        assert {r.name for r in rels} >= {*CONTENT_TABLES, "ix_convmem_search_body"}
        assert any(r.name.startswith("pg_toast.") for r in rels)
        return {r.name for r in rels if any(word.encode() in f.read_bytes()
                                            for f in self._forks(r.path))}

    def _forks(self, path: str) -> list[Path]:
        """A relation's files: segments (``.1``...) and forks (``_fsm``, ``_vm``)."""
        main = self.data / path
        return [f for f in main.parent.glob(main.name + "*")
                if f.name == main.name or f.name[len(main.name)] in "._"]

    def database_files_holding(self, word: str) -> list[str]:
        with self._flushed():
            pass
        return sorted(f.name for f in self.db_dir.iterdir()
                      if f.is_file() and word.encode() in f.read_bytes())


@pytest.mark.postgres
@pytest.mark.slow  # its own PostgreSQL server
def test_purge_physical_takes_deleted_and_redacted_text_out_of_postgresql_files(
    throwaway_postgres: EmbeddedPostgres, capsys: pytest.CaptureFixture[str]
) -> None:
    url = with_database(throwaway_postgres.admin_url, "postgres")
    store = TranscriptStore(url, retention=FOREVER)
    try:
        store.migrate()
        kept = store.create_thread(TENANT, title="kept")
        store.append(TENANT, kept.id, [NewMessage(role="user", content=f"note {i}")
                                       for i in range(40)])
        deleted_word, redacted_word = secret(), secret()
        doomed = store.create_thread(TENANT, title="deleted")
        store.append(TENANT, doomed.id, with_secret(deleted_word))
        redacted = store.create_thread(TENANT, title="redacted")
        targets = store.append(TENANT, redacted.id, with_secret(redacted_word))
        store.index_pending()  # as the index's sweep would: the text in the GIN index
        files = Files(store)
        with store.engine.connect() as conn:  # as autovacuum's ANALYZE would, some day
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")

        store.delete_thread(TENANT, doomed.id)
        for m in targets:
            store.redact(TENANT, redacted.id, m.id, actor="dpo", reason="erasure request")
        assert store.search(TENANT, deleted_word) == [] and store.search(TENANT, redacted_word) == []
        for word in (deleted_word, redacted_word):  # gone from the rows, not from the files
            holding = files.relations_holding(word)
            assert {"ix_convmem_search_body", "pg_statistic"} <= holding, holding

        assert main(["threads", "--db", url, "purge-physical"]) == 0
        report = capsys.readouterr().out
        for table in CONTENT_TABLES:
            assert f"VACUUM (FULL, ANALYZE) {table}: " in report, report
        assert "VACUUM (FULL) pg_catalog.pg_statistic: " in report
        assert "CHECKPOINT: done" in report and "skipped" not in report, report

        for word in (deleted_word, redacted_word):
            assert files.relations_holding(word) == set()
            assert files.database_files_holding(word) == []
        # nothing else changed: the kept thread, and the redacted one's structure
        assert len(store.tree(TENANT, kept.id).messages) == 40
        assert [m.redacted for m in store.tree(TENANT, redacted.id).messages] == [True, True]
    finally:
        store.close()


@pytest.mark.sqlite
def test_purge_physical_rewrites_a_sqlite_file_deleted_from_without_secure_delete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "record.db"
    url = f"sqlite:///{path}"
    store = TranscriptStore(url, retention=FOREVER)
    store.migrate()
    kept = store.create_thread(TENANT, title="kept")
    store.append(TENANT, kept.id, [NewMessage(role="user", content=f"note {i}") for i in range(40)])
    word = secret()
    doomed = store.create_thread(TENANT, title="deleted")
    store.append(TENANT, doomed.id, with_secret(word))
    store.index_pending()  # as the index's sweep would: the text in the FTS5 index
    store.close()
    # an older writer: the same rows deleted with secure_delete off
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA secure_delete=OFF")
    conn.execute("BEGIN")
    for table in ("convmem_search", "convmem_messages", "convmem_threads"):
        column = "id" if table == "convmem_threads" else "thread_id"
        conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (doomed.id,))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()

    def holding() -> list[str]:
        return sorted(f.name for f in tmp_path.iterdir() if word.encode() in f.read_bytes())

    assert holding() == ["record.db"]
    assert main(["threads", "--db", url, "purge-physical"]) == 0
    report = capsys.readouterr().out
    assert "search index: segments merged" in report and "VACUUM: " in report, report
    assert "secure_delete: on" in report
    assert holding() == []
    store = TranscriptStore(url, retention=FOREVER)
    assert len(store.tree(TENANT, kept.id).messages) == 40
    store.close()
