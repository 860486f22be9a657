"""``ThreadIds``: the key -> thread id cache the façade and the LlamaIndex chat stores
share, and its one rule for a thread erased by another process."""

from __future__ import annotations

import pytest

from convmem.effects import Flow, call, do, perform
from convmem.transcript import ThreadNotFound, TranscriptStore
from convmem.transcript.thread_ids import ThreadIds


def _messages(store: TranscriptStore, tenant: str, tid: str) -> Flow[str]:
    yield from do(call(store.active_path, store.aactive_path, tenant, tid))
    return tid


def test_a_key_is_looked_up_once_and_kept(transcript: TranscriptStore, tenant: str) -> None:
    ids = ThreadIds()
    first = perform(ids.lookup(transcript, tenant, "k"))
    assert first == transcript.get_or_create_thread(tenant, "k").id
    transcript.delete_thread(tenant, first)
    assert perform(ids.lookup(transcript, tenant, "k")) == first  # kept: no read


def test_the_same_key_in_two_tenants_is_two_threads(
    transcript: TranscriptStore, tenant: str
) -> None:
    ids = ThreadIds()
    mine = perform(ids.lookup(transcript, tenant, "a:b"))
    theirs = perform(ids.lookup(transcript, tenant + ":a", "b"))
    assert mine != theirs
    assert perform(ids.lookup(transcript, tenant, "a:b")) == mine


def test_a_kept_thread_erased_elsewhere_is_looked_up_again_once(
    transcript: TranscriptStore, tenant: str
) -> None:
    ids = ThreadIds()
    old = perform(ids.lookup(transcript, tenant, "k"))
    transcript.delete_thread(tenant, old)  # another process
    ran = perform(ids.on_thread(transcript, tenant, "k", lambda t: _messages(transcript, tenant, t)))
    assert ran != old
    assert perform(ids.lookup(transcript, tenant, "k")) == ran


def test_a_freshly_read_thread_that_is_gone_is_not_retried(
    transcript: TranscriptStore, tenant: str
) -> None:
    ids = ThreadIds()
    calls: list[str] = []

    def gone(tid: str) -> Flow[str]:
        calls.append(tid)
        raise ThreadNotFound(f"thread {tid!r} not found")
        yield  # a flow

    with pytest.raises(ThreadNotFound):
        perform(ids.on_thread(transcript, tenant, "k", gone))
    assert len(calls) == 1


def test_the_cache_is_bounded(transcript: TranscriptStore, tenant: str) -> None:
    ids = ThreadIds(kept=2)
    first = perform(ids.lookup(transcript, tenant, "k1"))
    perform(ids.lookup(transcript, tenant, "k2"))
    perform(ids.lookup(transcript, tenant, "k3"))  # full: starts over
    transcript.delete_thread(tenant, first)
    assert perform(ids.lookup(transcript, tenant, "k1")) != first  # read again
