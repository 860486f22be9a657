"""Test support importable by third-party backends: the conformance suites and the
pytest plugin that provides real servers (``convmem.testing.pytest_plugin``).

Both suites are built alike (async tests run through the sync and the async methods, a
typed driver, backend ids): ``SessionStateStoreSpec`` for session-state stores,
``TranscriptStoreSpec`` for the durable record. Names load on first use (PEP 562), so a
session-state backend does not import SQLAlchemy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convmem.testing.state_store_spec import SessionStateStoreSpec
    from convmem.testing.transcript_spec import TranscriptStoreSpec

_HOME = {
    "SessionStateStoreSpec": "state_store_spec",
    "TranscriptStoreSpec": "transcript_spec",
}

__all__ = ["SessionStateStoreSpec", "TranscriptStoreSpec"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
