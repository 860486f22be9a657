"""Redis and Redis Cluster stores: the conformance suite, then the faults they must survive.

The suite runs on the session's Redis (``redis_url``) and three-master cluster
(``redis_cluster_url``) under a per-test key prefix. Fault tests never touch those:
each starts its own redis-server (``throwaway_redis``) and kills, freezes or restarts
only that process, by PID.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import date
from typing import Any, Protocol, TypeVar

import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster
from redis.driver_info import DriverInfo

from convmem.errors import ConfigError, StateUnavailable, VersionConflict
from convmem.state import SessionState
from convmem.stores import RedisClusterSessionStateStore, RedisSessionStateStore, state_key
from convmem.testing import SessionStateStoreSpec
from convmem.testing.servers import RedisServer, free_port, redis_command
from convmem.testing.state_store_spec import TENANT, StoreDriver, rich_state

MODES = ("sync", "async")


class _RawRedisHooks(SessionStateStoreSpec):
    """Spec hooks implemented with a plain redis-py client on the same server."""

    raw: Any

    def write_raw(self, store: Any, tenant: str, thread_id: str, raw: bytes) -> None:
        self.raw.set(state_key(tenant, thread_id, store.prefix), raw, px=3_600_000)

    def remaining_ttl(self, store: Any, tenant: str, thread_id: str) -> float | None:
        ms = self.raw.pttl(state_key(tenant, thread_id, store.prefix))
        return None if ms < 0 else ms / 1000

    def set_remaining_ttl(self, store: Any, tenant: str, thread_id: str, seconds: float
                          ) -> None:
        self.raw.pexpire(state_key(tenant, thread_id, store.prefix), round(seconds * 1000))


# The conformance suite and the 50-writer façade test check semantics (compare-and-set,
# TTL, corrupt values) with up to 50 concurrent writers on a loaded CI machine: their
# stores wait longer than the 0.25 s production default, whose behaviour the fault tests
# below check on their own stores.
SPEC_SOCKET_TIMEOUT = 5.0


async def _close_all(stores: list[Any]) -> None:
    for store in stores:
        await store.aclose()
        await asyncio.to_thread(store.close)


AnyStore = TypeVar("AnyStore", RedisSessionStateStore, RedisClusterSessionStateStore)


def _store_maker(
    backend: type[AnyStore], url: str, key_prefix: str, stores: list[Any]
) -> Callable[..., AnyStore]:
    """The spec's ``make_store(ttl=, strict=, prefix=)``: a ``backend`` store on ``url``,
    under ``key_prefix`` unless told, kept in ``stores`` for the fixture to close."""

    def make(*, ttl: float = 3600, strict: bool = False, prefix: str | None = None) -> AnyStore:
        store = backend(url, ttl=ttl, prefix=key_prefix if prefix is None else prefix,
                        strict=strict, socket_timeout=SPEC_SOCKET_TIMEOUT)
        stores.append(store)
        return store

    return make


@pytest.mark.redis
class TestRedisStore(_RawRedisHooks):
    backend_id = "redis"

    @pytest.fixture
    async def make_store(self, redis_url: str, key_prefix: str) -> AsyncIterator[Any]:
        self.raw = redis.Redis.from_url(redis_url)
        stores: list[RedisSessionStateStore] = []
        yield _store_maker(RedisSessionStateStore, redis_url, key_prefix, stores)
        await _close_all(stores)
        await asyncio.to_thread(self.raw.close)


@pytest.mark.cluster
class TestRedisClusterStore(_RawRedisHooks):
    backend_id = "cluster"

    @pytest.fixture
    async def make_store(self, redis_cluster_url: str, key_prefix: str) -> AsyncIterator[Any]:
        self.raw = await asyncio.to_thread(RedisCluster.from_url, redis_cluster_url)
        stores: list[RedisClusterSessionStateStore] = []
        yield _store_maker(RedisClusterSessionStateStore, redis_cluster_url, key_prefix, stores)
        await _close_all(stores)
        await asyncio.to_thread(self.raw.close)


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def urls(redis_url: str, redis_cluster_url: str) -> dict[str, str]:
    """Both servers, resolved before the test body (and its blockbuster) starts."""
    return {"redis": redis_url, "cluster": redis_cluster_url}


STORE_CLASSES = {"redis": RedisSessionStateStore, "cluster": RedisClusterSessionStateStore}


Closable = TypeVar("Closable", RedisSessionStateStore, RedisClusterSessionStateStore,
                   redis.Redis, RedisCluster, redis.asyncio.Redis)


class Closing(Protocol):
    """The ``closing`` fixture: give it what you open, use what it gives back."""

    def __call__(self, thing: Closable) -> Closable: ...


@pytest.fixture
async def closing() -> AsyncIterator[Closing]:
    """Registers each store or client a test opens; closes them all at teardown, pass or fail."""
    opened: list[Any] = []

    def register(thing: Closable) -> Closable:
        opened.append(thing)
        return thing

    yield register
    for thing in reversed(opened):
        if isinstance(thing, redis.asyncio.Redis):
            await thing.aclose()
            continue
        if isinstance(thing, (RedisSessionStateStore, RedisClusterSessionStateStore)):
            await thing.aclose()
        await asyncio.to_thread(thing.close)


@pytest.fixture
def own_store(throwaway_redis: RedisServer, closing: Closing) -> RedisSessionStateStore:
    return closing(RedisSessionStateStore(throwaway_redis.url, prefix="fault"))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "convmem.stores" and r.levelno == logging.WARNING]


async def _turn(api: StoreDriver, thread_id: str, question: str) -> int:
    """One façade-style turn: load (empty when degraded), add the question, save."""
    return await api.ask(TENANT, thread_id, question)


# --------------------------------------------------------------------------- faults


@pytest.mark.redis
@pytest.mark.parametrize("mode", MODES)
async def test_server_killed_mid_session_turns_go_on_then_state_is_saved_again(
    mode: str, throwaway_redis: RedisServer, own_store: RedisSessionStateStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = StoreDriver(own_store, mode)  # type: ignore[arg-type]
    assert await _turn(api, "t1", "revenue for Northline?") == 1
    assert await _turn(api, "t1", "only EMEA") == 2

    await asyncio.to_thread(throwaway_redis.kill)
    with caplog.at_level(logging.WARNING, logger="convmem.stores"):
        started = time.monotonic()
        for i in range(5):  # five turns during the outage: none raises
            assert await api.load(TENANT, "t1") is None
            assert await api.save(TENANT, "t1", SessionState(turn=1), expected_version=0) == 1
            assert await _turn(api, "t1", f"outage question {i}") == 1
        elapsed = time.monotonic() - started
    assert len(_warnings(caplog)) == 1, "one warning per incident, not per call"
    assert own_store.stats.degraded == 1
    assert elapsed < 5.0, f"a dead cache must not stall turns ({elapsed:.2f}s for 15 calls)"

    await asyncio.to_thread(throwaway_redis.restart)
    # Same store object, no restart of the application: state is saved again.
    assert await _turn(api, "t1", "after restart") == 1
    loaded = await api.load(TENANT, "t1")
    assert loaded is not None and loaded.recent_questions == ("after restart",)
    assert own_store.stats.degraded == 1

    # A second outage is a second incident.
    await asyncio.to_thread(throwaway_redis.kill)
    with caplog.at_level(logging.WARNING, logger="convmem.stores"):
        assert await api.load(TENANT, "t1") is None
    assert own_store.stats.degraded == 2
    assert len(_warnings(caplog)) == 2


@pytest.mark.redis
@pytest.mark.parametrize("mode", MODES)
async def test_frozen_server_times_out_and_degrades(
    mode: str, throwaway_redis: RedisServer, own_store: RedisSessionStateStore
) -> None:
    api = StoreDriver(own_store, mode)  # type: ignore[arg-type]
    await _turn(api, "t1", "before")
    assert throwaway_redis.pid is not None
    os.kill(throwaway_redis.pid, signal.SIGSTOP)  # our own server, by PID
    try:
        started = time.monotonic()
        assert await api.load(TENANT, "t1") is None
        assert time.monotonic() - started < 2.0  # socket_timeout=0.25, no retries
        assert own_store.stats.degraded == 1
    finally:
        os.kill(throwaway_redis.pid, signal.SIGCONT)
    loaded = await api.load(TENANT, "t1")
    assert loaded is not None and loaded.recent_questions == ("before",)


@pytest.mark.redis
@pytest.mark.parametrize("mode", MODES)
async def test_strict_store_raises_when_the_server_is_gone(
    mode: str, throwaway_redis: RedisServer, closing: Closing
) -> None:
    store = closing(RedisSessionStateStore(throwaway_redis.url, strict=True))
    api = StoreDriver(store, mode)  # type: ignore[arg-type]
    await asyncio.to_thread(throwaway_redis.kill)
    with pytest.raises(StateUnavailable):
        await api.load(TENANT, "t1")
    with pytest.raises(StateUnavailable):
        await api.save(TENANT, "t1", rich_state(), expected_version=0)
    assert store.stats.degraded == 0  # strict raises instead of degrading


@pytest.mark.redis
@pytest.mark.cluster
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", [RedisSessionStateStore, RedisClusterSessionStateStore])
async def test_nothing_listening_at_startup_degrades(
    mode: str, backend: type[Any], closing: Closing
) -> None:
    store = closing(backend(f"redis://127.0.0.1:{free_port()}/0"))
    api = StoreDriver(store, mode)  # type: ignore[arg-type]
    assert await api.load(TENANT, "t1") is None
    assert await api.save(TENANT, "t1", rich_state(), expected_version=3) == 4
    await api.delete(TENANT, "t1")
    assert store.stats.degraded == 1


_BAD_VALUES: dict[str, Callable[[redis.Redis, str], object]] = {
    "ten megabytes": lambda raw, key: raw.set(
        key, b'{"v":1,"version":3,' + b" " * 10_000_000 + b"}"),
    "another redis type": lambda raw, key: raw.hset(key, "not", "ours"),
}


@pytest.mark.redis
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad_value", list(_BAD_VALUES))
async def test_a_value_we_cannot_read_degrades_and_is_replaced(
    mode: str, bad_value: str, redis_url: str, key_prefix: str, closing: Closing
) -> None:
    store = closing(RedisSessionStateStore(redis_url, prefix=key_prefix))
    raw = closing(redis.Redis.from_url(redis_url))
    key = state_key(TENANT, "t1", key_prefix)
    api = StoreDriver(store, mode)  # type: ignore[arg-type]
    await asyncio.to_thread(_BAD_VALUES[bad_value], raw, key)
    assert await api.load(TENANT, "t1") is None
    assert store.stats.degraded == 1
    if bad_value == "ten megabytes":
        assert not await asyncio.to_thread(raw.exists, key), "a corrupt value is discarded"
    assert await api.save(TENANT, "t1", rich_state(), expected_version=0) == 1
    assert await api.load(TENANT, "t1") == rich_state().evolve(version=1)


# --------------------------------------------------------------------------- wire format


@pytest.mark.redis
def test_key_layout_value_format_and_ttl(
    redis_url: str, key_prefix: str, closing: Closing
) -> None:
    store = closing(RedisSessionStateStore(redis_url, prefix=key_prefix, ttl=120))
    raw = closing(redis.Redis.from_url(redis_url))
    store.save("tenant-a", "thread-1", rich_state(), expected_version=0)
    key = f"{key_prefix}:v2:state:{{tenant-a:thread-1}}"
    stored = raw.get(key) or b""
    assert stored.startswith(b'{"v":2,"version":1,')  # STATE_HEAD: CAS reads no JSON
    value = json.loads(stored)
    assert (value["v"], value["version"]) == (2, 1)
    assert 110_000 < raw.pttl(key) <= 120_000
    # spec §5: separators and braces escaped inside the one hash tag
    store.save("acme:eu", "{mail@x.example}:42", rich_state(), expected_version=0)
    assert raw.exists(f"{key_prefix}:v2:state:{{acme%3Aeu:%7Bmail@x.example%7D%3A42}}")


@pytest.mark.redis
@pytest.mark.parametrize("mode", MODES)
async def test_cold_script_cache_falls_back_to_eval(
    mode: str, throwaway_redis: RedisServer, own_store: RedisSessionStateStore,
    closing: Closing,
) -> None:
    api = StoreDriver(own_store, mode)  # type: ignore[arg-type]
    raw = closing(redis.Redis.from_url(throwaway_redis.url))
    await asyncio.to_thread(raw.script_flush)  # our own server only
    assert await api.save(TENANT, "t1", rich_state(), expected_version=0) == 1
    assert await asyncio.to_thread(raw.script_exists, *_script_shas()) == [True]
    assert own_store.stats.degraded == 0


@pytest.mark.redis
@pytest.mark.parametrize(
    "stored",
    [
        b'{"v":1,"version":12,"turn":3}',
        b'{"v":1,"version":12}',
        b'{"v":1,"version":12,"focus":',  # head decides, body corrupt
        b'{"turn":3,"version":7,"v":1}',  # another key order: decoded
        b'{"version":7.0,"v":1}',
        b'{"version":-7,"v":1}',
        b'{"version":"7","v":1}',
        b'{"version":true,"v":1}',
        b'{"v":2,"version":7}',  # the current format's head
        b'{"v":2,"version":7,"salient":[]}',
        b'{"version":7,"v":2}',
        b'{"v":3,"version":7}',  # a format we cannot read
        b'{"version":7,"v":3}',
        b'{"version":7,"v":"2"}',
        b'{"version":7,"v":2.0}',
        b'{"v":12,"version":7}',
        b'{"v": 1, "version": 7}',  # not our head (spaces): decoded
        b"[7]",
        b"\xff\x00garbage",
        b"",
        b'{"v":1,"version":5,"x":"' + b"y" * 70_000 + b'"}',  # over 64 KB
    ],
)
def test_lua_reads_the_stored_version_like_the_codec(
    stored: bytes, redis_url: str, key_prefix: str, closing: Closing
) -> None:
    """The CAS script and ``convmem.state.stored_version`` agree on every kind of value."""
    from convmem.state import stored_version

    store = closing(RedisSessionStateStore(redis_url, prefix=key_prefix))
    raw = closing(redis.Redis.from_url(redis_url))
    raw.set(state_key(TENANT, "t1", key_prefix), stored)
    expected = stored_version(stored)
    with pytest.raises(VersionConflict) as info:
        store.save(TENANT, "t1", rich_state(), expected_version=expected + 1)
    assert info.value.actual == expected
    assert store.save(TENANT, "t1", rich_state(), expected_version=expected) == expected + 1


def _script_shas() -> list[str]:
    from convmem.stores.redis_wire import CAS_SHA

    return [CAS_SHA]


# --------------------------------------------------------------------------- listing


@pytest.mark.redis
@pytest.mark.cluster
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["redis", "cluster"])
async def test_iter_threads_lists_one_tenant_with_scan(
    mode: str, backend: str, urls: dict[str, str], key_prefix: str,
    closing: Closing,
) -> None:
    store = closing(STORE_CLASSES[backend](urls[backend], prefix=key_prefix))
    api = StoreDriver(store, mode)  # type: ignore[arg-type]
    wanted = {f"thread-{i}" for i in range(40)}
    for thread_id in wanted:
        await api.save("a", thread_id, SessionState(), expected_version=0)
    await api.save("a*", "glob-tenant", SessionState(), expected_version=0)
    await api.save("b", "other-tenant", SessionState(), expected_version=0)
    if mode == "sync":
        found = await asyncio.to_thread(lambda: set(store.iter_threads("a", count=7)))
    else:
        found = {t async for t in store.aiter_threads("a", count=7)}
    assert found == wanted


@pytest.mark.cluster
def test_cluster_spreads_one_tenant_over_every_master(
    redis_cluster_url: str, key_prefix: str, closing: Closing
) -> None:
    store = closing(RedisClusterSessionStateStore(redis_cluster_url, prefix=key_prefix))
    raw = closing(RedisCluster.from_url(redis_cluster_url))
    for i in range(30):
        store.save("one-tenant", f"t{i}", SessionState(), expected_version=0)
    owners = {raw.get_node_from_key(state_key("one-tenant", f"t{i}", key_prefix)).name
              for i in range(30)}
    assert len(owners) == 3


# --------------------------------------------------------------------------- clients


@pytest.mark.redis
async def test_given_clients_are_used_for_their_side_only(
    redis_url: str, key_prefix: str, closing: Closing
) -> None:
    sync_store = RedisSessionStateStore(closing(redis.Redis.from_url(redis_url)),
                                        prefix=key_prefix)
    # driver_info given: otherwise redis-py looks its version up on disk per connection,
    # a blocking call blockbuster (rightly) reports.
    async_client = closing(redis.asyncio.Redis.from_url(
        redis_url, driver_info=DriverInfo(name="redis-py", lib_version=redis.__version__)))
    async_store = RedisSessionStateStore(async_client, prefix=key_prefix)
    await asyncio.to_thread(
        lambda: sync_store.save(TENANT, "t1", rich_state(), expected_version=0))
    assert await async_store.aload(TENANT, "t1") == rich_state().evolve(version=1)
    with pytest.raises(ConfigError, match="sync client"):
        await sync_store.aload(TENANT, "t1")
    with pytest.raises(ConfigError, match="async client"):
        await asyncio.to_thread(async_store.load, TENANT, "t1")


@pytest.mark.redis
def test_async_methods_work_across_event_loops(redis_url: str, key_prefix: str) -> None:
    store = RedisSessionStateStore(redis_url, prefix=key_prefix)
    asyncio.run(store.asave(TENANT, "t1", rich_state(), expected_version=0))
    assert asyncio.run(store.aload(TENANT, "t1")) == rich_state().evolve(version=1)


def test_rejects_what_is_not_a_client() -> None:
    with pytest.raises(ConfigError, match="redis-py client"):
        RedisClusterSessionStateStore(redis.Redis())


# --------------------------------------------------------------------------- through the façade


@pytest.mark.redis
def test_facade_turns_survive_a_redis_kill(
    throwaway_redis: RedisServer, crm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A session driven through SessionMemory keeps answering while its cache is dead."""
    from convmem import SessionMemory, TurnContext

    domain = crm
    store = RedisSessionStateStore(throwaway_redis.url, prefix=f"facade{os.getpid()}")
    mem = SessionMemory(domain, store=store, tenant="acme")
    today = date(2026, 11, 30)
    mem.begin_turn("t", "Pull up Brightwater Farms.", today=today)
    mem.record_tool("t", "lookup_customer", {}, {"ok": True, "data": {"id": "C-1080", "name": "Brightwater Farms"}})
    mem.end_turn("t")
    ctx = mem.begin_turn("t", "Who's their rep?", today=today)
    assert isinstance(ctx, TurnContext) and ctx.rewritten == "Who's Brightwater Farms's rep?"
    mem.end_turn("t")

    throwaway_redis.kill()
    with caplog.at_level(logging.WARNING, logger="convmem.stores"):
        for q in ("What did they order last quarter?", "Briefly.", "Who's their rep?"):
            ctx = mem.begin_turn("t", q, today=today)  # no exception reaches the caller
            assert isinstance(ctx, TurnContext)
            assert ctx.state.focus is None  # the state came back empty: one repeated question
            mem.end_turn("t")
    assert store.stats.degraded == 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING and r.name == "convmem.stores"]) == 1

    throwaway_redis.restart()
    mem.begin_turn("t", "Pull up Brightwater Farms.", today=today)
    mem.end_turn("t")
    state = mem.get_state("t")
    assert state is not None and state.focus is not None and state.focus.id == "C-1080"


@pytest.mark.redis
@pytest.mark.cluster
@pytest.mark.parametrize("backend", ["redis", "cluster"])
async def test_fifty_concurrent_facade_turns_lose_no_saved_update(
    backend: str, urls: dict[str, str], key_prefix: str, crm: Any,
    caplog: pytest.LogCaptureFixture, closing: Closing,
) -> None:
    """50 writers on one thread through SessionMemory: every turn the façade saved counts.

    The façade retries a conflict twice, then goes on unsaved with a warning; so the
    state must hold exactly the turns that were not given up, no more, no fewer.
    """
    from convmem import SessionMemory

    store = closing(STORE_CLASSES[backend](urls[backend], prefix=key_prefix,
                                           socket_timeout=SPEC_SOCKET_TIMEOUT))
    mems = [SessionMemory(crm, store=store, tenant="acme") for _ in range(50)]
    with caplog.at_level(logging.WARNING, logger="convmem.session"):
        await asyncio.gather(*(
            mem.abegin_turn("shared", f"question {i} about quotas", message_id=f"m{i}",
                            today=date(2026, 11, 30))
            for i, mem in enumerate(mems)))
    gave_up = [r for r in caplog.records
               if r.name == "convmem.session" and "gave up" in r.getMessage()]
    state = await mems[0].aget_state("shared")
    assert state is not None
    assert (state.turn, state.version) == (50 - len(gave_up), 50 - len(gave_up))
    assert state.turn >= 1 and store.stats.degraded == 0


# --------------------------------------------------------------------------- misconfiguration
# Spec §5: an outage degrades, a misconfiguration raises ConfigError naming the cause,
# on first contact and on every call after (issue 11, finding 9).


@pytest.fixture
def garbage_server() -> Iterator[int]:
    """A TCP server of this test's own that answers anything with an HTTP error: a port
    that is not Redis. Yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                try:
                    conn.settimeout(1)
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        worker.join(timeout=5)
        listener.close()


def _require_password(server: RedisServer, password: str) -> None:
    """Turn on AUTH on our own throwaway server."""
    assert redis_command("127.0.0.1", server.port, "CONFIG", "SET", "requirepass", password
                         ).startswith(b"+OK")


async def _every_call_raises_config_error(store: Any, mode: str, match: str) -> None:
    """load, save, delete, list and ping: each raises ConfigError, again and again."""
    api = StoreDriver(store, mode)  # type: ignore[arg-type]
    for _ in range(3):  # not "degraded forever after one warning"
        with pytest.raises(ConfigError, match=match):
            await api.load(TENANT, "t1")
        with pytest.raises(ConfigError, match=match):
            await api.save(TENANT, "t1", rich_state(), expected_version=0)
        with pytest.raises(ConfigError, match=match):
            await api.delete(TENANT, "t1")
        with pytest.raises(ConfigError, match=match):
            await api.threads(TENANT)
        with pytest.raises(ConfigError, match=match):
            if mode == "sync":
                await asyncio.to_thread(store.ping)
            else:
                await store.aping()
    assert store.stats.degraded == 0


@pytest.mark.redis
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("credentials", ["", ":wrong@", "someone:wrong@"])
async def test_refused_credentials_are_a_config_error_not_an_outage(
    mode: str, strict: bool, credentials: str, throwaway_redis: RedisServer,
    caplog: pytest.LogCaptureFixture, closing: Closing,
) -> None:
    await asyncio.to_thread(_require_password, throwaway_redis, "s3cret")
    url = f"redis://{credentials}127.0.0.1:{throwaway_redis.port}/0"
    store = closing(RedisSessionStateStore(url, strict=strict))
    with caplog.at_level(logging.WARNING, logger="convmem.stores"):
        await _every_call_raises_config_error(store, mode, "refused our credentials")
    assert _warnings(caplog) == []
    with pytest.raises(ConfigError) as info:
        await asyncio.to_thread(store.load, TENANT, "t1")
    assert "wrong" not in str(info.value), "the password is never echoed"
    # The same server with the right password: the store works.
    good = closing(
        RedisSessionStateStore(f"redis://:s3cret@127.0.0.1:{throwaway_redis.port}/0"))
    api = StoreDriver(good, mode)  # type: ignore[arg-type]
    assert await api.save(TENANT, "t1", rich_state(), expected_version=0) == 1


@pytest.fixture(
    params=[
        "database-beyond-the-servers",
        pytest.param("not-redis", marks=pytest.mark.cluster),
        pytest.param("not-redis-cluster", marks=pytest.mark.cluster),
        "cluster-store-on-a-standalone-server",
    ]
)
def misconfigured(request: pytest.FixtureRequest) -> tuple[type[Any], str, str]:
    """A store class, a URL none of its calls can work on, and what its ConfigError says."""
    if request.param == "database-beyond-the-servers":
        # redis-server's default `databases` is 16: 0..15
        port = request.getfixturevalue("throwaway_redis").port
        return RedisSessionStateStore, f"redis://127.0.0.1:{port}/16", "database number"
    if request.param == "cluster-store-on-a-standalone-server":
        url = request.getfixturevalue("redis_url")
        return RedisClusterSessionStateStore, url, "use RedisSessionStateStore"
    # a server that does not speak Redis, to either store
    backend = RedisSessionStateStore if request.param == "not-redis" else RedisClusterSessionStateStore
    port = request.getfixturevalue("garbage_server")
    return backend, f"redis://127.0.0.1:{port}/0", "does not speak the Redis protocol"


@pytest.mark.redis
@pytest.mark.parametrize("mode", MODES)
async def test_a_misconfigured_store_is_a_config_error(
    mode: str, misconfigured: tuple[type[Any], str, str], closing: Closing
) -> None:
    backend, url, match = misconfigured
    store = closing(backend(url))
    await _every_call_raises_config_error(store, mode, match)


@pytest.mark.redis
@pytest.mark.parametrize("mode", MODES)
async def test_server_out_of_memory_degrades_like_an_outage(
    mode: str, throwaway_redis: RedisServer, own_store: RedisSessionStateStore
) -> None:
    api = StoreDriver(own_store, mode)  # type: ignore[arg-type]
    assert await api.save(TENANT, "t1", rich_state(1), expected_version=0) == 1
    for setting in (("maxmemory-policy", "noeviction"), ("maxmemory", "1")):
        await asyncio.to_thread(redis_command, "127.0.0.1", throwaway_redis.port,
                                "CONFIG", "SET", *setting)
    assert await api.save(TENANT, "t2", rich_state(), expected_version=0) == 1  # unsaved
    assert own_store.stats.degraded == 1
    loaded = await api.load(TENANT, "t1")  # reads still work: the incident ends
    assert loaded is not None and loaded.turn == 1


@pytest.mark.redis
@pytest.mark.cluster
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["redis", "cluster"])
async def test_ping_answers_for_a_healthy_server_and_names_an_outage(
    mode: str, backend: str, urls: dict[str, str], closing: Closing
) -> None:
    healthy = closing(STORE_CLASSES[backend](urls[backend]))
    dead = closing(STORE_CLASSES[backend](f"redis://127.0.0.1:{free_port()}/0"))
    if mode == "sync":
        assert await asyncio.to_thread(healthy.ping) is None
        with pytest.raises(StateUnavailable, match="unavailable"):
            await asyncio.to_thread(dead.ping)
    else:
        assert await healthy.aping() is None
        with pytest.raises(StateUnavailable, match="unavailable"):
            await dead.aping()
    # ping reports; it is not a turn: nothing degraded, turns still degrade quietly
    assert dead.stats.degraded == 0
    assert await StoreDriver(dead, mode).load(TENANT, "t1") is None  # type: ignore[arg-type]
    assert dead.stats.degraded == 1


@pytest.mark.parametrize("backend", [RedisSessionStateStore, RedisClusterSessionStateStore])
@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("localhost:6379", "schemes"),
        ("http://127.0.0.1:6379/0", "schemes"),
        ("redis://127.0.0.1:notaport/0", "Port"),
        ("redis://127.0.0.1:99999/0", "Port"),
        ("redis://127.0.0.1:6379/zero", "database number"),
        ("redis://127.0.0.1:6379/0?socket_timeout=soon", "socket_timeout"),
        ("", "schemes"),
    ],
)
def test_malformed_url_is_refused_at_construction(
    backend: type[Any], url: str, fragment: str
) -> None:
    with pytest.raises(ConfigError, match="malformed Redis URL") as info:
        backend(url)
    assert fragment in str(info.value)


def test_malformed_url_error_never_shows_the_password() -> None:
    with pytest.raises(ConfigError, match="malformed Redis URL") as info:
        RedisSessionStateStore("redis://app:hunter2@127.0.0.1:6379/zero")
    assert "hunter2" not in str(info.value) and "app:***@" in str(info.value)
    with pytest.raises(ConfigError, match="malformed Redis URL") as info:
        RedisSessionStateStore("redis://app:hunter2@127.0.0.1:port/0")
    assert "hunter2" not in str(info.value)


def test_cluster_url_must_name_database_zero() -> None:
    with pytest.raises(ConfigError, match="only database 0"):
        RedisClusterSessionStateStore("redis://127.0.0.1:7000/3")
    RedisClusterSessionStateStore("redis://127.0.0.1:7000/0")  # lazy: nothing contacted
    RedisSessionStateStore("redis://127.0.0.1:6379/3")


@pytest.mark.redis
@pytest.mark.cluster
@pytest.mark.parametrize("backend", ["redis", "cluster"])
@pytest.mark.parametrize("mode", MODES)
async def test_more_concurrent_calls_than_pooled_connections_wait_for_one(
    backend: str, mode: str, urls: dict[str, str], key_prefix: str, closing: Closing
) -> None:
    """redis-py 8 caps a pool at 100 connections and raises ``MaxConnectionsError``
    beyond them: 300 turns at once on one URL-built store must wait for a connection,
    never fail (strict) or degrade to an empty state."""
    store = closing(STORE_CLASSES[backend](urls[backend], prefix=key_prefix, strict=True,
                                           socket_timeout=SPEC_SOCKET_TIMEOUT))
    threads = [f"pool-{i}" for i in range(300)]
    if mode == "async":
        versions = await asyncio.gather(
            *(store.asave(TENANT, t, rich_state(), expected_version=0) for t in threads))
        loaded = await asyncio.gather(*(store.aload(TENANT, t) for t in threads))
    else:
        from concurrent.futures import ThreadPoolExecutor

        def both(t: str) -> tuple[int, SessionState | None]:
            return store.save(TENANT, t, rich_state(), expected_version=0), store.load(TENANT, t)

        def all_at_once() -> list[tuple[int, SessionState | None]]:
            with ThreadPoolExecutor(max_workers=300) as pool:
                return list(pool.map(both, threads))

        pairs = await asyncio.to_thread(all_at_once)
        versions, loaded = [v for v, _ in pairs], [s for _, s in pairs]
    assert len(versions) == 300 and all(s is not None for s in loaded)
    assert store.stats.degraded == 0


# --------------------------------------------------------------------------- auto-pipelining


def _connections_named(raw: redis.Redis, name: str) -> int:
    return sum(c.get("name") == name for c in raw.client_list())


@pytest.mark.redis
async def test_concurrent_async_calls_share_one_pipelined_connection(
    redis_url: str, key_prefix: str, closing: Closing
) -> None:
    """The commands 100 sessions issue in one loop turn go out as one pipeline on one
    pooled connection (``CommandBatches``), not one connection and round trip each; every
    session still gets its own reply."""
    name = f"convmem-batch-{key_prefix}"
    client = closing(redis.asyncio.Redis.from_url(
        redis_url, client_name=name,
        driver_info=DriverInfo(name="redis-py", lib_version=redis.__version__)))
    store = closing(RedisSessionStateStore(client, prefix=key_prefix, strict=True))
    raw = closing(redis.Redis.from_url(redis_url))
    threads = [f"batch-{i}" for i in range(100)]
    states = [rich_state().evolve(recent_questions=(f"q{i}",)) for i in range(100)]
    versions = await asyncio.gather(
        *(store.asave(TENANT, t, s, expected_version=0) for t, s in zip(threads, states, strict=True)))
    loaded = await asyncio.gather(*(store.aload(TENANT, t) for t in threads))
    assert versions == [1] * 100
    assert [s.recent_questions if s else None for s in loaded] == [(f"q{i}",) for i in range(100)]
    assert await asyncio.to_thread(_connections_named, raw, name) == 1


@pytest.mark.redis
async def test_a_command_alone_in_its_loop_turn_is_sent_by_itself(
    redis_url: str, key_prefix: str, closing: Closing
) -> None:
    """One session's calls, one at a time, go out as plain commands (no pipeline of
    one); two in the same loop turn go out as one pipeline."""
    client = closing(redis.asyncio.Redis.from_url(redis_url))
    pipelines = [0]
    real_pipeline = client.pipeline

    def counted(*args: Any, **kwargs: Any) -> Any:
        pipelines[0] += 1
        return real_pipeline(*args, **kwargs)

    client.pipeline = counted  # type: ignore[method-assign]
    store = closing(RedisSessionStateStore(client, prefix=key_prefix, strict=True))
    assert await store.asave(TENANT, "alone", rich_state(), expected_version=0) == 1
    assert await store.aload(TENANT, "alone") is not None
    assert pipelines == [0]
    loaded = await asyncio.gather(store.aload(TENANT, "alone"), store.aload(TENANT, "none"))
    assert loaded[0] is not None and loaded[1] is None and pipelines == [1]


@pytest.mark.redis
async def test_a_batched_command_fails_alone(
    redis_url: str, key_prefix: str, closing: Closing
) -> None:
    """One pipeline carries a load of a key of the wrong type (degrades), a save that
    loses its compare-and-set (``VersionConflict``) and two that succeed: each caller
    gets what it would get alone, and the others are untouched."""
    raw = closing(redis.Redis.from_url(redis_url))
    await asyncio.to_thread(raw.lpush, state_key(TENANT, "wrong", key_prefix), "x")

    async def outcomes(store: RedisSessionStateStore, together: bool) -> list[Any]:
        await store.asave(TENANT, "taken", rich_state(), expected_version=0)
        calls = [lambda: store.aload(TENANT, "wrong"),
                 lambda: store.asave(TENANT, "taken", rich_state(), expected_version=0),
                 lambda: store.asave(TENANT, "fresh", rich_state(), expected_version=0),
                 lambda: store.aload(TENANT, "taken")]
        if together:
            got = await asyncio.gather(*(c() for c in calls), return_exceptions=True)
        else:
            got = [await asyncio.gather(c(), return_exceptions=True) for c in calls]
            got = [g[0] for g in got]
        await asyncio.to_thread(raw.delete, *(state_key(TENANT, t, key_prefix)
                                              for t in ("taken", "fresh")))
        return [type(g).__name__ if isinstance(g, BaseException) else
                (g.version if isinstance(g, SessionState) else g) for g in got]

    alone = closing(RedisSessionStateStore(redis_url, prefix=key_prefix))
    batched = closing(RedisSessionStateStore(redis_url, prefix=key_prefix))
    expected = await outcomes(alone, together=False)
    assert expected == [None, "VersionConflict", 1, 1]
    assert await outcomes(batched, together=True) == expected
    assert (alone.stats.degraded, batched.stats.degraded) == (1, 1)
    assert (alone.stats.conflicts, batched.stats.conflicts) == (1, 1)


@pytest.mark.redis
async def test_a_batch_on_a_cold_script_cache_falls_back_per_caller(
    throwaway_redis: RedisServer, own_store: RedisSessionStateStore, closing: Closing
) -> None:
    """Every compare-and-set in a pipeline answered NOSCRIPT: each caller retries with
    ``EVAL`` on its own, and all 30 saves land."""
    raw = closing(redis.Redis.from_url(throwaway_redis.url))
    await asyncio.to_thread(raw.script_flush)  # our own server only
    versions = await asyncio.gather(*(
        own_store.asave(TENANT, f"cold-{i}", rich_state(), expected_version=0)
        for i in range(30)))
    assert versions == [1] * 30 and own_store.stats.degraded == 0
    assert await asyncio.to_thread(raw.dbsize) == 30


@pytest.mark.redis
async def test_a_frozen_server_degrades_every_caller_in_the_batch(
    throwaway_redis: RedisServer, own_store: RedisSessionStateStore
) -> None:
    """The pipeline's own failure (a timeout) is every caller's: each of 30 loads
    degrades to an empty state within the socket timeout; none raises or hangs."""
    await own_store.asave(TENANT, "t1", rich_state(), expected_version=0)
    assert throwaway_redis.pid is not None
    os.kill(throwaway_redis.pid, signal.SIGSTOP)  # our own server, by PID
    try:
        started = time.monotonic()
        loaded = await asyncio.gather(*(own_store.aload(TENANT, "t1") for _ in range(30)))
        assert time.monotonic() - started < 2.0
    finally:
        os.kill(throwaway_redis.pid, signal.SIGCONT)
    assert loaded == [None] * 30 and own_store.stats.degraded == 1  # one incident
    assert (await own_store.aload(TENANT, "t1")) is not None


@pytest.mark.redis
async def test_a_caller_cancelled_before_its_batch_is_sent_sends_nothing(
    redis_url: str, key_prefix: str, closing: Closing
) -> None:
    """A save cancelled while it waits for the end of the loop turn drops out of the
    pipeline: the key is never written; the save beside it is."""
    raw = closing(redis.Redis.from_url(redis_url))
    store = closing(RedisSessionStateStore(redis_url, prefix=key_prefix, strict=True))
    await store.aload(TENANT, "warm")  # the client and its pool exist
    kept = asyncio.ensure_future(store.asave(TENANT, "kept", rich_state(), expected_version=0))
    dropped = asyncio.ensure_future(
        store.asave(TENANT, "dropped", rich_state(), expected_version=0))
    await asyncio.sleep(0)  # both queued; the batch goes out at the end of the next turn
    dropped.cancel()
    assert await kept == 1
    with pytest.raises(asyncio.CancelledError):
        await dropped
    exists = await asyncio.to_thread(
        raw.exists, state_key(TENANT, "kept", key_prefix), state_key(TENANT, "dropped", key_prefix))
    assert exists == 1
