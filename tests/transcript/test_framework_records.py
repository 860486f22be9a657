"""``convmem.transcript.framework_records``: the rules both adapters map records by, with
no database (the adapters' round trips through real stores are ``tests/test_adapter_records.py``
and each adapter folder's record tests)."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import pytest

from convmem.errors import ConfigError
from convmem.transcript import AttachmentPart, Message, NewMessage, TextPart
from convmem.transcript.framework_records import (
    FrameworkNamespace,
    attachment_bytes,
    attachment_digests,
    same_record,
    stored_parts,
)

NS = FrameworkNamespace("fw", version=2, reads=frozenset({0, 2}))
PNG = b"\x89PNG" + bytes(range(40))
SHA = hashlib.sha256(PNG).hexdigest()


def stored(parts: tuple[object, ...], extra: dict[str, object]) -> Message:
    return Message(
        id="m", thread_id="t", parent_id=None, seq=1, role="user", parts=parts,  # type: ignore[arg-type]
        author=None, extra=extra, received_at=datetime.now(timezone.utc), client_ts=None,
        visibility="conversation", copy_of=None, turn_id=None, redacted=False,
    )


@pytest.mark.parametrize(("extra", "payload"), [
    ({"fw": {"v": 2, "a": 1}}, {"a": 1}),
    ({"fw": {"a": 1}}, {"a": 1}),  # written before the namespace carried a version: 0
    ({"fw": {"v": 1, "a": 1}}, None),  # a version this code does not read
    ({"other": {"v": 2}}, None),
    ({"fw": "not an object"}, None),
    (None, None),
])
def test_unpack_reads_only_known_versions(extra: dict[str, object] | None, payload: object) -> None:
    assert NS.unpack(extra) == payload


def test_pack_versions_and_reserves_the_version_key() -> None:
    assert NS.pack({"a": 1}) == {"fw": {"v": 2, "a": 1}}
    with pytest.raises(ConfigError, match="reserved"):
        NS.pack({"v": 3})
    with pytest.raises(ConfigError, match="readable"):
        FrameworkNamespace("fw", version=3, reads=frozenset({1}))


def test_redacted_attachments_are_not_fetched_and_read_as_none() -> None:
    live = AttachmentPart("image/png", "scan.png", sha256=SHA, size=len(PNG))
    redacted = AttachmentPart("image/png", "[redacted]")  # what redact leaves
    records = [stored((live, redacted), {}), stored((redacted, live), {})]
    assert attachment_digests(records) == [SHA]
    assert attachment_bytes(live, {SHA: PNG}) == PNG
    assert attachment_bytes(redacted, {SHA: PNG}) is None


def test_stored_parts_are_what_a_read_returns() -> None:
    parts, blobs = stored_parts([TextPart("hi"), AttachmentPart("image/png", "scan.png", data=PNG)])
    assert parts == (TextPart("hi"), AttachmentPart("image/png", "scan.png", sha256=SHA, size=len(PNG)))
    assert blobs == {SHA: PNG}


def test_same_record_is_rebase_paths_rule() -> None:
    """Same role, stored parts and extra, exactly (``TranscriptStore.rebase_path``)."""
    new = NewMessage("user", [AttachmentPart("image/png", "scan.png", data=PNG)],
                     extra={**NS.pack({"a": 1}), "convmem": {"x": 1}})
    ref = (AttachmentPart("image/png", "scan.png", sha256=SHA, size=len(PNG)),)
    assert same_record(new, stored(ref, {"fw": {"v": 2, "a": 1}, "convmem": {"x": 1}}))
    assert not same_record(new, stored(ref, {"fw": {"a": 1}, "convmem": {"x": 1}}))  # unversioned
    assert not same_record(new, stored(ref, {"fw": {"v": 2, "a": 1}}))  # other keys count too
    assert not same_record(new, stored((TextPart("scan.png"),), new.extra or {}))
