"""pytest plugin: real test servers, per-run isolation, and the async blocking check.

Load it with ``pytest_plugins = ["convmem.testing.pytest_plugin"]``. Session fixtures
``redis_url``, ``redis_cluster_url`` and ``postgres_url`` resolve a server once per
run following ``CONVMEM_TEST_SERVERS`` (see ``convmem.testing.servers``); a shared
server is isolated by ``key_prefix`` (unique per run and test; the run's keys are
removed at the end) and by a database created for the run and dropped after it. The
machine has no Redis Cluster, so ``redis_cluster_url`` uses ``REDIS_CLUSTER_URL`` when
set and otherwise builds a throwaway three-master cluster in every mode.
``throwaway_redis`` gives a fault test its own redis-server to kill and restart, and
``throwaway_postgres`` its own embedded PostgreSQL to stop and resume. A
skipped ``redis``/``cluster``/``postgres`` test fails the run under ``CI=true``, so a
missing server can never turn a red run green. Coroutine tests run inside
``blockbuster`` so a blocking call on the event loop fails the test.
"""

from __future__ import annotations

import inspect
import itertools
import os
import uuid
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from convmem.testing.servers import (
    DEFAULT_DATABASE_URL,
    DEFAULT_REDIS_URL,
    EmbeddedPostgres,
    RedisClusterServers,
    RedisServer,
    create_database,
    drop_database,
    env,
    postgres_ping,
    redis_ping,
    servers_mode,
    with_database,
)

SERVER_MARKERS = ("redis", "cluster", "postgres")
_COUNTER = itertools.count(1)


def _ci() -> bool:
    return (os.environ.get("CI") or "").strip().lower() in ("1", "true", "yes")


def pytest_report_header(config: pytest.Config) -> str:
    return f"convmem test servers: CONVMEM_TEST_SERVERS={servers_mode()}, CI={_ci()}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under CI a skipped server test is a failure: "no server" must not look like a pass."""
    report: pytest.TestReport = yield
    if (
        report.skipped
        and _ci()
        and not hasattr(report, "wasxfail")
        and any(item.get_closest_marker(m) is not None for m in SERVER_MARKERS)
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"CI=true: a {'/'.join(SERVER_MARKERS)} test may not skip ({reason})"
    return report


# --------------------------------------------------------------------------- identity


@pytest.fixture(scope="session")
def test_run_id() -> str:
    """Eight hex digits naming this run's keys and database."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def key_prefix(test_run_id: str) -> str:
    """A Redis key prefix unique to this run and test (no hash-tag characters)."""
    return f"cmt{test_run_id}n{next(_COUNTER)}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """SQLAlchemy URL of a fresh SQLite file."""
    return f"sqlite:///{tmp_path / 'convmem.sqlite3'}"


# --------------------------------------------------------------------------- redis


Server = TypeVar("Server", RedisServer, RedisClusterServers, EmbeddedPostgres)


@contextmanager
def _started(server: Server) -> Iterator[Server]:
    """``server`` started, and cleaned up however the run or the test ends."""
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def redis_url(test_run_id: str) -> Iterator[str]:
    """URL of a Redis server for this run (external or a throwaway embedded one)."""
    mode = servers_mode()
    external = env("REDIS_URL") or DEFAULT_REDIS_URL
    if mode != "embedded":
        if redis_ping(external):
            yield external
            _remove_run_keys(external, test_run_id)
            return
        if mode == "external":
            pytest.skip(f"CONVMEM_TEST_SERVERS=external but no Redis answers at {external}")
    with _started(RedisServer()) as server:
        yield server.url


def _remove_run_keys(url: str, run_id: str) -> None:
    """Delete this run's keys from a shared server (SCAN on our prefix; never KEYS/FLUSH)."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"cmt{run_id}n*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                client.unlink(*batch)
                batch.clear()
        if batch:
            client.unlink(*batch)
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A startup-node URL of a three-master Redis Cluster."""
    external = env("REDIS_CLUSTER_URL")
    if external is not None and servers_mode() != "embedded":
        if redis_ping(external):
            yield external
            return
        if servers_mode() == "external":
            pytest.skip(f"REDIS_CLUSTER_URL={external} does not answer")
    with _started(RedisClusterServers()) as cluster:
        yield cluster.url


@pytest.fixture
def throwaway_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, safe to ``kill()`` and ``restart()``."""
    with _started(RedisServer()) as server:
        yield server


# --------------------------------------------------------------------------- postgres


@pytest.fixture(scope="session")
def postgres_url(test_run_id: str) -> Iterator[str]:
    """``postgresql+psycopg://`` URL of a database created for this run, dropped after it."""
    mode = servers_mode()
    admin: str | None = None
    if mode != "embedded":
        external = env("DATABASE_URL") or DEFAULT_DATABASE_URL
        if postgres_ping(external):
            admin = external
        elif mode == "external":
            pytest.skip(f"CONVMEM_TEST_SERVERS=external but no PostgreSQL at {external}")
    server: EmbeddedPostgres | None = None
    if admin is None:
        server = EmbeddedPostgres().start()
        admin = server.admin_url
    name = f"convmem_test_{test_run_id}"
    create_database(admin, name)
    try:
        yield with_database(admin, name)
    finally:
        try:
            drop_database(admin, name)
        finally:
            if server is not None:
                server.cleanup()


@pytest.fixture
def throwaway_postgres() -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL of this test's own (in every mode), safe to ``stop()``/``resume()``."""
    with _started(EmbeddedPostgres()) as server:
        yield server


# --------------------------------------------------------------------------- async


@pytest.fixture(autouse=True)
def _convmem_blockbuster(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a coroutine test that makes a blocking call on the event loop."""
    if not inspect.iscoroutinefunction(getattr(request.node, "obj", None)):
        yield
        return
    from blockbuster import blockbuster_ctx

    with blockbuster_ctx():
        yield
