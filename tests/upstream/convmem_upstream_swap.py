"""pytest plugin for ``./dev upstream``: run LangChain's own history suites with only the
history factory swapped for ``ConvMemChatMessageHistory`` (record view, on SQLite).

Loaded into a pytest run over the *downloaded* upstream test files (``-p
convmem_upstream_swap``; ``tests/upstream/run.py`` starts it). Per test module, the
names the upstream tests build histories with are rebound to stand-ins that build a
``ConvMemChatMessageHistory`` instead — nothing else in the upstream tests changes:

* langchain-core ``InMemoryChatMessageHistory(messages=...)`` → a history on a fresh
  transcript thread holding those messages. Upstream compares stores with ``==``
  (pydantic field equality on ``messages``); ``ConvMemChatMessageHistory``'s own
  equality is the same (same class, equal ``messages``).
* langchain-postgres ``PostgresChatMessageHistory(table, session_id, sync_connection=
  ... | async_connection=...)`` → the history keyed ``session_id`` in the tenant
  ``pg-<table>``; ``create_tables`` / ``drop_table`` (and their async twins) create
  nothing / delete every thread of that tenant; the suite's connection helpers
  (``syncpg_client`` / ``asyncpg_client``) yield ``None``: the records live in SQLite.

The record is one SQLite file in a temporary folder made at start and removed when
pytest ends, failed or not (``pytest_unconfigure``). The plugin writes one row per test to ``$CONVMEM_UPSTREAM_REPORT`` (outcome, the
failure's last line or the skip reason, and whether the test built a swapped
history: one that never does tests LangChain itself, not our history), which
``run.py`` prints. A test known not to apply is skipped with the reason
(``CANNOT_APPLY``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from convmem.transcript import RetentionPolicy, TranscriptStore
from langchain_convmem import ConvMemChatMessageHistory

#: upstream test id (file::name) -> why it cannot run against a swapped factory
CANNOT_APPLY: dict[str, str] = {}

_STATE: dict[str, Any] = {"used": False}
_STORE: TranscriptStore | None = None
_FOLDER: Path | None = None


def _store() -> TranscriptStore:
    assert _STORE is not None, "the plugin's store is made at session start"
    return _STORE


def pytest_configure(config: pytest.Config) -> None:
    """One migrated SQLite record for the whole run, made before any event loop runs."""
    global _STORE, _FOLDER
    _FOLDER = Path(tempfile.mkdtemp(prefix="convmem-upstream-"))
    _STORE = TranscriptStore(f"sqlite:///{_FOLDER / 'record.db'}",
                             retention=RetentionPolicy(max_age=None, owner="upstream suites"))
    _STORE.migrate()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the record and remove its folder, whatever the run's outcome."""
    global _STORE, _FOLDER
    if _STORE is not None:
        _STORE.engine.dispose()
        _STORE = None
    if _FOLDER is not None:
        shutil.rmtree(_FOLDER, ignore_errors=True)
        _FOLDER = None


class SwappedInMemoryHistory(ConvMemChatMessageHistory):
    """Stands in for ``InMemoryChatMessageHistory(messages=...)``."""

    def __init__(self, messages: Sequence[BaseMessage] | None = None, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"the swap takes only messages=, got {sorted(kwargs)}")
        super().__init__(_store(), f"upstream-{uuid.uuid4().hex}")
        _STATE["used"] = True
        if messages:
            self.add_messages(list(messages))


class SwappedPostgresHistory(ConvMemChatMessageHistory):
    """Stands in for ``PostgresChatMessageHistory(table, session_id, ...)``."""

    def __init__(self, table_name: str, session_id: str, /, *,
                 sync_connection: Any = None, async_connection: Any = None) -> None:
        super().__init__(_store(), session_id, tenant=f"pg-{table_name}")
        _STATE["used"] = True

    @staticmethod
    def create_tables(connection: Any, table_name: str, /) -> None:
        """Nothing to create: the transcript schema is migrated once."""

    @staticmethod
    def drop_table(connection: Any, table_name: str, /) -> None:
        store = _store()
        for thread in store.list_threads(f"pg-{table_name}"):
            store.delete_thread(f"pg-{table_name}", thread.id)

    @staticmethod
    async def acreate_tables(connection: Any, table_name: str, /) -> None:
        """Nothing to create."""

    @staticmethod
    async def adrop_table(connection: Any, table_name: str, /) -> None:
        store = _store()
        for thread in await store.alist_threads(f"pg-{table_name}"):
            await store.adelete_thread(f"pg-{table_name}", thread.id)


@contextlib.contextmanager
def _no_sync_connection() -> Iterator[None]:
    yield None


@contextlib.asynccontextmanager
async def _no_async_connection() -> AsyncIterator[None]:
    yield None


SWAPS: dict[str, Any] = {
    "InMemoryChatMessageHistory": SwappedInMemoryHistory,
    "PostgresChatMessageHistory": SwappedPostgresHistory,
    "syncpg_client": _no_sync_connection,
    "asyncpg_client": _no_async_connection,
}


def _test_id(item: pytest.Item) -> str:
    return f"{Path(str(item.fspath)).name}::{item.name.split('[')[0]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        reason = CANNOT_APPLY.get(_test_id(item))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"cannot apply: {reason}"))


@pytest.fixture(autouse=True)
def _convmem_swap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    module = request.module
    for name, stand_in in SWAPS.items():
        if hasattr(module, name):
            monkeypatch.setattr(module, name, stand_in)
    _STATE["used"] = False
    yield
    _USED[request.node.nodeid] = bool(_STATE["used"])


_USED: dict[str, bool] = {}
_RESULTS: dict[str, dict[str, Any]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Per test: the worst outcome over its phases, the first failure's last line."""
    found = _RESULTS.setdefault(report.nodeid, {"outcome": "passed", "detail": ""})
    if report.skipped and found["outcome"] == "passed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        found.update(outcome="skipped", detail=str(reason).removeprefix("Skipped: "))
    elif report.failed and found["outcome"] != "failed":
        text = str(report.longreprtext or "").strip().splitlines()
        where = "" if report.when == "call" else f" (in {report.when})"
        found.update(outcome="failed", detail=(text[-1] if text else "failed") + where)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the per-test report ``run.py`` prints (``CONVMEM_UPSTREAM_REPORT``)."""
    target = os.environ.get("CONVMEM_UPSTREAM_REPORT")
    if not target:
        return
    rows = [{"test": nodeid, **found, "swap_used": _USED.get(nodeid)}
            for nodeid, found in _RESULTS.items()]
    Path(target).write_text(json.dumps(rows, indent=1), encoding="utf-8")
