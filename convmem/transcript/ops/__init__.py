"""Every transcript operation, written once as a sans-I/O generator.
The operations live by concern: ``base`` (steps, context, row decoding, the edge),
``messages`` (the steps most operations share), ``threads``, ``append``, ``turns``,
``reads``, ``indexing`` (the deferred search index), ``redaction``, and ``portability`` (export and import; loaded on first use,
it brings the document reader). This package re-exports the rest, so ``ops.append``
names the operation wherever it lives.

An operation is a generator that *yields* SQLAlchemy statements (or a statement
and its parameter rows, for an executemany whose compiled form is cached) and is *sent* each
statement's (buffered) result; its return value is the operation's result. The
store runs the same generator on a sync ``Connection`` or an ``AsyncConnection``
inside one transaction, so the sync and async twins share every statement and
every decision and differ only in ``execute`` versus ``await execute``. Each
generator consumes a result before yielding the next statement.

Writers lock the thread row first (``SELECT ... FOR UPDATE`` on PostgreSQL; on
SQLite the store opens write transactions with ``BEGIN IMMEDIATE``), then take
their sequence numbers with one ``UPDATE ... RETURNING next_seq`` that also moves
the active leaf, so concurrent appends to one thread queue up and form one linear,
gapless path. On PostgreSQL ``insert_chain`` does the lock, the read of the active
leaf, the sequence numbers, the messages and their search text (indexed or queued:
``indexing``) in one statement;
an append to the active leaf is that statement alone (``Alone``: autocommit, one
round trip). Every statement filters on ``tenant``, and ids are namespaced by tenant
(primary keys ``(tenant, id)``): a thread of another tenant is indistinguishable from
a missing one (``ThreadNotFound``), and taking its id creates an unrelated thread.

The edge: tenants, keys and ids go through ``convmem.identity`` (a ``ConfigError``
naming the field, the same on SQLite and PostgreSQL); free text and JSON written to
the record (message parts, ``extra``, model inputs, metadata, derived memories, the
redaction log) and search queries have NUL and lone surrogates replaced by U+FFFD
(``clean_text``), so neither database ever sees them. Reads that walk parent links
stay inside one tenant's thread at every step and stop after ``next_seq`` steps (no
path is longer than the thread), and a loop found in stored links is
``RecordCorrupt``, never a hang.
"""

from __future__ import annotations

from convmem.transcript.ops.append import (
    append,
    archive_through,
    branches,
    rebase_path,
    set_active_leaf,
    sibling,
    switch,
)
from convmem.transcript.ops.base import (
    ACTIVE,
    ID_CHARS,
    JSON_INT,
    MSG_COLS,
    SEARCH_INDEX_MODES,
    ActiveLeaf,
    Alone,
    Ctx,
    Op,
    Read,
    Rewind,
    Step,
    Write,
    bounded,
    clean_json,
    clean_message,
    clean_part,
    content_key,
    edge,
    search_body,
    sha256_of,
    to_derived,
    to_message,
    to_thread,
)
from convmem.transcript.ops.indexing import index_batch, index_queued
from convmem.transcript.ops.messages import (
    add_attachment_refs,
    attachment_refs,
    corrupt_links,
    drop_attachment_refs,
    get_message,
    insert_chain,
    insert_message_rows,
    lock_thread,
    missing_thread,
    read_path,
    read_thread,
)
from convmem.transcript.ops.reads import (
    add_derived,
    export_user_view,
    fts_query,
    get_attachment,
    get_messages,
    list_derived,
    search,
    tree,
)
from convmem.transcript.ops.redaction import (
    PREFIX_MIN,
    delete_thread,
    expired_threads,
    optimize_search,
    quotes,
    redact,
    redact_parts,
    scrub,
    text_forms,
)
from convmem.transcript.ops.threads import (
    create_thread,
    create_thread_for_key,
    find_thread,
    fork_thread,
    get_thread,
    list_threads,
    set_retention,
)
from convmem.transcript.ops.turns import (
    begin_turn_record,
    bind_turn,
    complete_turn,
    complete_turn_on_leaf,
    reconstruct_model_input,
)
from convmem.transcript.records import TextPart, ToolCallPart, ToolResultPart

__all__ = [
    "ACTIVE",
    "ID_CHARS",
    "JSON_INT",
    "MSG_COLS",
    "PREFIX_MIN",
    "SEARCH_INDEX_MODES",
    "ActiveLeaf",
    "Alone",
    "Ctx",
    "Op",
    "Read",
    "Rewind",
    "Step",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "Write",
    "add_attachment_refs",
    "add_derived",
    "append",
    "archive_through",
    "attachment_refs",
    "begin_turn_record",
    "bind_turn",
    "bounded",
    "branches",
    "clean_json",
    "clean_message",
    "clean_part",
    "complete_turn",
    "complete_turn_on_leaf",
    "content_key",
    "corrupt_links",
    "create_thread",
    "create_thread_for_key",
    "delete_thread",
    "drop_attachment_refs",
    "edge",
    "expired_threads",
    "export_user_view",
    "find_thread",
    "fork_thread",
    "fts_query",
    "get_attachment",
    "get_message",
    "get_messages",
    "get_thread",
    "index_batch",
    "index_queued",
    "insert_chain",
    "insert_message_rows",
    "list_derived",
    "list_threads",
    "lock_thread",
    "missing_thread",
    "optimize_search",
    "quotes",
    "read_path",
    "read_thread",
    "rebase_path",
    "reconstruct_model_input",
    "redact",
    "redact_parts",
    "scrub",
    "search",
    "search_body",
    "set_active_leaf",
    "set_retention",
    "sha256_of",
    "sibling",
    "switch",
    "text_forms",
    "to_derived",
    "to_message",
    "to_thread",
    "tree",
]
