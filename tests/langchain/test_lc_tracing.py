"""``inline_untraced_spans``: the middleware's hook spans without worker-thread hops.

A real ``create_agent`` with ``SessionMemoryMiddleware`` and a tool, run with
``ainvoke``; the event loop's default executor counts what is handed to it. Without
the override LangSmith starts and ends each hook span there (two hops per hook call),
with it an untraced turn hands it nothing; a traced call (``tracing_context``) still
goes to the executor, or to the override installed before.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import langsmith
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langsmith._runtime_overrides import get_runtime_overrides
from lc_fakes import ScriptedChatModel, call

from convmem.session import SessionMemory
from langchain_convmem import SessionMemoryMiddleware, inline_untraced_spans


@tool
async def lookup_customer(name: str) -> str:
    """Look up one customer by name (async: a sync tool would run on the executor)."""
    return json.dumps({"id": "C-1080", "name": "Brightwater Farms", "city": "Fresno"})


class CountingExecutor(ThreadPoolExecutor):
    """The loop's default executor, counting the calls handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
def executor() -> Iterator[CountingExecutor]:
    pool = CountingExecutor()
    yield pool
    pool.shutdown(wait=True)


@pytest.fixture(autouse=True)
def no_override() -> Iterator[None]:
    """Each test starts and ends with LangSmith's default (no override installed)."""
    before = get_runtime_overrides().aio_to_thread
    langsmith.set_runtime_overrides()
    yield
    langsmith.set_runtime_overrides(aio_to_thread=before)


def _agent(memory: SessionMemory) -> Any:
    model = ScriptedChatModel(responses=[
        call("lookup_customer", "c1", name="Brightwater Farms"),
        AIMessage("Brightwater Farms, Fresno."),
    ])
    return create_agent(model, [lookup_customer], system_prompt="You are a CRM assistant.",
                        middleware=[SessionMemoryMiddleware(memory)])


async def _turn(memory: SessionMemory, executor: CountingExecutor) -> Any:
    asyncio.get_running_loop().set_default_executor(executor)
    out = await _agent(memory).ainvoke(
        {"messages": [HumanMessage("Pull up Brightwater Farms.")]},
        {"configurable": {"thread_id": "t-1"}},
    )
    return out["messages"][-1].text


async def test_langsmith_hops_to_a_thread_for_every_hook_span_by_default(
    memory: SessionMemory, executor: CountingExecutor
) -> None:
    assert await _turn(memory, executor) == "Brightwater Farms, Fresno."
    # (LangSmith's behaviour, pinned: when this fails, the override may have become moot)
    # two model steps and one tool call, each span started and ended on the executor
    assert executor.submitted == 6


async def test_an_untraced_turn_hands_the_executor_nothing(
    memory: SessionMemory, executor: CountingExecutor
) -> None:
    restore = inline_untraced_spans()
    try:
        assert await _turn(memory, executor) == "Brightwater Farms, Fresno."
        assert executor.submitted == 0
        state = await memory.aget_state("t-1")
        assert state is not None and state.focus is not None  # the turn did its work
    finally:
        restore()
    assert get_runtime_overrides().aio_to_thread is None


@pytest.mark.filterwarnings("ignore::langsmith.utils.LangSmithMissingAPIKeyWarning")
def test_a_traced_call_goes_to_the_override_installed_before(
    executor: CountingExecutor,
) -> None:
    """(A plain test running its own loop: a traced span makes LangSmith read its
    profile file on the loop, with or without an override, which blockbuster refuses.)"""
    seen: list[str] = []

    async def theirs(default: Any, ctx: contextvars.Context, func: Any, /, *a: Any,
                     **kw: Any) -> Any:
        seen.append(getattr(func, "__name__", type(func).__name__))
        return await default(ctx, func, *a, **kw)

    @langsmith.traceable
    async def step(x: int) -> int:
        return x + 1

    async def body() -> None:
        asyncio.get_running_loop().set_default_executor(executor)
        assert await step(1) == 2  # untraced: inline, neither theirs nor the executor
        assert seen == [] and executor.submitted == 0
        with langsmith.tracing_context(enabled="local"):  # traced, kept in this process
            assert await step(2) == 3
        assert len(seen) == 2 and executor.submitted == 2  # the span's start and end

    langsmith.set_runtime_overrides(aio_to_thread=theirs)
    restore = inline_untraced_spans()
    ours = get_runtime_overrides().aio_to_thread
    inline_untraced_spans()  # idempotent: still the one override
    assert get_runtime_overrides().aio_to_thread is ours
    asyncio.run(body())
    restore()
    assert get_runtime_overrides().aio_to_thread is theirs


def test_restore_leaves_a_later_override_alone() -> None:
    restore = inline_untraced_spans()

    async def later(default: Any, ctx: Any, func: Any, /, *a: Any, **kw: Any) -> Any:
        return await default(ctx, func, *a, **kw)

    langsmith.set_runtime_overrides(aio_to_thread=later)
    restore()
    assert get_runtime_overrides().aio_to_thread is later
