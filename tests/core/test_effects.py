"""``convmem.effects``: one flow, run by the sync and the async driver alike."""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Generator
from concurrent.futures import Future
from typing import Any

import pytest

from convmem import effects
from convmem.effects import (
    Done,
    Effect,
    Failed,
    Flow,
    Next,
    adrive,
    aperform,
    call,
    do,
    drive,
    perform,
    start,
    together,
    value_of,
)


class Box:
    """An I/O target with sync and async twins that log which form ran."""

    def __init__(self) -> None:
        self.value = 0
        self.log: list[str] = []

    def add(self, n: int, *, times: int = 1) -> int:
        self.log.append("sync")
        if n < 0:
            raise ValueError("negative")
        self.value += n * times
        return self.value

    async def aadd(self, n: int, *, times: int = 1) -> int:
        self.log.append("async")
        if n < 0:
            raise ValueError("negative")
        self.value += n * times
        return self.value


def adding(box: Box, *amounts: int) -> Flow[list[int]]:
    seen = []
    for n in amounts:
        try:
            seen.append((yield from do(call(box.add, box.aadd, n, times=2))))
        except ValueError:
            seen.append(-1)  # the flow handles what it expects, where it happened
    return seen


def test_both_drivers_run_the_same_flow_with_their_own_form() -> None:
    sync_box, async_box = Box(), Box()
    assert perform(adding(sync_box, 1, -5, 3)) == [2, -1, 8]
    assert sync_box.log == ["sync"] * 3
    import asyncio

    assert asyncio.run(aperform(adding(async_box, 1, -5, 3))) == [2, -1, 8]
    assert async_box.log == ["async"] * 3


async def test_an_unhandled_error_leaves_the_driver_and_closes_the_flow() -> None:
    closed: list[bool] = []

    def flow(box: Box) -> Flow[int]:
        try:
            return (yield from do(call(box.add, box.aadd, -1)))
        finally:
            closed.append(True)

    with pytest.raises(ValueError, match="negative"):
        perform(flow(Box()))
    with pytest.raises(ValueError, match="negative"):
        await aperform(flow(Box()))
    assert closed == [True, True]


def test_drive_answers_requests_that_are_not_effects() -> None:
    def statements() -> Generator[str, int, int]:
        total = 0
        for sql in ("select 1", "select 22"):
            total += yield sql
        return total

    assert drive(statements(), lambda sql: int(sql.split()[1])) == 23


def test_an_effect_without_keywords_runs() -> None:
    box = Box()
    effect: Effect[int] = call(box.add, box.aadd, 4)
    assert effect.kwargs is None
    assert effect.run() == 4


def statements(log: list[str]) -> Generator[str, int, int]:
    """A flow of requests that are not effects; logs how it ended."""
    total = 0
    try:
        for sql in ("select 1", "select 22"):
            total += yield sql
    finally:
        log.append("closed")
    return total


def answer(sql: str) -> int:
    return int(sql.split()[1])


async def aanswer(sql: str) -> int:
    return answer(sql)


async def test_start_peeks_the_first_request_and_the_drivers_go_on_from_it() -> None:
    for run_async in (False, True):
        log: list[str] = []
        flow = statements(log)
        first = start(flow)
        assert first == Next("select 1") and log == []  # nothing answered yet
        assert isinstance(first, Next)
        if run_async:
            assert await adrive(flow, aanswer, started=first) == 23
        else:
            assert drive(flow, answer, started=first) == 23
        assert log == ["closed"]


def test_start_returns_the_value_of_a_flow_that_asks_for_nothing() -> None:
    def nothing() -> Generator[str, int, str]:
        return "no I/O"
        yield "never"  # a generator all the same

    assert start(nothing()) == Done("no I/O")


async def test_a_refusal_of_a_later_request_is_thrown_into_the_flow_at_its_yield() -> None:
    def only_the_first(sql: str) -> int:
        if sql != "select 1":
            raise RuntimeError(f"refused {sql!r}")
        return 1

    async def aonly_the_first(sql: str) -> int:
        return only_the_first(sql)

    for run_async in (False, True):
        log: list[str] = []
        flow = statements(log)
        first = start(flow)
        assert isinstance(first, Next)
        with pytest.raises(RuntimeError, match="refused 'select 22'"):
            if run_async:
                await adrive(flow, aonly_the_first, started=first)
            else:
                drive(flow, only_the_first, started=first)
        assert log == ["closed"]


# ---------------------------------------------------------------- together

CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("CALLER", default="none")


class Meeting:
    """Sync calls that return only once both have started (a barrier), and say on which
    thread and in which context each ran."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=5)

    def meet(self, name: str) -> tuple[str, bool, str]:
        if name == "broken":
            raise ValueError("broken call")
        self.barrier.wait()
        return name, threading.current_thread() is threading.main_thread(), CALLER.get()

    async def ameet(self, name: str) -> tuple[str, bool, str]:
        return name, True, CALLER.get()


def meeting(m: Meeting, *names: str) -> Flow[tuple[Any, ...]]:
    return (yield from do(together(*(call(m.meet, m.ameet, n) for n in names))))


def test_the_sync_driver_makes_a_together_s_calls_at_once() -> None:
    """The first on the calling thread, the other meanwhile on a helper thread in the
    caller's context: each returns only once both have started."""
    token = CALLER.set("turn 7")
    try:
        first, second = perform(meeting(Meeting(), "save", "commit"))
    finally:
        CALLER.reset(token)
    assert value_of(first) == ("save", True, "turn 7")
    assert value_of(second) == ("commit", False, "turn 7")


def test_a_together_s_calls_fail_each_on_their_own_in_the_sync_driver() -> None:
    m = Meeting()
    m.barrier = threading.Barrier(1)  # nobody to wait for
    first, second = perform(meeting(m, "broken", "commit"))
    assert isinstance(first, Failed) and str(first.error) == "broken call"
    assert value_of(second)[0] == "commit"
    with pytest.raises(ValueError, match="broken call"):
        value_of(first)


def test_a_call_no_helper_started_is_made_on_the_calling_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All helpers busy: the caller makes the later call itself once the first is done."""

    class Busy:
        def submit(self, *_args: Any) -> Future[Any]:
            return Future()  # queued, never started

    monkeypatch.setattr(effects, "_helper_pool", Busy)
    m = Meeting()
    m.barrier = threading.Barrier(1)
    first, second = perform(meeting(m, "save", "commit"))
    assert value_of(first)[:2] == ("save", True) and value_of(second)[:2] == ("commit", True)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_forked_child_starts_its_own_helpers() -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    perform(meeting(Meeting(), "save", "commit"))  # the parent's helpers exist
    pid = os.fork()
    if pid == 0:  # the child: its together still meets, on a helper of its own
        try:
            _, second = perform(meeting(Meeting(), "save", "commit"))
            os._exit(0 if value_of(second)[1] is False else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
