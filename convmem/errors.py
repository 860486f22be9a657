"""The exception tree, on one screen.

    ConvMemError
    ├── ConfigError            bad configuration: a domain file, a missing thread id, a bad argument
    ├── VersionConflict        compare-and-set lost: somebody saved the state first
    ├── StateUnavailable       the session-state store is down and the store is strict
    ├── CorruptState           a stored state value does not decode
    └── TranscriptUnavailable  the durable record cannot be written before a model call

Degradation (a cache outage becomes an empty state) is not an exception: non-strict
stores log it once per incident and count it; see ``convmem.stores``.
"""

from __future__ import annotations


class ConvMemError(Exception):
    """Root of every error convmem raises on purpose."""


class ConfigError(ConvMemError, ValueError):
    """Configuration or input is wrong; the message names what and where."""


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
