"""The durable conversation record: append-only, branchable, reconstructible, erasable.

``TranscriptStore`` keeps threads as trees of immutable messages in SQL (SQLite by
default, PostgreSQL in production), records per turn what the model received,
and exports, redacts, deletes and sweeps a thread as one unit. ``convmem`` does
not import this package at import time; import it when a transcript is wanted.
Names are resolved on first use (PEP 562), so ``convmem.transcript.cli`` builds its
parser without importing SQLAlchemy, and the records without the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem._lazy import lazy_names

if TYPE_CHECKING:
    from convmem.transcript.document import ImportLimits
    from convmem.transcript.errors import (
        AttachmentNotFound,
        ImportRefused,
        QuotedRedacted,
        RecordCorrupt,
        ThreadDeleted,
        ThreadExists,
        ThreadNotFound,
    )
    from convmem.transcript.records import (
        AttachmentPart,
        DeletionReceipt,
        DerivedMemory,
        Message,
        ModelInput,
        NewMessage,
        Part,
        ReconstructedInput,
        RedactionReceipt,
        RetentionPolicy,
        SearchHit,
        SweepReport,
        TextPart,
        Thread,
        ThreadTree,
        ToolCallPart,
        ToolResultPart,
        TurnBinding,
        TurnRecord,
    )
    from convmem.transcript.store import TranscriptStore

#: The public names each submodule other than ``records`` defines; every other name in
#: ``__all__`` is a record.
_HOMES = {
    ".document": ("ImportLimits",),
    ".errors": (
        "AttachmentNotFound",
        "ImportRefused",
        "QuotedRedacted",
        "RecordCorrupt",
        "ThreadDeleted",
        "ThreadExists",
        "ThreadNotFound",
    ),
    ".store": ("TranscriptStore",),
}

__all__ = [
    "AttachmentNotFound",
    "AttachmentPart",
    "DeletionReceipt",
    "DerivedMemory",
    "ImportLimits",
    "ImportRefused",
    "Message",
    "ModelInput",
    "NewMessage",
    "Part",
    "QuotedRedacted",
    "ReconstructedInput",
    "RecordCorrupt",
    "RedactionReceipt",
    "RetentionPolicy",
    "SearchHit",
    "SweepReport",
    "TextPart",
    "Thread",
    "ThreadDeleted",
    "ThreadExists",
    "ThreadNotFound",
    "ThreadTree",
    "ToolCallPart",
    "ToolResultPart",
    "TranscriptStore",
    "TurnBinding",
    "TurnRecord",
]


__getattr__, __dir__ = lazy_names(
    __name__, {**_HOMES, ".records": set(__all__).difference(*_HOMES.values())}, __all__
)
