"""The two conformance suites, one idiom: each runs on its reference backend with backend ids
``[<backend>-sync]``/``[<backend>-async]``, and each fails a backend whose async method blocks
the event loop (the sync twin called from the async one) while its sync form still passes.

A short self-test: a child pytest runs two cases of each spec (``convmem.testing``'s public
names) on the reference backend (in-memory store; SQLite transcript), then on a copy with one
blocking async method.
"""

from __future__ import annotations

import pytest

STATE = '''
import time
import pytest
from convmem.stores import InMemorySessionStateStore
from convmem.testing import SessionStateStoreSpec

class Blocking(InMemorySessionStateStore):
    async def aload(self, tenant, thread_id):
        time.sleep(0.001)  # blocks the event loop
        return self.load(tenant, thread_id)

class TestReference(SessionStateStoreSpec):
    backend_id = "memory"
    @pytest.fixture
    def make_store(self):
        return lambda *, ttl=3600.0, strict=False: InMemorySessionStateStore(ttl=ttl, strict=strict)

class TestBlocking(SessionStateStoreSpec):
    backend_id = "blocking"
    @pytest.fixture
    def make_store(self):
        return lambda *, ttl=3600.0, strict=False: Blocking(ttl=ttl, strict=strict)
'''

TRANSCRIPT = '''
import pytest
from convmem.testing import TranscriptStoreSpec
from convmem.testing.transcript_driver import FOREVER
from convmem.transcript import TranscriptStore

class Blocking(TranscriptStore):
    async def aactive_path(self, tenant, thread_id, *, include_archived=True):
        return self.active_path(tenant, thread_id, include_archived=include_archived)

class TestReference(TranscriptStoreSpec):
    backend_id = "sqlite"
    @pytest.fixture
    def transcript_url(self, sqlite_url):
        return sqlite_url

class TestBlocking(TestReference):
    backend_id = "blocking"
    @pytest.fixture
    def store(self, transcript_url, clock):
        store = Blocking(transcript_url, retention=FOREVER, clock=clock)
        store.migrate()
        yield store
        store.engine.dispose()
'''

CASES = {
    "state": (STATE, "test_round_trip_keeps_every_field or test_tenants_are_isolated"),
    "transcript": (TRANSCRIPT, "test_order_of_many_messages or test_archive_is_a_watermark_view"),
}


@pytest.mark.sqlite
@pytest.mark.parametrize("suite", sorted(CASES))
def test_each_spec_passes_its_reference_backend_and_fails_a_blocking_one(
    pytester: pytest.Pytester, suite: str
) -> None:
    source, cases = CASES[suite]
    pytester.makeconftest('pytest_plugins = ["convmem.testing.pytest_plugin"]\n')
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n  redis: r\n  cluster: c\n  postgres: p\n  sqlite: s\n"
    )
    pytester.makepyfile(test_spec=source)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", "-k", cases)
    backend = "memory" if suite == "state" else "sqlite"
    passed = {line.split("::")[-1] for line in result.outlines if line.startswith("PASSED")}
    failed = {line.split("::")[-1].split(" ")[0] for line in result.outlines
              if line.startswith("FAILED")}
    for case in cases.split(" or "):
        assert {f"{case}[{backend}-sync]", f"{case}[{backend}-async]",
                f"{case}[blocking-sync]"} <= passed, result.outlines
        assert f"{case}[blocking-async]" in failed, result.outlines
    assert "BlockingError" in result.stdout.str()
