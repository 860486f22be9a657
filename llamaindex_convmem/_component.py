"""How the adapters behave as LlamaIndex components: traced, and never silently pickled.

Tracing. LlamaIndex traces through its instrumentation dispatcher
(``llama_index.core.instrumentation``): a span per call, nested by context, seen by
every span handler an application registers (``SimpleSpanHandler``, Arize Phoenix,
Langfuse, ...). Chat engines and tools get their spans from LlamaIndex's own
``DispatcherSpanMixin`` (``ConvMemChatEngine.chat``, ``ConvMemTool.acall``); memories,
memory blocks and chat stores are plain ``BaseComponent`` s, so ``traced`` wraps their
public methods with the same ``dispatcher.span`` — span ids read
``ConvMemMemory.aget-<uuid>``, nested under the engine's or agent's span.

Pickling. ``BaseComponent.__getstate__`` drops attributes it cannot pickle with only
a log line — a ``ChatMemoryBuffer`` pickled over a store that refuses pickling comes
back with LlamaIndex's default in-memory store and the conversation silently gone.
So a chat store pickles *by reference* (``pickled_by_reference``): its configuration
(``to_dict()``: tenant, masked URL, never a password) and a token naming its live
``TranscriptStore`` in this process. Unpickled in the same process (a copy, a
checkpoint of a workflow's context) it is the same store again; anywhere else the
token names nothing and unpickling raises ``ConfigError`` saying how to rebuild it
(a database connection, and its password, never travel in a pickle). A component
pickled on its own (a memory, a memory block) refuses at pickling time
(``unpicklable``), naming what to do instead.
"""

from __future__ import annotations

import inspect
import uuid
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

# LlamaIndex's public path for it (re-exported without __all__, hence the ignore)
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]

from convmem.errors import ConfigError

__all__ = ["get_dispatcher", "pickled_by_reference", "traced", "unpicklable"]

C = TypeVar("C", bound=type)

#: Methods that are configuration, not work: never spans.
_UNTRACED = frozenset({"class_name", "custom_model_dump", "to_dict", "from_dict", "from_defaults"})


def traced(cls: C) -> C:
    """Give every public method ``cls`` defines a LlamaIndex span."""
    dispatcher = get_dispatcher(cls.__module__)
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or name in _UNTRACED or not inspect.isfunction(member):
            continue
        setattr(cls, name, dispatcher.span(member))
    return cls


def unpicklable(instead: str) -> Callable[[C], C]:
    """Make pickling an instance of the class fail now, naming what to do ``instead``."""

    def apply(cls: C) -> C:
        def __getstate__(self: Any) -> NoReturn:
            raise ConfigError(
                f"{type(self).__name__} cannot be pickled: it holds a live connection "
                f"(a session-state or transcript store). {instead}"
            )

        cls.__getstate__ = __getstate__  # type: ignore[attr-defined]
        return cls

    return apply


# token -> live store, and back; weak both ways: pickling keeps nothing alive
_LIVE: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _token(resource: Any) -> str:
    found = _TOKENS.get(resource)
    if found is None:
        found = _TOKENS.setdefault(resource, uuid.uuid4().hex)
        _LIVE[found] = resource
    return found


def _rebuild(cls: type[Any], data: dict[str, Any], token: str) -> Any:
    live = _LIVE.get(token)
    if live is None:
        given = ("SessionMemory(domain, transcript=TranscriptStore(url, retention=...))"
                 if data.get("view") == "session" else "TranscriptStore(url, retention=...)")
        raise ConfigError(
            f"{cls.__name__}: this pickle refers to a store of another process (or one "
            "since garbage-collected); a database connection does not travel in a pickle. "
            f"Rebuild it there: {cls.__name__}({given}, "
            + ", ".join(f"{k}={v!r}" for k, v in data.items() if k in _REBUILT_FROM) + ")"
        )
    return cls(live, **{k: v for k, v in data.items() if k in _REBUILT_FROM})


#: the serialized fields a chat store is built again from (the rest is derived)
_REBUILT_FROM = ("tenant", "view", "rewrite", "system_prompt")


def pickled_by_reference(cls: C) -> C:
    """Pickle instances as their ``to_dict()`` plus a reference to the live store they
    were built on — the ``TranscriptStore``, or the ``SessionMemory`` of a session-view
    store (see the module docstring)."""

    def __reduce__(self: Any) -> tuple[Any, ...]:
        data = self.to_dict()
        live = self._ops.memory if data.get("view") == "session" else self.transcript
        if data.get("view") == "session":
            data.pop("tenant", None)  # the memory's
        return (_rebuild, (type(self), data, _token(live)))

    cls.__reduce__ = __reduce__  # type: ignore[assignment]
    return cls
