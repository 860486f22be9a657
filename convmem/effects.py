"""I/O written once: flows yield effects, and one sync and one async driver run them.

Every operation that does I/O (a turn of the façade, a Redis compare-and-set, a
transcript operation, an adapter's write) is written once, as a generator — a *flow* —
that yields what it needs and receives the result. The sync twin of a public method
runs the flow with ``perform``; the async twin with ``aperform``. The twins therefore
share every rule and differ only in how I/O is awaited, with no thread wrapped around
sync code and no method looked up by name.

An ``Effect`` is one call in both forms: ``sync(*args, **kwargs)`` and
``await async_(*args, **kwargs)``; ``call`` builds one and lets mypy check that both
forms take those arguments. Inside a flow, ``result = yield from do(effect)`` gives
the result its type. An exception raised by the I/O is thrown back into the flow at
its ``yield``, so a flow handles what it expects (a version conflict, an unavailable
record) where it happens; anything it does not handle leaves the driver unchanged.

``drive`` / ``adrive`` are the general form, for flows whose requests are not effects
(the transcript's SQL statements, answered by a connection): they are the one place
that steps a generator and catches its ``StopIteration``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

__all__ = ["Effect", "Flow", "adrive", "aperform", "call", "do", "drive", "perform"]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Effect(Generic[T]):
    """One I/O call, in its sync and its async form, with its arguments."""

    sync: Callable[..., T]
    async_: Callable[..., Awaitable[T]]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None

    def run(self) -> T:
        """Make the call with the sync form."""
        return self.sync(*self.args, **(self.kwargs or {}))

    async def arun(self) -> T:
        """Make the call with the async form."""
        return await self.async_(*self.args, **(self.kwargs or {}))


def call(
    sync: Callable[P, T], async_: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
) -> Effect[T]:
    """The effect of calling ``sync`` or awaiting ``async_`` with these arguments."""
    return Effect(sync, async_, args, kwargs or None)


#: A flow: yields effects, receives their results, returns ``T``.
Flow = Generator[Effect[Any], Any, T]


def do(effect: Effect[T]) -> Generator[Effect[T], Any, T]:
    """``result = yield from do(effect)``: one effect, its result typed."""
    result: T = yield effect
    return result


def drive(flow: Generator[R, Any, T], handle: Callable[[R], Any]) -> T:
    """Run ``flow`` to its return value, answering each request with ``handle``.

    An exception from ``handle`` is thrown into the flow where it yielded; the flow is
    closed however the run ends.
    """
    send: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                request = flow.send(send) if error is None else flow.throw(error)
            except StopIteration as stop:
                result: T = stop.value
                return result
            send, error = None, None
            try:
                send = handle(request)
            except Exception as exc:
                error = exc
    finally:
        flow.close()


async def adrive(flow: Generator[R, Any, T], handle: Callable[[R], Awaitable[Any]]) -> T:
    """``drive`` with an awaitable ``handle``."""
    send: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                request = flow.send(send) if error is None else flow.throw(error)
            except StopIteration as stop:
                result: T = stop.value
                return result
            send, error = None, None
            try:
                send = await handle(request)
            except Exception as exc:
                error = exc
    finally:
        flow.close()


def perform(flow: Flow[T]) -> T:
    """Run a flow with the sync form of every effect."""
    return drive(flow, Effect.run)


async def aperform(flow: Flow[T]) -> T:
    """Run a flow with the async form of every effect."""
    return await adrive(flow, Effect.arun)
