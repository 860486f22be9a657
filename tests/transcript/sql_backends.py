"""What the SQLite and the PostgreSQL transcript tests share: the conformance suite on
one backend, and the export → import round trip."""

from __future__ import annotations

import pytest

from convmem.testing import TranscriptStoreSpec
from convmem.testing.transcript_driver import FOREVER, rich_thread
from convmem.transcript import TranscriptStore


class SQLTranscriptSpec(TranscriptStoreSpec):
    """The conformance suite on the backend ``backend_id`` names (``"sqlite"`` or
    ``"postgres"``): its ``transcript_url`` is that backend's URL fixture (``sqlite_url``,
    ``postgres_url``)."""

    @pytest.fixture
    def transcript_url(self, request: pytest.FixtureRequest) -> str:
        return str(request.getfixturevalue(f"{self.backend_id}_url"))


def assert_export_imports_byte_identical(
    source_url: str, target_url: str, tenant: str, target_tenant: str
) -> None:
    """Export a rich thread written on ``source_url``, import it on ``target_url`` under
    ``target_tenant``: the target's export of it is byte-identical. The imported copy is
    deleted again (the target may be the run's shared database)."""
    source = TranscriptStore(source_url, retention=FOREVER)
    target = TranscriptStore(target_url, retention=FOREVER)
    source.migrate()
    target.migrate()
    try:
        tid = rich_thread(source, tenant)
        first = source.export_thread(tenant, tid)
        target.import_thread(target_tenant, first)
        assert target.export_thread(target_tenant, tid) == first
        target.delete_thread(target_tenant, tid)
    finally:
        source.engine.dispose()
        target.engine.dispose()
