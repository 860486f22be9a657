"""Test support importable by third-party backends: the conformance suites and the
pytest plugin that provides real servers (``convmem.testing.pytest_plugin``)."""

from __future__ import annotations

from convmem.testing.state_store_spec import SessionStateStoreSpec

__all__ = ["SessionStateStoreSpec"]
