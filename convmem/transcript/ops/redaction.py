"""Redaction, deletion and the retention sweep's candidates."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.identity import clean_text
from convmem.render import QUESTION_TOKENS, inert
from convmem.transcript.errors import RecordCorrupt
from convmem.transcript.ids import new_id
from convmem.transcript.models import (
    DERIVED,
    INDEX_QUEUE,
    MESSAGES,
    REDACTIONS,
    SEARCH,
    TEMPLATES,
    THREADS,
    TURNS,
)
from convmem.transcript.ops.base import Ctx, Op, bounded, edge
from convmem.transcript.ops.messages import (
    attachment_refs,
    drop_attachment_refs,
    get_message,
    lock_thread,
    missing_thread,
    read_thread,
)
from convmem.transcript.provenance import derived_texts
from convmem.transcript.records import (
    DeletionReceipt,
    JSONDict,
    RedactionReceipt,
    RetentionPolicy,
    utc,
)

log = logging.getLogger("convmem.transcript")

# ---------------------------------------------------------------- redaction and deletion


#: A stored string at least this long that is the start of a redacted text is that
#: text cut short (a session keeps questions cut to its limit): it is replaced whole.
PREFIX_MIN = 16


def text_forms(text: str) -> set[str]:
    """Every form of ``text`` a derived copy may hold: as written, each of its lines, and
    as the renderer quotes it in a session block (``convmem.render.inert``: one line,
    ``"`` and ``#`` mapped, cut to the question budget) with and without its ellipsis.
    Forms shorter than three characters are left alone (they would hit everything)."""
    forms = {text, *text.splitlines()}
    shown = inert(text, max_tokens=QUESTION_TOKENS)
    forms.add(shown)
    if shown.endswith("…"):
        forms.add(shown[:-1].rstrip())
    return {f for f in forms if len(f.strip()) >= 3}


def _needles(parts: Sequence[Mapping[str, Any]]) -> set[str]:
    """The forms of a message's content a redaction hunts for in derived copies."""
    found: set[str] = set()
    for p in parts:
        if p.get("kind") == "text":
            found |= text_forms(str(p["text"]))
        elif p.get("kind") == "tool_result":
            found |= text_forms(str(p["content"]))
        elif p.get("kind") == "tool_call":
            for v in _strings(p.get("arguments")):
                found |= text_forms(v)
        elif p.get("kind") == "attachment_ref":
            found |= text_forms(str(p.get("name", "")))
    return found


def _strings(obj: Any) -> Iterable[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def scrub(obj: Any, needles: Sequence[str], replacement: str) -> Any:
    """``obj`` with every needle inside every string replaced; a string that is the
    start of a needle (at least ``PREFIX_MIN`` characters: the text cut short) goes
    whole. ``needles`` longest first."""
    if isinstance(obj, str):
        if len(obj) >= PREFIX_MIN and any(n.startswith(obj) for n in needles):
            return replacement
        for n in needles:
            obj = obj.replace(n, replacement)
        return obj
    if isinstance(obj, Mapping):
        return {k: scrub(v, needles, replacement) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub(v, needles, replacement) for v in obj]
    return obj


def _derived_needles(extra: Mapping[str, Any]) -> set[str]:
    """Text derived from a message that ``SessionMemory`` notes in its ``extra``
    (``convmem.transcript.provenance``): it quotes the message in other words, so it
    goes wherever the message's own text goes, in all its forms."""
    found: set[str] = set()
    for text in derived_texts(extra):
        found |= text_forms(text)
    return found


def redact_parts(parts: Sequence[Mapping[str, Any]], replacement: str) -> list[JSONDict]:
    """Content gone, structure kept: kinds, tool names and call ids stay."""
    out: list[JSONDict] = []
    for p in parts:
        kind = p.get("kind")
        if kind == "text":
            out.append({"kind": "text", "text": replacement})
        elif kind == "tool_call":
            out.append({**p, "arguments": {}})
        elif kind == "tool_result":
            out.append({**p, "content": replacement})
        else:
            out.append({**p, "name": replacement, "sha256": "", "size": 0})
    return out


def quotes(turn: Mapping[str, Any], ids: set[str]) -> bool:
    """Whether a model-input record may quote one of ``ids``: by its links (its own user
    message, ``quoted_message_ids``), or — links unknown (``NULL``: written before
    revision 0003 or by a caller who did not say) — possibly, so it is scanned."""
    quoted = turn["quoted_message_ids"]
    if quoted is None:
        return True
    return turn["user_message_id"] in ids or not ids.isdisjoint(quoted)


_LOCK_THREADS = (
    sa.select(THREADS.c.id)
    .where(THREADS.c.tenant == sa.bindparam("l_tenant"),
           THREADS.c.id.in_(sa.bindparam("l_ids", expanding=True)))
    .order_by(THREADS.c.id)
    .with_for_update()
)


def _lock_copies(tenant: str, thread_id: str, message_id: str) -> Op[list[JSONDict]]:
    """The rows of a message's copy family (it, what it copies, every copy of that,
    across forks), with every thread holding one locked.

    A turn checks the messages it quotes under its own thread's lock only
    (``turns.begin_turn_record``): a redaction rewriting a fork's copy must hold the
    fork's lock too, or a turn there records a block quoting what is being erased.
    The threads are locked in id order (two redactions never wait on each other in a
    cycle); a fork made before the locks adds a thread, locked in turn (a fork locks
    its source, so none is made after)."""
    yield from read_thread(tenant, thread_id)  # ThreadNotFound before anything else
    target = yield from get_message(tenant, thread_id, message_id)
    root = target.copy_of or target.id
    family = sa.select(MESSAGES).where(
        MESSAGES.c.tenant == tenant, sa.or_(MESSAGES.c.id == root, MESSAGES.c.copy_of == root)
    )
    rows = [dict(r) for r in (yield family).mappings().all()]
    tried: set[str] = set()
    locked: set[str] = set()
    while (wanted := {r["thread_id"] for r in rows} | {thread_id}) - tried:
        res = yield (_LOCK_THREADS, {"l_tenant": tenant, "l_ids": sorted(wanted - tried)})
        locked.update(res.scalars().all())
        tried |= wanted
        if thread_id not in locked:  # deleted since it was read
            raise missing_thread(tenant, thread_id)
        rows = [dict(r) for r in (yield family).mappings().all()]
    return rows


def redact(
    ctx: Ctx,
    tenant: str,
    thread_id: str,
    message_id: str,
    actor: str,
    reason: str,
    replacement: str,
) -> Op[RedactionReceipt]:
    """Rewrite a message's content everywhere it was copied; keep ids, places and tree.

    Reaches, by link: the message and every row that is a copy of it or that it
    copies (``copy_of``, across forks), the search rows of those (indexed or queued), the derived memories
    citing any of them (tombstoned), the attachments they referenced, and the
    model-input records quoting them (``quotes``), where every form of the text
    (``text_forms``: as written, per line, as the renderer quotes it) is replaced in
    the rendered block and the state snapshot. Logs who, when and why (ids only).
    """
    edge(tenant, thread_id=thread_id, message_id=message_id)
    actor = bounded(actor, "actor", 200, blank=False)
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError("redact: actor and reason are required (they go to the redaction log)")
    reason, replacement = clean_text(reason), clean_text(replacement)
    rows = yield from _lock_copies(tenant, thread_id, message_id)
    found: set[str] = set()
    for r in rows:
        found |= _needles(r["parts"] or [])
        found |= _derived_needles(r["extra"] or {})
    found.discard(replacement)
    needles = sorted(found, key=len, reverse=True)
    now = ctx.now()
    ids = sorted(r["id"] for r in rows)
    idset = set(ids)
    threads = sorted({r["thread_id"] for r in rows})
    refs = attachment_refs(r["parts"] or [] for r in rows if r["redacted_at"] is None)
    for r in rows:
        yield (
            sa.update(MESSAGES)
            .where(MESSAGES.c.tenant == tenant, MESSAGES.c.id == r["id"])
            .values(
                parts=redact_parts(r["parts"] or [], replacement),
                extra=scrub(r["extra"] or {}, needles, replacement),
                redacted_at=now,
            )
        )
    removed = yield from drop_attachment_refs(tenant, refs)
    # the queue's rows first: an indexer holding one (it read the text before this
    # redaction) is waited for, so the row it indexes is there for the next delete
    yield sa.delete(INDEX_QUEUE).where(
        INDEX_QUEUE.c.tenant == tenant,
        INDEX_QUEUE.c.thread_id.in_(threads),
        INDEX_QUEUE.c.message_id.in_(ids),
    )
    yield sa.delete(SEARCH).where(SEARCH.c.tenant == tenant, SEARCH.c.message_id.in_(ids))
    res = yield sa.select(TURNS).where(TURNS.c.tenant == tenant, TURNS.c.thread_id.in_(threads))
    turn_ids: list[str] = []
    for t in res.mappings().all():
        if not quotes(t, idset):
            continue
        block = scrub(t["rendered_block"], needles, replacement)
        snap = scrub(t["state_snapshot"] or {}, needles, replacement)
        if block != t["rendered_block"] or snap != (t["state_snapshot"] or {}):
            turn_ids.append(t["id"])
            yield (
                sa.update(TURNS)
                .where(TURNS.c.tenant == tenant, TURNS.c.id == t["id"])
                .values(rendered_block=block, state_snapshot=snap)
            )
    res = yield sa.select(DERIVED).where(
        DERIVED.c.tenant == tenant, DERIVED.c.thread_id.in_(threads)
    )
    derived_ids = sorted(
        d["id"] for d in res.mappings().all() if set(d["source_message_ids"] or ()) & idset
    )
    if derived_ids:
        yield (
            sa.update(DERIVED)
            .where(DERIVED.c.tenant == tenant, DERIVED.c.id.in_(derived_ids))
            .values(content="", tombstoned_at=now)
        )
    redaction_id = new_id()
    yield sa.insert(REDACTIONS).values(
        id=redaction_id,
        thread_id=thread_id,
        tenant=tenant,
        message_id=message_id,
        actor=actor,
        reason=reason,
        at=now,
        affected={"messages": ids, "turns": sorted(turn_ids), "derived": derived_ids},
    )
    if ctx.dialect == "sqlite":
        yield from optimize_search()
    return RedactionReceipt(
        redaction_id=redaction_id,
        message_ids=tuple(ids),
        turn_ids=tuple(sorted(turn_ids)),
        derived_ids=tuple(derived_ids),
        attachments_removed=removed,
        thread_ids=tuple(threads),
    )


def optimize_search() -> Op[None]:
    """FTS5 keeps deleted terms in old segments until a merge; merge them all now."""
    yield sa.text("INSERT INTO convmem_search(convmem_search) VALUES('optimize')")


def delete_thread(ctx: Ctx, tenant: str, thread_id: str) -> Op[DeletionReceipt]:
    """Remove the thread and everything of it; release its attachment references."""
    edge(tenant, thread_id=thread_id)
    yield from lock_thread(tenant, thread_id)
    res = yield sa.select(MESSAGES.c.parts).where(
        MESSAGES.c.thread_id == thread_id, MESSAGES.c.tenant == tenant
    )
    refs = attachment_refs(r.parts or [] for r in res.all())
    where_thread = {
        t: sa.and_(t.c.thread_id == thread_id, t.c.tenant == tenant)
        for t in (INDEX_QUEUE, SEARCH, DERIVED, REDACTIONS, TURNS, MESSAGES)
    }
    yield sa.delete(INDEX_QUEUE).where(where_thread[INDEX_QUEUE])
    yield sa.delete(SEARCH).where(where_thread[SEARCH])
    derived = (yield sa.delete(DERIVED).where(where_thread[DERIVED])).rowcount
    yield sa.delete(REDACTIONS).where(where_thread[REDACTIONS])
    turns = (yield sa.delete(TURNS).where(where_thread[TURNS])).rowcount
    messages = (yield sa.delete(MESSAGES).where(where_thread[MESSAGES])).rowcount
    yield sa.delete(THREADS).where(THREADS.c.id == thread_id, THREADS.c.tenant == tenant)
    removed = yield from drop_attachment_refs(tenant, refs)
    used = sa.select(TURNS.c.template_sha256).where(
        TURNS.c.tenant == tenant, TURNS.c.template_sha256.is_not(None)
    )
    yield sa.delete(TEMPLATES).where(TEMPLATES.c.tenant == tenant, TEMPLATES.c.sha256.not_in(used))
    if ctx.dialect == "sqlite":
        yield from optimize_search()
    return DeletionReceipt(
        thread_id=thread_id,
        messages=int(messages),
        turns=int(turns),
        derived=int(derived),
        attachments_removed=removed,
    )


def expired_threads(
    ctx: Ctx, tenant: str | None, now: datetime
) -> Op[tuple[list[tuple[str, str]], int, list[tuple[str, str, str]]]]:
    """Threads whose effective policy has expired, how many are on legal hold, and
    the threads skipped because their stored policy cannot be read (logged: one bad
    row never stops the sweep of every other thread and tenant).

    A thread has expired when its age (``now - updated_at``) reaches ``max_age``:
    a difference of two dates, never a deadline past year 9999."""
    if tenant is not None:
        edge(tenant)
    stmt = sa.select(THREADS.c.id, THREADS.c.tenant, THREADS.c.updated_at, THREADS.c.retention)
    if tenant is not None:
        stmt = stmt.where(THREADS.c.tenant == tenant)
    res = yield stmt.order_by(THREADS.c.updated_at, THREADS.c.id)
    expired: list[tuple[str, str]] = []
    skipped: list[tuple[str, str, str]] = []
    held = 0
    at = utc(now)
    for r in res.all():
        try:
            policy = ctx.retention if r.retention is None else RetentionPolicy.from_json(r.retention)
        except RecordCorrupt as exc:
            log.warning("sweep: thread %r of tenant %r skipped: %s", r.id, r.tenant, exc)
            skipped.append((r.tenant, r.id, str(exc)))
            continue
        if policy.legal_hold:
            held += 1
        elif policy.max_age is not None and at - utc(r.updated_at) >= policy.max_age:
            expired.append((r.tenant, r.id))
    return expired, held, skipped
