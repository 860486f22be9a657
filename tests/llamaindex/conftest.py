"""Fixtures for the LlamaIndex adapter tests.

``_convmem_blockbuster`` overrides the plugin's fixture of the same name for this
directory only: the same check, plus one exemption for a blocking call inside
LlamaIndex itself (see below), so our own code is still checked on every path.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from blockbuster import blockbuster_ctx
from llama_index.core.utils import get_tokenizer

from convmem.domain import Domain, load_domain
from convmem.session import SessionMemory
from convmem.tokens import encoding
from convmem.transcript import TranscriptStore

# One-off loads done before any coroutine test runs: they read files once per process,
# which is not per-turn blocking (LlamaIndex engines load their tokenizer on construction).
get_tokenizer()
encoding()

DATA = Path(__file__).resolve().parents[1] / "data"
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


@pytest.fixture(scope="session")
def crm() -> Domain:
    domain = load_domain(DATA / "domains" / "crm.json")
    # The core builds the catalog (and reads its stopword file) lazily, on the first
    # resolve; build it here so no coroutine test does that file read on its loop.
    assert domain.catalog is not None
    return domain


@pytest.fixture
def session(crm: Domain) -> SessionMemory:
    return SessionMemory(crm, clock=lambda: TODAY)


# --------------------------------------------------------------------------- transcript


@pytest.fixture
def tenant() -> str:
    """A tenant no other test uses (the PostgreSQL database is shared by the run)."""
    return f"li-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def recorded(crm: Domain, transcript: TranscriptStore, tenant: str) -> SessionMemory:
    """A ``SessionMemory`` recording into the ``transcript`` (SQLite or PostgreSQL)."""
    return SessionMemory(crm, transcript=transcript, clock=lambda: TODAY, tenant=tenant)
