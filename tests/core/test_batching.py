"""``convmem.batching.LoopTurnBatches``: what both stores' batching rests on.

The stores' own tests drive it against real servers (``tests/stores/test_redis_store.py``,
``tests/transcript/test_transcript_postgres.py``); here are its rules by themselves, with
``send`` and ``alone`` recording what they were given.
"""

from __future__ import annotations

import asyncio

import pytest

from convmem.batching import LoopTurnBatches, Queued


class Recorder:
    """``send`` answers each call with its item doubled; ``alone`` with its item negated."""

    def __init__(self, limit: int = 8) -> None:
        self.batches: list[list[int]] = []
        self.alone: list[int] = []
        self.batcher: LoopTurnBatches[int, int] = LoopTurnBatches(self.send, self.one, limit)

    async def send(self, batch: list[Queued[int, int]]) -> None:
        self.batches.append([q.item for q in batch])
        for q in batch:
            q.settle(q.item * 2)

    async def one(self, item: int) -> int:
        self.alone.append(item)
        return -item


async def test_the_calls_of_one_loop_turn_go_out_together() -> None:
    r = Recorder()
    assert await asyncio.gather(*(r.batcher.call(i) for i in range(5))) == [0, 2, 4, 6, 8]
    assert r.batches == [[0, 1, 2, 3, 4]] and r.alone == []


async def test_a_call_alone_in_its_loop_turn_is_made_by_its_caller() -> None:
    r = Recorder()
    assert await r.batcher.call(7) == -7
    assert await r.batcher.call(8) == -8  # the next loop turn: alone again
    assert r.batches == [] and r.alone == [7, 8]


async def test_a_busy_loop_turn_sends_batches_of_at_most_the_limit() -> None:
    r = Recorder(limit=3)
    assert await asyncio.gather(*(r.batcher.call(i) for i in range(7))) == [
        0, 2, 4, 6, 8, 10, 12]
    assert r.batches == [[0, 1, 2], [3, 4, 5], [6]]  # the last one too: a batch of one


async def test_a_caller_cancelled_before_the_send_drops_out() -> None:
    r = Recorder()
    calls = [asyncio.ensure_future(r.batcher.call(i)) for i in range(3)]
    await asyncio.sleep(0)  # queued, not yet sent
    calls[1].cancel()
    done = await asyncio.gather(*calls, return_exceptions=True)
    assert done[0] == 0 and done[2] == 4 and isinstance(done[1], asyncio.CancelledError)
    assert r.batches == [[0, 2]]


async def test_a_send_that_fails_fails_every_caller_of_its_batch() -> None:
    async def send(batch: list[Queued[int, int]]) -> None:
        raise ConnectionError("the server went away")

    async def one(item: int) -> int:
        return item

    batcher: LoopTurnBatches[int, int] = LoopTurnBatches(send, one, 8)
    done = await asyncio.gather(*(batcher.call(i) for i in range(3)), return_exceptions=True)
    assert [type(d) for d in done] == [ConnectionError] * 3


async def test_a_call_the_send_leaves_unanswered_raises_instead_of_hanging() -> None:
    async def send(batch: list[Queued[int, int]]) -> None:
        batch[0].settle(ValueError("its own error"))  # an exception is that caller's
        batch[1].settle(1)

    async def one(item: int) -> int:
        return item

    batcher: LoopTurnBatches[int, int] = LoopTurnBatches(send, one, 8)
    done = await asyncio.gather(*(batcher.call(i) for i in range(3)), return_exceptions=True)
    assert isinstance(done[0], ValueError) and done[1] == 1
    assert isinstance(done[2], RuntimeError) and "unanswered" in str(done[2])


def test_a_limit_below_two_is_refused() -> None:
    async def send(batch: list[Queued[int, int]]) -> None: ...

    async def one(item: int) -> int:
        return item

    with pytest.raises(ValueError, match="at least 2"):
        LoopTurnBatches(send, one, 1)
