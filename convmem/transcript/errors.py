"""Errors specific to the durable record; the whole tree is drawn in ``convmem.errors``.

``ThreadNotFound`` is a ``NotFound`` (a ``LookupError``), not a ``ConfigError``: the
call was fine, the thread (message, attachment) is not there for this tenant.
"""

from __future__ import annotations

from convmem.errors import ConfigError, ConvMemError, NotFound, TranscriptUnavailable


class ThreadExists(ConfigError):
    """A thread with this id or key already exists for the tenant."""


class ThreadNotFound(NotFound):
    """The thread (or a message in it) does not exist for this tenant.

    Cross-tenant access raises this too, so a caller cannot learn that another
    tenant's thread exists.
    """


class ThreadDeleted(ThreadNotFound, TranscriptUnavailable):
    """The thread a turn began on was deleted (or deleted and re-created) since.

    A turn binds to its thread's incarnation when it begins; a commit point of a turn
    that began before a deletion fails with this and writes nothing, so an erased
    thread never comes back. Being a ``TranscriptUnavailable``, it fails the turn in
    ``on_transcript_error="raise"`` mode and is logged and counted in ``"degrade"``.
    """


class QuotedRedacted(ConvMemError):
    """Commit point 1 lost a race with a redaction: a message its model input quotes
    (``ModelInput.quoted_message_ids``) was redacted after the input was rendered.
    Nothing was written; ``message_ids`` are the quoted messages no longer intact.
    ``SessionMemory`` takes their questions out of the turn and records it again."""

    def __init__(self, message_ids: list[str]) -> None:
        super().__init__(
            f"model input not recorded: it quotes message(s) {', '.join(message_ids)}, "
            "redacted since it was rendered; render it again without them"
        )
        self.message_ids = message_ids


class ImportRefused(ConfigError):
    """An import document was refused; ``path`` is the JSON path of the first problem."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"import refused: {path} {problem}; nothing was written")
        self.path = path
        self.problem = problem


class RecordCorrupt(ConvMemError):
    """A stored thread breaks the record's invariants (e.g. its parent links loop).

    Imports refuse such documents and the store never writes one; this guards reads
    of databases written by older versions or edited by hand.
    """


class AttachmentNotFound(NotFound):
    """No attachment with this digest for this tenant (erased, or another tenant's).

    Not a ``ThreadNotFound``: the thread is there, so a caller renewing a thread it
    thinks was deleted must not catch this.
    """
