"""The public names of ``convmem.stores`` and ``convmem.transcript``, pinned: adding or
removing one is an API change, made here on purpose (``convmem``'s own list is pinned in
``test_eval_and_cli.py``, the adapters' in their folders' construction tests)."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "convmem.stores": [
        "InMemorySessionStateStore", "SessionStateStore", "StoreStats", "state_key",
    ],
    "convmem.transcript": [
        "AttachmentNotFound", "AttachmentPart", "DeletionReceipt", "DerivedMemory",
        "ImportLimits", "ImportRefused", "Message", "ModelInput", "NewMessage", "Part",
        "QuotedRedacted",
        "ReconstructedInput", "RecordCorrupt", "RedactionReceipt", "RetentionPolicy",
        "SearchHit", "SweepReport", "TextPart", "Thread", "ThreadDeleted", "ThreadExists",
        "ThreadNotFound", "ThreadTree", "ToolCallPart", "ToolResultPart", "TranscriptStore",
        "TurnBinding", "TurnRecord",
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_names_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PUBLIC[package])
    assert len(set(module.__all__)) == len(module.__all__)  # each listed once
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_the_redis_stores_resolve_without_being_listed() -> None:
    """They are reached by name (``convmem.stores.RedisSessionStateStore``, importing
    redis-py then) and stay out of ``__all__``."""
    pytest.importorskip("redis")
    stores = importlib.import_module("convmem.stores")
    for name in ("RedisSessionStateStore", "RedisClusterSessionStateStore"):
        assert getattr(stores, name).__name__ == name
        assert name not in stores.__all__
