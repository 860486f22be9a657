"""Hypothesis over the import format, on SQLite and PostgreSQL (issue 11).

Two properties: a document convmem could have written — any tree shape, any Unicode
text, any JSON in ``extra`` and metadata, attachments, model inputs, derived memories
— imports and exports again byte for byte; and any mutation of such a document is
either imported or refused with ``ImportRefused``/``ThreadExists``, never another
exception, and a refusal writes nothing. Example counts follow HYPOTHESIS_PROFILE
through ``storage_examples`` (``ci``: 25): each example is a real import.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem.transcript import ImportRefused, ThreadExists, TranscriptStore
from convmem.transcript.export import canonical_dumps
from convmem.transcript.models import CONTENT_TABLES
from tests.conftest import storage_examples

SETTINGS = settings(
    max_examples=storage_examples(),  # each example is a real import (tests/conftest.py)
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                           HealthCheck.data_too_large],
)

# Text a convmem export can hold: any code point but NUL and surrogates.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=40)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63 - 1), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
OBJECT = st.dictionaries(TEXT, JSON, max_size=4)
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def stamp(seconds: int) -> str:
    return (T0 + timedelta(microseconds=seconds * 1_000_003)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@st.composite
def documents(draw: Any) -> dict[str, Any]:
    """A valid ``convmem.thread`` document (sorted like an export)."""
    n = draw(st.integers(1, 7))
    ids = [f"m-{i}-{draw(st.uuids())}" for i in range(n)]
    blob = draw(st.binary(max_size=64))
    sha = hashlib.sha256(blob).hexdigest()
    with_file = draw(st.booleans())
    messages = []
    for i in range(n):
        parent = draw(st.sampled_from([None, *ids[:i]]))
        parts: list[dict[str, Any]] = [{"kind": "text", "text": draw(TEXT)}]
        kind = draw(st.sampled_from(["text", "tool_call", "tool_result"]))
        if kind == "tool_call":
            parts = [{"kind": "tool_call", "call_id": draw(TEXT), "name": draw(TEXT),
                      "arguments": draw(OBJECT)}]
        elif kind == "tool_result":
            parts = [{"kind": "tool_result", "call_id": draw(TEXT), "content": draw(TEXT),
                      "is_error": draw(st.booleans())}]
        if with_file and i == 0:
            parts.append({"kind": "attachment_ref", "media_type": "application/octet-stream",
                          "name": draw(TEXT), "sha256": sha, "size": len(blob)})
        messages.append({
            "id": ids[i], "parent_id": parent, "seq": i + 1,
            "role": draw(st.sampled_from(["system", "user", "assistant", "tool"])),
            "author": draw(st.none() | TEXT), "parts": parts, "extra": draw(OBJECT),
            "received_at": stamp(i), "client_ts": draw(st.none() | st.integers(0, 10**6).map(stamp)),
            "visibility": draw(st.sampled_from(["conversation", "execution"])),
            "copy_of": draw(st.sampled_from([None, *ids[:i]])), "turn_id": None,
            "redacted_at": None,
        })
    model_inputs = []
    if draw(st.booleans()):
        prompt = draw(st.none() | TEXT)
        turn = f"turn-{draw(st.uuids())}"
        messages[-1]["turn_id"] = turn
        messages[-1]["role"] = "user"  # a turn begins with the user's message
        model_inputs.append({
            "id": turn, "user_message_id": ids[-1], "rendered_block": draw(TEXT),
            "state_snapshot": draw(OBJECT), "sent_message_ids": draw(st.lists(st.sampled_from(ids), max_size=3)),
            "system_prompt": prompt,
            "system_prompt_sha256": None if prompt is None
            else hashlib.sha256(prompt.encode()).hexdigest(),
            "tool_schemas": draw(st.lists(OBJECT, max_size=2)), "model": draw(st.none() | TEXT),
            "model_params": draw(OBJECT), "created_at": stamp(50), "completed_at": None,
            "answer_message_id": None,
        })
        if draw(st.booleans()):
            model_inputs[0]["quoted_message_ids"] = draw(st.lists(st.sampled_from(ids), max_size=3))
    derived = [{"id": f"d-{draw(st.uuids())}", "kind": "fact", "content": draw(TEXT),
                "source_message_ids": draw(st.lists(st.sampled_from(ids), max_size=3)),
                "created_at": stamp(60), "tombstoned_at": None}] if draw(st.booleans()) else []
    leaf = draw(st.sampled_from([None, *ids]))
    return {
        "attachments": [{"sha256": sha, "media_type": "application/octet-stream",
                         "size": len(blob), "data_base64": base64.b64encode(blob).decode()}]
        if with_file else [],
        "derived": derived, "format": "convmem.thread", "messages": messages,
        "model_inputs": model_inputs, "redactions": [],
        "thread": {
            "id": f"t-{draw(st.uuids())}", "key": draw(st.none() | TEXT.filter(
                lambda k: bool(k.strip()) and not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in k))),
            "owner": draw(st.none() | TEXT), "title": draw(st.none() | TEXT),
            "metadata": draw(OBJECT), "created_at": stamp(0), "updated_at": stamp(70),
            "retention": draw(st.none() | st.builds(
                lambda s, h: {"legal_hold": h, "max_age_seconds": s, "owner": "legal"},
                st.none() | st.integers(1, 10**9), st.booleans())),
            "active_leaf": leaf, "next_seq": n + 1 + draw(st.integers(0, 3)),
            "archived_seq": draw(st.integers(0, n)), "forked_from": None,
        },
        "version": 1,
    }


def _rows(store: TranscriptStore, tenant: str) -> int:
    with store.engine.connect() as conn:
        return sum(
            conn.execute(sa.text(f'SELECT count(*) FROM "{t}" WHERE tenant = :t'),
                         {"t": tenant}).scalar_one()
            for t in CONTENT_TABLES
        )


@SETTINGS
@given(doc=documents())
def test_what_convmem_could_write_round_trips(transcript: TranscriptStore, doc: dict[str, Any]) -> None:
    tenant = f"hp-{uuid.uuid4().hex[:12]}"
    text = canonical_dumps(doc)
    thread = transcript.import_thread(tenant, text)
    assert transcript.export_thread(tenant, thread.id) == text
    transcript.delete_thread(tenant, thread.id)


def _mutate(doc: Any, draw: Any) -> Any:
    """One random change somewhere in the document: a value replaced, a key dropped or
    added, a list item duplicated."""
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k in list(node):
                paths.append((node, k))
                walk(node[k])
        elif isinstance(node, list):
            for i in range(len(node)):
                paths.append((node, i))
                walk(node[i])

    walk(doc)
    holder, key = draw(st.sampled_from(paths))
    how = draw(st.sampled_from(["replace", "drop", "add", "dup"]))
    if how == "replace":
        holder[key] = draw(JSON | st.sampled_from(["", "x" * 70, -1, 2**40, True, "1"]))
    elif how == "drop":
        del holder[key]
    elif how == "add" and isinstance(holder, dict):
        holder[draw(TEXT)] = draw(JSON)
    elif isinstance(holder, list):
        holder.append(json.loads(json.dumps(holder[key])))
    return doc


@SETTINGS
@given(doc=documents(), data=st.data())
def test_any_mutation_is_imported_or_refused_cleanly(
    transcript: TranscriptStore, doc: dict[str, Any], data: st.DataObject
) -> None:
    tenant = f"hm-{uuid.uuid4().hex[:12]}"
    mutated = _mutate(json.loads(json.dumps(doc)), data.draw)
    try:
        text = json.dumps(mutated, ensure_ascii=True, allow_nan=False)
    except ValueError:
        return
    try:
        thread = transcript.import_thread(tenant, text)
    except (ImportRefused, ThreadExists):
        assert _rows(transcript, tenant) == 0
        return
    again = json.loads(transcript.export_thread(tenant, thread.id))
    assert again["thread"]["id"] == thread.id
    transcript.tree(tenant, thread.id)
    transcript.delete_thread(tenant, thread.id)


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:hypothesis.*")
