"""The transcript's async methods from many event loops, and ``rebase_path``'s equality.

Sync wrappers such as LlamaIndex's ``asyncio_run`` run each call on a fresh loop (in
another thread when a loop is already running). A pooled async engine binds to the
loop that first waits for a connection; before the store kept its pool to one loop
at a time these tests failed with "Queue ... is bound to a different event loop".
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import NewMessage, TranscriptStore


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def one_connection(request: pytest.FixtureRequest) -> Iterator[TranscriptStore]:
    """A store whose pool holds one connection, so concurrent calls must wait for it."""
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    TranscriptStore(url, retention=FOREVER).migrate()
    store = TranscriptStore(url, retention=FOREVER, pool_size=1, max_overflow=0)
    yield store
    asyncio.run(store.aclose())


async def _contend(store: TranscriptStore, tenant: str, thread_id: str) -> None:
    paths = await asyncio.gather(*(store.aactive_path(tenant, thread_id) for _ in range(6)))
    assert all(len(p) == 1 for p in paths)


def test_the_pool_follows_fresh_loops_and_threads(one_connection: TranscriptStore) -> None:
    store = one_connection
    th = store.create_thread("loops")
    store.append("loops", th.id, NewMessage(role="user", content="hi"))
    for _ in range(3):  # each asyncio.run: a new loop, the previous one closed
        asyncio.run(_contend(store, "loops", th.id))

    async def main() -> None:
        await _contend(store, "loops", th.id)
        for _ in range(3):  # a loop in another thread while this one runs
            worker = threading.Thread(target=asyncio.run, args=(_contend(store, "loops", th.id),))
            worker.start()
            await asyncio.to_thread(worker.join)
            await _contend(store, "loops", th.id)

    asyncio.run(main())


def test_rebase_path_compares_extra(one_connection: TranscriptStore) -> None:
    store = one_connection
    th = store.create_thread("extra")
    first = [NewMessage(role="assistant", content="same", extra={"call": 1})]
    store.rebase_path("extra", th.id, first)
    store.rebase_path("extra", th.id, first)
    assert len(store.tree("extra", th.id).messages) == 1
    second = [NewMessage(role="assistant", content="same", extra={"call": 2})]
    (msg,) = store.rebase_path("extra", th.id, second)
    assert msg.extra == {"call": 2}
    assert msg.copy_of is None
    assert len(store.tree("extra", th.id).messages) == 2
