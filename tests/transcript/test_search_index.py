"""``search_index="inline" | "deferred"``: where a message's search text goes when it is
written, and how queued text reaches the index (the next search, ``index_pending``).

On both backends: a search sees every message whatever wrote it (appends, both commit
points, edits, forks, imports) in either mode; the sweep moves rows in batches, and
indexers running at once never index a row twice; erasure (redaction, deletion,
retention) reaches queued rows. The conformance suite runs in the other mode too
(``tests/transcript/test_transcript_sqlite.py``, ``test_transcript_postgres.py``).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.testing.transcript_driver import FOREVER
from convmem.transcript import ModelInput, NewMessage, RetentionPolicy, TranscriptStore


def _store(url: str, mode: str, migrated: Callable[[str], TranscriptStore]) -> TranscriptStore:
    migrated(url).engine.dispose()  # the run's schema, at head once
    return TranscriptStore(url, retention=FOREVER, search_index=mode)


@pytest.fixture(params=["inline", "deferred"])
def store(
    request: pytest.FixtureRequest,
    transcript_url: str,
    migrated_store: Callable[[str], TranscriptStore],
) -> Iterator[TranscriptStore]:
    """A store in each mode on each backend."""
    s = _store(transcript_url, request.param, migrated_store)
    yield s
    asyncio.run(s.aclose())


@pytest.fixture
def deferred(
    transcript_url: str, migrated_store: Callable[[str], TranscriptStore]
) -> Iterator[TranscriptStore]:
    """A store that queues search text, on each backend."""
    s = _store(transcript_url, "deferred", migrated_store)
    yield s
    asyncio.run(s.aclose())


def _rows(store: TranscriptStore, sql: str, tenant: str) -> list[tuple[Any, ...]]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql), {"t": tenant})]


def queued(store: TranscriptStore, tenant: str) -> list[tuple[Any, ...]]:
    """(thread_id, message_id) of ``tenant``'s queued rows: keys, the text stays in the
    message."""
    return _rows(store, "SELECT thread_id, message_id FROM convmem_index_queue "
                        "WHERE tenant = :t", tenant)


def indexed(store: TranscriptStore, tenant: str) -> list[tuple[Any, ...]]:
    """(thread_id, message_id, body) of ``tenant``'s indexed rows."""
    return _rows(store, "SELECT thread_id, message_id, body FROM convmem_search "
                        "WHERE tenant = :t", tenant)


def user(text: str) -> NewMessage:
    return NewMessage(role="user", content=text)


def bot(text: str) -> NewMessage:
    return NewMessage(role="assistant", content=text)


def test_search_index_must_be_inline_or_deferred(tmp_path: Any) -> None:
    for bad in ("lazy", None, 1):
        with pytest.raises(ConfigError, match="search_index must be 'inline' or 'deferred'"):
            TranscriptStore(f"sqlite:///{tmp_path / 'x.db'}", retention=FOREVER,
                            search_index=bad)  # type: ignore[arg-type]


def test_search_sees_every_message_whatever_wrote_it(store: TranscriptStore, tenant: str) -> None:
    th = store.create_thread(tenant)
    written = store.append(tenant, th.id, user("alpha zebra"))
    written += store.append(tenant, th.id, [user("bravo zebra"), bot("charlie zebra")])
    turn = store.begin_turn_record(
        tenant, th.id, user("delta zebra"), ModelInput(rendered_block="", model="m")
    )
    written += [turn.user_message]
    written += store.complete_turn(tenant, th.id, turn.turn_id, [bot("echo zebra")])
    written += [store.edit(tenant, th.id, written[0].id, "foxtrot zebra")]
    fork = store.fork_thread(tenant, th.id, written[2].id)
    other = store.import_thread(tenant, store.export_thread(tenant, th.id), new_id=True)
    in_threads = {
        t: {m.id for m in store.tree(tenant, t).messages} for t in (th.id, fork.id, other.id)
    }
    everything = set().union(*in_threads.values())
    assert len(everything) == len(written) + 3 + len(written)
    if store.search_index == "deferred":
        assert indexed(store, tenant) == []
        assert {m for _, m in queued(store, tenant)} == everything
        # a thread's search indexes that thread's rows only
        hits = store.search(tenant, "zebra", thread_id=fork.id, limit=100)
        assert {h.message_id for h in hits} == in_threads[fork.id]
        assert {m for _, m in queued(store, tenant)} == everything - in_threads[fork.id]
    else:
        assert queued(store, tenant) == []
    hits = asyncio.run(store.asearch(tenant, "zebra", limit=100))
    assert {h.message_id for h in hits} == everything
    assert {h.text for h in hits if h.message_id == written[-1].id} == {"foxtrot zebra"}
    assert queued(store, tenant) == []
    assert sorted(m for _, m, _ in indexed(store, tenant)) == sorted(everything)


def test_a_search_sees_what_a_store_of_the_other_mode_queued(
    transcript_url: str, migrated_store: Callable[[str], TranscriptStore], tenant: str
) -> None:
    """Modes can meet on one database (an application queues, ``convmem threads search``
    runs with the default): every search indexes what is queued first."""
    writer = _store(transcript_url, "deferred", migrated_store)
    reader = _store(transcript_url, "inline", migrated_store)
    try:
        th = writer.create_thread(tenant)
        (msg,) = writer.append(tenant, th.id, user("quebec words"))
        assert [h.message_id for h in reader.search(tenant, "quebec")] == [msg.id]
        assert queued(reader, tenant) == []
    finally:
        writer.engine.dispose()
        reader.engine.dispose()


def test_index_pending_moves_queued_rows_in_batches(
    deferred: TranscriptStore, tenant: str
) -> None:
    store = deferred
    th = store.create_thread(tenant)
    msgs = store.append(tenant, th.id, [user(f"kilo word{i}") for i in range(25)])
    elsewhere = tenant + "-b"
    store.append(elsewhere, store.create_thread(elsewhere).id, user("kilo elsewhere"))
    batches: list[int] = []

    def count(conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if "convmem_index_queue" in statement and statement.lstrip().startswith(
            ("WITH", "DELETE")
        ):
            batches.append(1)

    sa.event.listen(store.engine, "before_cursor_execute", count)
    try:
        assert store.index_pending(tenant, limit=10, batch=4) == 10
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", count)
    assert len(batches) == 3  # 4 + 4 + 2
    assert len(queued(store, tenant)) == 15 and len(indexed(store, tenant)) == 10
    assert store.index_pending(tenant, batch=4) == 15
    assert queued(store, tenant) == [] and len(queued(store, elsewhere)) == 1
    assert store.index_pending(tenant) == 0
    assert asyncio.run(store.aindex_pending()) >= 1  # every tenant's, the other one's too
    assert queued(store, elsewhere) == []
    hits = store.search(tenant, "kilo", limit=100)
    assert sorted(h.message_id for h in hits) == sorted(m.id for m in msgs)
    for bad in ({"batch": 0}, {"limit": -1}, {"batch": 1.5}):
        with pytest.raises(ConfigError, match=r"index_pending: (batch|limit) must be"):
            store.index_pending(tenant, **bad)


def test_concurrent_indexers_never_index_a_row_twice(
    deferred: TranscriptStore, tenant: str
) -> None:
    """Two sweeps and two searches at once over 240 queued rows: each row is indexed
    exactly once (a second copy would break the index's key, or show in the count)."""
    store = deferred
    ids: set[str] = set()
    for t in range(3):
        th = store.create_thread(tenant)
        ids |= {m.id for m in store.append(tenant, th.id, [user(f"lima {t} {i}") for i in range(80)])}
    start = threading.Barrier(4)
    errors: list[BaseException] = []
    moved: list[int] = []
    found: list[int] = []

    def run(job: Callable[[], None]) -> None:
        try:
            start.wait()
            job()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    jobs = [
        lambda: moved.append(store.index_pending(batch=7)),
        lambda: moved.append(store.index_pending(tenant, batch=11)),
        lambda: found.append(len(store.search(tenant, "lima", limit=1000))),
        lambda: found.append(len(store.search(tenant, "lima", limit=1000))),
    ]
    workers = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert found == [240, 240]  # a search waits for rows another indexer holds
    assert 0 <= sum(moved) <= 240
    assert queued(store, tenant) == []
    rows = indexed(store, tenant)
    assert len(rows) == 240 and {m for _, m, _ in rows} == ids


def test_erasure_reaches_queued_rows(deferred: TranscriptStore, tenant: str) -> None:
    store = deferred
    secret = f"secret-{uuid.uuid4().hex[:8]}"
    th = store.create_thread(tenant)
    (q, a) = store.append(tenant, th.id, [user(f"my card is {secret}"), bot("noted")])
    fork = store.fork_thread(tenant, th.id, a.id)  # copies, queued as well
    copy = next(m.id for m in store.tree(tenant, fork.id).messages if m.text == q.text)
    assert {q.id, copy} <= {m for _, m in queued(store, tenant)}

    def anywhere() -> list[str]:
        return [b for _, _, b in indexed(store, tenant) if secret in b]

    receipt = store.redact(tenant, th.id, q.id, actor="dpo", reason="request")
    assert len(receipt.message_ids) == 2  # the message and its copy in the fork
    assert {q.id, copy}.isdisjoint(m for _, m in queued(store, tenant))
    store.index_pending(tenant)
    assert anywhere() == []
    assert store.search(tenant, secret) == []
    # deletion and the retention sweep take a thread's queued rows with it
    gone = store.create_thread(tenant)
    store.append(tenant, gone.id, user("november words"))
    store.delete_thread(tenant, gone.id)
    old = store.create_thread(tenant)
    store.append(tenant, old.id, user("oscar words"))
    store.set_retention(tenant, old.id, RetentionPolicy(max_age=timedelta(days=1), owner="x"))
    later = store.get_thread(tenant, old.id).updated_at + timedelta(days=2)
    assert store.sweep(tenant, dry_run=False, now=later).expired == ((tenant, old.id),)
    assert {t for t, _ in queued(store, tenant)} <= {th.id, fork.id}
    store.delete_thread(tenant, fork.id)
    store.delete_thread(tenant, th.id)
    assert queued(store, tenant) == [] and indexed(store, tenant) == []


def test_the_indexer_reads_each_queued_message_in_its_own_tenant(
    deferred: TranscriptStore, tenant: str
) -> None:
    """The queue holds keys, and ids are per tenant: a thread imported with its ids
    (its text changed) into a tenant whose name holds separators is queued under the
    same message ids. Each tenant's index gets its own message's text, by the
    every-tenant sweep and by a search's drain alike; a redaction in one leaves the
    other's copy indexed."""
    store, other = deferred, f"{tenant}:eu/{{x}}"
    ours, theirs = f"ours{uuid.uuid4().hex[:8]}", f"theirs{uuid.uuid4().hex[:8]}"
    th = store.create_thread(tenant)
    (said,) = store.append(tenant, th.id, user(f"card {ours}"))
    document = store.export_thread(tenant, th.id).replace(ours, theirs)
    copy = store.import_thread(other, document)
    assert copy.id == th.id and {m for _, m in queued(store, other)} == {said.id}
    assert store.index_pending() >= 2  # every tenant's queue
    assert [b for _, _, b in indexed(store, tenant)] == [f"card {ours}"]
    assert [b for _, _, b in indexed(store, other)] == [f"card {theirs}"]
    assert store.search(tenant, theirs) == [] and store.search(other, ours) == []
    store.redact(tenant, th.id, said.id, actor="dpo", reason="request")
    (again,) = store.append(other, copy.id, user(f"again {theirs}"))
    assert {h.message_id for h in store.search(other, theirs, limit=5)} == {again.id, said.id}
    assert store.search(tenant, ours) == []


def test_a_queued_row_whose_message_is_gone_leaves_the_queue_unindexed(
    deferred: TranscriptStore, tenant: str
) -> None:
    """A queue row planted for a message that is not there (or in another thread)
    indexes nothing and does not stay: the sweep and a search end it alike."""
    store = deferred
    th = store.create_thread(tenant)
    (said,) = store.append(tenant, th.id, user("lima words"))
    elsewhere = store.create_thread(tenant)
    with store.engine.begin() as conn:
        for thread_id, message_id in ((th.id, "no-such-message"), (elsewhere.id, said.id)):
            conn.execute(sa.text("INSERT INTO convmem_index_queue (tenant, thread_id,"
                                 " message_id) VALUES (:t, :th, :m)"),
                         {"t": tenant, "th": thread_id, "m": message_id})
    assert store.index_pending(tenant) == 3
    assert queued(store, tenant) == []
    assert [(t, m) for t, m, _ in indexed(store, tenant)] == [(th.id, said.id)]
    assert [h.thread_id for h in store.search(tenant, "lima")] == [th.id]
