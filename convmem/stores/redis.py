"""Session state on Redis and Redis Cluster: one key per thread, CAS in one round trip.

Each thread's state is one string key, ``<prefix>:v2:state:{<tenant>:<thread_id>}``
(tenant and thread id escaped: ``convmem.stores.base.state_key``), holding the JSON codec's bytes (format version inside) with a TTL set by every save
and left alone by a load. ``save`` is a compare-and-set on the stored ``version``,
run on the server as a Lua script (``EVALSHA``, falling back to ``EVAL`` when the
script cache is cold) that reads the version from the value's head (``{"v":2,"version":``)
instead of decoding its JSON, so a turn costs two round trips: one GET, one script. Lua
rather than ``WATCH``/``MULTI`` because an optimistic transaction needs three round
trips and a pinned connection, and rather than ``FUNCTION`` because Redis 6.2 has none.

Every operation is written once, as a generator that yields the Redis commands it
needs and receives their replies (``_load_steps``, ``_save_steps``); ``convmem.effects``'
``drive``/``adrive`` answer those commands with redis-py's sync or ``redis.asyncio``
client. The async side auto-pipelines: the commands that concurrent sessions issue in
one turn of the event loop go out as one pipeline on one connection
(``redis_wire.CommandBatches``), each caller still getting its own reply or error; the
cluster sends one command at a time. The scripts and the rules for reading the server's
errors are in ``convmem.stores.redis_wire``. That keeps the ``x``/``ax`` twins identical without thread wrappers, and the
standalone and cluster classes differ only in how they build clients.

Failures degrade on purpose (see ``convmem.stores.degradation``): an unreachable
server, a timeout, a server that is loading, read-only, out of memory or failing to
persist, or a value that does not decode (over 64 KB, not JSON, not ours) yields an
empty state and a saved-looking version, one warning per incident; a corrupt value is
discarded so the next save can replace it. A *misconfiguration* does not degrade: a
malformed URL is refused at construction, and credentials the server refuses, a
database number beyond its ``databases``, a server that does not speak Redis, or the
wrong class for the server (standalone vs cluster) raise ``ConfigError`` on first
contact and on every call after, naming the cause and the fix; waiting would never
mend them, and "degraded forever after one warning" would hide them (spec §5). ``ping``
checks the server on demand (a readiness probe). Listing threads uses ``SCAN`` on our
prefix, on every master of a cluster; never ``KEYS``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, ClassVar, NoReturn, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.exceptions
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.retry import Retry

from convmem.effects import adrive, drive
from convmem.errors import ConfigError, CorruptState, StateUnavailable, VersionConflict
from convmem.state import SessionState, decode_state
from convmem.stores.base import check_count, check_expected_version, tenant_key_head, thread_of_key
from convmem.stores.core import StoreCore
from convmem.stores.redis_wire import (
    CAS_SHA,
    DISCARD_SHA,
    Command,
    CommandBatches,
    Steps,
    acall_command,
    as_bytes,
    as_text,
    call_command,
    checked_url,
    eval_fallback,
    glob_escape,
    is_unavailable,
    misconfiguration,
    script_command,
    shown_url,
)

__all__ = ["RedisClusterSessionStateStore", "RedisSessionStateStore"]

T = TypeVar("T")

#: What a client raises when the server cannot be used: an outage or a misconfiguration.
_CLIENT_FAILURES = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError)

#: How many of our own last writes a store remembers to skip decoding them on load.
_RECENT_SIZE = 1024

#: Connections a URL-built client keeps to one server (redis-py 8's default). Its pools
#: raise ``MaxConnectionsError`` beyond them, which would degrade a turn under mere
#: concurrency; ours wait for a free connection (``BlockingConnectionPool``), at most
#: ``socket_timeout``, like any other call.
POOL_SIZE = 100

#: redis-py's async cluster client cannot wait for a connection: each node may open as
#: many as there are calls in flight (what every redis-py pool did before 8).
_CLUSTER_ASYNC_NODE_CONNECTIONS = 2**31 - 1

class _RedisStoreBase(StoreCore):
    """Shared behaviour; subclasses say how to build their sync and async clients."""

    _name: ClassVar[str]
    _cluster: ClassVar[bool] = False
    #: Whether async commands are auto-pipelined (``CommandBatches``).
    _batched: ClassVar[bool] = True
    _sync_types: ClassVar[tuple[type, ...]]
    _async_types: ClassVar[tuple[type, ...]]

    def __init__(
        self,
        client_or_url: Any,
        *,
        ttl: float = 3600,
        prefix: str = "convmem",
        strict: bool = False,
        socket_timeout: float = 0.25,
    ) -> None:
        super().__init__(self._name, ttl=ttl, prefix=prefix, strict=strict)
        self.strict = strict
        self.socket_timeout = socket_timeout
        self._url: str | None = None
        self._client: Any = None  # sync client
        self._aclient: Any = None  # async client
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._abatches: CommandBatches | None = None  # the async client's, when batched
        self._recent: dict[str, tuple[bytes, SessionState]] = {}
        self._owns_clients = isinstance(client_or_url, str)
        if isinstance(client_or_url, str):
            self._url = checked_url(client_or_url, type(self).__name__, cluster=self._cluster)
        elif isinstance(client_or_url, self._sync_types):
            self._client = client_or_url
        elif isinstance(client_or_url, self._async_types):
            self._aclient = client_or_url
        else:
            raise ConfigError(
                f"{type(self).__name__} takes a redis:// URL or a redis-py client of type "
                f"{' / '.join(t.__qualname__ for t in self._sync_types + self._async_types)}, "
                f"got {type(client_or_url).__name__}"
            )

    # ----------------------------------------------------------------- clients

    def _client_options(self) -> dict[str, Any]:
        return {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            # Given explicitly, redis-py skips an importlib.metadata lookup (file
            # system calls) on every new connection, which would block the event loop.
            "driver_info": DriverInfo(name="redis-py", lib_version=redis.__version__),
        }

    def _new_client(self, url: str) -> Any:
        raise NotImplementedError

    def _new_aclient(self, url: str) -> Any:
        raise NotImplementedError

    def _url_for_own_client(self, given: str, instead: str) -> str:
        """The URL to build a client from; a store given only a ``given`` client has none."""
        if self._url is None:
            raise ConfigError(
                f"{type(self).__name__} was given {given} client; use {instead} "
                "or pass a URL to get both"
            )
        return self._url

    def _sync_client(self) -> Any:
        if self._client is None:
            self._client = self._new_client(
                self._url_for_own_client("an async", "the a* methods"))
        return self._client

    def _async_client(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._owns_clients and self._aloop is not loop:
            # An async client belongs to one event loop; a new loop (asyncio.run per
            # request, per-test loops) gets a fresh client instead of a broken one.
            self._aclient = None
        if self._aclient is None:
            self._aclient = self._new_aclient(
                self._url_for_own_client("a sync", "the sync methods"))
            self._aloop = loop
        return self._aclient

    def _asender(self, client: Any) -> Callable[[Command], Awaitable[Any]]:
        """How an async operation sends one command: batched with the other sessions'
        commands of the same loop turn, or (the cluster) one command at a time."""
        if not self._batched:
            return functools.partial(acall_command, client)
        if self._abatches is None or self._abatches.client is not client:
            self._abatches = CommandBatches(client)
        return self._abatches.call

    async def _aprepare(self, client: Any) -> None:
        """Hook run before each async operation (the cluster initialises its client)."""

    def close(self) -> None:
        """Close the sync client if this store created it."""
        if self._owns_clients and self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        """Close the async client if this store created it (call on its event loop)."""
        if self._owns_clients and self._aclient is not None:
            client, self._aclient, self._aloop = self._aclient, None, None
            await client.aclose()

    # ----------------------------------------------------------------- drivers

    def _run(self, operation: str, key: str, steps: Steps[T], fallback: T) -> T:
        """Execute ``steps`` with the sync client; degrade on unavailability."""
        try:
            client = self._sync_client()

            def execute(command: Command) -> Any:
                try:
                    return call_command(client, command)
                except redis.exceptions.NoScriptError:
                    return call_command(client, eval_fallback(command))

            return drive(steps, execute)
        except _CLIENT_FAILURES as exc:
            self._failed(operation, key, exc)
        return fallback

    async def _arun(self, operation: str, key: str, steps: Steps[T], fallback: T) -> T:
        """Execute ``steps`` with the async client; degrade on unavailability."""
        try:
            client = self._async_client()
            await self._aprepare(client)

            send = self._asender(client)

            async def execute(command: Command) -> Any:
                try:
                    return await send(command)
                except redis.exceptions.NoScriptError:
                    return await send(eval_fallback(command))

            return await adrive(steps, execute)
        except _CLIENT_FAILURES as exc:
            self._failed(operation, key, exc)
        return fallback

    def _where(self) -> str:
        return f"the server at {shown_url(self._url)}" if self._url else "the client's server"

    def _config_error(self, exc: BaseException) -> ConfigError | None:
        problem = misconfiguration(exc)
        if problem is None:
            return None
        return ConfigError(f"{self._name}: {self._where()} cannot be used: {problem}")

    def _failed(self, operation: str, key: str, exc: BaseException) -> None:
        """A command failed: ``ConfigError`` for a misconfiguration, a degraded incident
        for an outage (``StateUnavailable`` when strict); anything else propagates."""
        config_error = self._config_error(exc)
        if config_error is not None:
            raise config_error from exc
        if not is_unavailable(exc):
            raise exc
        self._incidents.failed(operation, key, exc)

    def _ping_failed(self, exc: BaseException) -> NoReturn:
        """Raise what ``ping`` raises for ``exc``."""
        config_error = self._config_error(exc)
        if config_error is not None:
            raise config_error from exc
        if not is_unavailable(exc):
            raise exc
        raise StateUnavailable(
            f"{self._name}: {self._where()} is unavailable ({type(exc).__name__}: {exc}); turns "
            "degrade to an empty state until it answers. If this lasts, check the host and "
            "port, and whether the server wants TLS (rediss://)") from exc

    def ping(self) -> None:
        """Check the server now (a readiness probe): returns when it answers.

        Raises ``ConfigError`` when it is misconfigured (refused credentials, a database
        it does not have, not a Redis server, the wrong store class) and
        ``StateUnavailable`` when it cannot be reached, whatever ``strict`` says.
        """
        try:
            call_command(self._sync_client(), ("PING",))
        except _CLIENT_FAILURES as exc:
            self._ping_failed(exc)

    async def aping(self) -> None:
        """Async ``ping``."""
        try:
            client = self._async_client()
            await self._aprepare(client)
            await acall_command(client, ("PING",))
        except _CLIENT_FAILURES as exc:
            self._ping_failed(exc)

    # ----------------------------------------------------------------- operations (pure)

    def _remember(self, key: str, payload: bytes, state: SessionState) -> None:
        """Keep what we just wrote, so the next turn's load can skip decoding it."""
        self._recent[key] = (payload, state)
        if len(self._recent) > _RECENT_SIZE:
            self._recent.pop(next(iter(self._recent), key), None)  # oldest first

    def _load_steps(self, key: str) -> Steps[SessionState | None]:
        raw = yield ("GET", key)
        if raw is None:
            self._incidents.succeeded()
            return None
        recent = self._recent.get(key)
        if recent is not None and recent[0] == raw:
            # Byte-identical to our own last save (the common case: the next turn of a
            # thread lands on the same process); states are immutable, so share it.
            self._incidents.succeeded()
            return recent[1]
        try:
            state = decode_state(raw)
        except CorruptState as exc:
            self._incidents.failed("load", key, exc)  # raises when strict
            yield script_command(DISCARD_SHA, key, hashlib.sha1(as_bytes(raw)).hexdigest())
            return None
        self._incidents.succeeded()
        return state

    def _save_steps(
        self, key: str, state: SessionState, expected_version: int
    ) -> Steps[int]:
        new_version = expected_version + 1
        stamped = state.evolve(version=new_version)
        payload = self._encoded(key, stamped)
        if payload is None:
            return new_version
        ttl_ms = max(1, round(self.ttl * 1000))
        reply = int((yield script_command(CAS_SHA, key, expected_version, payload, ttl_ms)))
        self._incidents.succeeded()
        if reply < 0:
            self.stats.conflicts += 1
            raise VersionConflict(key, expected_version, -1 - reply)
        self._remember(key, payload, stamped)
        return reply

    def _delete_steps(self, key: str) -> Steps[None]:
        self._recent.pop(key, None)
        yield ("DEL", key)
        self._incidents.succeeded()

    def _scan_match(self, tenant: str) -> tuple[str, str]:
        """(SCAN MATCH pattern, literal key head) for one tenant's threads. The escaped
        tenant holds no ``:`` and the escaped thread no ``}``, so the pattern matches
        exactly this tenant's keys; glob characters in either are escaped."""
        head = tenant_key_head(tenant, self.prefix)  # "<prefix>:v2:state:{<tenant>:"
        return glob_escape(head) + "*}", head

    # ----------------------------------------------------------------- public API

    def load(self, tenant: str, thread_id: str) -> SessionState | None:
        """The thread's state, or None when absent, expired, corrupt or unreachable."""
        key = self._key(tenant, thread_id)
        return self._run("load", key, self._load_steps(key), None)

    async def aload(self, tenant: str, thread_id: str) -> SessionState | None:
        key = self._key(tenant, thread_id)
        return await self._arun("load", key, self._load_steps(key), None)

    def save(
        self, tenant: str, thread_id: str, state: SessionState, *, expected_version: int
    ) -> int:
        """Compare-and-set; returns the new version, raises ``VersionConflict`` if beaten."""
        key = self._key(tenant, thread_id)
        check_expected_version(expected_version)
        steps = self._save_steps(key, state, expected_version)
        return self._run("save", key, steps, expected_version + 1)

    async def asave(
        self, tenant: str, thread_id: str, state: SessionState, *, expected_version: int
    ) -> int:
        key = self._key(tenant, thread_id)
        check_expected_version(expected_version)
        steps = self._save_steps(key, state, expected_version)
        return await self._arun("save", key, steps, expected_version + 1)

    def delete(self, tenant: str, thread_id: str) -> None:
        key = self._key(tenant, thread_id)
        self._run("delete", key, self._delete_steps(key), None)

    async def adelete(self, tenant: str, thread_id: str) -> None:
        key = self._key(tenant, thread_id)
        await self._arun("delete", key, self._delete_steps(key), None)

    def iter_threads(self, tenant: str, *, count: int = 500) -> Iterator[str]:
        """Thread ids with live state for ``tenant`` (SCAN; every master of a cluster).

        Like any SCAN, a key written during the walk may or may not appear. An
        outage ends the listing early (degraded), it does not raise.
        """
        check_count(count)
        pattern, head = self._scan_match(tenant)
        try:
            for key in self._sync_client().scan_iter(match=pattern, count=count):
                yield thread_of_key(as_text(key), head)
        except _CLIENT_FAILURES as exc:
            self._failed("scan", pattern, exc)
            return
        self._incidents.succeeded()

    async def aiter_threads(self, tenant: str, *, count: int = 500) -> AsyncIterator[str]:
        check_count(count)
        pattern, head = self._scan_match(tenant)
        try:
            client = self._async_client()
            await self._aprepare(client)
            async for key in client.scan_iter(match=pattern, count=count):
                yield thread_of_key(as_text(key), head)
        except _CLIENT_FAILURES as exc:
            self._failed("scan", pattern, exc)
            return
        self._incidents.succeeded()


def _no_retry() -> Retry:
    # redis-py retries 3 times with 1 s exponential backoff by default: a dead cache
    # would stall every turn for seconds. One attempt, then degrade.
    return Retry(NoBackoff(), 0)


def _no_aretry() -> redis.asyncio.retry.Retry:
    return redis.asyncio.retry.Retry(NoBackoff(), 0)


class RedisSessionStateStore(_RedisStoreBase):
    """``SessionStateStore`` on one Redis server (or a proxy/Sentinel-managed primary).

    Pass a URL to get both sync and async methods (clients are created lazily with
    ``socket_timeout`` and no retries), or a ``redis.Redis`` / ``redis.asyncio.Redis``
    client to use it as configured, for that side only.
    """

    _name = "Redis session-state store"
    _sync_types = (redis.Redis,)
    _async_types = (redis.asyncio.Redis,)

    def _new_client(self, url: str) -> redis.Redis:
        return redis.Redis.from_pool(redis.BlockingConnectionPool.from_url(
            url, retry=_no_retry(), max_connections=POOL_SIZE, timeout=self.socket_timeout,
            **self._client_options()))

    def _new_aclient(self, url: str) -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_pool(redis.asyncio.BlockingConnectionPool.from_url(
            url, retry=_no_aretry(), max_connections=POOL_SIZE, timeout=self.socket_timeout,
            **self._client_options()))


class RedisClusterSessionStateStore(_RedisStoreBase):
    """``SessionStateStore`` on Redis Cluster; the URL names any startup node.

    The hash tag around the (escaped) tenant and thread keeps one thread on one slot (so the CAS script
    touches one key on one node) while spreading a tenant's threads over all slots.
    """

    _name = "Redis Cluster session-state store"
    _cluster = True
    # redis-py's async cluster pipeline regroups commands by node and retries a batch on
    # MOVED/ASK as a whole; one command at a time keeps each session's failure its own.
    _batched = False
    _sync_types = (redis.cluster.RedisCluster,)
    _async_types = (redis.asyncio.cluster.RedisCluster,)

    def _new_client(self, url: str) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster.from_url(
            url, retry=_no_retry(), connection_pool_class=redis.BlockingConnectionPool,
            max_connections=POOL_SIZE, timeout=self.socket_timeout, **self._client_options())

    async def _aprepare(self, client: Any) -> None:
        # redis-py's async cluster client, first used by many coroutines at once,
        # re-initialises under their feet and closes connections they hold
        # ("Connection closed by server"). Initialising explicitly first avoids it;
        # afterwards this is a flag check.
        await client.initialize()

    def _new_aclient(self, url: str) -> redis.asyncio.cluster.RedisCluster:
        return redis.asyncio.cluster.RedisCluster.from_url(
            url, retry=_no_aretry(), max_connections=_CLUSTER_ASYNC_NODE_CONNECTIONS,
            **self._client_options())
