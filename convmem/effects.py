"""I/O written once: flows yield effects, and one sync and one async driver run them.

Every operation that does I/O (a turn of the façade, a Redis compare-and-set, a
transcript operation, an adapter's write) is written once, as a generator — a *flow* —
that yields what it needs and receives the result. The sync twin of a public method
runs the flow with ``perform``; the async twin with ``aperform``. The twins therefore
share every rule and differ only in how I/O is awaited, with no thread wrapped around
sync code and no method looked up by name.

An ``Effect`` is one call in both forms: ``sync(*args, **kwargs)`` and
``await async_(*args, **kwargs)``; ``call`` builds one and lets mypy check that both
forms take those arguments (it settles for what the two forms share, so
``tests/test_one_way_to_do_io.py`` pins that every pair is ``x.name, x.aname``). Inside a flow, ``result = yield from do(effect)`` gives
the result its type. An exception raised by the I/O is thrown back into the flow at
its ``yield``, so a flow handles what it expects (a version conflict, an unavailable
record) where it happens; anything it does not handle leaves the driver unchanged.

``drive`` / ``adrive`` are the general form, for flows whose requests are not effects
(the transcript's SQL statements, answered by a connection): they are the one place
that steps a generator and catches its ``StopIteration``. ``start`` takes a flow's
first request (``Next``) or its value (``Done``) before it is driven, for a driver
that chooses how to answer by what is asked first (the transcript store runs a lone
statement outside a transaction); ``drive(flow, handle, started=...)`` goes on from it.

``together(*effects)`` is one effect made of several independent calls, so their waits
on I/O overlap (one wait instead of one per call, e.g. the session state's save and the
record's commit point 1): the async driver awaits them concurrently; the sync one makes
the first on the calling thread and each other one meanwhile on a helper thread (in a
copy of the caller's context), or after it when no helper was free to start it. Each
call's failure is its own: the result holds, per call, its value or the exception it
raised (``Failed``), for the flow to take apart with ``value_of``.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

__all__ = [
    "Done",
    "Effect",
    "Failed",
    "Flow",
    "Next",
    "adrive",
    "aperform",
    "call",
    "do",
    "drive",
    "perform",
    "start",
    "together",
    "value_of",
]

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


@dataclass(frozen=True, slots=True)
class Failed:
    """One call of a ``together`` effect that raised ``error``."""

    error: Exception


def value_of(outcome: T | Failed) -> T:
    """A ``together`` call's value, or its exception raised again."""
    if isinstance(outcome, Failed):
        raise outcome.error
    return outcome


def _outcome(effect: Effect[Any]) -> Any:
    try:
        return effect.run()
    except Exception as exc:
        return Failed(exc)


async def _aoutcome(effect: Effect[Any]) -> Any:
    try:
        return await effect.arun()
    except Exception as exc:
        return Failed(exc)


#: Threads that make a sync ``together``'s later calls while the caller makes its first
#: (a call waits on a server, so a few threads serve many concurrent turns).
_HELPERS = 16
_helpers: ThreadPoolExecutor | None = None
_helpers_lock = threading.Lock()


def _helper_pool() -> ThreadPoolExecutor:
    global _helpers
    with _helpers_lock:
        if _helpers is None:
            _helpers = ThreadPoolExecutor(_HELPERS, thread_name_prefix="convmem-together")
        return _helpers


def _forget_helpers() -> None:
    """In a forked child: the parent's helper threads are not there."""
    global _helpers, _helpers_lock
    _helpers, _helpers_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def _run_all(*effects: Effect[Any]) -> tuple[Any, ...]:
    if len(effects) < 2:
        return tuple(_outcome(e) for e in effects)
    pool = _helper_pool()
    later = [pool.submit(contextvars.copy_context().run, _outcome, e) for e in effects[1:]]
    first = _outcome(effects[0])
    # a call no helper has started yet is made here instead: never slower than in turn
    return (first, *(_outcome(e) if f.cancel() else f.result()
                     for e, f in zip(effects[1:], later, strict=True)))


async def _arun_all(*effects: Effect[Any]) -> tuple[Any, ...]:
    return tuple(await asyncio.gather(*(_aoutcome(e) for e in effects)))


def together(*effects: Effect[Any]) -> Effect[tuple[Any, ...]]:
    """Independent calls as one effect, their waits overlapping: awaited concurrently by
    ``aperform``; by ``perform``, the first on this thread and the others on helper
    threads meanwhile. The result has, per call in order, its value or ``Failed``."""
    return Effect(_run_all, _arun_all, effects)


#: A flow: yields effects, receives their results, returns ``T``.
Flow = Generator[Effect[Any], Any, T]


def do(effect: Effect[T]) -> Generator[Effect[T], Any, T]:
    """``result = yield from do(effect)``: one effect, its result typed."""
    result: T = yield effect
    return result


@dataclass(frozen=True, slots=True)
class Next(Generic[R]):
    """A flow stopped at ``request``, waiting for its answer."""

    request: R


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """A flow that returned ``value``."""

    value: T


def _resume(flow: Generator[R, Any, T], answer: Any, error: Exception | None) -> Next[R] | Done[T]:
    """Send ``answer`` into ``flow`` (or throw ``error`` at its ``yield``): where it stops next."""
    try:
        request = flow.send(answer) if error is None else flow.throw(error)
    except StopIteration as stop:
        value: T = stop.value
        return Done(value)
    return Next(request)


def start(flow: Generator[R, Any, T]) -> Next[R] | Done[T]:
    """Run ``flow`` to its first request (``Next``), or to its end if it asks for nothing.

    For a driver that chooses how to answer by what is asked first; it then hands the
    ``Next`` to ``drive``/``adrive`` as ``started``, and must close a flow it does not
    drive after all.
    """
    return _resume(flow, None, None)


def drive(
    flow: Generator[R, Any, T], handle: Callable[[R], Any], *, started: Next[R] | None = None
) -> T:
    """Run ``flow`` to its return value, answering each request with ``handle``.

    An exception from ``handle`` is thrown into the flow where it yielded; the flow is
    closed however the run ends. ``started``: the flow's first request, already taken
    by ``start``.
    """
    try:
        step = started if started is not None else start(flow)
        while isinstance(step, Next):
            try:
                answer = handle(step.request)
            except Exception as exc:
                step = _resume(flow, None, exc)
            else:
                step = _resume(flow, answer, None)
        return step.value
    finally:
        flow.close()


async def adrive(
    flow: Generator[R, Any, T],
    handle: Callable[[R], Awaitable[Any]],
    *,
    started: Next[R] | None = None,
) -> T:
    """``drive`` with an awaitable ``handle``."""
    try:
        step = started if started is not None else start(flow)
        while isinstance(step, Next):
            try:
                answer = await handle(step.request)
            except Exception as exc:
                step = _resume(flow, None, exc)
            else:
                step = _resume(flow, answer, None)
        return step.value
    finally:
        flow.close()


def perform(flow: Flow[T]) -> T:
    """Run a flow with the sync form of every effect."""
    return drive(flow, Effect.run)


async def aperform(flow: Flow[T]) -> T:
    """Run a flow with the async form of every effect."""
    return await adrive(flow, Effect.arun)
