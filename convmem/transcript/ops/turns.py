"""Turn records: what a turn binds to, what the model received, the answer that completed it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.identity import check_id, clean_text
from convmem.transcript.errors import QuotedRedacted, ThreadNotFound
from convmem.transcript.ids import new_id
from convmem.transcript.models import (
    MESSAGES,
    TEMPLATES,
    THREADS,
    TURNS,
)
from convmem.transcript.ops.base import (
    ACTIVE,
    ID_CHARS,
    SYSTEM_PROMPT,
    TURNS_WITH_PROMPT,
    ActiveLeaf,
    Alone,
    Ctx,
    Op,
    bounded,
    clean_json,
    edge,
    sha256_of,
    tenant_join,
    to_thread,
    utc_or_none,
)
from convmem.transcript.ops.messages import (
    PG_CHAIN_CTES,
    PG_LOCK_CTE,
    attachment_refs,
    chain_rows,
    get_message,
    insert_chain,
    lock_thread,
    missing_thread,
    number_chain,
    pg_chain_params,
    read_path,
)
from convmem.transcript.ops.reads import get_messages
from convmem.transcript.records import (
    JSONDict,
    Message,
    ModelInput,
    NewMessage,
    ReconstructedInput,
    Thread,
    TurnRecord,
    utc,
)

_BIND = (
    sa.select(
        THREADS,
        MESSAGES.c.id.label("m_id"),
        MESSAGES.c.parts.label("m_parts"),
        MESSAGES.c.extra.label("m_extra"),
    )
    .select_from(
        tenant_join(
            THREADS,
            MESSAGES,
            MESSAGES.c.thread_id == THREADS.c.id,
            MESSAGES.c.role == "user",
            outer=True,
        )
    )
    .where(THREADS.c.tenant == sa.bindparam("b_tenant"), THREADS.c.key == sa.bindparam("b_key"))
    .order_by(MESSAGES.c.seq.desc())
    .limit(sa.bindparam("b_recent"))
)


def bind_turn(tenant: str, key: str, recent: int) -> Op[tuple[Thread, list[JSONDict]] | None]:
    """What a turn binds to when it begins: the key's thread (its id and incarnation)
    and the ``id``, ``parts`` and ``extra`` of its last ``recent`` user messages, newest
    first (what the turn's block may quote). ``None`` when the key has no thread yet.
    ONE statement (``Alone``: one round trip on PostgreSQL)."""
    edge(tenant, key=key)
    if type(recent) is not int or recent < 0:
        raise ConfigError(f"bind_turn: recent must be a non-negative integer, got {recent!r}")
    res = yield Alone(_BIND, {"b_tenant": tenant, "b_key": key, "b_recent": max(recent, 1)})
    rows = res.mappings().all()
    if not rows:
        return None
    users = [
        {"id": r["m_id"], "parts": r["m_parts"] or [], "extra": r["m_extra"] or {}}
        for r in rows
        if r["m_id"] is not None
    ]
    return to_thread(rows[0]), users[:recent]

# Commit point 1 on PostgreSQL in ONE statement (``Alone``: one round trip, no
# BEGIN/COMMIT): lock the thread row, then the messages the model input quotes that
# are still intact (``FOR SHARE`` after the thread's lock, as redaction takes them: a
# redaction committed meanwhile is seen, the row re-read; one primary-key probe per
# quoted id, the thread compared after it: with the thread in the probe, a planner
# that thinks a thread holds one row scans the thread instead); only if all are (``ok``)
# the chain of ``_PG_INSERT_CHAIN`` for the user message, then the template (once per
# tenant and text) and the turn row (they select from ``th``). The last row says
# which: the first number, whether the thread was there, the quoted ids not intact.
_PG_BEGIN_TURN = sa.text(
    "WITH" + PG_LOCK_CTE + """, quoted AS (
    SELECT DISTINCT q.id FROM json_array_elements_text(CAST(:quoted_ids AS json)) AS q(id)
), intact AS (
    SELECT m.id FROM locked, quoted CROSS JOIN LATERAL (
        SELECT m.id, m.thread_id FROM convmem_messages AS m
        WHERE m.tenant = :tenant AND m.id = quoted.id AND m.redacted_at IS NULL
        FOR SHARE) AS m
    WHERE m.thread_id = locked.id
), ok AS (
    SELECT locked.id, locked.active_leaf, locked.open_leaf, locked.open_segment FROM locked
    WHERE (SELECT count(*) FROM intact) = (SELECT count(*) FROM quoted)
),""" + PG_CHAIN_CTES.format(src="ok") + """, tpl AS (
    INSERT INTO convmem_templates (tenant, sha256, text)
    SELECT :tenant, CAST(:sha AS text), :prompt FROM th WHERE CAST(:sha AS text) IS NOT NULL
    ON CONFLICT DO NOTHING
), turn AS (
    INSERT INTO convmem_turns (id, thread_id, tenant, user_message_id, rendered_block,
        state_snapshot, sent_message_ids, template_sha256, tool_schemas, model,
        model_params, created_at, completed_at, answer_message_id, quoted_message_ids)
    SELECT :turn_id, :thread_id, :tenant, :last_id, :rendered_block,
        CAST(:state_snapshot AS json), CAST(:sent_message_ids AS json), CAST(:sha AS text),
        CAST(:tool_schemas AS json), :model, CAST(:model_params AS json), :now, NULL, NULL,
        CAST(:quoted_message_ids AS json)
    FROM th
)
SELECT (SELECT first_seq FROM th), (SELECT parent_id FROM th), (SELECT segment FROM th),
    EXISTS (SELECT 1 FROM locked),
    (SELECT json_agg(id) FROM quoted WHERE id NOT IN (SELECT id FROM intact))
"""
)

#: The quoted messages of a model input still intact (the transactional path, after
#: the thread's lock: every statement there sees what committed before it).
_INTACT = sa.select(MESSAGES.c.id).where(
    MESSAGES.c.tenant == sa.bindparam("q_tenant"),
    MESSAGES.c.thread_id == sa.bindparam("q_thread_id"),
    MESSAGES.c.redacted_at.is_(None),
    MESSAGES.c.id.in_(sa.bindparam("q_ids", expanding=True)),
)


def check_quoted(tenant: str, thread_id: str, quoted: Sequence[str] | None) -> Op[None]:
    """``QuotedRedacted`` unless every quoted message is intact (the caller holds the
    thread's lock, as a redaction needs it)."""
    wanted = sorted(set(quoted or ()))
    if not wanted:
        return
    res = yield (_INTACT, {"q_tenant": tenant, "q_thread_id": thread_id, "q_ids": wanted})
    intact = set(res.scalars().all())
    if len(intact) != len(wanted):
        raise QuotedRedacted([q for q in wanted if q not in intact])


_TURN_JSON = ("state_snapshot", "sent_message_ids", "tool_schemas", "model_params",
              "quoted_message_ids")


def _pg_begin_turn(
    tenant: str,
    thread_id: str,
    rows: list[JSONDict],
    now: Any,
    turn_id: str,
    turn: JSONDict,
    prompt: str | None,
    incarnation: str | None,
    search_index: str,
) -> Op[Message]:
    """Run ``_PG_BEGIN_TURN`` for the user message's row; its record."""
    params = pg_chain_params(
        tenant, thread_id, ACTIVE, rows, now, move_leaf=True, turn_id=turn_id,
        incarnation=incarnation, search_index=search_index,
    )
    params.update(
        sha=turn["template_sha256"], prompt=prompt, rendered_block=turn["rendered_block"],
        model=turn["model"], **{k: json.dumps(turn[k]) for k in _TURN_JSON},
        quoted_ids=json.dumps(turn["quoted_message_ids"] or []),
    )
    res = yield Alone(_PG_BEGIN_TURN, params)
    first_seq, parent, segment, thread_found, not_intact = res.one()
    if not thread_found:
        raise missing_thread(tenant, thread_id, incarnation)
    if first_seq is None:
        raise QuotedRedacted(sorted(not_intact or ()))
    (msg,) = number_chain(rows, int(first_seq), parent, segment)
    return msg


def begin_turn_record(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    user_message: NewMessage,
    model_input: ModelInput,
    parent_id: str | ActiveLeaf | None = ACTIVE,
    incarnation: str | None = None,
) -> Op[TurnRecord]:
    """Commit point 1: the user message and what the model is about to receive.

    The message follows the active leaf, or goes under ``parent_id`` (an edit: a
    sibling of the edited question); either way it becomes the active leaf. With
    ``incarnation`` it is written only into that incarnation of the thread. Nothing
    is written, and ``QuotedRedacted`` raised, when a message the input quotes was
    redacted meanwhile (checked under the thread's lock, which redaction takes)."""
    edge(tenant, thread_id=thread_id, parent_id=None if isinstance(parent_id, ActiveLeaf) else parent_id)
    if user_message.role != "user":  # a turn's user message; import refuses any other
        raise ConfigError(
            f"begin_turn_record: user_message.role is {user_message.role!r}; a turn begins "
            "with a message of role 'user'"
        )
    for i, sent in enumerate(model_input.sent_message_ids):
        check_id(sent, f"model_input.sent_message_ids[{i}]", ID_CHARS)
    quoted = model_input.quoted_message_ids
    for i, q in enumerate(quoted or ()):
        check_id(q, f"model_input.quoted_message_ids[{i}]", ID_CHARS)
    if not isinstance(parent_id, ActiveLeaf):
        yield from lock_thread(tenant, thread_id, incarnation)
        if parent_id is not None:
            yield from get_message(tenant, thread_id, parent_id)
    turn_id = new_id()
    sha: str | None = None
    prompt = None if model_input.system_prompt is None else clean_text(model_input.system_prompt)
    if prompt is not None:
        sha = sha256_of(prompt.encode("utf-8"))
    turn = {
        "rendered_block": clean_text(model_input.rendered_block),
        "state_snapshot": clean_json(dict(model_input.state_snapshot)),
        "sent_message_ids": list(model_input.sent_message_ids),
        "template_sha256": sha,
        "tool_schemas": [clean_json(dict(s)) for s in model_input.tool_schemas],
        "model": bounded(model_input.model, "model", 200),
        "model_params": clean_json(dict(model_input.model_params)),
        "quoted_message_ids": None if quoted is None else list(quoted),
    }
    if ctx.dialect == "postgresql" and isinstance(parent_id, ActiveLeaf):
        now = ctx.now()
        rows, _ = chain_rows(tenant, thread_id, [user_message], now, turn_id, None)
        if not attachment_refs(r["parts"] for r in rows):
            msg = yield from _pg_begin_turn(tenant, thread_id, rows, now, turn_id, turn,
                                            prompt, incarnation, ctx.search_index)
            return TurnRecord(turn_id=turn_id, thread_id=thread_id, user_message=msg)
    if quoted:  # after the thread's lock (insert_chain takes it again: a no-op)
        if isinstance(parent_id, ActiveLeaf):
            yield from lock_thread(tenant, thread_id, incarnation)
        yield from check_quoted(tenant, thread_id, quoted)
    (msg,) = yield from insert_chain(
        ctx, tenant, thread_id, parent_id, [user_message], move_leaf=True, turn_id=turn_id,
        incarnation=incarnation,
    )
    if prompt is not None:
        yield (
            ctx.insert(TEMPLATES)
            .values(tenant=tenant, sha256=sha, text=prompt)
            .on_conflict_do_nothing()
        )
    yield sa.insert(TURNS).values(
        id=turn_id,
        thread_id=thread_id,
        tenant=tenant,
        user_message_id=msg.id,
        created_at=ctx.now(),
        completed_at=None,
        answer_message_id=None,
        **turn,
    )
    return TurnRecord(turn_id=turn_id, thread_id=thread_id, user_message=msg)


def complete_turn(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    turn_id: str,
    messages: Sequence[NewMessage],
    incarnation: str | None = None,
) -> Op[list[Message]]:
    """Commit point 2: tool calls, results and the answer, linked to the turn.

    They follow the active leaf when the turn's user message is still on the active
    path (another device may have appended meanwhile); if the user has since moved
    to another branch, they go under the user message and the pointer stays put.
    With ``incarnation``, only into that incarnation of the thread.
    """
    edge(tenant, thread_id=thread_id, turn_id=turn_id)
    th = yield from lock_thread(tenant, thread_id, incarnation)
    res = yield sa.select(TURNS).where(
        TURNS.c.id == turn_id, TURNS.c.thread_id == thread_id, TURNS.c.tenant == tenant
    )
    turn = res.mappings().first()
    if turn is None:
        raise ThreadNotFound(f"turn {turn_id!r} not found in thread {thread_id!r}")
    if turn["completed_at"] is not None:
        raise ConfigError(f"turn {turn_id!r} is already complete")
    if th["active_leaf"] == turn["user_message_id"]:
        on_path = True  # the usual case, nothing appended since point 1: no path walk
    else:
        path = yield from read_path(tenant, thread_id)
        on_path = any(m.id == turn["user_message_id"] for m in path)
    parent = th["active_leaf"] if on_path else turn["user_message_id"]
    out = yield from insert_chain(
        ctx, tenant, thread_id, parent, messages, move_leaf=on_path, turn_id=turn_id
    )
    answer = next((m.id for m in reversed(out) if m.role == "assistant"), None)
    yield (
        sa.update(TURNS)
        .where(TURNS.c.tenant == tenant, TURNS.c.thread_id == thread_id, TURNS.c.id == turn_id)
        .values(completed_at=ctx.now(), answer_message_id=answer or (out[-1].id if out else None))
    )
    return out

# Commit point 2 on PostgreSQL in ONE statement, for the usual case: the turn's user
# message is still the active leaf. Lock the thread row, then the turn row (its
# ``FOR UPDATE`` comes after the thread's: the turn is found through the locked
# row, and it reads the turn as last committed, so a turn completed meanwhile is
# seen complete); only if the turn is open and its user message is the active leaf
# (``ok``) do the chain and the turn's completion run. The last row says which.
_PG_COMPLETE_TURN = sa.text(
    "WITH" + PG_LOCK_CTE + """, turn AS (
    SELECT user_message_id, completed_at FROM convmem_turns
    WHERE tenant = :tenant AND id = :turn_id AND thread_id = (SELECT id FROM locked)
    FOR UPDATE
), ok AS (
    SELECT locked.id, locked.active_leaf, locked.open_leaf, locked.open_segment
    FROM locked, turn
    WHERE turn.completed_at IS NULL AND turn.user_message_id = locked.active_leaf
),""" + PG_CHAIN_CTES.format(src="ok") + """, done AS (
    UPDATE convmem_turns AS tu SET completed_at = :now, answer_message_id = :answer_id
    FROM th WHERE tu.tenant = :tenant AND tu.thread_id = :thread_id AND tu.id = :turn_id
)
SELECT (SELECT first_seq FROM th), (SELECT parent_id FROM th), (SELECT segment FROM th),
    EXISTS (SELECT 1 FROM locked), EXISTS (SELECT 1 FROM turn),
    EXISTS (SELECT 1 FROM turn WHERE completed_at IS NOT NULL)
"""
)


def complete_turn_on_leaf(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    turn_id: str,
    messages: Sequence[NewMessage],
    incarnation: str | None = None,
) -> Op[list[Message] | None]:
    """``complete_turn`` in one ``Alone`` statement on PostgreSQL when the turn's user
    message is still the active leaf; ``None`` (nothing written) when it is not, and
    the caller runs ``complete_turn``. SQLite, an empty list or attachments: ``complete_turn``."""
    edge(tenant, thread_id=thread_id, turn_id=turn_id)
    if ctx.dialect != "postgresql" or not messages:
        return (yield from complete_turn(ctx, tenant, thread_id, turn_id, messages, incarnation))
    now = ctx.now()
    rows, _ = chain_rows(tenant, thread_id, messages, now, turn_id, None)
    if attachment_refs(r["parts"] for r in rows):
        return (yield from complete_turn(ctx, tenant, thread_id, turn_id, messages, incarnation))
    answer = next((r["id"] for r in reversed(rows) if r["role"] == "assistant"), rows[-1]["id"])
    params = pg_chain_params(
        tenant, thread_id, ACTIVE, rows, now, move_leaf=True, turn_id=turn_id,
        incarnation=incarnation, search_index=ctx.search_index,
    )
    params["answer_id"] = answer
    res = yield Alone(_PG_COMPLETE_TURN, params)
    first_seq, parent, segment, thread_found, turn_found, completed = res.one()
    if not thread_found:
        raise missing_thread(tenant, thread_id, incarnation)
    if not turn_found:
        raise ThreadNotFound(f"turn {turn_id!r} not found in thread {thread_id!r}")
    if completed:
        raise ConfigError(f"turn {turn_id!r} is already complete")
    if first_seq is None:
        return None  # another device appended meanwhile: the path decides (complete_turn)
    return number_chain(rows, int(first_seq), parent, segment)


def reconstruct_model_input(tenant: str, thread_id: str, turn_id: str) -> Op[ReconstructedInput]:
    """Rebuild what the model received on a turn from the record."""
    edge(tenant, thread_id=thread_id, turn_id=turn_id)
    res = yield (
        sa.select(TURNS, SYSTEM_PROMPT)
        .select_from(TURNS_WITH_PROMPT)
        .where(TURNS.c.id == turn_id, TURNS.c.thread_id == thread_id, TURNS.c.tenant == tenant)
    )
    turn = res.mappings().first()
    if turn is None:
        raise ThreadNotFound(f"turn {turn_id!r} not found in thread {thread_id!r}")
    sent = list(turn["sent_message_ids"] or [])
    msgs = yield from get_messages(tenant, thread_id, [*sent, turn["user_message_id"]])
    by_id = {m.id: m for m in msgs}
    return ReconstructedInput(
        turn_id=turn_id,
        thread_id=thread_id,
        system_prompt=turn["system_prompt"],
        rendered_block=turn["rendered_block"],
        state_snapshot=dict(turn["state_snapshot"] or {}),
        messages=tuple(by_id[i] for i in sent if i in by_id),
        user_message=by_id[turn["user_message_id"]],
        tool_schemas=tuple(turn["tool_schemas"] or ()),
        model=turn["model"],
        model_params=dict(turn["model_params"] or {}),
        created_at=utc(turn["created_at"]),
        completed_at=utc_or_none(turn["completed_at"]),
        answer_message_id=turn["answer_message_id"],
    )
