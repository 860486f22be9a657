"""Export and import of a whole thread, streamed, as sans-I/O operations.

**Export** writes the canonical document (``convmem.transcript.export``) chunk by
chunk (``ops.Write`` steps): each section is read in pages (keyset pagination: by
``seq`` for messages, by time then id for the rest; one attachment's bytes at a
time) inside one read transaction (``REPEATABLE READ`` on PostgreSQL, a snapshot on
SQLite), and each record is written through ``document.record_json``. Memory holds
one page, never the thread. Ids are ordered by code point on both backends
(``COLLATE "C"`` on PostgreSQL), so the bytes are the same everywhere.

**Import** is strict and bounded, in one write transaction, in two passes over the
document (``ops.Read``/``ops.Rewind`` steps; a source that cannot seek is spooled
to a temporary file by the store first):

1. *Validate.* The document is parsed incrementally (``document.DocumentReader``),
   every record is checked on its own (``document.parse_record``: types, ranges,
   formats, hashes of prompts and attachments), and its ids and references go into
   temporary tables of the import's own transaction (private to it, dropped at its
   end). Then queries over those check what needs the whole document: unique ids
   and sequence numbers, every reference inside the document (parents earlier in
   ``seq`` than their children, so the parent graph is a forest with no cycle and
   no self-parent; the active leaf; turn ids; model-input, derived and redaction
   targets; attachments referenced and present; a model input's user message of
   role ``user``, a redaction entry only for a redacted message), ``copy_of``
   inside the document or naming a message of the same tenant (a fork's source),
   and no id already used in the tenant. The first problem is one ``ImportRefused`` naming its JSON path; no
   row of the record has been written, and the transaction rolls back.
2. *Write.* The document is read again and written in batches, thread row first:
   ``PAGE`` records, or fewer once they span ``BATCH_BYTES`` of the document.
   Both passes hash the bytes they read; a document that changed between them is
   refused and rolled back.

Memory holds one record and one batch, never the document (measured by
``bench/transcript_memory.py``); ``ImportLimits`` bounds a record while it is read,
so no document, however it is shaped, makes an import hold more. ``new_ids=True`` maps every id through
``ids.remapped_id`` (deterministic per import), so no mapping table is kept.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from typing import Any, BinaryIO

import sqlalchemy as sa

from convmem.transcript import export as ex
from convmem.transcript.document import (
    SECTIONS,
    AttachmentDoc,
    ImportLimits,
    MessageDoc,
    ThreadDoc,
    check_header,
    parse_record,
    record_from_row,
    record_json,
    record_row,
)
from convmem.transcript.errors import ImportRefused
from convmem.transcript.ids import remapped_id
from convmem.transcript.models import (
    ATTACHMENTS,
    DERIVED,
    MESSAGES,
    REDACTIONS,
    TEMPLATES,
    THREADS,
    TURNS,
)
from convmem.transcript.ops.base import (
    SYSTEM_PROMPT,
    TURNS_WITH_PROMPT,
    Ctx,
    Op,
    Rewind,
    Write,
    edge,
    to_thread,
)
from convmem.transcript.ops.import_checks import (
    CHUNK,
    PAGE,
    Staged,
    check_originals_locked,
    check_whole,
    create_staging,
    drop_staging,
    flush_stage,
    read_records,
    stage_record,
    staged,
)
from convmem.transcript.ops.messages import fill_segments, insert_message_rows, read_thread
from convmem.transcript.records import Thread

# ---------------------------------------------------------------- export


class _Out:
    """Buffers canonical text and flushes it as ``Write`` steps of about ``CHUNK``."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        self.parts: list[str] = []
        self.size = 0
        self.first = True

    def add(self, text: str) -> bool:
        self.parts.append(text)
        self.size += len(text)
        return self.size >= CHUNK

    def open_list(self, text: str) -> None:
        """``text`` ends in ``[``: the next record is the list's first."""
        self.add(text)
        self.first = True

    def add_record(self, record: type[Any], row: Mapping[str, Any]) -> bool:
        """One row of the open list as its canonical record; true when a chunk is due."""
        text = _dumps(record_json(record_from_row(record, row)))
        due = self.add(text if self.first else "," + text)
        self.first = False
        return due

    def flush(self) -> Write:
        data = "".join(self.parts).encode("utf-8")
        self.parts, self.size = [], 0
        return Write(self.sink, data)


def _dumps(obj: Any) -> str:
    return ex.canonical_dumps(obj)[:-1]


def _by_code_point(ctx: Ctx, col: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """``col`` ordered by code point (PostgreSQL's default collation is not)."""
    return col.collate("C") if ctx.dialect == "postgresql" else col


# Distinct attachment digests the thread's messages reference, a page at a time.
_REFERENCED_SHAS = {
    "postgresql": sa.text(
        "SELECT s.sha FROM (SELECT DISTINCT p->>'sha256' AS sha "
        "FROM convmem_messages AS m, json_array_elements(m.parts) AS p "
        "WHERE m.tenant = :tenant AND m.thread_id = :thread_id "
        "AND p->>'kind' = 'attachment_ref' AND p->>'sha256' <> '') AS s "
        'WHERE s.sha COLLATE "C" > :after ORDER BY s.sha COLLATE "C" LIMIT :n'
    ),
    "sqlite": sa.text(
        "SELECT s.sha FROM (SELECT DISTINCT json_extract(p.value, '$.sha256') AS sha "
        "FROM convmem_messages AS m, json_each(m.parts) AS p "
        "WHERE m.tenant = :tenant AND m.thread_id = :thread_id "
        "AND json_extract(p.value, '$.kind') = 'attachment_ref' "
        "AND json_extract(p.value, '$.sha256') <> '') AS s "
        "WHERE s.sha > :after ORDER BY s.sha LIMIT :n"
    ),
}


def export_thread(ctx: Ctx, tenant: str, thread_id: str, sink: BinaryIO) -> Op[None]:
    """Write the canonical export of the thread to ``sink``, a page at a time."""
    edge(tenant, thread_id=thread_id)
    th = yield from read_thread(tenant, thread_id)
    out = _Out(sink)
    out.open_list('{"attachments":[')
    after = ""
    while True:
        res = yield (
            _REFERENCED_SHAS[ctx.dialect],
            {"tenant": tenant, "thread_id": thread_id, "after": after, "n": PAGE},
        )
        shas = [r.sha for r in res.all()]
        for sha in shas:
            res = yield sa.select(ATTACHMENTS).where(
                ATTACHMENTS.c.tenant == tenant, ATTACHMENTS.c.sha256 == sha
            )
            a = res.mappings().first()
            if a is None:
                continue  # released (never for a consistent record)
            if out.add_record(AttachmentDoc, a):
                yield out.flush()
        if len(shas) < PAGE:
            break
        after = shas[-1]
    out.add("]")
    yield from _timed_section(ctx, out, "derived", DERIVED, "created_at", tenant, thread_id)
    out.open_list(f',"format":{_dumps(ex.FORMAT)},"messages":[')
    last = 0
    while True:
        res = yield (
            sa.select(MESSAGES)
            .where(
                MESSAGES.c.tenant == tenant,
                MESSAGES.c.thread_id == thread_id,
                MESSAGES.c.seq > last,
            )
            .order_by(MESSAGES.c.seq)
            .limit(PAGE)
        )
        rows = res.mappings().all()
        for r in rows:
            if out.add_record(MessageDoc, r):
                yield out.flush()
        if len(rows) < PAGE:
            break
        last = rows[-1]["seq"]
    out.add("]")
    yield from _timed_section(ctx, out, "model_inputs", TURNS, "created_at", tenant, thread_id)
    yield from _timed_section(ctx, out, "redactions", REDACTIONS, "at", tenant, thread_id)
    thread = _dumps(record_json(record_from_row(ThreadDoc, th)))
    out.add(f',"thread":{thread},"version":{ex.VERSION}}}\n')
    yield out.flush()


def _timed_section(
    ctx: Ctx,
    out: _Out,
    name: str,
    table: sa.Table,
    time_col: str,
    tenant: str,
    thread_id: str,
) -> Op[None]:
    """``,"name":[...]``: rows by (time, id by code point), keyset-paged, each as the
    section's record (``document.SECTIONS``)."""
    out.open_list(f',"{name}":[')
    when, ident = table.c[time_col], _by_code_point(ctx, table.c.id)
    cols: list[Any] = [table]
    source: Any = table
    if table is TURNS:
        cols.append(SYSTEM_PROMPT)
        source = TURNS_WITH_PROMPT
    cursor: tuple[Any, str] | None = None
    while True:
        stmt = (
            sa.select(*cols)
            .select_from(source)
            .where(table.c.tenant == tenant, table.c.thread_id == thread_id)
            .order_by(when, ident)
            .limit(PAGE)
        )
        if cursor is not None:
            stmt = stmt.where(
                sa.or_(when > cursor[0], sa.and_(when == cursor[0], ident > cursor[1]))
            )
        res = yield stmt
        rows = res.mappings().all()
        for r in rows:
            if out.add_record(SECTIONS[name], r):
                yield out.flush()
        if len(rows) < PAGE:
            break
        cursor = (rows[-1][time_col], rows[-1]["id"])
    out.add("]")


# ---------------------------------------------------------------- import: the operation


def import_thread(
    ctx: Ctx, tenant: str, source: BinaryIO, new_ids: bool, limits: ImportLimits
) -> Op[Thread]:
    """Validate the whole document, then write it (see the module docstring)."""
    edge(tenant)
    yield from create_staging(ctx)
    st = Staged()
    hasher = hashlib.sha256()

    def validate(section: str, i: int | None, value: Any) -> Op[None]:
        if section in SECTIONS and i is not None:
            stage_record(st, section, i, value, limits)
            yield from flush_stage(st, force=False)
        elif section == "format":
            st.fmt = value
            if value != ex.FORMAT:
                check_header(value, ex.VERSION)
        elif section == "version":
            st.version = value
        elif section == "thread":
            st.thread = parse_record(ThreadDoc, value, "$.thread", limits)

    yield from read_records(source, limits, hasher, validate)
    check_header(st.fmt, st.version)
    yield from flush_stage(st, force=True)
    yield from check_whole(ctx, tenant, st, new_ids)
    st.digest = hasher.hexdigest()
    yield Rewind(source)
    thread = yield from _write(ctx, tenant, source, st, new_ids, limits)
    yield from check_originals_locked(ctx, tenant)
    yield from drop_staging(ctx)
    return thread


#: A pass-2 batch is written once the document bytes it was read from reach this.
BATCH_BYTES = 1024 * 1024


class _Tally:
    """The sha256 of the bytes a pass reads, and their count (pass 2's batches)."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.read = 0

    def update(self, chunk: bytes) -> None:
        self.sha.update(chunk)
        self.read += len(chunk)


class _Ids:
    """Id mapping for ``new_ids`` (identity otherwise)."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.salt = os.urandom(16)
        self.ms = time.time_ns() // 1_000_000

    def __call__(self, section: str, old: str | None) -> str | None:
        if old is None or not self.on:
            return old
        return remapped_id(self.salt, self.ms, section, old)



def _write(
    ctx: Ctx, tenant: str, source: BinaryIO, st: Staged, new_ids: bool, limits: ImportLimits
) -> Op[Thread]:
    """Pass 2: the thread row, then every section in document order, in batches."""
    th = st.thread
    assert th is not None
    m = _Ids(new_ids)
    thread_id = str(m("thread", th.id))  # the id ``record_row`` maps the thread's to
    values = record_row(th, m) | {
        "tenant": tenant,
        "key": None if new_ids else th.key,
        "incarnation": remapped_id(os.urandom(16), m.ms, "incarnation", thread_id),
    }
    yield sa.insert(THREADS).values(**values)
    tally = _Tally()
    batch: dict[str, list[Any]] = {name: [] for name in SECTIONS}
    written_at = 0  # bytes read when the last batch was written

    def write(section: str, i: int | None, value: Any) -> Op[None]:
        nonlocal written_at
        if section not in SECTIONS:
            return
        if i is not None:  # a record: batched
            cls = SECTIONS[section]
            batch[section].append(parse_record(cls, value, f"$.{section}[{i}]", limits))
            if len(batch[section]) < PAGE and tally.read - written_at < BATCH_BYTES:
                return
        # a full batch, or the section's end (its list completed): write what is pending
        yield from _write_batch(ctx, tenant, thread_id, section, batch[section], m)
        batch[section] = []
        written_at = tally.read

    yield from read_records(source, limits, tally, write)
    if tally.sha.hexdigest() != st.digest:
        raise ImportRefused("$", "changed while it was being imported (read it again)")
    yield from fill_segments(tenant, thread_id)
    return to_thread(values)


def _write_batch(
    ctx: Ctx, tenant: str, thread_id: str, section: str, recs: list[Any], m: _Ids
) -> Op[None]:
    if not recs:
        return
    now = ctx.now()
    if section == "attachments":
        for a in recs:
            res = yield (
                sa.text(f"SELECT count(*) FROM {staged('attref')} WHERE sha = :sha"), {"sha": a.sha256}
            )
            n = int(res.scalar_one())
            stmt = ctx.insert(ATTACHMENTS).values(
                record_row(a, m) | {"tenant": tenant, "refcount": n, "created_at": now}
            )
            yield stmt.on_conflict_do_update(
                index_elements=["tenant", "sha256"], set_={"refcount": ATTACHMENTS.c.refcount + n}
            )
    elif section == "messages":
        in_doc: set[str] = set()
        if m.on:
            copies = sorted({r.copy_of for r in recs if r.copy_of is not None})
            in_doc = yield from _in_document("messages", copies)
        rows = [
            record_row(r, m) | {
                "thread_id": thread_id,
                "tenant": tenant,
                # a copy's original keeps its id unless the document brought it
                "copy_of": m("messages", r.copy_of) if r.copy_of in in_doc else r.copy_of,
            }
            for r in recs
        ]
        for row in rows:
            row["segment"] = row["id"]  # its own until ``fill_segments`` joins them
        yield from insert_message_rows(ctx, rows)
    elif section == "model_inputs":
        for t in recs:
            if t.system_prompt is not None:
                yield (
                    ctx.insert(TEMPLATES)
                    .values(tenant=tenant, sha256=t.system_prompt_sha256, text=t.system_prompt)
                    .on_conflict_do_nothing()
                )
        yield (
            sa.insert(TURNS),
            [record_row(t, m) | {"thread_id": thread_id, "tenant": tenant} for t in recs],
        )
    elif section == "derived":
        yield (
            sa.insert(DERIVED),
            [record_row(d, m) | {"thread_id": thread_id, "tenant": tenant} for d in recs],
        )
    else:
        rows = []
        for r in recs:
            affected = dict(r.affected)
            if m.on:
                affected = yield from _map_affected(m, affected)
            rows.append(
                record_row(r, m) | {"thread_id": thread_id, "tenant": tenant, "affected": affected}
            )
        yield (sa.insert(REDACTIONS), rows)


#: The lists of a redaction log's ``affected``, and the section each names ids of.
_AFFECTED = {"messages": "messages", "turns": "model_inputs", "derived": "derived"}


def _map_affected(m: _Ids, affected: dict[str, Any]) -> Op[dict[str, Any]]:
    """A redaction log's ids, mapped where they are the document's own."""
    out: dict[str, Any] = {}
    for key, section in _AFFECTED.items():
        olds = list(affected.get(key, []))
        known = yield from _in_document(section, olds)
        out[key] = [m(section, o) if o in known else o for o in olds]
    return out


_STAGED_MESSAGE_IDS = sa.text(f"SELECT id FROM {staged('msg')} WHERE id IN :ids").bindparams(
    sa.bindparam("ids", expanding=True)
)
_STAGED_IDS = sa.text(
    f"SELECT id FROM {staged('ids')} WHERE id IN :ids AND section = :section"
).bindparams(sa.bindparam("ids", expanding=True))


def _in_document(section: str, ids: list[str]) -> Op[set[str]]:
    """Which of ``ids`` of ``section`` the document itself brought (staged in pass 1);
    no query for no ids."""
    if not ids:
        return set()
    if section == "messages":
        res = yield (_STAGED_MESSAGE_IDS, {"ids": ids})
    else:
        res = yield (_STAGED_IDS, {"ids": ids, "section": section})
    return {r[0] for r in res.all()}
