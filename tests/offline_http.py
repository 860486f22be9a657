"""Offline provider-client tests: hand-written vcrpy cassettes behind a network guard.

A pytest plugin (loaded by ``tests/conftest.py``). Tests that drive a real provider
client (``langchain-openai``, ``llama-index-llms-openai``) take the ``cassette``
fixture, parametrised indirectly with a file name under the test's own
``cassettes/`` folder. Three things keep such a test honest:

* ``record_mode="none"``: a request the cassette does not hold raises instead of
  being sent, and nothing is ever written back to a cassette;
* ``network_guard``: while the test runs, connecting a socket to (or resolving) any
  host that is not loopback raises ``NetworkBlocked``, and every attempt is kept, so
  the test fails at teardown even when a client retried or a resolver fell back on
  the error;
* teardown checks that every interaction of the cassette was played, so a fallback
  test cannot pass because its request missed the cassette.

Requests match on method, URI and ``json_body_subset``: every field the cassette's
request body states must be sent with that value (objects compared field by field,
recursively; lists and scalars exactly); fields the cassette leaves out (``stream``,
``temperature``, the full JSON schema) are not compared. So each cassette pins what
its test is about (the model, the prompt, ``response_format`` and whether it is
strict) without copying every default of the client version installed.

The provider is reached with a dummy key (``DUMMY_OPENAI_KEY``); the environment's
OpenAI variables are removed for the test so no real key or base URL leaks in.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import vcr
from vcr.cassette import Cassette
from vcr.request import Request

DUMMY_OPENAI_KEY = "sk-test-dummy-not-a-real-key"
OPENAI_BASE_URL = "https://api.openai.com/v1"
_OPENAI_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_ORG_ID",
               "OPENAI_ORGANIZATION", "OPENAI_PROJECT", "OPENAI_PROJECT_ID")


class NetworkBlocked(RuntimeError):
    """An offline test tried to reach a host that is not this machine."""


def _is_local(host: object) -> bool:
    if not isinstance(host, str):
        return False
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def network_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse (and remember) every socket connect or name lookup to a non-local host."""
    attempts: list[str] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def refuse(what: str) -> NetworkBlocked:
        attempts.append(what)
        return NetworkBlocked(f"offline test tried to reach the network: {what}")

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            raise refuse(f"connect {address!r}")

    def connect(sock: socket.socket, address: Any) -> None:
        check(sock, address)
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        check(sock, address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and not _is_local(name):
            raise refuse(f"getaddrinfo {name!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts
    assert not attempts, f"offline test tried to reach the network: {attempts}"


def _subset_mismatch(expected: object, actual: object, path: str) -> str | None:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}: expected an object, got {actual!r}"
        for key, value in expected.items():
            if key not in actual:
                return f"{path}.{key}: not sent"
            found = _subset_mismatch(value, actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if expected != actual:
        return f"{path}: cassette has {expected!r}, request sent {actual!r}"
    return None


def _json(request: Request) -> object:
    body = request.body
    text = body.decode() if isinstance(body, bytes) else (body or "")
    return json.loads(text) if text.strip() else None


def json_body_subset(live: Request, stored: Request) -> None:
    """vcrpy matcher: the live JSON body holds every field the cassette's body states."""
    mismatch = _subset_mismatch(_json(stored), _json(live), "body")
    assert mismatch is None, mismatch


_LIVE: list[Request] = []  # requests the client sent during the current test


def _note_live(live: Request, stored: Request) -> None:
    """Not a filter: keeps each live request so a miss can be explained at teardown."""
    if not _LIVE or _LIVE[-1] is not live:
        _LIVE.append(live)


OFFLINE_VCR = vcr.VCR(
    record_mode="none",
    match_on=("note_live", "method", "scheme", "host", "port", "path", "query",
              "json_body_subset"),
    decode_compressed_response=True,
)
OFFLINE_VCR.register_matcher("note_live", _note_live)
OFFLINE_VCR.register_matcher("json_body_subset", json_body_subset)


def _unplayed(played: Cassette) -> str:
    """Which interactions never played, and how the last request differed from each."""
    lines = []
    for i, (stored, _) in enumerate(played.data):
        if played.play_counts[i]:
            continue
        why = "no request was sent"
        if _LIVE:
            live = _LIVE[-1]
            why = (f"{live.method} {live.uri} differs: "
                   f"{_subset_mismatch(_json(stored), _json(live), 'body') or 'method/URI'}")
        lines.append(f"interaction {i} never played ({why})")
    return "; ".join(lines)


@pytest.fixture
def cassette(
    request: pytest.FixtureRequest,
    network_guard: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Cassette]:
    """Play ``cassettes/<request.param>`` next to the test file; every interaction must play.

    Entered here, in a sync fixture, so the cassette file is read before a coroutine
    test's event loop runs (``blockbuster`` would rightly flag the read inside it).
    """
    name = getattr(request, "param", None)
    if not isinstance(name, str):
        raise TypeError('use @pytest.mark.parametrize("cassette", ["<file>.yaml"], indirect=True)')
    path = Path(request.path).parent / "cassettes" / name
    if not path.is_file():
        raise FileNotFoundError(f"no cassette {path}")
    for name in _OPENAI_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_OPENAI_KEY)
    _LIVE.clear()
    with OFFLINE_VCR.use_cassette(str(path)) as played:
        yield played
        assert played.all_played, f"{path.name}: {_unplayed(played)}"
