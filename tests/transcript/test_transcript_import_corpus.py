"""A strict import (issue 11, finding 4): the hostile corpus in ``tests/data/hostile_imports.json``.

Every case patches the export of a small rich thread (or replaces it) and imports it
into a fresh tenant that also holds a thread of its own, while a victim tenant holds
another. A refusal must be one convmem error (``ImportRefused`` naming the JSON path
the case names, or ``ThreadExists``) and leave every row of both tenants, and the
row count of every table, unchanged; the cases marked ``accepted`` must import and
export again. Runs on SQLite and PostgreSQL, through the sync and the async methods;
the test prints tried / refused cleanly / accepted.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from convmem.errors import ConvMemError
from convmem.testing.transcript_spec import Api
from convmem.transcript import (
    AttachmentPart,
    ImportLimits,
    ImportRefused,
    ModelInput,
    NewMessage,
    TextPart,
    ThreadExists,
    TranscriptStore,
)
from convmem.transcript.models import CONTENT_TABLES

CORPUS = Path(__file__).resolve().parent.parent / "data" / "hostile_imports.json"
CASES: list[dict[str, Any]] = json.loads(CORPUS.read_text("utf-8"))["cases"]


def test_the_corpus_is_big_and_covers_every_category() -> None:
    assert len(CASES) >= 60
    categories = {c["category"] for c in CASES}
    assert categories >= {
        "syntax", "header", "sections", "seq", "ids", "types", "references", "graph",
        "collisions", "hashes", "timestamps", "retention", "caps", "text", "legitimate",
    }
    assert len({c["name"] for c in CASES}) == len(CASES)


def source_thread(api: Api, tenant: str) -> tuple[str, dict[str, Any]]:
    """A thread with every section filled: branches, a turn with a prompt and an
    attachment, a regenerated answer, a derived memory and a redaction."""
    th = api.create_thread(tenant, key="corpus", title="Corpus", metadata={"x": [1, 2.5, None]})
    m0, m1 = api.append(tenant, th.id, [NewMessage(role="user", content="hello"),
                                         NewMessage(role="assistant", content="hi")])
    pdf = AttachmentPart(media_type="application/pdf", name="r.pdf", data=bytes(range(256)))
    tr = api.begin_turn_record(
        tenant, th.id,
        NewMessage(role="user", content=[TextPart("see file"), pdf]),
        ModelInput(rendered_block="block", state_snapshot={"s": 1}, system_prompt="sys",
                   sent_message_ids=[m0.id], quoted_message_ids=[m0.id]),
    )
    (answer,) = api.complete_turn(tenant, th.id, tr.turn_id, [NewMessage(role="assistant",
                                                                         content="seen")])
    api.regenerate(tenant, th.id, answer.id, "seen it")
    api.add_derived(tenant, th.id, "fact", "likes files", [tr.user_message.id])
    api.redact(tenant, th.id, m1.id, actor="ops", reason="test")
    return str(th.id), json.loads(api.export_thread(tenant, th.id))


class World:
    """The tenants of one run: the source, a victim, and per case a fresh importer."""

    def __init__(self, api: Api, store: TranscriptStore) -> None:
        run = uuid.uuid4().hex[:8]
        self.api, self.store = api, store
        self.source = f"corpus-src-{run}"
        self.victim = f"corpus-victim-{run}"
        _, self.base = source_thread(api, self.source)
        assert self.base["thread"]["next_seq"] == 6 and len(self.base["messages"]) == 5
        vt = api.create_thread(self.victim, key="victim")
        vtr = api.begin_turn_record(self.victim, vt.id, NewMessage(role="user", content="v"),
                                    ModelInput())
        self.values = {
            "@victim_thread": vt.id,
            "@victim_message": vtr.user_message.id,
            "@victim_turn": vtr.turn_id,
            "@long65": "x" * 65,
            "@long501": "k" * 501,
        }
        for i, m in enumerate(self.base["messages"]):
            self.values[f"@msg{i}"] = m["id"]

    def importer(self, n: int) -> tuple[str, dict[str, str]]:
        tenant = f"corpus-imp-{n}-{uuid.uuid4().hex[:8]}"
        sib = self.api.create_thread(tenant, key="sibling-key")
        tr = self.api.begin_turn_record(tenant, sib.id, NewMessage(role="user", content="s"),
                                        ModelInput())
        return tenant, {
            "@sibling_thread": sib.id,
            "@sibling_message": tr.user_message.id,
            "@sibling_turn": tr.turn_id,
            "@fresh": str(uuid.uuid4()),
        }

    def snapshot(self, *tenants: str) -> str:
        """Every row of ``tenants`` and the row count of every table, as one digest."""
        h = hashlib.sha256()
        with self.store.engine.connect() as conn:
            for table in CONTENT_TABLES:
                rows = conn.execute(
                    sa.text(f'SELECT * FROM "{table}" WHERE tenant IN :t').bindparams(
                        sa.bindparam("t", expanding=True)
                    ),
                    {"t": list(tenants)},
                ).all()
                h.update(repr(sorted(repr(tuple(r)) for r in rows)).encode())
                n = conn.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar_one()
                h.update(f"{table}={n}".encode())
        return h.hexdigest()


def build(world: World, case: dict[str, Any], values: dict[str, str]) -> bytes:
    """The case's document as bytes."""
    if "raw" in case:
        return str(case["raw"]).encode("utf-8")
    if "raw_b64" in case:
        return base64.b64decode(case["raw_b64"])
    doc = copy.deepcopy(world.base)
    for patch in case.get("patches", []):
        doc = apply(doc, patch, values)
    if "nest" in case:
        doc = apply(doc, {"set": case["nest"], "value": "@@NEST@@"}, values)
    text = json.dumps(doc, sort_keys=not case.get("reorder"), separators=(",", ":"),
                      ensure_ascii=True)
    if case.get("reorder"):
        text = json.dumps(_reversed(doc), separators=(",", ":"), ensure_ascii=True)
    for patch in case.get("patches", []):
        if "text_replace" in patch:
            old, new = patch["text_replace"]
            assert old in text, old
            text = text.replace(old, new, 1)
    if "nest" in case:
        depth = int(case["depth"])
        nested = ("[" * depth + "]" * depth) if case.get("kind") != "object" else (
            '{"a":' * depth + "1" + "}" * depth)
        text = text.replace('"@@NEST@@"', nested)
    text += "\n"
    if "truncate" in case:
        cut = case["truncate"]
        text = text[: int(len(text) * cut)] if cut > 0 else text[:cut]
    text = case.get("prefix_text", "") + text + case.get("append_text", "")
    return text.encode("utf-8")


def _reversed(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _reversed(obj[k]) for k in reversed(list(obj))}
    if isinstance(obj, list):
        return [_reversed(v) for v in obj]
    return obj


def apply(doc: Any, patch: dict[str, Any], values: dict[str, str]) -> Any:
    def fill(v: Any) -> Any:
        if isinstance(v, str) and v.startswith("@"):
            return values.get(v, v)
        if isinstance(v, list):
            return [fill(x) for x in v]
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v

    def at(path: list[Any]) -> Any:
        node = doc
        for step in path:
            node = node[step]
        return node

    if "set" in patch:
        *head, last = patch["set"]
        at(head)[last] = fill(patch["value"])
    elif "del" in patch:
        *head, last = patch["del"]
        del at(head)[last]
    elif "append" in patch:
        item = copy.deepcopy(at(patch["copy_of"])) if "copy_of" in patch else fill(patch["value"])
        at(patch["append"]).append(item)
    return doc


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, transcript: TranscriptStore) -> Any:
    api = Api(transcript, request.param)
    yield api
    api.close()


def test_hostile_documents_are_refused_cleanly(api: Api, transcript: TranscriptStore) -> None:
    world = World(api, transcript)
    tried = refused = accepted = 0
    problems: list[str] = []
    # the async twins share every decision with the sync ones: a third of the corpus
    # (and every legitimate document) shows that they drive it the same way
    cases = CASES if api.mode == "sync" else [
        c for i, c in enumerate(CASES) if i % 3 == 0 or c["expect"] == "accepted"
    ]
    for n, case in enumerate(cases):
        tenant, local = world.importer(n)
        values = {**world.values, **local}
        data = build(world, case, values)
        limits = ImportLimits(**case.get("limits", {}))
        before = world.snapshot(tenant, world.victim, world.source)
        tried += 1
        try:
            thread = api.import_thread(tenant, data, new_id=bool(case.get("new_id")),
                                       limits=limits)
        except (ImportRefused, ThreadExists) as exc:
            refused += 1
            after = world.snapshot(tenant, world.victim, world.source)
            if after != before:
                problems.append(f"{case['name']}: refused but the database changed")
            want = case["expect"]
            if want == "accepted":
                problems.append(f"{case['name']}: refused ({exc}) but should be accepted")
            elif want == "exists" and not isinstance(exc, ThreadExists):
                problems.append(f"{case['name']}: want ThreadExists, got {exc}")
            elif want == "refused" and not isinstance(exc, ImportRefused):
                problems.append(f"{case['name']}: want ImportRefused, got {exc!r}")
            elif isinstance(exc, ImportRefused) and "path" in case and exc.path != case["path"]:
                problems.append(f"{case['name']}: path {exc.path!r}, want {case['path']!r}")
            elif isinstance(exc, ImportRefused) and not exc.path.startswith(
                case.get("path_prefix", "$")
            ):
                problems.append(f"{case['name']}: path {exc.path!r} not under "
                                f"{case['path_prefix']!r}")
            continue
        except ConvMemError as exc:  # a convmem error, but not a clean refusal
            problems.append(f"{case['name']}: {type(exc).__name__}: {exc}")
            continue
        except Exception as exc:  # the point: no raw exception escapes
            problems.append(f"{case['name']}: raw {type(exc).__name__}: {exc}")
            continue
        accepted += 1
        if case["expect"] != "accepted":
            problems.append(f"{case['name']}: accepted, want {case['expect']}")
            continue
        again = json.loads(api.export_thread(tenant, thread.id))
        if not case.get("new_id"):
            assert again == json.loads(build(world, {**case, "reorder": False}, values)), case
        assert api.tree(tenant, thread.id).active_path_ids  # readable, finite
    print(f"\nhostile import corpus ({transcript.dialect}, {api.mode}): tried={tried} "
          f"refused_cleanly={refused} accepted={accepted} "
          f"legitimately_accepted={sum(c['expect'] == 'accepted' for c in cases)}")
    assert problems == [], "\n".join(problems)
    assert refused + accepted == tried == len(cases)
    assert accepted == sum(c["expect"] == "accepted" for c in cases)
