"""Test support importable by third-party backends: the conformance suites and the
pytest plugin that provides real servers (``convmem.testing.pytest_plugin``)."""

from __future__ import annotations

from typing import Any

__all__ = ["SessionStateStoreSpec"]


def __getattr__(name: str) -> Any:
    # Imported lazily so ``convmem.testing.servers`` works without pytest loaded.
    if name == "SessionStateStoreSpec":
        from convmem.testing.state_store_spec import SessionStateStoreSpec

        return SessionStateStoreSpec
    raise AttributeError(f"module 'convmem.testing' has no attribute {name!r}")
