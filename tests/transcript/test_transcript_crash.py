"""A turn killed (SIGKILL) between and inside its commit points leaves what issue 4 says.

Between commit point 1 (``begin_turn_record``) and 2 (``complete_turn``), the record
holds exactly point 1: the user message and what the model was about to receive,
reconstructible. Killed inside point 2's transaction, nothing of point 2 is there (on
PostgreSQL point 2 is one autocommitted statement: killed right after it, all of it
is there, never a part), the sequence has no gap, and the thread takes the next turn at once (no lock outlives the
process: SQLite's file locks die with it, PostgreSQL rolls the dropped backend back).
The turn runs in a child process (``_crash_child.py``) with the same interpreter,
through the sync methods or their async twins.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import convmem
from convmem.testing.transcript_spec import FOREVER, bot, user
from convmem.transcript import ModelInput, TranscriptStore

CHILD = Path(__file__).with_name("_crash_child.py")
REPO = Path(convmem.__file__).resolve().parent.parent
FOLLOW_UP_TIMEOUT = 30.0  # seconds; a lock left behind by the dead process would hang here
CHILD_TIMEOUT = 120.0  # seconds for the child to reach its stage (a loaded CI machine)

MODEL_INPUT: dict[str, Any] = {
    "rendered_block": "focus: ACME (tentative)\nperiod: 2026-Q3",
    "state_snapshot": {"recent_questions": ["revenue of ACME?"], "turn": 2},
    "system_prompt": "You are terse. Cite records.",
    "tool_schemas": [{"name": "crm", "parameters": {"q": {"type": "string"}}}],
    "model": "gpt-x",
    "model_params": {"temperature": 0},
}


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TranscriptStore]:
    """A migrated store on a fresh SQLite file or the run's PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'crash.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    store = TranscriptStore(url, retention=FOREVER)
    store.migrate()
    yield store
    store.close()


def kill_child_at(store: TranscriptStore, payload: dict[str, Any]) -> dict[str, Any]:
    """Run the child until it announces its stage, SIGKILL it (by PID), return the announcement."""
    url = store.engine.url.render_as_string(hide_password=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    # stderr goes to a file, not a pipe: the child never blocks writing it
    with tempfile.TemporaryFile() as errors:

        def child_errors() -> str:
            errors.seek(0)
            return errors.read().decode(errors="replace")[-3000:]

        proc = subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps({**payload, "url": url})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=env,
            text=True,
        )
        try:
            assert proc.stdout is not None
            reader = ThreadPoolExecutor(max_workers=1)
            try:  # a child stuck before its stage fails the test (killed below), never hangs it
                line = reader.submit(proc.stdout.readline).result(timeout=CHILD_TIMEOUT)
            finally:
                reader.shutdown(wait=False)
            assert line, f"child exited early ({proc.wait(timeout=30)}): {child_errors()}"
            announced: dict[str, Any] = json.loads(line)
            assert announced["stage"] == payload["stage"], (announced, child_errors())
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
    return announced


def within_timeout(fn: Any, *args: Any) -> Any:
    """Run ``fn`` in a worker and give up (failing the test) after ``FOLLOW_UP_TIMEOUT``."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn, *args).result(timeout=FOLLOW_UP_TIMEOUT)
    finally:
        pool.shutdown(wait=False)


def start_thread(store: TranscriptStore, tenant: str) -> tuple[str, str]:
    th = store.create_thread(tenant, title="crash")
    (hello,) = store.append(tenant, th.id, user("hello"))
    return th.id, hello.id


def assert_exactly_point_one(
    store: TranscriptStore, tenant: str, thread_id: str, hello_id: str, turn: dict[str, Any]
) -> None:
    """The record holds the user message and the model input of the turn, nothing more."""
    tree = store.tree(tenant, thread_id)
    assert [(m.seq, m.role, m.text) for m in tree.messages] == [
        (1, "user", "hello"),
        (2, "user", "revenue of ACME?"),
    ]
    question = tree.messages[1]
    assert question.id == turn["message_id"] and question.turn_id == turn["turn_id"]
    assert tree.active_path_ids == (hello_id, question.id)
    rec = store.reconstruct_model_input(tenant, thread_id, turn["turn_id"])
    assert rec.completed_at is None and rec.answer_message_id is None
    assert rec.user_message.id == question.id and rec.user_message.text == "revenue of ACME?"
    assert [m.id for m in rec.messages] == [hello_id]
    assert rec.rendered_block == MODEL_INPUT["rendered_block"]
    assert rec.state_snapshot == MODEL_INPUT["state_snapshot"]
    assert rec.system_prompt == MODEL_INPUT["system_prompt"]
    assert list(rec.tool_schemas) == MODEL_INPUT["tool_schemas"]
    assert (rec.model, rec.model_params) == (MODEL_INPUT["model"], MODEL_INPUT["model_params"])
    if store.dialect == "sqlite":
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"


def assert_point_two_whole(
    store: TranscriptStore, tenant: str, thread_id: str, turn: dict[str, Any]
) -> None:
    """All of point 2 is there (never a part of it), gapless, and the thread takes the
    next turn at once: no lock outlived the killed process."""
    path = store.active_path(tenant, thread_id)
    assert [(m.seq, m.role) for m in path] == [
        (1, "user"), (2, "user"), (3, "assistant"), (4, "tool"), (5, "assistant")
    ]
    assert path[-1].text == "ACME made 4.2 M." and {m.turn_id for m in path[2:]} == {turn["turn_id"]}
    rec = store.reconstruct_model_input(tenant, thread_id, turn["turn_id"])
    assert rec.completed_at is not None and rec.answer_message_id == path[-1].id
    tr = within_timeout(
        store.begin_turn_record, tenant, thread_id, user("and Globex?"), ModelInput()
    )
    store.complete_turn(tenant, thread_id, tr.turn_id, [bot("3.1 M.")])
    assert [m.seq for m in store.active_path(tenant, thread_id)] == [1, 2, 3, 4, 5, 6, 7]


def assert_next_turns_work(
    store: TranscriptStore, tenant: str, thread_id: str, turn_id: str
) -> None:
    """Point 2 of the interrupted turn can still be written, and a new turn follows it."""
    out = within_timeout(store.complete_turn, tenant, thread_id, turn_id, [bot("4.2 M.")])
    assert [m.seq for m in out] == [3]
    tr = within_timeout(
        store.begin_turn_record, tenant, thread_id, user("and Globex?"), ModelInput()
    )
    store.complete_turn(tenant, thread_id, tr.turn_id, [bot("3.1 M.")])
    path = store.active_path(tenant, thread_id)
    assert [m.seq for m in path] == [1, 2, 3, 4, 5]
    assert [m.text for m in path] == ["hello", "revenue of ACME?", "4.2 M.", "and Globex?", "3.1 M."]


def kill_a_turn(
    store: TranscriptStore, tenant: str, api: str, stage: str
) -> tuple[str, str, dict[str, Any]]:
    """A fresh thread whose turn "revenue of ACME?" the child dies in at ``stage``:
    the thread, its first message and what the child reported of the turn."""
    thread_id, hello_id = start_thread(store, tenant)
    payload = {
        "tenant": tenant,
        "thread_id": thread_id,
        "stage": stage,
        "api": api,
        "question": "revenue of ACME?",
        "model_input": {**MODEL_INPUT, "sent_message_ids": [hello_id]},
    }
    return thread_id, hello_id, kill_child_at(store, payload)


@pytest.mark.parametrize("api", ["sync", "async"])
def test_killed_between_commit_points_leaves_exactly_point_one(
    store: TranscriptStore, tenant: str, api: str
) -> None:
    thread_id, hello_id, turn = kill_a_turn(store, tenant, api, "between")
    assert_exactly_point_one(store, tenant, thread_id, hello_id, turn)
    assert_next_turns_work(store, tenant, thread_id, turn["turn_id"])


@pytest.mark.parametrize("api", ["sync", "async"])
def test_killed_inside_commit_point_two_leaves_nothing_of_it(
    store: TranscriptStore, tenant: str, api: str
) -> None:
    thread_id, hello_id, turn = kill_a_turn(store, tenant, api, "inside")
    assert turn["statement"].upper() == "INSERT INTO CONVMEM_MESSAGES"
    if turn["autocommit"]:  # PostgreSQL: point 2 is one statement, killed after it ran
        assert store.dialect == "postgresql"
        assert_point_two_whole(store, tenant, thread_id, turn)
        return
    assert_exactly_point_one(store, tenant, thread_id, hello_id, turn)
    with store.engine.connect() as conn:  # the seq counter moved inside point 2: rolled back
        next_seq = conn.execute(
            sa.text("SELECT next_seq FROM convmem_threads WHERE id = :id"), {"id": thread_id}
        ).scalar_one()
    assert next_seq == 3
    assert_next_turns_work(store, tenant, thread_id, turn["turn_id"])
