"""Turn records: what a turn binds to, what the model received, the answer that completed it."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.identity import check_id, clean_text
from convmem.transcript.errors import ThreadNotFound
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
    ActiveLeaf,
    Alone,
    Ctx,
    Op,
    bounded,
    clean_json,
    edge,
    sha256_of,
    to_thread,
)
from convmem.transcript.ops.messages import get_message, insert_chain, lock_thread, read_path
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
        THREADS.outerjoin(
            MESSAGES,
            sa.and_(
                MESSAGES.c.tenant == THREADS.c.tenant,
                MESSAGES.c.thread_id == THREADS.c.id,
                MESSAGES.c.role == "user",
            ),
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
    ``incarnation`` it is written only into that incarnation of the thread."""
    edge(tenant, thread_id=thread_id, parent_id=None if isinstance(parent_id, ActiveLeaf) else parent_id)
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
    (msg,) = yield from insert_chain(
        ctx, tenant, thread_id, parent_id, [user_message], move_leaf=True, turn_id=turn_id,
        incarnation=incarnation,
    )
    sha: str | None = None
    prompt = None if model_input.system_prompt is None else clean_text(model_input.system_prompt)
    if prompt is not None:
        sha = sha256_of(prompt.encode("utf-8"))
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
        rendered_block=clean_text(model_input.rendered_block),
        state_snapshot=clean_json(dict(model_input.state_snapshot)),
        sent_message_ids=list(model_input.sent_message_ids),
        template_sha256=sha,
        tool_schemas=[clean_json(dict(s)) for s in model_input.tool_schemas],
        model=bounded(model_input.model, "model", 200),
        model_params=clean_json(dict(model_input.model_params)),
        created_at=ctx.now(),
        completed_at=None,
        answer_message_id=None,
        quoted_message_ids=None if quoted is None else list(quoted),
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

def reconstruct_model_input(tenant: str, thread_id: str, turn_id: str) -> Op[ReconstructedInput]:
    """Rebuild what the model received on a turn from the record."""
    edge(tenant, thread_id=thread_id, turn_id=turn_id)
    res = yield (
        sa.select(TURNS, TEMPLATES.c.text.label("system_prompt"))
        .select_from(
            TURNS.outerjoin(
                TEMPLATES,
                sa.and_(
                    TEMPLATES.c.tenant == TURNS.c.tenant,
                    TEMPLATES.c.sha256 == TURNS.c.template_sha256,
                ),
            )
        )
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
        completed_at=None if turn["completed_at"] is None else utc(turn["completed_at"]),
        answer_message_id=turn["answer_message_id"],
    )
