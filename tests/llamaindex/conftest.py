"""Fixtures for the LlamaIndex adapter tests (``crm``, ``tenant`` and ``transcript`` are
``tests/conftest.py``'s).

``_convmem_blockbuster`` overrides the plugin's fixture of the same name for this
directory only: the same check, plus one exemption for a blocking call inside
LlamaIndex itself (see below), so our own code is still checked on every path.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import datetime

import pytest
from blockbuster import blockbuster_ctx
from llama_index.core.utils import get_tokenizer

from convmem.domain import Domain
from convmem.session import SessionMemory
from convmem.tokens import encoding
from convmem.transcript import TranscriptStore

# One-off loads done before any coroutine test runs: they read files once per process,
# which is not per-turn blocking (LlamaIndex engines load their tokenizer on construction).
get_tokenizer()
encoding()

TODAY = datetime(2026, 11, 30, 12, 0)


@pytest.fixture(autouse=True)
def _convmem_blockbuster(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail any coroutine test that blocks the event loop."""
    if inspect.iscoroutinefunction(request.function):
        with blockbuster_ctx() as bb:
            # LlamaIndex's own blocking, not ours: in 0.14.25 the async response synthesizer
            # counts tokens with the sync ``ChatMessage.estimate_tokens``, which runs
            # ``asyncio_run`` on a worker thread and joins it on the event loop.
            for name in ("threading.Lock.acquire", "threading.Lock.acquire_lock"):
                bb.functions[name].can_block_in("llama_index/core/async_utils.py", "asyncio_run")
            yield
    else:
        yield


@pytest.fixture
def session(crm: Domain) -> SessionMemory:
    return SessionMemory(crm, clock=lambda: TODAY)


# --------------------------------------------------------------------------- transcript


@pytest.fixture
def recorded(crm: Domain, transcript: TranscriptStore, tenant: str) -> SessionMemory:
    """A ``SessionMemory`` recording into the ``transcript`` (SQLite or PostgreSQL)."""
    return SessionMemory(crm, transcript=transcript, clock=lambda: TODAY, tenant=tenant)
