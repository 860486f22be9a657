"""The durable conversation record: append-only, branchable, reconstructible, erasable.

``TranscriptStore`` keeps threads as trees of immutable messages in SQL (SQLite by
default, PostgreSQL in production), records per turn what the model received,
and exports, redacts, deletes and sweeps a thread as one unit. ``convmem`` does
not import this package at import time; import it when a transcript is wanted.
"""

from __future__ import annotations

from convmem.transcript.document import ImportLimits
from convmem.transcript.errors import (
    ImportRefused,
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

__all__ = [
    "AttachmentPart",
    "DeletionReceipt",
    "DerivedMemory",
    "ImportLimits",
    "ImportRefused",
    "Message",
    "ModelInput",
    "NewMessage",
    "Part",
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
