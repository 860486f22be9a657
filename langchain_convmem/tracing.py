"""``inline_untraced_spans``: no worker-thread hops for spans nobody records.

``create_agent`` wraps every middleware's ``awrap_model_call`` and ``awrap_tool_call`` in
LangSmith's ``traceable``. Its async wrapper starts and ends the span on a worker thread
(``loop.run_in_executor``), whether or not anything is traced. That is two thread hops
per hook call: an agent turn with one tool call makes six for ``SessionMemoryMiddleware``
(two model steps and one tool call), which the same agent without middleware does not
make. ``bench/spans.py`` measures them: about 0.3 ms of CPU per agent turn, a tenth of
the turn with in-memory stores.

``inline_untraced_spans()`` installs a LangSmith runtime override
(``langsmith.set_runtime_overrides``, LangSmith's hook for runtimes such as Temporal).
The override runs that bookkeeping on the calling thread when the call is not traced
(``langsmith.utils.tracing_is_enabled()`` is false in the call's context, as it is
without ``LANGSMITH_TRACING`` and outside a ``tracing_context``). A traced call goes
on as before: to the override that was installed already, else to LangSmith's default.
LangChain's own tracer runs inline for the same reason: this bookkeeping is Python code
that holds the GIL, so a thread does not run it concurrently anyway.

It changes a process-wide LangSmith setting, so it is never done implicitly: call it
once at start-up. It returns the function that puts the previous override back.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from convmem.errors import ConfigError

__all__ = ["inline_untraced_spans"]

#: LangSmith's override signature: ``(default, ctx, func, /, *args, **kwargs)``.
AioToThread = Callable[..., Awaitable[Any]]

#: The override this module installed, keyed to the one it replaced.
_PREVIOUS = "__convmem_previous__"


def _overrides() -> tuple[Callable[..., None], Callable[[], Any]]:
    """LangSmith's setter (public) and getter (the module that defines the setter)."""
    try:
        import langsmith
        from langsmith._runtime_overrides import get_runtime_overrides
    except ImportError as exc:  # a langsmith older than its runtime overrides
        raise ConfigError(
            "inline_untraced_spans needs langsmith's runtime overrides "
            f"(langsmith.set_runtime_overrides): {exc}; upgrade langsmith"
        ) from exc
    return langsmith.set_runtime_overrides, get_runtime_overrides


def _inline_unless_traced(previous: AioToThread | None) -> AioToThread:
    from langsmith.utils import tracing_is_enabled

    async def aio_to_thread(
        default: AioToThread, ctx: contextvars.Context, func: Callable[..., Any], /,
        *args: Any, **kwargs: Any,
    ) -> Any:
        if not ctx.run(tracing_is_enabled):
            return ctx.run(func, *args, **kwargs)
        if previous is not None:
            return await previous(default, ctx, func, *args, **kwargs)
        return await default(ctx, func, *args, **kwargs)

    setattr(aio_to_thread, _PREVIOUS, previous)
    return aio_to_thread


def inline_untraced_spans() -> Callable[[], None]:
    """Run LangSmith's span bookkeeping inline for calls that are not traced.

    Idempotent. Returns ``restore``, which puts back the override that was installed
    before (none: LangSmith's default), unless another one has replaced this one since.
    """
    set_overrides, get_overrides = _overrides()
    current = get_overrides().aio_to_thread
    if current is not None and hasattr(current, _PREVIOUS):
        ours = current  # installed already: keep it, and what it replaced
    else:
        ours = _inline_unless_traced(current)
        set_overrides(aio_to_thread=ours)

    def restore() -> None:
        if get_overrides().aio_to_thread is ours:
            set_overrides(aio_to_thread=getattr(ours, _PREVIOUS))

    return restore
