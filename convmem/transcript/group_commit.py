"""Group commit: the one-statement operations of one event-loop turn, committed together.

Under many concurrent sessions, each turn's commit points are one autocommitted
statement each (``ops.Alone``), and each used to cost a pool checkout, two autocommit
switches, a write, a wake-up, a read and a WAL flush of its own. ``GroupCommit`` queues
the statements that the loop's tasks issue during one turn of the event loop and sends
them on one pooled psycopg connection in pipeline mode (``BEGIN``, the lock bound, the
statements, ``COMMIT``, one Sync): one round trip, one transaction, one commit. The
transaction is explicit because a pipeline's implicit one would commit, at the Sync,
the statements sent before psycopg refused a later one's parameters. In ``bench``'s measure this cut the client CPU of a
statement about 3.5 times and more than doubled the statements a second.

Every statement is still atomic, and now so is the batch. A caller is answered only
once the batch has committed, so nothing is acknowledged before it is durable. If any
statement fails (a constraint, a deadlock, a lock it waited on past ``LOCK_WAIT``, a
parameter psycopg cannot send), the whole batch is rolled back, and every statement is then run again alone, as it
would have been without batching: each caller gets its own rows or its own error, and
one tenant's failing statement never fails another's. ``LOCK_WAIT`` bounds how long one
statement that waits on a row lock (a long deletion of its thread, say) can hold the
others of its batch back. A connection that breaks mid-batch fails every caller with
the error it would have raised alone, and the connection is discarded.

This module only schedules (on ``convmem.batching.LoopTurnBatches``, which the Redis
store's command batches share); the driver (``engine._DriverAlone``: ``arun`` for one
statement, ``_acommit_together`` for a batch) does the talking.

A caller cancelled before its batch is sent drops out of it. Once the batch is sent, the
statement commits with the others (as a statement already sent would), and the reply
is dropped. A statement with no other in its loop turn is run by its caller, exactly as
unbatched (a cancelled call then discards its connection mid-statement).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from convmem.batching import LoopTurnBatches, Queued

if TYPE_CHECKING:
    from convmem.transcript.engine import DriverStatement, Rows

#: Most statements in one batch; a busier loop turn sends several batches at once.
BATCH_LIMIT = 64
#: The longest a batched statement waits for a row lock before the batch is rolled back
#: and its statements run alone (where a statement waits as long as it must).
LOCK_WAIT = "100ms"

#: A statement and its parameters.
Call = tuple["DriverStatement", Any]
#: One statement by itself.
Alone = Callable[["DriverStatement", Any], Awaitable["Rows"]]
#: A batch in one transaction: per statement its rows (or, when the connection broke,
#: the error it would raise alone); ``None`` when the batch was rolled back.
Together = Callable[[Sequence[Call]], Awaitable["Sequence[Rows | Exception] | None"]]


class GroupCommit:
    """The batches of one pooled async engine (see the module docstring)."""

    def __init__(self, alone: Alone, together: Together) -> None:
        self._alone = alone
        self._together = together
        self._batches: LoopTurnBatches[Call, Rows] = LoopTurnBatches(
            self._send, self._run_alone, BATCH_LIMIT)

    async def run(self, stmt: DriverStatement, params: Any) -> Rows:
        """``stmt``'s rows, once the batch it joins has committed."""
        return await self._batches.call((stmt, params))

    async def _run_alone(self, call: Call) -> Rows:
        return await self._alone(*call)

    async def _send_alone(self, queued: Queued[Call, Rows]) -> None:
        try:
            rows = await self._alone(*queued.item)
        except Exception as exc:
            queued.settle(exc)
        else:
            queued.settle(rows)

    async def _send(self, batch: list[Queued[Call, Rows]]) -> None:
        outcome = await self._together([q.item for q in batch])
        if outcome is None:  # rolled back: each statement again, by itself
            await asyncio.gather(*(self._send_alone(q) for q in batch))
            return
        for queued, result in zip(batch, outcome, strict=True):
            queued.settle(result)
