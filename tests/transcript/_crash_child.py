"""A turn that a crash test kills: run by ``test_transcript_crash`` in its own process.

``python _crash_child.py '<json>'`` writes commit point 1 (``begin_turn_record``) and
then, by ``stage``:

- ``between``: prints the turn and waits for a line on stdin before writing commit
  point 2, so the parent can SIGKILL it between the two commit points;
- ``inside``: starts commit point 2 (``complete_turn``) and, right after that
  transaction's first INSERT into the messages table, prints and hangs inside it.
  On PostgreSQL point 2 is one autocommitted statement (``autocommit`` in the
  announcement): there is no "inside" a client can stop in, so the kill comes
  right after that statement.

``api`` picks the sync methods or their async twins (aiosqlite / psycopg async).
Every line printed to stdout is one JSON object; the parent reads exactly one.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from typing import Any

import sqlalchemy as sa

from convmem.transcript import (
    ModelInput,
    NewMessage,
    RetentionPolicy,
    ToolCallPart,
    ToolResultPart,
    TranscriptStore,
)


def announce(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def hang() -> None:
    """Block until killed (the parent's SIGKILL is the only way out)."""
    while True:
        time.sleep(60)


def answer_messages() -> list[NewMessage]:
    """Commit point 2: a tool call, its result and the answer."""
    call = ToolCallPart(call_id="c1", name="crm", arguments={"q": "ACME"})
    return [
        NewMessage(role="assistant", content=[call]),
        NewMessage(role="tool", content=[ToolResultPart(call_id="c1", content="4.2 M")]),
        NewMessage(role="assistant", content="ACME made 4.2 M."),
    ]


def main(payload: dict[str, Any]) -> None:
    store = TranscriptStore(
        payload["url"], retention=RetentionPolicy(max_age=None, owner="crash-test")
    )
    tenant, thread_id, stage = payload["tenant"], payload["thread_id"], payload["stage"]
    engine = store.engine if payload["api"] == "sync" else store.async_engine.sync_engine
    inside_point_two = False
    turn: dict[str, str] = {}

    @sa.event.listens_for(engine, "after_cursor_execute")
    def stop_inside(conn: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        # the statement writing message rows: a plain INSERT, or on PostgreSQL the one
        # statement that locks the thread and inserts (``WITH ... INSERT INTO ...``)
        written = re.search(r"INSERT INTO convmem_messages\b", statement, re.IGNORECASE)
        if inside_point_two and written:
            autocommit = conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
            announce(stage="inside", statement=written.group(0), autocommit=autocommit, **turn)
            hang()

    question = NewMessage(role="user", content=payload["question"])
    model_input = ModelInput(**payload["model_input"])

    def run_sync() -> None:
        nonlocal inside_point_two
        tr = store.begin_turn_record(tenant, thread_id, question, model_input)
        turn.update(turn_id=tr.turn_id, message_id=tr.user_message.id)
        if stage == "between":
            announce(stage="between", **turn)
            sys.stdin.readline()
        inside_point_two = True
        store.complete_turn(tenant, thread_id, tr.turn_id, answer_messages())
        announce(stage="completed", turn_id=tr.turn_id)

    async def run_async() -> None:
        nonlocal inside_point_two
        tr = await store.abegin_turn_record(tenant, thread_id, question, model_input)
        turn.update(turn_id=tr.turn_id, message_id=tr.user_message.id)
        if stage == "between":
            announce(stage="between", **turn)
            await asyncio.to_thread(sys.stdin.readline)
        inside_point_two = True
        await store.acomplete_turn(tenant, thread_id, tr.turn_id, answer_messages())
        announce(stage="completed", turn_id=tr.turn_id)

    if payload["api"] == "sync":
        run_sync()
    else:
        asyncio.run(run_async())


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
