"""The test-server plugin itself: each fixture yields a live, isolated server."""

from __future__ import annotations

import psycopg
import pytest
import redis
from redis.cluster import RedisCluster

from convmem.testing.servers import libpq_url, redis_ping, with_database


@pytest.mark.redis
def test_redis_url_answers_and_prefix_is_unique(redis_url: str, key_prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.set(f"{key_prefix}:probe", b"1", px=60_000, nx=True)
        assert client.get(f"{key_prefix}:probe") == b"1"
    finally:
        client.delete(f"{key_prefix}:probe")
        client.close()


@pytest.mark.cluster
def test_cluster_has_three_masters_covering_all_slots(redis_cluster_url: str) -> None:
    client = RedisCluster.from_url(redis_cluster_url)
    try:
        assert len(client.get_primaries()) == 3
        info = client.cluster_info(target_nodes=RedisCluster.RANDOM)
        assert info["cluster_state"] == "ok"
        assert int(info["cluster_slots_assigned"]) == 16384
    finally:
        client.close()


@pytest.mark.postgres
def test_postgres_url_is_a_database_created_for_this_run(
    postgres_url: str, test_run_id: str
) -> None:
    assert postgres_url.startswith("postgresql+psycopg://")
    with psycopg.connect(libpq_url(postgres_url)) as conn:
        row = conn.execute("SELECT current_database()").fetchone()
    assert row is not None and row[0] == f"convmem_test_{test_run_id}"


@pytest.mark.redis
def test_throwaway_redis_can_be_killed_and_restarted(throwaway_redis: object) -> None:
    from convmem.testing.servers import RedisServer

    assert isinstance(throwaway_redis, RedisServer)
    first_pid = throwaway_redis.pid
    throwaway_redis.kill()
    assert not throwaway_redis.running and not redis_ping(throwaway_redis.url)
    throwaway_redis.restart()
    assert throwaway_redis.pid != first_pid and redis_ping(throwaway_redis.url)


def test_with_database_keeps_the_socket_query() -> None:
    url = with_database("postgresql://postgres:@/postgres?host=/tmp/x", "db1")
    assert url == "postgresql+psycopg://postgres:@/db1?host=/tmp/x"
    assert libpq_url(url) == "postgresql://postgres:@/db1?host=/tmp/x"


def test_sqlite_url_is_a_file_url(sqlite_url: str) -> None:
    assert sqlite_url.startswith("sqlite:///") and sqlite_url.endswith(".sqlite3")


_SKIPPING_TESTS = '''
import pytest

@pytest.fixture
def missing_server():
    pytest.skip("no server here")

@pytest.mark.redis
def test_redis_skips_in_body():
    pytest.skip("no server here")

@pytest.mark.postgres
def test_postgres_skips_in_fixture(missing_server):
    pass

def test_unmarked_skip():
    pytest.skip("not a storage test")
'''


@pytest.mark.parametrize(("ci", "failed", "skipped"), [("true", 1, 1), ("", 0, 3)])
def test_ci_turns_a_skipped_storage_test_into_a_failure(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, failed: int,
    skipped: int,
) -> None:
    """Under CI=true a storage test that skips (in its body or a fixture) fails the run."""
    pytester.makeconftest('pytest_plugins = ["convmem.testing.pytest_plugin"]\n')
    pytester.makeini("[pytest]\nmarkers =\n  redis: r\n  cluster: c\n  postgres: p\n")
    pytester.makepyfile(test_skips=_SKIPPING_TESTS)
    monkeypatch.setenv("CI", ci)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=failed, errors=failed, skipped=skipped)  # fixture: error
    assert result.ret == (1 if failed else 0)
    if failed:
        result.stdout.fnmatch_lines(["*CI=true: a redis/cluster/postgres test may not skip*"])
