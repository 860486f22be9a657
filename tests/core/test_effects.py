"""``convmem.effects``: one flow, run by the sync and the async driver alike."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from convmem.effects import (
    Done,
    Effect,
    Flow,
    Next,
    adrive,
    aperform,
    call,
    do,
    drive,
    perform,
    start,
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
