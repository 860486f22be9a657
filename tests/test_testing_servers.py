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
