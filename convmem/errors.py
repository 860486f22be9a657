"""The exception tree, on one screen.

    ConvMemError
    ├── ConfigError (ValueError)    bad configuration or input; the message names what and where
    │   ├── ThreadExists            an id or key is already taken in this tenant (import: --new-id)
    │   └── ImportRefused           an import document convmem could not have written; names
    │                               the JSON path ($.messages[0].parent_id); nothing was written
    ├── NotFound (LookupError)      what was asked for does not exist for this tenant
    │   ├── AttachmentNotFound      no attachment with this digest *in this tenant*
    │   └── ThreadNotFound          no such thread or message *in this tenant*
    │       └── ThreadDeleted       (also a TranscriptUnavailable) the thread a turn began on
    │                               was deleted since: the turn's commit point writes nothing
    ├── ResolverError (ValueError)  a resolver's model failed, refused or answered something
    │                               invalid for the domain; StructuredResolver falls back on it
    ├── VersionConflict             compare-and-set lost: somebody saved the state first
    ├── StateUnavailable            the session-state store is down and the store is strict
    ├── CorruptState (ValueError)   a stored state value does not decode
    ├── TranscriptUnavailable       the durable record cannot be written before a model call
    ├── QuotedRedacted              commit point 1 quotes a message redacted since it was
    │                               rendered: nothing written (SessionMemory renders again)
    └── RecordCorrupt               a stored thread breaks the record's invariants (a parent cycle)

The transcript's errors (``ThreadExists``, ``ImportRefused``, ``ThreadNotFound``,
``AttachmentNotFound``, ``ThreadDeleted``, ``QuotedRedacted``, ``RecordCorrupt``) live in ``convmem.transcript.errors`` and are
exported by ``convmem.transcript``; the rest here and from ``convmem``. A caller that
wants "does not exist" catches ``NotFound`` (or ``LookupError``), not ``ConfigError``:
a missing thread is not a mistake in the call, and another tenant's thread looks
missing too.

Degradation (a cache outage becomes an empty state) is not an exception: non-strict
stores log it once per incident and count it; see ``convmem.stores``.
"""

from __future__ import annotations


class ConvMemError(Exception):
    """Root of every error convmem raises on purpose."""


class ConfigError(ConvMemError, ValueError):
    """Configuration or input is wrong; the message names what and where."""


class NotFound(ConvMemError, LookupError):
    """What was asked for does not exist (for this tenant); nothing is wrong with the call."""


class ResolverError(ConvMemError, ValueError):
    """A resolver could not read the question: its model failed, refused or answered
    something invalid for the domain (the message names the field). A ``ValueError`` too,
    so code written against the ``ValueError`` the resolvers raised before still catches it."""


class VersionConflict(ConvMemError):
    """A compare-and-set save found a different version than expected."""

    def __init__(self, key: str, expected: int, actual: int | None) -> None:
        super().__init__(f"state {key!r}: expected version {expected}, found {actual}")
        self.key = key
        self.expected = expected
        self.actual = actual


class StateUnavailable(ConvMemError):
    """The session-state store could not be reached and it was asked to be strict."""


class CorruptState(ConvMemError, ValueError):
    """A stored session-state value could not be decoded."""


class TranscriptUnavailable(ConvMemError):
    """The durable record could not be written; the model must not be called."""
