"""The ``./dev upstream`` swap plugin, offline: a test module written like LangChain's
own suites builds ``InMemoryChatMessageHistory``; under the plugin it gets a
``ConvMemChatMessageHistory`` on SQLite, and the per-test report says what ran, what
failed (and why) and whether the swap was exercised, and the plugin's temporary
record is gone afterwards, failures or not. (The real suites need the
network to download: ``./dev upstream``.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

UPSTREAM_LIKE = '''
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, HumanMessage


def test_swapped():
    history = InMemoryChatMessageHistory(messages=[HumanMessage("hi")])
    assert type(history).__name__ == "SwappedInMemoryHistory"
    history.add_message(AIMessage("hello"))
    assert history == InMemoryChatMessageHistory(messages=[HumanMessage("hi"), AIMessage("hello")])


async def test_swapped_async():
    history = InMemoryChatMessageHistory()
    await history.aadd_messages([HumanMessage("a"), HumanMessage("b")])
    assert [m.text for m in await history.aget_messages()] == ["a", "b"]


def test_not_about_histories():
    assert InMemoryChatMessageHistory is not None


def test_failing():
    assert InMemoryChatMessageHistory().messages == [HumanMessage("never added")]
'''


@pytest.mark.sqlite
@pytest.mark.slow
def test_the_swap_plugin_runs_and_reports(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "report.json"
    scratch = tmp_path / "tmp"  # the plugin's record folder goes here and must not stay
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    pytester.makepyfile(test_upstream_like=UPSTREAM_LIKE)
    pytester.makeini("[pytest]\nasyncio_mode = auto\n")
    monkeypatch.setenv("CONVMEM_UPSTREAM_REPORT", str(report))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(ROOT / "tests" / "upstream"), str(ROOT), os.environ.get("PYTHONPATH"))
        if p))
    result = pytester.runpytest_subprocess("-p", "convmem_upstream_swap", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    rows = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())}
    assert {k: (r["outcome"], r["swap_used"]) for k, r in rows.items()} == {
        "test_swapped": ("passed", True),
        "test_swapped_async": ("passed", True),
        "test_not_about_histories": ("passed", False),
        "test_failing": ("failed", True),
    }
    assert "AssertionError" in rows["test_failing"]["detail"]
    assert list(scratch.iterdir()) == []  # removed although a test failed
