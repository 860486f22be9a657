"""Import pass 1: reading the document, staging its ids, the cross-record checks.

Each record is checked on its own (``document.parse_record``) as it is read, and its
ids and references go into temporary tables of the import's own transaction
(``staged(name)``: private to it, dropped at its end). ``check_whole`` then asks those
tables, one query per rule, for the first offender in document order, so the first
problem is one ``ImportRefused`` naming its JSON path and nothing has been written.
The operation itself is ``convmem.transcript.ops.portability.import_thread``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import sqlalchemy as sa

from convmem.transcript.document import (
    AttachmentDoc,
    DerivedDoc,
    ImportLimits,
    MessageDoc,
    ModelInputDoc,
    RedactionDoc,
    ThreadDoc,
    parse_record,
    system_prompt_matches,
)
from convmem.transcript.errors import ImportRefused, ThreadExists
from convmem.transcript.models import (
    THREADS,
)
from convmem.transcript.ops.base import Ctx, Op, Read
from convmem.transcript.reader import DocumentReader
from convmem.transcript.records import JSONDict

CHUNK = 256 * 1024  # bytes read or written per step
PAGE = 500  # rows per export page and per import batch


#: What ``read_records`` hands each parsed record to: (section, index or None, value).
OnRecord = Callable[[str, int | None, Any], Op[None]]


def read_records(source: BinaryIO, limits: ImportLimits, hasher: Any, each: OnRecord) -> Op[None]:
    """Read the document a chunk at a time (``Read`` steps), and run ``each`` on every
    value it completes, in document order: one chunk's records in memory, never more."""
    reader = DocumentReader(limits)
    while True:
        chunk = yield Read(source, CHUNK)
        if not isinstance(chunk, (bytes, bytearray)):
            raise ImportRefused("$", "is not binary data (read the document in binary mode)")
        hasher.update(chunk)
        reader.feed(bytes(chunk))
        for section, i, value in reader.pop():
            yield from each(section, i, value)
        if not chunk:
            return


# ---------------------------------------------------------------- import: staging


_STAGE = {
    "msg": "idx INTEGER, id VARCHAR(64), seq INTEGER, parent_id VARCHAR(64), "
    "copy_of VARCHAR(64), turn_id VARCHAR(64), role VARCHAR(16), redacted INTEGER",
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


def staged(name: str) -> str:
    return f"convmem_import_{name}"


def create_staging(ctx: Ctx) -> Op[None]:
    on_commit = " ON COMMIT DROP" if ctx.dialect == "postgresql" else ""
    for name, cols in _STAGE.items():
        yield sa.text(f"DROP TABLE IF EXISTS {staged(name)}")
        yield sa.text(f"CREATE TEMPORARY TABLE {staged(name)} ({cols}){on_commit}")
    for name, cols in _STAGE_INDEXES:
        index = f"{staged(name)}_{cols.replace(', ', '_')}"
        yield sa.text(f"CREATE INDEX {index} ON {staged(name)} ({cols})")


def drop_staging(ctx: Ctx) -> Op[None]:
    if ctx.dialect != "postgresql":  # PostgreSQL drops them at commit
        for name in _STAGE:
            yield sa.text(f"DROP TABLE IF EXISTS {staged(name)}")


def _insert(name: str, rows: list[JSONDict]) -> Op[None]:
    if rows:
        cols = list(rows[0])
        yield (
            sa.text(
                f"INSERT INTO {staged(name)} ({', '.join(cols)}) "
                f"VALUES ({', '.join(':' + c for c in cols)})"
            ),
            rows,
        )
        rows.clear()


@dataclass
class Staged:
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


def stage_record(st: Staged, section: str, i: int, obj: Any, limits: ImportLimits) -> None:
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
             "copy_of": m.copy_of, "turn_id": m.turn_id, "role": m.role,
             "redacted": int(m.redacted_at is not None)}
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


def flush_stage(st: Staged, force: bool) -> Op[None]:
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
        "SELECT r.section, r.idx, r.field, r.target_section FROM convmem_import_ref r "
        "WHERE r.target_section = 'messages' AND NOT EXISTS "
        "(SELECT 1 FROM convmem_import_msg x WHERE x.id = r.target) "
        "ORDER BY r.section, r.idx LIMIT 1"
    ),
    "model_inputs": sa.text(
        "SELECT r.section, r.idx, r.field, r.target_section FROM convmem_import_ref r "
        "WHERE r.target_section = 'model_inputs' AND NOT EXISTS "
        "(SELECT 1 FROM convmem_import_ids x WHERE x.id = r.target "
        "AND x.section = 'model_inputs') ORDER BY r.section, r.idx LIMIT 1"
    ),
}
# A reference to a message of the document that is not the kind the field names
# (after ``_DANGLING``: the message is there).
_WRONG_KIND = {
    "user message": sa.text(  # a turn begins with the user's message
        "SELECT r.idx, m.idx, m.role FROM convmem_import_ref r JOIN convmem_import_msg m "
        "ON m.id = r.target WHERE r.section = 'model_inputs' AND r.field = 'user_message_id' "
        "AND m.role <> 'user' ORDER BY r.idx LIMIT 1"
    ),
    "redacted message": sa.text(  # the log records a redaction that happened
        "SELECT r.idx, m.idx FROM convmem_import_ref r JOIN convmem_import_msg m "
        "ON m.id = r.target WHERE r.section = 'redactions' AND r.field = 'message_id' "
        "AND m.redacted = 0 ORDER BY r.idx LIMIT 1"
    ),
}
_HAS_MESSAGE = sa.text("SELECT 1 FROM convmem_import_msg WHERE id = :id")
_BAD_COPY = sa.text(
    "SELECT m.idx FROM convmem_import_msg m WHERE m.copy_of IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM convmem_import_msg d WHERE d.id = m.copy_of) "
    "AND NOT EXISTS (SELECT 1 FROM convmem_messages x WHERE x.tenant = :tenant "
    "AND x.id = m.copy_of) ORDER BY m.idx LIMIT 1"
)
#: A copy arriving whole whose original is redacted (stored, or in the document): a
#: redaction reaches every copy, so a backup taken before it cannot bring one back.
_REDACTED_ORIGINAL = sa.text(
    "SELECT m.idx FROM convmem_import_msg m WHERE m.copy_of IS NOT NULL AND m.redacted = 0 "
    "AND (EXISTS (SELECT 1 FROM convmem_import_msg d WHERE d.id = m.copy_of AND d.redacted = 1) "
    "OR (NOT EXISTS (SELECT 1 FROM convmem_import_msg d WHERE d.id = m.copy_of) "
    "AND EXISTS (SELECT 1 FROM convmem_messages x WHERE x.tenant = :tenant "
    "AND x.id = m.copy_of AND x.redacted_at IS NOT NULL))) ORDER BY m.idx LIMIT 1"
)
#: The threads holding the stored originals of the document's copies, locked ``FOR
#: SHARE`` in id order (PostgreSQL; SQLite has one writer). A redaction holds them ``FOR
#: UPDATE`` while it reads the copies it rewrites, so it either commits first (the
#: check after this lock sees the original redacted) or waits for this import and then
#: finds the new copies.
_LOCK_ORIGINALS = sa.text(
    "SELECT t.id FROM convmem_threads t WHERE t.tenant = :tenant AND t.id IN ("
    "SELECT x.thread_id FROM convmem_messages x JOIN convmem_import_msg m "
    "ON x.tenant = :tenant AND x.id = m.copy_of) ORDER BY t.id FOR SHARE"
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

#: A cross-record check: its query (``:tenant`` is bound) and the refusal, (JSON path,
#: why), for the first offending row it returns.
_Check = tuple[sa.TextClause, Callable[[Any], tuple[str, str]]]


def _bad_parent(row: Any) -> tuple[str, str]:
    why = (
        "names no message of this document (a parent must be in the same thread)"
        if row[1] is None
        else f"names $.messages[{row[1]}], which does not come earlier in seq "
        "(parents precede children: no cycles, no self-parent)"
    )
    return f"$.messages[{row[0]}].parent_id", why


def _dangling(row: Any) -> tuple[str, str]:
    return (
        f"$.{row[0]}[{row[1]}].{row[2]}",
        f"names no entry of $.{row[3]} (references stay inside the document)",
    )


# In the order they run (the active leaf is checked between the two).
_IDS_AND_REFERENCES: tuple[_Check, ...] = (
    (_DUP_MESSAGE_ID, lambda r: (f"$.messages[{r[0]}].id", f"repeats $.messages[{r[1]}].id")),
    (_DUP_SEQ, lambda r: (f"$.messages[{r[0]}].seq", f"repeats $.messages[{r[1]}].seq")),
    (_DUP_ID, lambda r: (f"$.{r[0]}[{r[1]}].id", f"repeats $.{r[0]}[{r[2]}].id")),
    (_BAD_PARENT, _bad_parent),
    (_DANGLING["messages"], _dangling),
    (_DANGLING["model_inputs"], _dangling),
    (
        _WRONG_KIND["user message"],
        lambda r: (
            f"$.model_inputs[{r[0]}].user_message_id",
            f"names $.messages[{r[1]}], whose role is {r[2]!r}: a model input's user "
            "message must have the role 'user'",
        ),
    ),
    (
        _WRONG_KIND["redacted message"],
        lambda r: (
            f"$.redactions[{r[0]}].message_id",
            f"names $.messages[{r[1]}], which is not redacted (its redacted_at is null): "
            "the log only records redactions that happened",
        ),
    ),
)
_REDACTED_COPY: _Check = (
    _REDACTED_ORIGINAL,
    lambda r: (
        f"$.messages[{r[0]}].copy_of",
        "names a redacted message, but this copy of it is not redacted (a redaction "
        "reaches every copy: export the thread again, after the redaction)",
    ),
)
_COPIES_AND_ATTACHMENTS: tuple[_Check, ...] = (
    (
        _BAD_COPY,
        lambda r: (
            f"$.messages[{r[0]}].copy_of",
            "names no message of this document nor of this tenant (a copy's original must "
            "be in the document, or be the tenant's message it was forked from)",
        ),
    ),
    _REDACTED_COPY,
    (
        _DUP_ATTACHMENT,
        lambda r: (f"$.attachments[{r[0]}].sha256", f"repeats $.attachments[{r[1]}]"),
    ),
    (
        _MISSING_ATTACHMENT,
        lambda r: (f"$.messages[{r[0]}].{r[1]}", "names no entry of $.attachments (missing data)"),
    ),
    (
        _ATTACHMENT_SIZE,
        lambda r: (
            f"$.messages[{r[0]}].{r[1].replace('sha256', 'size')}",
            f"does not match the attachment's size ({r[2]})",
        ),
    ),
    (
        _UNREFERENCED_ATTACHMENT,
        lambda r: (
            f"$.attachments[{r[0]}]",
            "is referenced by no unredacted message of the document",
        ),
    ),
)


def _run_checks(checks: tuple[_Check, ...], tenant: str) -> Op[None]:
    """Run ``checks`` in order; the first offending row found is the refusal."""
    for query, refusal in checks:
        row = _first((yield (query, {"tenant": tenant})))
        if row is not None:
            raise ImportRefused(*refusal(row))


def check_originals_locked(ctx: Ctx, tenant: str) -> Op[None]:
    """The copies' originals checked again under their threads' locks, last, right
    before the import commits: a redaction that committed since pass 1 is seen, and one
    still to come waits for the commit (a turn on those threads waits only for that)."""
    if ctx.dialect == "postgresql":
        yield (_LOCK_ORIGINALS, {"tenant": tenant})
        yield from _run_checks((_REDACTED_COPY,), tenant)


def check_whole(ctx: Ctx, tenant: str, st: Staged, new_ids: bool) -> Op[None]:
    """Pass 1's cross-record checks, as queries over the staged ids."""
    th = st.thread
    assert th is not None
    if st.max_seq >= th.next_seq:
        raise ImportRefused(
            "$.thread.next_seq",
            f"is {th.next_seq}, but $.messages[{st.max_seq_idx}].seq is {st.max_seq}: "
            "next_seq must be above every message's seq",
        )
    yield from _run_checks(_IDS_AND_REFERENCES, tenant)
    if th.active_leaf is not None:
        if _first((yield (_HAS_MESSAGE, {"id": th.active_leaf}))) is None:
            raise ImportRefused("$.thread.active_leaf", "names no message of this document")
    yield from _run_checks(_COPIES_AND_ATTACHMENTS, tenant)
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


