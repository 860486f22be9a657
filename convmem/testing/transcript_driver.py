"""The typed driver ``TranscriptStoreSpec`` calls a store through, and the suite's helpers.

``await api(store.append, tenant, thread_id, message)`` calls ``store.append`` in a
worker thread (sync mode, as a sync web app would) or awaits ``store.aappend`` on the
event loop (async mode, under blockbuster, so a blocking call in an ``a*`` method
fails). The arguments are checked by mypy against the sync method's signature. The
twin comes from ``TWINS``, each store method listed beside its async twin: mypy checks
that each pair takes the same arguments and returns the same type, and
``tests/transcript/test_store_twins.py`` that every method is listed with its own twin;
the twin is then the store's own (a subclass's override included), never a name built
from a string.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Concatenate, ParamSpec, TypeVar

from convmem.testing._modes import MODES, Mode
from convmem.transcript import (
    AttachmentPart,
    ModelInput,
    NewMessage,
    RetentionPolicy,
    TextPart,
    TranscriptStore,
)

P = ParamSpec("P")
T = TypeVar("T")

FOREVER = RetentionPolicy(max_age=None, owner="convmem-tests")

Sync = Callable[..., Any]
Async = Callable[..., Awaitable[Any]]


def _twin(
    sync: Callable[Concatenate[TranscriptStore, P], T],
) -> Callable[[Callable[Concatenate[TranscriptStore, P], Awaitable[T]]], tuple[Sync, Async]]:
    """``_twin(sync)(async_)``: a store method and its async twin. Curried so that mypy
    solves the arguments and result from ``sync`` alone and then checks ``async_``
    against them (given both at once, it would settle for what the two share)."""

    def with_twin(async_: Callable[Concatenate[TranscriptStore, P], Awaitable[T]]) -> tuple[Sync, Async]:
        return sync, async_

    return with_twin


_S = TranscriptStore
#: ``TranscriptStore``'s methods (the functions on the class) and their async twins.
TWINS: dict[Sync, Async] = dict([
    _twin(_S.active_path)(_S.aactive_path),
    _twin(_S.add_derived)(_S.aadd_derived),
    _twin(_S.append)(_S.aappend),
    _twin(_S.archive_through)(_S.aarchive_through),
    _twin(_S.begin_turn_record)(_S.abegin_turn_record),
    _twin(_S.bind_turn)(_S.abind_turn),
    _twin(_S.branches)(_S.abranches),
    _twin(_S.close)(_S.aclose),
    _twin(_S.complete_turn)(_S.acomplete_turn),
    _twin(_S.create_thread)(_S.acreate_thread),
    _twin(_S.delete_thread)(_S.adelete_thread),
    _twin(_S.edit)(_S.aedit),
    _twin(_S.export_thread)(_S.aexport_thread),
    _twin(_S.export_thread_to)(_S.aexport_thread_to),
    _twin(_S.export_user_view)(_S.aexport_user_view),
    _twin(_S.fork_thread)(_S.afork_thread),
    _twin(_S.get_attachment)(_S.aget_attachment),
    _twin(_S.get_messages)(_S.aget_messages),
    _twin(_S.get_or_create_thread)(_S.aget_or_create_thread),
    _twin(_S.find_thread)(_S.afind_thread),
    _twin(_S.get_thread)(_S.aget_thread),
    _twin(_S.import_thread)(_S.aimport_thread),
    _twin(_S.index_pending)(_S.aindex_pending),
    _twin(_S.list_derived)(_S.alist_derived),
    _twin(_S.list_threads)(_S.alist_threads),
    _twin(_S.rebase_path)(_S.arebase_path),
    _twin(_S.reconstruct_model_input)(_S.areconstruct_model_input),
    _twin(_S.redact)(_S.aredact),
    _twin(_S.regenerate)(_S.aregenerate),
    _twin(_S.search)(_S.asearch),
    _twin(_S.set_active_leaf)(_S.aset_active_leaf),
    _twin(_S.set_retention)(_S.aset_retention),
    _twin(_S.sweep)(_S.asweep),
    _twin(_S.switch)(_S.aswitch),
    _twin(_S.tree)(_S.atree),
])


_TWIN_NAMES = {sync.__name__: twin.__name__ for sync, twin in TWINS.items()}


def twin_name(method: Sync) -> str:
    """The name ``TWINS`` lists beside ``method``'s; looked up on the store under test, it
    is that store's own async twin (a backend's override included)."""
    name = _TWIN_NAMES.get(getattr(method, "__name__", ""))
    if name is None:
        raise TypeError(f"{method!r} is not a TranscriptStore method with an async twin")
    return name


def async_twin(store: TranscriptStore, method: Sync) -> Async:
    """``store``'s async twin of ``method`` (see ``twin_name``)."""
    twin: Async = getattr(store, twin_name(method))
    return twin


class Clock:
    """A settable clock (sweeps are tested without sleeping)."""

    def __init__(self) -> None:
        self.now = datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now


class TranscriptDriver:
    """Calls one store through its sync methods (in a worker thread) or their ``a`` twins."""

    def __init__(self, store: TranscriptStore, mode: Mode) -> None:
        self.store = store
        self.mode = mode

    async def __call__(self, method: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``method`` (a sync method of ``self.store``), or its async twin, with these
        arguments."""
        if getattr(method, "__self__", None) is not self.store:
            raise TypeError(f"{method!r} is not a method of the store under test")
        if self.mode == "sync":
            return await asyncio.to_thread(method, *args, **kwargs)
        twin = async_twin(self.store, method)
        assert inspect.iscoroutinefunction(twin), twin
        result: T = await twin(*args, **kwargs)
        return result

    @property
    def engine_events(self) -> Any:
        """The engine whose events see this mode's statements."""
        return self.store.engine if self.mode == "sync" else self.store.async_engine.sync_engine

    async def close(self) -> None:
        """Dispose of the pools (the async one on this loop)."""
        if self.mode == "async":
            await self.store.async_engine.dispose()
        await asyncio.to_thread(self.store.engine.dispose)


#: One call for ``Api.concurrently``: a store method (bound), its arguments, its keywords.
Call = tuple[Sync, tuple[Any, ...], dict[str, Any]]


class Api:
    """For sync test code (property tests, restarts): calls ``store.x`` (sync mode), or runs
    ``store.ax`` on a loop of its own (async mode). The conformance suite uses the typed
    ``TranscriptDriver`` instead."""

    def __init__(self, store: TranscriptStore, mode: str) -> None:
        self.store = store
        self.mode = mode
        self.loop = asyncio.new_event_loop() if mode == "async" else None

    def run(self, coro: Any) -> Any:
        """Run a coroutine on this API's loop."""
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn: Sync = getattr(self.store, name)
        if self.loop is None:
            return fn
        twin = async_twin(self.store, fn)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.run(twin(*args, **kwargs))

        return call

    def concurrently(self, calls: list[Call]) -> list[Any]:
        """Run many calls at once: threads in sync mode, ``gather`` in async mode."""
        if self.loop is None:
            with ThreadPoolExecutor(max_workers=len(calls)) as pool:
                futures = [pool.submit(fn, *a, **k) for fn, a, k in calls]
                return [f.result() for f in futures]

        async def all_at_once() -> list[Any]:
            twins = [async_twin(self.store, fn)(*a, **k) for fn, a, k in calls]
            return list(await asyncio.gather(*twins))

        return list(self.run(all_at_once()))

    def close(self) -> None:
        """Dispose of pools (the async one on its own loop)."""
        if self.loop is not None:
            self.run(self.store.async_engine.dispose())
            self.loop.close()
        self.store.engine.dispose()


def user(text: str, **kw: Any) -> NewMessage:
    """A user message."""
    return NewMessage(role="user", content=text, **kw)


def bot(text: str, **kw: Any) -> NewMessage:
    """An assistant message."""
    return NewMessage(role="assistant", content=text, **kw)


def sha256(data: bytes) -> str:
    """An attachment's digest."""
    return hashlib.sha256(data).hexdigest()


async def build_rich_thread(api: TranscriptDriver, tenant: str) -> str:
    """A thread using every part of the record: branches, a turn with an attachment and a
    system prompt, a regeneration, a derived memory, a redaction, an archive mark."""
    s = api.store
    th = await api(
        s.create_thread, tenant, key="rich", title="Rich", metadata={"x": [1, 2.5, None]}
    )
    q, a = await api(s.append, tenant, th.id, [user("héllo ✓"), bot("hi")])
    await api(s.edit, tenant, th.id, q.id, "hello again")
    pdf = AttachmentPart(media_type="application/pdf", name="r.pdf", data=bytes(range(256)))
    tr = await api(
        s.begin_turn_record,
        tenant,
        th.id,
        NewMessage(role="user", content=[TextPart("see file"), pdf], extra={"k": {"v": 1}}),
        ModelInput(rendered_block="block", state_snapshot={"s": 1}, system_prompt="sys"),
    )
    out = await api(s.complete_turn, tenant, th.id, tr.turn_id, [bot("seen")])
    await api(s.regenerate, tenant, th.id, out[-1].id, "seen it")
    await api(s.add_derived, tenant, th.id, "fact", "likes files", [tr.user_message.id])
    await api(s.redact, tenant, th.id, a.id, actor="ops", reason="test")
    await api(s.archive_through, tenant, th.id, 2)
    return str(th.id)


def rich_thread(store: TranscriptStore, tenant: str) -> str:
    """``build_rich_thread`` through the sync methods, from sync code."""
    return asyncio.run(build_rich_thread(TranscriptDriver(store, "sync"), tenant))


__all__ = [
    "FOREVER",
    "MODES",
    "TWINS",
    "Api",
    "Call",
    "Clock",
    "Mode",
    "TranscriptDriver",
    "async_twin",
    "bot",
    "build_rich_thread",
    "rich_thread",
    "sha256",
    "twin_name",
    "user",
]
