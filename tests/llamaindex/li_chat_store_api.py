"""Call a chat store through its sync methods or through its async twins, same code."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from blockbuster import blockbuster_ctx

from llamaindex_convmem import ConvMemChatStore

#: BaseChatStore's async names (note ``async_add_message``).
ASYNC_NAMES = {"add_message": "async_add_message"}


class StoreApi:
    """``api.x(...)`` runs ``store.x`` (sync) or the async twin on a private loop."""

    def __init__(self, store: ConvMemChatStore, mode: str) -> None:
        self.store = store
        self.mode = mode
        self.loop = asyncio.new_event_loop() if mode == "async" else None

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if self.loop is None:
            fn: Callable[..., Any] = getattr(self.store, name)
            return fn
        afn = getattr(self.store, ASYNC_NAMES.get(name, "a" + name))
        loop = self.loop

        def call(*args: Any, **kwargs: Any) -> Any:
            return loop.run_until_complete(afn(*args, **kwargs))

        return call

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()


@contextmanager
def store_api(store: ConvMemChatStore, mode: str) -> Iterator[StoreApi]:
    """The API in ``mode``; async calls run under ``blockbuster`` (no blocking on the loop)."""
    api = StoreApi(store, mode)
    try:
        if mode == "async":
            with blockbuster_ctx():
                yield api
        else:
            yield api
    finally:
        api.close()
