"""``convmem state``: one thread's session state on a real Redis (server or cluster),
shown and reset from a shell; an unreachable server or a bad URL is one line, never a
traceback."""

from __future__ import annotations

import json
from datetime import date

import pytest

from convmem import SessionMemory, load_domain
from convmem.cli import main
from convmem.stores import (
    RedisClusterSessionStateStore,
    RedisSessionStateStore,
    SessionStateStore,
)
from convmem.testing.servers import free_port


def _one_turn(store: SessionStateStore, tenant: str, thread_id: str, question: str) -> None:
    """Leave in ``store`` the session state of one CRM turn: what the CLI then shows."""
    memory = SessionMemory(load_domain("crm"), store=store, tenant=tenant)
    memory.begin_turn(thread_id, question, today=date(2026, 11, 30))
    memory.end_turn(thread_id)


@pytest.mark.parametrize(
    "backend",
    [pytest.param("redis", marks=pytest.mark.redis),
     pytest.param("cluster", marks=pytest.mark.cluster)],
)
def test_show_and_reset_a_thread(
    backend: str, key_prefix: str, capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    store: RedisSessionStateStore | RedisClusterSessionStateStore
    if backend == "redis":
        url = str(request.getfixturevalue("redis_url"))
        store = RedisSessionStateStore(url, prefix=key_prefix)
        connect = ["--redis", url, "--prefix", key_prefix]
    else:
        url = str(request.getfixturevalue("redis_cluster_url"))
        store = RedisClusterSessionStateStore(url, prefix=key_prefix)
        connect = ["--cluster", "--redis", url, "--prefix", key_prefix]
    _one_turn(store, "acme:eu", "thread 42", "How is Brightwater Farms doing last quarter?")
    saved = store.load("acme:eu", "thread 42")
    assert saved is not None
    v = saved.version
    base = ["state", *connect, "--tenant", "acme:eu"]

    assert main([*base, "show", "thread 42"]) == 0
    out = capsys.readouterr().out
    assert f"tenant=acme:eu thread_id=thread 42 version={v} turn=1" in out
    assert "Brightwater Farms" in out and "2026-Q3" in out

    assert main([*base, "show", "thread 42", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == v and doc["focus"]["label"] == "Brightwater Farms"

    # another tenant's thread is simply not there
    assert main(["state", *connect, "--tenant", "acme", "show", "thread 42"]) == 1
    assert "no session state for tenant 'acme'" in capsys.readouterr().out

    assert main([*base, "reset", "thread 42"]) == 0
    assert f"deleted (version {v})" in capsys.readouterr().out
    assert store.load("acme:eu", "thread 42") is None
    assert main([*base, "show", "thread 42"]) == 1
    assert "never written, or expired" in capsys.readouterr().out
    assert main([*base, "reset", "thread 42"]) == 0  # resetting nothing is not an error
    store.close()


def test_an_unreachable_redis_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert main(["state", "--redis", url, "--tenant", "t", "--timeout", "0.5", "show", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convmem state: Redis session-state store load") and "failed" in err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["state", "--tenant", "t", "show", "x"], 2, "give --redis URL"),
        (["state", "--redis", "redis://127.0.0.1:6379/0", "show", "x"], 2, "give --tenant T"),
        (["state", "--redis", "redis://127.0.0.1:notaport/0", "--tenant", "t", "show", "x"], 2,
         "malformed Redis URL 'redis://127.0.0.1:notaport/0'"),
        (["state", "--redis", "redis://127.0.0.1:6379/0", "--tenant", "t", "show", "a\nb"], 2,
         "thread_id contains a control character"),
        (["state", "--redis", "redis://127.0.0.1:6379/0", "--tenant", "t", "--prefix", "{x}",
          "show", "x"], 2, "prefix must be non-empty and free of"),
    ],
)
def test_bad_state_arguments_are_one_line(
    argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CONVMEM_REDIS_URL", raising=False)
    monkeypatch.delenv("CONVMEM_TENANT", raising=False)
    assert main(argv) == code
    assert message in capsys.readouterr().err
