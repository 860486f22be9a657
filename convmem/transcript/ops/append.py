"""Appends and branches: a new leaf, a sibling, a switch, a rebase, the archive watermark."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.transcript.models import (
    MESSAGES,
    THREADS,
)
from convmem.transcript.ops.base import (
    ACTIVE,
    ActiveLeaf,
    Ctx,
    Op,
    clean_message,
    content_key,
    edge,
    sha256_of,
    to_message,
)
from convmem.transcript.ops.messages import (
    corrupt_links,
    get_message,
    insert_chain,
    lock_thread,
    read_path,
)
from convmem.transcript.ops.threads import this_thread
from convmem.transcript.records import (
    AttachmentPart,
    Message,
    NewMessage,
    Part,
    part_to_json,
)

# ---------------------------------------------------------------- appends


def append(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    messages: Sequence[NewMessage],
    parent_id: str | ActiveLeaf | None,
    activate: bool,
    incarnation: str | None = None,
) -> Op[list[Message]]:
    """Append to the active leaf (one linear path under concurrency) or under a parent.
    ``incarnation``: only into that incarnation of the thread (a turn's binding)."""
    edge(tenant, thread_id=thread_id, parent_id=None if isinstance(parent_id, ActiveLeaf) else parent_id)
    if isinstance(parent_id, ActiveLeaf):
        return (
            yield from insert_chain(
                ctx, tenant, thread_id, ACTIVE, messages, move_leaf=True, whole_op=True,
                incarnation=incarnation,
            )
        )
    yield from lock_thread(tenant, thread_id, incarnation)
    if parent_id is not None:
        yield from get_message(tenant, thread_id, parent_id)
    return (
        yield from insert_chain(ctx, tenant, thread_id, parent_id, messages, move_leaf=activate)
    )

def sibling(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    message_id: str,
    make: Callable[[Message], NewMessage],
    require_role: str | None,
    keep_turn: bool = False,
) -> Op[Message]:
    """A new sibling of ``message_id`` made active (edit, regenerate). ``keep_turn``: it
    answers the same model input (a regeneration), so it carries the old ``turn_id``."""
    edge(tenant, thread_id=thread_id, message_id=message_id)
    yield from lock_thread(tenant, thread_id)
    old = yield from get_message(tenant, thread_id, message_id)
    if require_role is not None and old.role != require_role:
        raise ConfigError(f"message {message_id!r} is a {old.role} message, not {require_role}")
    (new,) = yield from insert_chain(
        ctx, tenant, thread_id, old.parent_id, [make(old)], move_leaf=True,
        turn_id=old.turn_id if keep_turn else None,
    )
    return new


def branches(tenant: str, thread_id: str, message_id: str) -> Op[list[Message]]:
    """The message and its siblings (alternatives at that point), in seq order."""
    edge(tenant, thread_id=thread_id, message_id=message_id)
    msg = yield from get_message(tenant, thread_id, message_id)
    parent_cond = (
        MESSAGES.c.parent_id.is_(None)
        if msg.parent_id is None
        else MESSAGES.c.parent_id == msg.parent_id
    )
    res = yield (
        sa.select(MESSAGES)
        .where(MESSAGES.c.thread_id == thread_id, MESSAGES.c.tenant == tenant, parent_cond)
        .order_by(MESSAGES.c.seq)
    )
    return [to_message(r) for r in res.mappings().all()]


def switch(tenant: str, thread_id: str, message_id: str) -> Op[Message]:
    """Make the branch through ``message_id`` active: its newest descendant becomes the
    leaf. The walk down stops after ``next_seq`` steps (``RecordCorrupt``: a loop)."""
    edge(tenant, thread_id=thread_id, message_id=message_id)
    th = yield from lock_thread(tenant, thread_id)
    leaf = yield from get_message(tenant, thread_id, message_id)
    for _ in range(int(th["next_seq"])):
        res = yield (
            sa.select(MESSAGES)
            .where(
                MESSAGES.c.tenant == tenant,
                MESSAGES.c.thread_id == thread_id,
                MESSAGES.c.parent_id == leaf.id,
            )
            .order_by(MESSAGES.c.seq.desc())
            .limit(1)
        )
        row = res.mappings().first()
        if row is None:
            break
        leaf = to_message(row)
    else:
        raise corrupt_links(thread_id, message_id)
    yield sa.update(THREADS).where(*this_thread(tenant, thread_id)).values(active_leaf=leaf.id)
    return leaf


def set_active_leaf(tenant: str, thread_id: str, message_id: str | None) -> Op[None]:
    """Point the thread at ``message_id``; ``None`` empties the active path."""
    edge(tenant, thread_id=thread_id, message_id=message_id)
    yield from lock_thread(tenant, thread_id)
    if message_id is not None:
        yield from get_message(tenant, thread_id, message_id)
    yield sa.update(THREADS).where(*this_thread(tenant, thread_id)).values(active_leaf=message_id)


def rebase_path(
    ctx: Ctx, tenant: str, thread_id: str, messages: Sequence[NewMessage]
) -> Op[list[Message]]:
    """Make the active path equal ``messages`` while changing as little as possible.

    The longest common prefix (same role, parts and ``extra``) is reused; the rest is appended
    as a branch from its end. A new row whose content equals a message of the old
    path carries ``copy_of`` (the original). The same list is a no-op; a shorter
    prefix of the path only moves the pointer back.
    """
    edge(tenant, thread_id=thread_id)
    messages = [clean_message(m) for m in messages]
    yield from lock_thread(tenant, thread_id)
    path = yield from read_path(tenant, thread_id)
    wanted = [
        content_key(m.role, [part_to_json(p) for p in _hashless(m.parts())], m.extra)
        for m in messages
    ]
    have = [content_key(m.role, [part_to_json(p) for p in m.parts], m.extra) for m in path]
    i = 0
    while i < len(wanted) and i < len(path) and wanted[i] == have[i]:
        i += 1
    if i == len(wanted):
        if i < len(path):
            leaf = path[i - 1].id if i else None
            yield (
                sa.update(THREADS).where(*this_thread(tenant, thread_id)).values(active_leaf=leaf)
            )
        return path[:i]
    originals: dict[str, list[Message]] = {}
    for msg, key in zip(path[i:], have[i:], strict=True):
        originals.setdefault(key, []).append(msg)
    copies: list[str | None] = []
    for key in wanted[i:]:
        pool = originals.get(key)
        src = pool.pop(0) if pool else None
        copies.append(None if src is None else (src.copy_of or src.id))
    parent = path[i - 1].id if i else None
    new = yield from insert_chain(
        ctx, tenant, thread_id, parent, messages[i:], move_leaf=True, copy_of=copies
    )
    return path[:i] + new


def _hashless(parts: Sequence[Part]) -> list[Part]:
    """Parts as they will be stored (attachment data replaced by its digest)."""
    out: list[Part] = []
    for p in parts:
        if isinstance(p, AttachmentPart) and p.data is not None:
            p = AttachmentPart(
                media_type=p.media_type, name=p.name, sha256=sha256_of(p.data), size=len(p.data)
            )
        out.append(p)
    return out


def archive_through(tenant: str, thread_id: str, seq: int) -> Op[int]:
    """Raise the archive watermark (never lowers it); messages are untouched."""
    edge(tenant, thread_id=thread_id)
    if type(seq) is not int or not 0 <= seq <= 2**31 - 1:
        raise ConfigError(f"archive_through: seq must be an integer from 0 to 2**31-1, got {seq!r}")
    th = yield from lock_thread(tenant, thread_id)
    mark = max(int(th["archived_seq"]), seq)
    yield sa.update(THREADS).where(*this_thread(tenant, thread_id)).values(archived_seq=mark)
    return mark
