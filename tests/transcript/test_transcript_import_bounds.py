"""One huge record cannot make an import unbounded (issue 22, finding 3).

A document of one message full of ``{}`` used to be built whole as Python objects
(10 MB of JSON: 360 MB of memory) and then accepted or refused. ``ImportLimits``
now bounds each record while it streams in — its JSON values and keys, and its
bytes — and refuses it with ``ImportRefused`` naming where it was and the bound.

The hostile documents (~30 MB each: one message of wide or nested objects and
lists, an object of many keys, one long string, deep nesting) are imported from a
file in a process of their own (``_import_child.py``), which must be refused and
peak under 100 MB of RSS on SQLite and PostgreSQL; a legitimate document of large
messages (a 3.5 MB answer and sixteen of 1 MiB) must import under the same bound.
The other tests check the refusals' paths, that a record exactly at the byte bound
passes, and that an attachment is bounded by its own cap rather than a record's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem.transcript import (
    AttachmentPart,
    ImportLimits,
    ImportRefused,
    NewMessage,
    TextPart,
    TranscriptStore,
)

CHILD = Path(__file__).with_name("_import_child.py")
REPO = Path(__file__).resolve().parents[2]
LIMIT_MB = 100
HOSTILE_BYTES = 30 * 1024 * 1024


def base_document(store: TranscriptStore) -> str:
    """The export of a one-message thread (the tenant is dropped again)."""
    tenant = f"bounds-{uuid.uuid4().hex[:8]}"
    th = store.create_thread(tenant, title="bounds")
    store.append(tenant, th.id, [NewMessage(role="user", content="hello")])
    doc = store.export_thread(tenant, th.id)
    store.delete_thread(tenant, th.id)
    return doc


def repeated(unit: bytes) -> Iterator[bytes]:
    yield unit * (HOSTILE_BYTES // len(unit))


def numbered_keys() -> Iterator[bytes]:
    for block in range(HOSTILE_BYTES // 1_400_000):
        yield b"".join(b'"k%d":{},' % (block * 100_000 + i) for i in range(100_000))


#: Where the filler goes in the message (after this text of the export), what it is,
#: and the path its refusal names.
HOSTILE: dict[str, tuple[str, Callable[[], Iterator[bytes]], str]] = {
    "wide objects": ('"parts":[', lambda: repeated(b"{},"), "$.messages[0].parts["),
    "nested objects and lists": (
        '"parts":[', lambda: repeated(b'{"a":[{"b":{}},[]]},'), "$.messages[0].parts["
    ),
    "many keys": ('"extra":{', numbered_keys, "$.messages[0].extra"),
    "one long string": (
        '"parts":[', lambda: iter([b'{"kind":"text","text":"', *repeated(b"x")]),
        "$.messages[0].parts[0].text",
    ),
    "deep nesting": ('"parts":[', lambda: repeated(b"["), "$.messages[0].parts[0]"),
}


def write_hostile(doc: str, shape: str, path: Path) -> None:
    """``doc`` with ~30 MB of ``shape`` spliced into its message, written to ``path``
    (a bounded import never reaches the text after it)."""
    marker, filler, _ = HOSTILE[shape]
    at = doc.index(marker) + len(marker)
    with path.open("wb") as f:
        f.write(doc[:at].encode())
        for block in filler():
            f.write(block)
        f.write(doc[at:].encode())


def write_large_messages(doc: str, path: Path) -> None:
    """``doc`` with its message replaced by a chain of large ones: a 3.5 MB answer
    (within ``max_record_bytes``) and sixteen messages of 1 MiB of words."""
    obj = json.loads(doc)
    first = obj["messages"][0]
    words = "the quarterly figures for the northern region, once more "
    sizes = [3_500_000] + [1024 * 1024] * 16
    messages: list[dict[str, Any]] = []
    for i, size in enumerate(sizes):
        text = (words * (size // len(words) + 1))[:size]
        messages.append(first | {
            "id": f"m{i:03d}", "parent_id": f"m{i - 1:03d}" if i else None, "seq": i + 1,
            "role": "assistant" if i % 2 else "user",
            "parts": [{"kind": "text", "text": text}],
        })
    obj["messages"] = messages
    obj["thread"] |= {"active_leaf": messages[-1]["id"], "next_seq": len(messages) + 1}
    path.write_text(json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n", "utf-8")


def import_in_child(url: str, path: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    tenant = f"bounds-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(
        [sys.executable, str(CHILD), url, tenant, str(path), str(LIMIT_MB)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    out: dict[str, Any] = json.loads(lines[-1])
    assert proc.returncode == 0, (out, proc.stderr[-2000:])
    return out


@pytest.fixture
def document(transcript: TranscriptStore) -> str:
    return base_document(transcript)


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(HOSTILE))
def test_a_huge_record_is_refused_as_it_streams_in_within_100_mb(
    transcript_url: str, document: str, tmp_path: Path, shape: str
) -> None:
    path = tmp_path / "hostile.json"
    write_hostile(document, shape, path)
    out = import_in_child(transcript_url, path)
    assert out["outcome"] == "refused", out
    assert out["path"].startswith(HOSTILE[shape][2]), out
    if shape != "deep nesting":  # refused by max_depth, as before
        assert "ImportLimits.max_record_" in out["problem"], out
        assert "the record $.messages[0] " in out["problem"], out
    peak_mb = out["peak_kb"] / 1024
    print(f"{shape}: {out['path']}, peak RSS {peak_mb:.1f} MB, baseline {out['base_kb'] / 1024:.1f} MB")
    assert peak_mb <= LIMIT_MB, f"peak RSS {peak_mb:.0f} MB (baseline {out['base_kb'] / 1024:.0f} MB)"


@pytest.mark.slow
def test_large_legitimate_messages_import_within_100_mb(
    transcript_url: str, document: str, tmp_path: Path
) -> None:
    path = tmp_path / "large.json"
    write_large_messages(document, path)
    out = import_in_child(transcript_url, path)
    assert out["outcome"] == "accepted", out
    peak_mb = out["peak_kb"] / 1024
    print(f"large messages: peak RSS {peak_mb:.1f} MB, baseline {out['base_kb'] / 1024:.1f} MB")
    assert peak_mb <= LIMIT_MB, f"peak RSS {peak_mb:.0f} MB (baseline {out['base_kb'] / 1024:.0f} MB)"


# ---------------------------------------------------------------- the bounds, in process


def with_message(doc: str, *, extra: dict[str, Any] | None = None, text: str | None = None) -> str:
    obj = json.loads(doc)
    if extra is not None:
        obj["messages"][0]["extra"] = extra
    if text is not None:
        obj["messages"][0]["parts"] = [{"kind": "text", "text": text}]
    return json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n"


def message_bytes(doc: str) -> int:
    """Bytes of the first message's JSON as the document holds it."""
    return len(json.dumps(json.loads(doc)["messages"][0], sort_keys=True,
                          separators=(",", ":")).encode())


def test_too_many_values_are_refused_with_the_path_and_the_bound(
    transcript: TranscriptStore, document: str, tenant: str
) -> None:
    doc = with_message(document, extra={"big": list(range(500))})
    with pytest.raises(ImportRefused) as caught:
        transcript.import_thread(tenant, doc, limits=ImportLimits(max_record_values=300))
    assert caught.value.path.startswith("$.messages[0].extra.big[")
    assert "the record $.messages[0] more than 300 JSON values" in caught.value.problem
    assert "ImportLimits.max_record_values" in caught.value.problem
    assert transcript.list_threads(tenant) == []
    transcript.import_thread(tenant, doc, limits=ImportLimits(max_record_values=600))


def test_a_record_is_refused_past_the_byte_bound_and_accepted_at_it(
    transcript: TranscriptStore, document: str, tenant: str
) -> None:
    # 1.5 MB: the import reads 256 KiB chunks, so the record spans several
    doc = with_message(document, text="lorem ipsum " * 125_000)
    size = message_bytes(doc)
    with pytest.raises(ImportRefused) as caught:
        transcript.import_thread(tenant, doc, limits=ImportLimits(max_record_bytes=600_000))
    assert caught.value.path == "$.messages[0].parts[0].text"
    assert "the record $.messages[0] longer than 600000 bytes" in caught.value.problem
    assert "ImportLimits.max_record_bytes" in caught.value.problem
    # a record of exactly the bound is never refused
    transcript.import_thread(tenant, doc, limits=ImportLimits(max_record_bytes=size))


def test_the_thread_record_is_bounded_too(
    transcript: TranscriptStore, document: str, tenant: str
) -> None:
    obj = json.loads(document)
    obj["thread"]["metadata"] = {f"k{i}": i for i in range(200)}
    with pytest.raises(ImportRefused) as caught:
        transcript.import_thread(tenant, json.dumps(obj), limits=ImportLimits(max_record_values=100))
    assert caught.value.path.startswith("$.thread.metadata")
    assert "the record $.thread more" in caught.value.problem


def test_an_attachment_is_bounded_by_its_own_cap(
    transcript: TranscriptStore, tenant: str
) -> None:
    th = transcript.create_thread(tenant, title="file")
    data = os.urandom(1024 * 1024)
    transcript.append(tenant, th.id, [NewMessage(role="user", content=[
        TextPart("see"), AttachmentPart(media_type="application/pdf", name="a.pdf", data=data)
    ])])
    doc = transcript.export_thread(tenant, th.id)
    small = ImportLimits(max_record_bytes=64 * 1024)  # the attachment's record is 1.4 MB
    transcript.import_thread(tenant + "-copy", doc, limits=small)
    with pytest.raises(ImportRefused) as caught:
        transcript.import_thread(
            tenant + "-copy2", doc, limits=ImportLimits(max_record_bytes=64 * 1024,
                                                   max_attachment_bytes=256 * 1024)
        )
    assert caught.value.path.startswith("$.attachments[0]")
