"""``LoopTurnBatches``: the calls that an event loop's tasks make during one turn of the
loop, sent together.

Under many concurrent sessions each turn of the event loop resumes many tasks, and
each may issue a call to the same server. Queuing those calls until the loop turn ends
and sending them as one batch (one pooled connection, one write, one read) replaces a
checkout, a write, a wake-up and a read per call by one per loop turn. Both stores do
this: the Redis state store pipelines its commands (``stores.redis_wire.CommandBatches``)
and the transcript commits its one-statement operations together
(``transcript.group_commit.GroupCommit``). This module is the part they share: the
queue, the batches, and who answers whom.

A call made alone in its loop turn is not batched: its caller makes it, exactly as
unbatched. A caller cancelled before its batch is sent drops out of it; once the batch
is sent, the call runs (as a call already written does) and its answer is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["LoopTurnBatches", "Queued"]

Item = TypeVar("Item")
Result = TypeVar("Result")

#: The answer to a call alone in its loop turn: its caller makes it.
_ALONE: Any = object()


@dataclass(slots=True)
class Queued(Generic[Item, Result]):
    """One call waiting for its batch: what to send, and where its answer goes."""

    item: Item
    reply: asyncio.Future[Result]

    def settle(self, result: Result | BaseException) -> None:
        """Answer the caller (nothing, when it was cancelled meanwhile)."""
        if self.reply.done():
            return
        if isinstance(result, BaseException):
            self.reply.set_exception(result)
        else:
            self.reply.set_result(result)


class LoopTurnBatches(Generic[Item, Result]):
    """Calls of one loop turn in batches of at most ``limit``: ``send`` answers every
    call of a batch (``Queued.settle``; a call it leaves unanswered raises ``RuntimeError``
    in its caller), ``alone`` makes a call that had no other in its loop turn."""

    def __init__(self, send: Callable[[list[Queued[Item, Result]]], Awaitable[None]],
                 alone: Callable[[Item], Awaitable[Result]], limit: int) -> None:
        if limit < 2:
            raise ValueError(f"LoopTurnBatches: limit must be at least 2, got {limit}")
        self._send = send
        self._alone = alone
        self._limit = limit
        self._queued: list[Queued[Item, Result]] = []
        self._sending: set[asyncio.Task[None]] = set()  # strong references while sending

    async def call(self, item: Item) -> Result:
        """``item``'s answer, once the batch it joins is sent (or it was sent alone)."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Result] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._send_queued)
        self._queued.append(Queued(item, reply))
        answer = await reply
        if answer is _ALONE:  # nobody to batch with: the caller's own call, as unbatched
            return await self._alone(item)
        return answer

    def _send_queued(self) -> None:
        queued, self._queued = self._queued, []
        live = [q for q in queued if not q.reply.done()]  # cancelled: not sent
        if len(live) == 1:
            live[0].reply.set_result(_ALONE)
            return
        for start in range(0, len(live), self._limit):
            task = asyncio.ensure_future(self._sent(live[start:start + self._limit]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _sent(self, batch: list[Queued[Item, Result]]) -> None:
        try:
            await self._send(batch)
        except Exception as exc:  # ``send``'s own failure is every caller's
            for queued in batch:
                queued.settle(exc)
        except BaseException:  # cancelled (the loop is closing): so are its callers
            for queued in batch:
                queued.reply.cancel()
            raise
        else:
            for queued in batch:
                queued.settle(RuntimeError("a batched call was left unanswered"))
