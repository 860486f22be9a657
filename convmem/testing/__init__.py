"""Test support importable by third-party backends: the conformance suites and the
pytest plugin that provides real servers (``convmem.testing.pytest_plugin``).

Both suites are built alike (async tests run through the sync and the async methods, a
typed driver, backend ids): ``SessionStateStoreSpec`` for session-state stores,
``TranscriptStoreSpec`` for the durable record. Names load on first use (PEP 562), so a
session-state backend does not import SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem._lazy import lazy_names

if TYPE_CHECKING:
    from convmem.testing.state_store_spec import SessionStateStoreSpec
    from convmem.testing.transcript_spec import TranscriptStoreSpec

#: The public names each submodule defines.
_HOMES = {
    ".state_store_spec": ("SessionStateStoreSpec",),
    ".transcript_spec": ("TranscriptStoreSpec",),
}

__all__ = ["SessionStateStoreSpec", "TranscriptStoreSpec"]


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
