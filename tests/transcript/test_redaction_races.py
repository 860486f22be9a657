"""A redaction against what races it, on SQLite and PostgreSQL, through the sync
methods and their async twins: commit point 1 waiting for the thread's lock, another
redaction of the same copies, an import bringing a copy back.

Commit point 1 checks that the messages its model input quotes are still intact,
under its thread's lock. A redaction locks every thread whose rows it rewrites
(forks carrying copies included), so one that commits while the turn waits is always
seen. The fork cases that edit (the transactional path, which reads the quoted
messages without row locks) failed before: the redaction locked only the thread it
was called on, and the turn on the fork recorded a block quoting the copy it was
erasing. Two redactions of one copy family, called from either side, take those
locks in one order and both complete. An import whose copy names a redacted original
is refused (it failed before: a fork exported before the redaction brought the text
back), and one racing the redaction waits for it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from convmem.effects import drive
from convmem.testing.transcript_driver import Api
from convmem.transcript import (
    ImportRefused,
    ModelInput,
    NewMessage,
    QuotedRedacted,
    ThreadNotFound,
    TranscriptStore,
    ops,
)
from convmem.transcript.engine import _answer

SECRET = "Which card ends in 4242?"

_WAITING = sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                   " AND datname = current_database()")


def _waiting_on_a_lock(store: TranscriptStore, turn: threading.Thread) -> None:
    """Until a statement of this database waits for a lock (PostgreSQL) or ``turn``
    has ended (it did not wait: its outcome tells); SQLite's waiting cannot be seen
    from outside: a pause instead."""
    if store.dialect != "postgresql":
        time.sleep(0.3)
        return
    deadline = time.monotonic() + 20
    with store.engine.connect() as watch:
        while turn.is_alive() and not watch.execute(_WAITING).scalar():
            assert time.monotonic() < deadline, "commit point 1 neither waited nor ended"
            watch.rollback()
            time.sleep(0.01)


def _held(store: TranscriptStore, op: ops.Op[Any]) -> Iterator[Any]:
    """Run ``op`` in a write transaction and keep it open (its locks held) until the
    generator is resumed: then commit."""
    with store.engine.connect() as conn:
        conn.execution_options(convmem_write=True)
        with conn.begin():
            yield drive(op, _answer(conn.execute))


class _Call(threading.Thread):
    """``call()`` in a thread of its own; ``result()`` returns or raises its outcome."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._call = call
        self._out: dict[str, Any] = {}
        self.start()

    def run(self) -> None:
        try:
            self._out["value"] = self._call()
        except BaseException as exc:  # handed to the test
            self._out["error"] = exc

    def result(self) -> Any:
        self.join(30)
        assert not self.is_alive(), "the call did not end"
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]


def _turn(store: TranscriptStore, sync: bool, *args: Any, **kw: Any) -> _Call:
    """Commit point 1 by ``begin_turn_record`` or, in an event loop of its own,
    ``abegin_turn_record``."""
    return _Call((lambda: store.begin_turn_record(*args, **kw)) if sync else (
        lambda: asyncio.run(store.abegin_turn_record(*args, **kw))))


def _conversation(
    store: TranscriptStore, tenant: str, where: str
) -> tuple[str, str, str, list[str]]:
    """A thread that asked ``SECRET`` and answered, twice, and a fork of it: the thread
    and message the redaction is called on, and the thread of the next turn with its
    path (ids; the first is the question there, the original or its copy). ``where``:
    both in the thread (``same thread``); the original redacted, the turn on the fork
    (``fork``); the fork's copy redacted, the turn on the original (``origin``)."""
    th = store.create_thread(tenant)
    said = store.append(tenant, th.id, [
        NewMessage(role="user", content=SECRET),
        NewMessage(role="assistant", content="The Visa."),
        NewMessage(role="user", content="And its limit?"),
        NewMessage(role="assistant", content="$5,000."),
    ])
    fork = store.fork_thread(tenant, th.id, said[-1].id).id
    on_fork = [m.id for m in store.active_path(tenant, fork)]
    on_th = [m.id for m in said]
    if where == "same thread":
        return th.id, said[0].id, th.id, on_th
    if where == "fork":
        return th.id, said[0].id, fork, on_fork
    return fork, on_fork[0], th.id, on_th


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("edit", [False, True], ids=["follows", "edits"])
@pytest.mark.parametrize("where", ["same thread", "fork", "origin"])
def test_a_redaction_committing_while_commit_point_one_waits_is_seen(
    transcript: TranscriptStore, sync: bool, edit: bool, where: str
) -> None:
    """The redaction holds its locks; the turn, quoting the message, waits; the
    redaction commits: the turn writes nothing and names the message."""
    store = transcript
    tenant = f"race-{uuid.uuid4().hex[:8]}"
    redact_in, asked, turn_in, path = _conversation(store, tenant, where)
    quoted = path[0]
    redaction = _held(store, ops.redact(store._ctx, tenant, redact_in, asked, "dpo",
                                        "erasure request", "[redacted]"))
    receipt = next(redaction)
    assert quoted in receipt.message_ids
    turn = _turn(
        store, sync, tenant, turn_in, NewMessage(role="user", content="Is it still active?"),
        ModelInput(rendered_block=f'Asked: "{SECRET}"', quoted_message_ids=[quoted]),
        parent_id=path[1] if edit else ops.ACTIVE)
    _waiting_on_a_lock(store, turn)
    next(redaction, None)  # commit
    with pytest.raises(QuotedRedacted) as refused:
        turn.result()
    assert refused.value.message_ids == [quoted]
    assert [m.id for m in store.active_path(tenant, turn_in)] == path  # nothing written
    assert SECRET not in store.export_thread(tenant, turn_in)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_another_write_committing_while_commit_point_one_waits_leaves_the_turn_whole(
    transcript: TranscriptStore, sync: bool
) -> None:
    """What commits while the turn waits redacts nothing it quotes (an append; a
    redaction of a message it does not quote): the turn is recorded, quoting it."""
    store = transcript
    tenant = f"race-{uuid.uuid4().hex[:8]}"
    th, quoted, _, path = _conversation(store, tenant, "same thread")
    for op in (
        ops.append(store._ctx, tenant, th, [NewMessage(role="user", content="Hello?")],
                   ops.ACTIVE, True, None),
        ops.redact(store._ctx, tenant, th, path[3], "dpo", "request", "[redacted]"),
    ):
        held = _held(store, op)
        next(held)
        turn = _turn(
            store, sync, tenant, th, NewMessage(role="user", content="Is it still active?"),
            ModelInput(rendered_block=f'Asked: "{SECRET}"', quoted_message_ids=[quoted]))
        _waiting_on_a_lock(store, turn)
        assert turn.is_alive()  # it waited
        next(held, None)
        record = turn.result()
        made = store.reconstruct_model_input(tenant, th, record.turn_id)
        assert SECRET in made.rendered_block


def _at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Each call on a thread of its own, all released together: their results, or the
    first error raised."""
    start = threading.Barrier(len(calls))
    out: list[dict[str, Any]] = [{} for _ in calls]

    def run(call: Callable[[], Any], into: dict[str, Any]) -> None:
        start.wait()
        try:
            into["value"] = call()
        except BaseException as exc:  # handed to the test
            into["error"] = exc

    threads = [threading.Thread(target=run, args=pair, daemon=True)
               for pair in zip(calls, out, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a call did not end"
    for got in out:
        if "error" in got:
            raise got["error"]
    return [got["value"] for got in out]


def test_redactions_of_one_copy_family_from_both_sides_at_once_both_complete(
    transcript: TranscriptStore,
) -> None:
    """One redaction called on the thread, another on its fork, each rewriting rows in
    both: they take the threads' locks in one order, so neither deadlocks the other
    (on PostgreSQL a cycle would abort one with ``DeadlockDetected``)."""
    store = transcript
    for _ in range(8):
        tenant = f"race-{uuid.uuid4().hex[:8]}"
        th, asked, fork, on_fork = _conversation(store, tenant, "fork")
        receipts = _at_once(
            lambda t=tenant, th=th, m=asked: store.redact(t, th, m, actor="dpo", reason="r"),
            lambda t=tenant, f=fork, m=on_fork[1]: store.redact(t, f, m, actor="dpo", reason="r"),
        )
        assert [len(r.message_ids) for r in receipts] == [2, 2]  # each: it and its copy
        assert SECRET not in store.export_thread(tenant, fork)
        assert "The Visa." not in store.export_thread(tenant, th)


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, transcript: TranscriptStore) -> Iterator[Api]:
    api = Api(transcript, request.param)
    yield api
    api.close()


def test_a_fork_exported_before_a_redaction_cannot_bring_the_copy_back(api: Api) -> None:
    """The fork is exported (a backup), deleted, its original redacted; importing the
    backup is refused at the copy, and nothing is written."""
    tenant = f"race-{uuid.uuid4().hex[:8]}"
    th, asked, fork, _ = _conversation(api.store, tenant, "fork")
    backup = api.export_thread(tenant, fork)
    api.delete_thread(tenant, fork)
    api.redact(tenant, th, asked, actor="dpo", reason="erasure request")
    with pytest.raises(ImportRefused) as refused:
        api.import_thread(tenant, backup)
    assert refused.value.path == "$.messages[0].copy_of"
    with pytest.raises(ThreadNotFound):
        api.get_thread(tenant, fork)
    assert [t.id for t in api.list_threads(tenant)] == [th]


def test_a_document_whose_original_is_redacted_and_copy_is_not_is_refused(api: Api) -> None:
    """The same within one document (written by someone else): its own original is
    redacted, a copy of it is not."""
    tenant = f"race-{uuid.uuid4().hex[:8]}"
    th, _, _, _ = _conversation(api.store, tenant, "same thread")
    doc = json.loads(api.export_thread(tenant, th))
    api.delete_thread(tenant, th)
    first = doc["messages"][0]
    first["redacted_at"] = first["received_at"]
    first["parts"] = [{"kind": "text", "text": "[redacted]"}]
    doc["messages"][2]["copy_of"] = first["id"]
    doc["messages"][2]["parts"] = [{"kind": "text", "text": SECRET}]
    with pytest.raises(ImportRefused) as refused:
        api.import_thread(tenant, json.dumps(doc))
    assert refused.value.path == "$.messages[2].copy_of"
    with pytest.raises(ThreadNotFound):
        api.get_thread(tenant, th)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_an_import_racing_a_redaction_of_its_copies_original_waits_and_is_refused(
    transcript: TranscriptStore, sync: bool
) -> None:
    """The redaction holds its locks; the import of a backup of the fork, deleted
    since, waits for the original's thread; the redaction commits: the import is
    refused, and no copy of the text is left."""
    store = transcript
    tenant = f"race-{uuid.uuid4().hex[:8]}"
    th, asked, fork, _ = _conversation(store, tenant, "fork")
    backup = store.export_thread(tenant, fork)
    store.delete_thread(tenant, fork)
    redaction = _held(store, ops.redact(store._ctx, tenant, th, asked, "dpo", "request",
                                        "[redacted]"))
    next(redaction)
    importing = _Call(lambda: store.import_thread(tenant, backup) if sync else
                      asyncio.run(store.aimport_thread(tenant, backup)))
    _waiting_on_a_lock(store, importing)
    next(redaction, None)  # commit
    with pytest.raises(ImportRefused):
        importing.result()
    assert [t.id for t in store.list_threads(tenant)] == [th]
    assert SECRET not in store.export_thread(tenant, th)


def test_another_tenants_redaction_of_the_same_id_does_not_refuse_a_copy(api: Api) -> None:
    """Ids are per tenant: tenant B holds the same conversation (imported, same ids) as
    tenant A, whose original is redacted; B's fork backup still imports into B, as B's
    original is intact."""
    a, b = f"race-{uuid.uuid4().hex[:8]}", f"race-{uuid.uuid4().hex[:8]}"
    th, asked, fork, _ = _conversation(api.store, a, "fork")
    api.import_thread(b, api.export_thread(a, th))
    api.import_thread(b, api.export_thread(a, fork))
    backup = api.export_thread(b, fork)
    api.delete_thread(b, fork)
    api.redact(a, th, asked, actor="dpo", reason="erasure request")
    api.import_thread(b, backup)
    assert SECRET in api.export_thread(b, fork)
    assert SECRET not in api.export_thread(a, fork)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_redaction_of_a_thread_deleted_while_it_waits_raises_thread_not_found(
    transcript: TranscriptStore, sync: bool
) -> None:
    """The deletion holds the thread's lock; the redaction read the thread before it
    and waits for the lock; the deletion commits: ``ThreadNotFound``, nothing logged."""
    store = transcript
    tenant = f"race-{uuid.uuid4().hex[:8]}"
    th, asked, fork, _ = _conversation(store, tenant, "fork")
    deletion = _held(store, ops.delete_thread(store._ctx, tenant, th))
    next(deletion)
    redacting = _Call(lambda: store.redact(tenant, th, asked, actor="dpo", reason="r") if sync
                      else asyncio.run(store.aredact(tenant, th, asked, actor="dpo", reason="r")))
    _waiting_on_a_lock(store, redacting)
    next(deletion, None)  # commit
    with pytest.raises(ThreadNotFound):
        redacting.result()
    assert SECRET in store.export_thread(tenant, fork)  # the fork's copy is its own
