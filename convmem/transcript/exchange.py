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
   targets; attachments referenced and present), ``copy_of`` inside the document or
   naming a message of the same tenant (a fork's source), and no id already used in
   the tenant. The first problem is one ``ImportRefused`` naming its JSON path; no
   row of the record has been written, and the transaction rolls back.
2. *Write.* The document is read again and written in batches, thread row first.
   Both passes hash the bytes they read; a document that changed between them is
   refused and rolled back.

Memory holds one record and one batch, never the document (measured by
``bench/transcript_memory.py``). ``new_ids=True`` maps every id through
``ids.remapped_id`` (deterministic per import), so no mapping table is kept.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import sqlalchemy as sa

from convmem.transcript import export as ex
from convmem.transcript.document import (
    SECTIONS,
    AttachmentDoc,
    DerivedDoc,
    DocumentReader,
    ImportLimits,
    MessageDoc,
    ModelInputDoc,
    RedactionDoc,
    ThreadDoc,
    check_header,
    parse_record,
    record_json,
    system_prompt_matches,
)
from convmem.transcript.errors import ImportRefused, ThreadExists
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
from convmem.transcript.ops import (
    Ctx,
    Op,
    Read,
    Rewind,
    Write,
    edge,
    insert_message_rows,
    read_thread,
    to_thread,
)
from convmem.transcript.records import JSONDict, Thread

CHUNK = 256 * 1024  # bytes read or written per step
PAGE = 500  # rows per export page and per import batch

# ---------------------------------------------------------------- export


class _Out:
    """Buffers canonical text and flushes it as ``Write`` steps of about ``CHUNK``."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: str) -> bool:
        self.parts.append(text)
        self.size += len(text)
        return self.size >= CHUNK

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


def _message_doc(r: Mapping[str, Any]) -> MessageDoc:
    return MessageDoc(
        id=r["id"], parent_id=r["parent_id"], seq=r["seq"], role=r["role"], author=r["author"],
        parts=r["parts"] or [], extra=r["extra"] or {}, received_at=r["received_at"],
        client_ts=r["client_ts"], visibility=r["visibility"], copy_of=r["copy_of"],
        turn_id=r["turn_id"], redacted_at=r["redacted_at"],
    )


def _model_input_doc(t: Mapping[str, Any]) -> ModelInputDoc:
    return ModelInputDoc(
        id=t["id"], user_message_id=t["user_message_id"], rendered_block=t["rendered_block"],
        state_snapshot=t["state_snapshot"] or {}, sent_message_ids=t["sent_message_ids"] or [],
        system_prompt=t["system_prompt"], system_prompt_sha256=t["template_sha256"],
        tool_schemas=t["tool_schemas"] or [], model=t["model"],
        model_params=t["model_params"] or {}, created_at=t["created_at"],
        completed_at=t["completed_at"], answer_message_id=t["answer_message_id"],
        quoted_message_ids=t["quoted_message_ids"],
    )


def _derived_doc(d: Mapping[str, Any]) -> DerivedDoc:
    return DerivedDoc(
        id=d["id"], kind=d["kind"], content=d["content"],
        source_message_ids=d["source_message_ids"] or [], created_at=d["created_at"],
        tombstoned_at=d["tombstoned_at"],
    )


def _redaction_doc(r: Mapping[str, Any]) -> RedactionDoc:
    return RedactionDoc(
        id=r["id"], message_id=r["message_id"], actor=r["actor"], reason=r["reason"],
        at=r["at"], affected=r["affected"] or {},
    )


def _thread_doc(th: Mapping[str, Any]) -> ThreadDoc:
    return ThreadDoc(
        id=th["id"], key=th["key"], owner=th["owner"], title=th["title"],
        metadata=th["metadata"] or {}, created_at=th["created_at"],
        updated_at=th["updated_at"], retention=th["retention"], active_leaf=th["active_leaf"],
        next_seq=th["next_seq"], archived_seq=th["archived_seq"],
        forked_from=th["forked_from"],
    )


def export_thread(ctx: Ctx, tenant: str, thread_id: str, sink: BinaryIO) -> Op[None]:
    """Write the canonical export of the thread to ``sink``, a page at a time."""
    edge(tenant, thread_id=thread_id)
    th = yield from read_thread(tenant, thread_id)
    out = _Out(sink)
    out.add('{"attachments":[')
    first = True
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
            doc = AttachmentDoc(
                sha256=a["sha256"], media_type=a["media_type"], size=a["size"],
                data_base64=bytes(a["data"]),
            )
            if out.add(("" if first else ",") + _dumps(record_json(doc))):
                yield out.flush()
            first = False
        if len(shas) < PAGE:
            break
        after = shas[-1]
    out.add("]")
    yield from _timed_section(
        ctx, out, "derived", DERIVED, "created_at", _derived_doc, tenant, thread_id
    )
    out.add(f',"format":{_dumps(ex.FORMAT)},"messages":[')
    last = 0
    first = True
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
            if out.add(("" if first else ",") + _dumps(record_json(_message_doc(r)))):
                yield out.flush()
            first = False
        if len(rows) < PAGE:
            break
        last = rows[-1]["seq"]
    out.add("]")
    yield from _timed_section(
        ctx, out, "model_inputs", TURNS, "created_at", _model_input_doc, tenant, thread_id
    )
    yield from _timed_section(
        ctx, out, "redactions", REDACTIONS, "at", _redaction_doc, tenant, thread_id
    )
    out.add(f',"thread":{_dumps(record_json(_thread_doc(th)))},"version":{ex.VERSION}}}\n')
    yield out.flush()


def _timed_section(
    ctx: Ctx,
    out: _Out,
    name: str,
    table: sa.Table,
    time_col: str,
    make: Any,
    tenant: str,
    thread_id: str,
) -> Op[None]:
    """``,"name":[...]``: rows by (time, id by code point), keyset-paged."""
    out.add(f',"{name}":[')
    when, ident = table.c[time_col], _by_code_point(ctx, table.c.id)
    cols: list[Any] = [table]
    source: Any = table
    if table is TURNS:
        cols.append(TEMPLATES.c.text.label("system_prompt"))
        source = TURNS.outerjoin(
            TEMPLATES,
            sa.and_(
                TEMPLATES.c.tenant == TURNS.c.tenant,
                TEMPLATES.c.sha256 == TURNS.c.template_sha256,
            ),
        )
    cursor: tuple[Any, str] | None = None
    first = True
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
            if out.add(("" if first else ",") + _dumps(record_json(make(r)))):
                yield out.flush()
            first = False
        if len(rows) < PAGE:
            break
        cursor = (rows[-1][time_col], rows[-1]["id"])
    out.add("]")


# ---------------------------------------------------------------- import: staging


_STAGE = {
    "msg": "idx INTEGER, id VARCHAR(64), seq INTEGER, parent_id VARCHAR(64), "
    "copy_of VARCHAR(64), turn_id VARCHAR(64)",
    "ids": "section VARCHAR(16), idx INTEGER, id VARCHAR(64)",
    "ref": "section VARCHAR(16), idx INTEGER, field VARCHAR(200), target VARCHAR(64), "
    "target_section VARCHAR(16)",
    "att": "idx INTEGER, sha VARCHAR(64), size INTEGER",
    "attref": "idx INTEGER, field VARCHAR(200), sha VARCHAR(64), size INTEGER",
}
_STAGE_INDEXES = (
    ("msg", "id"), ("msg", "seq"), ("ids", "section, id"), ("ref", "target"),
    ("att", "sha"), ("attref", "sha"),
)


def _t(name: str) -> str:
    return f"convmem_import_{name}"


def _create_staging(ctx: Ctx) -> Op[None]:
    on_commit = " ON COMMIT DROP" if ctx.dialect == "postgresql" else ""
    for name, cols in _STAGE.items():
        yield sa.text(f"DROP TABLE IF EXISTS {_t(name)}")
        yield sa.text(f"CREATE TEMPORARY TABLE {_t(name)} ({cols}){on_commit}")
    for name, cols in _STAGE_INDEXES:
        index = f"{_t(name)}_{cols.replace(', ', '_')}"
        yield sa.text(f"CREATE INDEX {index} ON {_t(name)} ({cols})")


def _drop_staging(ctx: Ctx) -> Op[None]:
    if ctx.dialect != "postgresql":  # PostgreSQL drops them at commit
        for name in _STAGE:
            yield sa.text(f"DROP TABLE IF EXISTS {_t(name)}")


def _insert(name: str, rows: list[JSONDict]) -> Op[None]:
    if rows:
        cols = list(rows[0])
        yield (
            sa.text(
                f"INSERT INTO {_t(name)} ({', '.join(cols)}) "
                f"VALUES ({', '.join(':' + c for c in cols)})"
            ),
            rows,
        )
        rows.clear()


@dataclass
class _Staged:
    """What pass 1 keeps in memory: the header, the thread and a few numbers."""

    fmt: Any = None
    version: Any = None
    thread: ThreadDoc | None = None
    max_seq: int = 0
    max_seq_idx: int = -1
    counts: dict[str, int] = field(default_factory=dict)
    digest: str = ""
    batches: dict[str, list[JSONDict]] = field(
        default_factory=lambda: {name: [] for name in _STAGE}
    )


def _read_records(
    source: BinaryIO, limits: ImportLimits, hasher: Any
) -> Generator[Read | tuple[str, int | None, Any], Any, None]:
    """Yields ``Read`` requests (send the bytes back) and parsed values in order."""
    reader = DocumentReader(limits)
    while True:
        chunk = yield Read(source, CHUNK)
        if not isinstance(chunk, (bytes, bytearray)):
            raise ImportRefused("$", "is not binary data (read the document in binary mode)")
        hasher.update(chunk)
        reader.feed(bytes(chunk))
        yield from reader.pop()
        if not chunk:
            return


def _stage_record(st: _Staged, section: str, i: int, obj: Any, limits: ImportLimits) -> None:
    """Pass 1 for one list item: check it alone, queue its ids and references."""
    path = f"$.{section}[{i}]"
    st.counts[section] = i + 1
    b = st.batches
    if section == "messages":
        m = parse_record(MessageDoc, obj, path, limits)
        if m.seq > st.max_seq:
            st.max_seq, st.max_seq_idx = m.seq, i
        b["msg"].append(
            {"idx": i, "id": m.id, "seq": m.seq, "parent_id": m.parent_id,
             "copy_of": m.copy_of, "turn_id": m.turn_id}
        )
        if m.turn_id is not None:
            b["ref"].append(_ref(section, i, "turn_id", m.turn_id, "model_inputs"))
        for j, p in enumerate(m.parts):
            if p["kind"] != "attachment_ref":
                continue
            where = f"parts[{j}].sha256"
            if m.redacted_at is None:
                if p["sha256"] == "":
                    raise ImportRefused(
                        f"{path}.{where}", "is empty, but only a redacted message loses its digest"
                    )
                b["attref"].append({"idx": i, "field": where, "sha": p["sha256"], "size": p["size"]})
    elif section == "attachments":
        a = parse_record(AttachmentDoc, obj, path, limits)
        digest = hashlib.sha256(a.data_base64).hexdigest()
        if digest != a.sha256:
            raise ImportRefused(f"{path}.sha256", f"does not match the data's sha256 ({digest})")
        if len(a.data_base64) != a.size:
            raise ImportRefused(f"{path}.size", f"is {a.size} but the data has {len(a.data_base64)} bytes")
        b["att"].append({"idx": i, "sha": a.sha256, "size": a.size})
    elif section == "model_inputs":
        t = parse_record(ModelInputDoc, obj, path, limits)
        system_prompt_matches(t, path)
        b["ids"].append({"section": section, "idx": i, "id": t.id})
        b["ref"].append(_ref(section, i, "user_message_id", t.user_message_id, "messages"))
        if t.answer_message_id is not None:
            b["ref"].append(_ref(section, i, "answer_message_id", t.answer_message_id, "messages"))
        for k, mid in enumerate(t.sent_message_ids):
            b["ref"].append(_ref(section, i, f"sent_message_ids[{k}]", mid, "messages"))
        for k, mid in enumerate(t.quoted_message_ids or ()):
            b["ref"].append(_ref(section, i, f"quoted_message_ids[{k}]", mid, "messages"))
    elif section == "derived":
        d = parse_record(DerivedDoc, obj, path, limits)
        b["ids"].append({"section": section, "idx": i, "id": d.id})
        for k, mid in enumerate(d.source_message_ids):
            b["ref"].append(_ref(section, i, f"source_message_ids[{k}]", mid, "messages"))
    else:
        r = parse_record(RedactionDoc, obj, path, limits)
        b["ids"].append({"section": section, "idx": i, "id": r.id})
        b["ref"].append(_ref(section, i, "message_id", r.message_id, "messages"))


def _ref(section: str, idx: int, name: str, target: str, target_section: str) -> JSONDict:
    return {
        "section": section, "idx": idx, "field": name, "target": target,
        "target_section": target_section,
    }


def _flush_stage(st: _Staged, force: bool) -> Op[None]:
    for name, rows in st.batches.items():
        if rows and (force or len(rows) >= PAGE):
            yield from _insert(name, rows)


def _first(res: Any) -> Any:
    return res.first()


# The cross-record checks: each query returns the first offender, in document order.
_DUP_MESSAGE_ID = sa.text(
    "SELECT b.idx, a.idx FROM convmem_import_msg a JOIN convmem_import_msg b "
    "ON a.id = b.id AND a.idx < b.idx ORDER BY b.idx LIMIT 1"
)
_DUP_SEQ = sa.text(
    "SELECT b.idx, a.idx FROM convmem_import_msg a JOIN convmem_import_msg b "
    "ON a.seq = b.seq AND a.idx < b.idx ORDER BY b.idx LIMIT 1"
)
_DUP_ID = sa.text(
    "SELECT b.section, b.idx, a.idx FROM convmem_import_ids a JOIN convmem_import_ids b "
    "ON a.section = b.section AND a.id = b.id AND a.idx < b.idx ORDER BY b.section, b.idx LIMIT 1"
)
_BAD_PARENT = sa.text(  # in the document and earlier in seq: the graph is a forest
    "SELECT m.idx, p.idx FROM convmem_import_msg m LEFT JOIN convmem_import_msg p "
    "ON p.id = m.parent_id WHERE m.parent_id IS NOT NULL AND (p.idx IS NULL OR p.seq >= m.seq) "
    "ORDER BY m.idx LIMIT 1"
)
_DANGLING = {
    "messages": sa.text(
        "SELECT r.section, r.idx, r.field FROM convmem_import_ref r "
        "WHERE r.target_section = 'messages' AND NOT EXISTS "
        "(SELECT 1 FROM convmem_import_msg x WHERE x.id = r.target) "
        "ORDER BY r.section, r.idx LIMIT 1"
    ),
    "model_inputs": sa.text(
        "SELECT r.section, r.idx, r.field FROM convmem_import_ref r "
        "WHERE r.target_section = 'model_inputs' AND NOT EXISTS "
        "(SELECT 1 FROM convmem_import_ids x WHERE x.id = r.target "
        "AND x.section = 'model_inputs') ORDER BY r.section, r.idx LIMIT 1"
    ),
}
_HAS_MESSAGE = sa.text("SELECT 1 FROM convmem_import_msg WHERE id = :id")
_BAD_COPY = sa.text(
    "SELECT m.idx FROM convmem_import_msg m WHERE m.copy_of IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM convmem_import_msg d WHERE d.id = m.copy_of) "
    "AND NOT EXISTS (SELECT 1 FROM convmem_messages x WHERE x.tenant = :tenant "
    "AND x.id = m.copy_of) ORDER BY m.idx LIMIT 1"
)
_DUP_ATTACHMENT = sa.text(
    "SELECT b.idx, a.idx FROM convmem_import_att a JOIN convmem_import_att b "
    "ON a.sha = b.sha AND a.idx < b.idx ORDER BY b.idx LIMIT 1"
)
_MISSING_ATTACHMENT = sa.text(
    "SELECT r.idx, r.field FROM convmem_import_attref r WHERE NOT EXISTS "
    "(SELECT 1 FROM convmem_import_att a WHERE a.sha = r.sha) ORDER BY r.idx LIMIT 1"
)
_ATTACHMENT_SIZE = sa.text(
    "SELECT r.idx, r.field, a.size FROM convmem_import_attref r JOIN convmem_import_att a "
    "ON a.sha = r.sha WHERE a.size <> r.size ORDER BY r.idx LIMIT 1"
)
_UNREFERENCED_ATTACHMENT = sa.text(
    "SELECT a.idx FROM convmem_import_att a WHERE NOT EXISTS "
    "(SELECT 1 FROM convmem_import_attref r WHERE r.sha = a.sha) ORDER BY a.idx LIMIT 1"
)
_TAKEN = {  # ids this tenant already uses (another thread of its own)
    "messages": sa.text(
        "SELECT s.idx FROM convmem_import_msg s JOIN convmem_messages x "
        "ON x.tenant = :tenant AND x.id = s.id ORDER BY s.idx LIMIT 1"
    ),
    "model_inputs": sa.text(
        "SELECT s.idx FROM convmem_import_ids s JOIN convmem_turns x ON x.tenant = :tenant "
        "AND x.id = s.id WHERE s.section = 'model_inputs' ORDER BY s.idx LIMIT 1"
    ),
    "derived": sa.text(
        "SELECT s.idx FROM convmem_import_ids s JOIN convmem_derived x ON x.tenant = :tenant "
        "AND x.id = s.id WHERE s.section = 'derived' ORDER BY s.idx LIMIT 1"
    ),
    "redactions": sa.text(
        "SELECT s.idx FROM convmem_import_ids s JOIN convmem_redactions x "
        "ON x.tenant = :tenant AND x.id = s.id WHERE s.section = 'redactions' "
        "ORDER BY s.idx LIMIT 1"
    ),
}


def _check_whole(ctx: Ctx, tenant: str, st: _Staged, new_ids: bool) -> Op[None]:
    """Pass 1's cross-record checks, as queries over the staged ids."""
    th = st.thread
    assert th is not None
    if st.max_seq >= th.next_seq:
        raise ImportRefused(
            "$.thread.next_seq",
            f"is {th.next_seq}, but $.messages[{st.max_seq_idx}].seq is {st.max_seq}: "
            "next_seq must be above every message's seq",
        )
    row = _first((yield _DUP_MESSAGE_ID))
    if row is not None:
        raise ImportRefused(f"$.messages[{row[0]}].id", f"repeats $.messages[{row[1]}].id")
    row = _first((yield _DUP_SEQ))
    if row is not None:
        raise ImportRefused(f"$.messages[{row[0]}].seq", f"repeats $.messages[{row[1]}].seq")
    row = _first((yield _DUP_ID))
    if row is not None:
        raise ImportRefused(f"$.{row[0]}[{row[1]}].id", f"repeats $.{row[0]}[{row[2]}].id")
    row = _first((yield _BAD_PARENT))
    if row is not None:
        why = (
            "names no message of this document (a parent must be in the same thread)"
            if row[1] is None
            else f"names $.messages[{row[1]}], which does not come earlier in seq "
            "(parents precede children: no cycles, no self-parent)"
        )
        raise ImportRefused(f"$.messages[{row[0]}].parent_id", why)
    for target_section, query in _DANGLING.items():
        row = _first((yield query))
        if row is not None:
            raise ImportRefused(
                f"$.{row[0]}[{row[1]}].{row[2]}",
                f"names no entry of $.{target_section} (references stay inside the document)",
            )
    if th.active_leaf is not None:
        if _first((yield (_HAS_MESSAGE, {"id": th.active_leaf}))) is None:
            raise ImportRefused("$.thread.active_leaf", "names no message of this document")
    row = _first((yield (_BAD_COPY, {"tenant": tenant})))
    if row is not None:
        raise ImportRefused(
            f"$.messages[{row[0]}].copy_of",
            "names no message of this document nor of this tenant (a copy's original must "
            "be in the document, or be the tenant's message it was forked from)",
        )
    row = _first((yield _DUP_ATTACHMENT))
    if row is not None:
        raise ImportRefused(f"$.attachments[{row[0]}].sha256", f"repeats $.attachments[{row[1]}]")
    row = _first((yield _MISSING_ATTACHMENT))
    if row is not None:
        raise ImportRefused(
            f"$.messages[{row[0]}].{row[1]}", "names no entry of $.attachments (missing data)"
        )
    row = _first((yield _ATTACHMENT_SIZE))
    if row is not None:
        raise ImportRefused(
            f"$.messages[{row[0]}].{row[1].replace('sha256', 'size')}",
            f"does not match the attachment's size ({row[2]})",
        )
    row = _first((yield _UNREFERENCED_ATTACHMENT))
    if row is not None:
        raise ImportRefused(
            f"$.attachments[{row[0]}]", "is referenced by no unredacted message of the document"
        )
    if new_ids:
        return
    taken = _first((yield (
        sa.select(THREADS.c.id).where(
            THREADS.c.tenant == tenant,
            sa.or_(THREADS.c.id == th.id, *([THREADS.c.key == th.key] if th.key else [])),
        )
    )))
    if taken is not None:
        raise ThreadExists(
            f"thread {th.id!r} (key {th.key!r}) already exists for this tenant; import with "
            "new_id=True (convmem threads import --new-id)"
        )
    for section, query in _TAKEN.items():
        row = _first((yield (query, {"tenant": tenant})))
        if row is not None:
            raise ImportRefused(
                f"$.{section}[{row[0]}].id",
                "is already used by another thread of this tenant (import with new_id=True)",
            )


# ---------------------------------------------------------------- import: the operation


def import_thread(
    ctx: Ctx, tenant: str, source: BinaryIO, new_ids: bool, limits: ImportLimits
) -> Op[Thread]:
    """Validate the whole document, then write it (see the module docstring)."""
    edge(tenant)
    yield from _create_staging(ctx)
    st = _Staged()
    hasher = hashlib.sha256()
    reads = _read_records(source, limits, hasher)
    got: Any = None
    while True:
        try:
            item = reads.send(got)
        except StopIteration:
            break
        got = None
        if isinstance(item, Read):
            got = yield item
            continue
        section, i, value = item
        if section in SECTIONS and i is not None:
            _stage_record(st, section, i, value, limits)
            yield from _flush_stage(st, force=False)
        elif section == "format":
            st.fmt = value
            if value != ex.FORMAT:
                check_header(value, ex.VERSION)
        elif section == "version":
            st.version = value
        elif section == "thread":
            st.thread = parse_record(ThreadDoc, value, "$.thread", limits)
    check_header(st.fmt, st.version)
    yield from _flush_stage(st, force=True)
    yield from _check_whole(ctx, tenant, st, new_ids)
    st.digest = hasher.hexdigest()
    yield Rewind(source)
    thread = yield from _write(ctx, tenant, source, st, new_ids, limits)
    yield from _drop_staging(ctx)
    return thread


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

    def many(self, section: str, olds: Sequence[str]) -> list[str]:
        return [str(self(section, o)) for o in olds]


def _write(
    ctx: Ctx, tenant: str, source: BinaryIO, st: _Staged, new_ids: bool, limits: ImportLimits
) -> Op[Thread]:
    """Pass 2: the thread row, then every section in document order, in batches."""
    th = st.thread
    assert th is not None
    m = _Ids(new_ids)
    thread_id = str(m("thread", th.id))
    values = {
        "id": thread_id,
        "tenant": tenant,
        "key": None if new_ids else th.key,
        "owner": th.owner,
        "title": th.title,
        "metadata": th.metadata,
        "created_at": th.created_at,
        "updated_at": th.updated_at,
        "retention": th.retention,
        "active_leaf": m("messages", th.active_leaf),
        "next_seq": th.next_seq,
        "archived_seq": th.archived_seq,
        "forked_from": th.forked_from,
        "incarnation": remapped_id(os.urandom(16), m.ms, "incarnation", thread_id),
    }
    yield sa.insert(THREADS).values(**values)
    hasher = hashlib.sha256()
    reads = _read_records(source, limits, hasher)
    batch: dict[str, list[Any]] = {name: [] for name in SECTIONS}
    got: Any = None
    while True:
        try:
            item = reads.send(got)
        except StopIteration:
            break
        got = None
        if isinstance(item, Read):
            got = yield item
            continue
        section, i, value = item
        if section not in SECTIONS:
            continue
        if i is not None:
            cls = SECTIONS[section]
            batch[section].append(parse_record(cls, value, f"$.{section}[{i}]", limits))
            if len(batch[section]) < PAGE:
                continue
        yield from _write_batch(ctx, tenant, thread_id, section, batch[section], m)
        batch[section] = []
    if hasher.hexdigest() != st.digest:
        raise ImportRefused("$", "changed while it was being imported (read it again)")
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
                sa.text(f"SELECT count(*) FROM {_t('attref')} WHERE sha = :sha"), {"sha": a.sha256}
            )
            n = int(res.scalar_one())
            stmt = ctx.insert(ATTACHMENTS).values(
                tenant=tenant, sha256=a.sha256, media_type=a.media_type, size=a.size,
                data=a.data_base64, refcount=n, created_at=now,
            )
            yield stmt.on_conflict_do_update(
                index_elements=["tenant", "sha256"], set_={"refcount": ATTACHMENTS.c.refcount + n}
            )
    elif section == "messages":
        in_doc: set[str] = set()
        if m.on:
            copies = sorted({r.copy_of for r in recs if r.copy_of is not None})
            if copies:
                res = yield (
                    sa.text(f"SELECT id FROM {_t('msg')} WHERE id IN :ids").bindparams(
                        sa.bindparam("ids", expanding=True)
                    ),
                    {"ids": copies},
                )
                in_doc = {r[0] for r in res.all()}
        rows = [
            {
                "id": m("messages", r.id),
                "thread_id": thread_id,
                "tenant": tenant,
                "parent_id": m("messages", r.parent_id),
                "seq": r.seq,
                "role": r.role,
                "author": r.author,
                "parts": r.parts,
                "extra": r.extra,
                "received_at": r.received_at,
                "client_ts": r.client_ts,
                "visibility": r.visibility,
                "copy_of": m("messages", r.copy_of) if r.copy_of in in_doc else r.copy_of,
                "turn_id": m("model_inputs", r.turn_id),
                "redacted_at": r.redacted_at,
            }
            for r in recs
        ]
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
            [
                {
                    "id": m("model_inputs", t.id),
                    "thread_id": thread_id,
                    "tenant": tenant,
                    "user_message_id": m("messages", t.user_message_id),
                    "rendered_block": t.rendered_block,
                    "state_snapshot": t.state_snapshot,
                    "sent_message_ids": m.many("messages", t.sent_message_ids),
                    "template_sha256": t.system_prompt_sha256,
                    "tool_schemas": t.tool_schemas,
                    "model": t.model,
                    "model_params": t.model_params,
                    "created_at": t.created_at,
                    "completed_at": t.completed_at,
                    "answer_message_id": m("messages", t.answer_message_id),
                    "quoted_message_ids": None
                    if t.quoted_message_ids is None
                    else m.many("messages", t.quoted_message_ids),
                }
                for t in recs
            ],
        )
    elif section == "derived":
        yield (
            sa.insert(DERIVED),
            [
                {
                    "id": m("derived", d.id),
                    "thread_id": thread_id,
                    "tenant": tenant,
                    "kind": d.kind,
                    "content": d.content,
                    "source_message_ids": m.many("messages", d.source_message_ids),
                    "created_at": d.created_at,
                    "tombstoned_at": d.tombstoned_at,
                }
                for d in recs
            ],
        )
    else:
        rows = []
        for r in recs:
            affected = dict(r.affected)
            if m.on:
                affected = yield from _map_affected(m, affected)
            rows.append(
                {
                    "id": m("redactions", r.id),
                    "thread_id": thread_id,
                    "tenant": tenant,
                    "message_id": m("messages", r.message_id),
                    "actor": r.actor,
                    "reason": r.reason,
                    "at": r.at,
                    "affected": affected,
                }
            )
        yield (sa.insert(REDACTIONS), rows)


def _map_affected(m: _Ids, affected: dict[str, Any]) -> Op[dict[str, Any]]:
    """A redaction log's ids, mapped where they are the document's own."""
    out: dict[str, Any] = {}
    for key, section, table, extra in (
        ("messages", "messages", _t("msg"), ""),
        ("turns", "model_inputs", _t("ids"), " AND section = 'model_inputs'"),
        ("derived", "derived", _t("ids"), " AND section = 'derived'"),
    ):
        olds = list(affected.get(key, []))
        known: set[str] = set()
        if olds:
            res = yield (
                sa.text(f"SELECT id FROM {table} WHERE id IN :ids{extra}").bindparams(
                    sa.bindparam("ids", expanding=True)
                ),
                {"ids": olds},
            )
            known = {r[0] for r in res.all()}
        out[key] = [m(section, o) if o in known else o for o in olds]
    return out

