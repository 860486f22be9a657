"""The offline guard the provider-cassette tests stand on: it must refuse, loudly."""

from __future__ import annotations

import socket

import httpx
import pytest
from vcr.cassette import Cassette
from vcr.errors import CannotOverwriteExistingCassetteException

from tests.offline_http import NetworkBlocked


def test_guard_refuses_a_non_local_connect_and_lookup(network_guard: list[str]) -> None:
    with pytest.raises(NetworkBlocked, match=r"203\.0\.113\.7"):
        socket.create_connection(("203.0.113.7", 443), timeout=1)  # TEST-NET-3
    with pytest.raises(NetworkBlocked, match=r"api\.openai\.com"):
        socket.getaddrinfo("api.openai.com", 443)
    assert len(network_guard) == 2
    network_guard.clear()  # seen and expected: the guard's own teardown check stays quiet


def test_guard_lets_loopback_through(network_guard: list[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=1):
            pass
    assert network_guard == []


@pytest.mark.parametrize("cassette", ["empty.yaml"], indirect=True)
def test_a_request_the_cassette_lacks_is_refused(cassette: Cassette) -> None:
    with pytest.raises(CannotOverwriteExistingCassetteException):
        httpx.post("https://api.openai.com/v1/chat/completions", json={"model": "x"})
    assert cassette.play_count == 0
