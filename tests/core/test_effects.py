"""``convmem.effects``: one flow, run by the sync and the async driver alike."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from convmem.effects import Effect, Flow, aperform, call, do, drive, perform


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
