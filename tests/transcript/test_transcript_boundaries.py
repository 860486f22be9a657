"""Issue 11 on the durable record: the boundaries ``TranscriptStore`` owns.

Each test failed on the code before the issue and passes after; all run on SQLite
and PostgreSQL, through the sync methods and their async twins.

- finding 2: an import cannot borrow another tenant's message, and path reads stay
  in one tenant's thread at every step even over a link planted in the database;
- finding 3: parent cycles are refused on import, and reads over a stored cycle end
  with ``RecordCorrupt`` instead of running forever;
- finding 8 (the record's own API): NUL and lone surrogates are replaced by U+FFFD on
  every write and in searches, never a raw encoder or driver error;
- finding 10: ``tree`` and ``convmem threads show`` handle a 2,000-message tool chain
  and a 1,500-deep edit chain;
- finding 11: another tenant's thread and message ids reveal nothing (ids are per
  tenant), and over-long or control-character ids are a ``ConfigError`` naming the
  field on both backends.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.identity import MAX_TENANT_CHARS, MAX_THREAD_ID_CHARS
from convmem.testing.transcript_spec import Api
from convmem.transcript import (
    ImportRefused,
    ModelInput,
    NewMessage,
    RecordCorrupt,
    ThreadNotFound,
    ToolCallPart,
    ToolResultPart,
    TranscriptStore,
)
from convmem.transcript.cli import main as cli_main
from convmem.transcript.cli import render_tree
from convmem.transcript.framework_records import same_record


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, transcript: TranscriptStore) -> Iterator[Api]:
    api = Api(transcript, request.param)
    yield api
    api.close()


def new_tenant() -> str:
    """A tenant no other test uses (this file makes several per test)."""
    return f"b-{uuid.uuid4().hex[:12]}"


def user(text: str, **kw: Any) -> NewMessage:
    return NewMessage(role="user", content=text, **kw)


def bot(text: str) -> NewMessage:
    return NewMessage(role="assistant", content=text)


def plant_parent(store: TranscriptStore, tenant: str, message_id: str, parent_id: str) -> None:
    """A link no API writes (an older version's import, a hand edit)."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE convmem_messages SET parent_id = :p WHERE tenant = :t AND id = :m"
            ),
            {"p": parent_id, "t": tenant, "m": message_id},
        )


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``, or a test failure if it has not ended after ``seconds``."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"did not end within {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# --------------------------------------------------------------------------- finding 2


def test_import_cannot_borrow_another_tenants_message(api: Api) -> None:
    victim, attacker = new_tenant(), new_tenant()
    vt = api.create_thread(victim)
    (secret,) = api.append(victim, vt.id, user("the victim's secret"))
    own = api.create_thread(attacker)
    api.append(attacker, own.id, [user("hello"), bot("hi")])
    doc = json.loads(api.export_thread(attacker, own.id))
    api.delete_thread(attacker, own.id)
    doc["messages"][0]["parent_id"] = secret.id
    with pytest.raises(ImportRefused) as info:
        api.import_thread(attacker, json.dumps(doc))
    assert info.value.path == "$.messages[0].parent_id"
    assert api.list_threads(attacker) == []


def test_path_reads_stay_in_the_tenants_thread(api: Api, transcript: TranscriptStore) -> None:
    victim, owner = new_tenant(), new_tenant()
    vt = api.create_thread(victim)
    (secret,) = api.append(victim, vt.id, user("the victim's secret"))
    th = api.create_thread(owner)
    (mine,) = api.append(owner, th.id, user("mine"))
    other = api.create_thread(owner)
    (elsewhere,) = api.append(owner, other.id, user("another thread of mine"))
    for planted in (secret.id, elsewhere.id):
        plant_parent(transcript, owner, mine.id, planted)
        assert [m.text for m in api.active_path(owner, th.id)] == ["mine"]
        view = api.export_user_view(owner, th.id)
        assert "secret" not in view and "another thread" not in view
        fork = api.fork_thread(owner, th.id, mine.id)
        assert [m.text for m in api.active_path(owner, fork.id)] == ["mine"]
        assert [m.copy_of for m in api.active_path(owner, fork.id)] == [mine.id]
        # recall's path (segments) steps through parents by (tenant, id) too
        hits = api.search(owner, "mine secret another", thread_id=th.id, match="any",
                          active_path=True)
        assert [h.message_id for h in hits] == [mine.id]
    assert [m.text for m in api.active_path(victim, vt.id)] == ["the victim's secret"]


# --------------------------------------------------------------------------- finding 3


@pytest.mark.parametrize("cycle", ["self", "pair"])
def test_import_refuses_parent_cycles(api: Api, cycle: str) -> None:
    owner = new_tenant()
    th = api.create_thread(owner)
    api.append(owner, th.id, [user("a"), bot("b")])
    doc = json.loads(api.export_thread(owner, th.id))
    api.delete_thread(owner, th.id)
    msgs = doc["messages"]
    if cycle == "self":
        msgs[1]["parent_id"] = msgs[1]["id"]
    else:
        msgs[0]["parent_id"] = msgs[1]["id"]
    with pytest.raises(ImportRefused) as info:
        api.import_thread(owner, json.dumps(doc))
    assert info.value.path == f"$.messages[{1 if cycle == 'self' else 0}].parent_id"
    assert api.list_threads(owner) == []


def test_reads_over_a_stored_cycle_end(api: Api, transcript: TranscriptStore) -> None:
    owner = new_tenant()
    th = api.create_thread(owner)
    first, second = api.append(owner, th.id, [user("a"), bot("b")])
    plant_parent(transcript, owner, first.id, second.id)  # a loop: a → b → a
    for name, args in (
        ("active_path", (owner, th.id)),
        ("tree", (owner, th.id)),
        ("export_user_view", (owner, th.id)),
        ("switch", (owner, th.id, first.id)),
        ("fork_thread", (owner, th.id, second.id)),
    ):
        with pytest.raises(RecordCorrupt):
            within(60, lambda n=name, a=args: getattr(api, n)(*a))
    url = transcript.engine.url.render_as_string(hide_password=False)
    assert within(60, lambda: cli_main(["threads", "--db", url, "--tenant", owner, "show", th.id])) == 1


@pytest.mark.parametrize("leaf", ["first", "second"])
def test_path_search_over_a_stored_cycle_ends(
    api: Api, transcript: TranscriptStore, leaf: str
) -> None:
    """Recall's path is found by segments (one step per branch point): a loop planted in
    the links ends the walk, from either end, with only the thread's own messages."""
    owner = new_tenant()
    th = api.create_thread(owner)
    first, second = api.append(owner, th.id, [user("zebu question"), bot("zebu answer")])
    plant_parent(transcript, owner, first.id, second.id)  # a loop: first → second → first
    api.set_active_leaf(owner, th.id, first.id if leaf == "first" else second.id)
    hits = within(60, lambda: api.search(owner, "zebu", thread_id=th.id, match="any",
                                         active_path=True))
    found = {h.message_id for h in hits}
    assert found == ({first.id} if leaf == "first" else {first.id, second.id})


# --------------------------------------------------------------------------- finding 8


def test_nul_and_lone_surrogates_are_replaced_on_every_write(api: Api) -> None:
    owner = new_tenant()
    bad, good = "a\x00b\ud800c", "a\ufffdb\ufffdc"
    th = api.create_thread(owner, title=bad, owner="o\x00", metadata={"k\x00": [bad]})
    (q,) = api.append(owner, th.id, user(bad, author="x\udfff", extra={"e": bad}))
    tr = api.begin_turn_record(
        owner, th.id, user(bad),
        ModelInput(rendered_block=bad, state_snapshot={"q": bad}, system_prompt=bad,
                   tool_schemas=[{"d": bad}], model="m\x00", model_params={"p": bad}),
    )
    out = api.complete_turn(owner, th.id, tr.turn_id, [
        NewMessage(role="assistant", content=[ToolCallPart("c\x00", "t", {"a": bad})]),
        NewMessage(role="tool", content=[ToolResultPart("c\x00", bad)]),
        bot(bad),
    ])
    d = api.add_derived(owner, th.id, "fact\x00", bad, [q.id])
    assert isinstance(api.search(owner, bad), list) and api.search(owner, "\x00") == []
    got = api.get_thread(owner, th.id)
    assert (got.title, got.owner, got.metadata) == (good, "o\ufffd", {"k\ufffd": [good]})
    (stored,) = api.get_messages(owner, th.id, [q.id])
    assert (stored.text, stored.author, stored.extra) == (good, "x\ufffd", {"e": good})
    seen = api.reconstruct_model_input(owner, th.id, tr.turn_id)
    assert (seen.rendered_block, seen.system_prompt, seen.model) == (good, good, "m\ufffd")
    assert seen.state_snapshot == {"q": good} and seen.model_params == {"p": good}
    assert seen.tool_schemas == ({"d": good},)
    assert [m.text for m in out][-1] == good and d.content == good and d.kind == "fact\ufffd"
    api.redact(owner, th.id, q.id, actor="dpo\x00", reason=bad)
    doc = api.export_thread(owner, th.id)
    assert "\x00" not in doc and "\\u0000" not in doc
    api.delete_thread(owner, th.id)
    api.import_thread(owner, doc)  # what convmem wrote, convmem reads back
    assert api.export_thread(owner, th.id) == doc


@pytest.mark.parametrize(("number", "name"), [
    (float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity")])
def test_a_number_json_has_not_is_written_as_its_name_on_every_backend(
    api: Api, number: float, name: str
) -> None:
    """A NaN or an infinity in tool arguments, a message's extra, a snapshot or model
    settings is written as its name, on SQLite and PostgreSQL alike (PostgreSQL's driver
    raised ``DataError`` for it, SQLite kept ``NaN``, which no JSON reader takes), and
    the thread still exports and imports."""
    owner = new_tenant()
    th = api.create_thread(owner, metadata={"ratio": number})
    (call,) = api.append(owner, th.id, NewMessage(
        role="assistant", content=[ToolCallPart("c1", "t", {"ratio": [1.5, number]})]))
    (asked,) = api.append(owner, th.id, user("q", extra={"score": number}))
    tr = api.begin_turn_record(owner, th.id, user("q"), ModelInput(
        rendered_block="b", state_snapshot={"min": number}, model_params={"t": number}))
    api.complete_turn(owner, th.id, tr.turn_id, [NewMessage(
        role="assistant", content=[ToolCallPart("c2", "t", {"x": number})]), bot("a")])
    assert api.get_thread(owner, th.id).metadata == {"ratio": name}
    got = {m.id: m for m in api.active_path(owner, th.id)}
    assert got[call.id].parts[0].arguments == {"ratio": [1.5, name]}  # type: ignore[union-attr]
    assert got[asked.id].extra == {"score": name}
    # a chat store's rewrite reuses the row: what it would store is what was stored
    assert same_record(user("q", extra={"score": number}), got[asked.id])
    seen = api.reconstruct_model_input(owner, th.id, tr.turn_id)
    assert seen.state_snapshot == {"min": name} and seen.model_params == {"t": name}
    doc = api.export_thread(owner, th.id)
    json.loads(doc, parse_constant=lambda c: pytest.fail(f"{c} in the export"))
    api.delete_thread(owner, th.id)
    api.import_thread(owner, doc)
    assert api.export_thread(owner, th.id) == doc


def test_an_import_holding_a_nan_is_refused_naming_where(api: Api) -> None:
    """A hostile import may carry ``NaN`` (Python's JSON reader takes it): refused with
    the path to it, and nothing written, on both backends."""
    owner = new_tenant()
    th = api.create_thread(owner)
    api.append(owner, th.id, NewMessage(
        role="assistant", content=[ToolCallPart("c1", "t", {"x": 1.5})]))
    doc = api.export_thread(owner, th.id)
    api.delete_thread(owner, th.id)
    hostile = doc.replace('"x":1.5', '"x":NaN')
    assert hostile != doc
    with pytest.raises(ImportRefused, match=r"arguments\.x"):
        api.import_thread(owner, hostile)
    with pytest.raises(ThreadNotFound):
        api.get_thread(owner, th.id)


# --------------------------------------------------------------------------- finding 10


def _edit_chain(depth: int) -> tuple[str, dict[str, Any]]:
    """A thread ``depth`` branch points deep: every question was edited once."""
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    stamp = lambda i: (t0 + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: E731
    tid = str(uuid.uuid4())
    messages: list[dict[str, Any]] = []
    parent = None
    for i in range(depth):
        for kind in ("edit", "main"):
            mid = f"{kind}-{i}"
            messages.append({
                "id": mid, "parent_id": parent, "seq": len(messages) + 1, "role": "user",
                "author": None, "parts": [{"kind": "text", "text": f"{kind} {i}"}], "extra": {},
                "received_at": stamp(len(messages)), "client_ts": None,
                "visibility": "conversation", "copy_of": None, "turn_id": None,
                "redacted_at": None,
            })
        parent = f"main-{i}"
    doc = {
        "format": "convmem.thread", "version": 1, "attachments": [], "derived": [],
        "model_inputs": [], "redactions": [], "messages": messages,
        "thread": {
            "id": tid, "key": None, "owner": None, "title": "deep", "metadata": {},
            "created_at": stamp(0), "updated_at": stamp(0), "retention": None,
            "active_leaf": parent, "next_seq": len(messages) + 1, "archived_seq": 0,
            "forked_from": None,
        },
    }
    return tid, doc


def test_show_draws_a_long_tool_chain_and_a_deep_edit_chain(
    api: Api, transcript: TranscriptStore, capsys: pytest.CaptureFixture[str]
) -> None:
    owner = new_tenant()
    th = api.create_thread(owner, title="tools")
    chain = [user("start")]
    for i in range(1000):
        chain.append(NewMessage(role="assistant", content=[ToolCallPart(f"c{i}", "t", {})]))
        chain.append(NewMessage(role="tool", content=[ToolResultPart(f"c{i}", f"r{i}")]))
    chain.append(bot("the end"))
    api.append(owner, th.id, chain)
    deep_id, doc = _edit_chain(1500)
    api.import_thread(owner, json.dumps(doc))
    url = transcript.engine.url.render_as_string(hide_password=False)
    for tid, last in ((th.id, "#2002 assistant"), (deep_id, "#3000 user")):
        tree = api.tree(owner, tid)
        assert tree.active_path_ids[-1] == tree.thread.active_leaf
        render_tree(tree, execution=False)
        for flags in ([], ["--execution"]):
            assert cli_main(["threads", "--db", url, "--tenant", owner, "show", tid, *flags]) == 0
            assert last in capsys.readouterr().out
    assert len(api.active_path(owner, deep_id)) == 1500


# --------------------------------------------------------------------------- finding 11


def test_another_tenants_ids_reveal_nothing(api: Api) -> None:
    a, b = new_tenant(), new_tenant()
    chosen = f"thread-{uuid.uuid4().hex}"
    ta = api.create_thread(a, thread_id=chosen, title="A's")
    (secret,) = api.append(a, ta.id, user("A's secret"))
    # for B, A's id behaves exactly like an id nobody uses: it is created, and is B's own
    fresh = f"thread-{uuid.uuid4().hex}"
    for tid in (chosen, fresh):
        tb = api.create_thread(b, thread_id=tid, title="B's")
        assert tb.id == tid and api.active_path(b, tid) == []
        with pytest.raises(ThreadNotFound):
            api.get_messages(b, tid, [secret.id]) or api.get_thread(b, "never-" + tid)
        api.delete_thread(b, tid)
    # importing A's export into B makes B's own copy; B's erasure never reaches A
    copy = api.import_thread(b, api.export_thread(a, ta.id))
    assert copy.id == chosen and api.get_thread(b, chosen).title == "A's"
    api.redact(b, chosen, secret.id, actor="b", reason="b's copy")
    api.delete_thread(b, chosen)
    assert [m.text for m in api.active_path(a, chosen)] == ["A's secret"]
    assert api.get_thread(a, chosen).title == "A's"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda api, t: api.create_thread("t" * (MAX_TENANT_CHARS + 1)), "tenant"),
        (lambda api, t: api.create_thread(t, key="k" * (MAX_THREAD_ID_CHARS + 1)), "key"),
        (lambda api, t: api.get_or_create_thread(t, "k" * (MAX_THREAD_ID_CHARS + 1)), "key"),
        (lambda api, t: api.create_thread(t, thread_id="x" * 65), "thread_id"),
        (lambda api, t: api.create_thread(t, key="a\nb"), "key"),
        (lambda api, t: api.create_thread(t, owner="o" * 201), "owner"),
        (lambda api, t: api.get_thread(t, "x" * 65), "thread_id"),
        (lambda api, t: api.get_thread("a\x00b", "x"), "tenant"),
        (lambda api, t: api.append(t, "x" * 65, user("q")), "thread_id"),
        (lambda api, t: api.append(t, "x", user("q", author="a" * 201)), "author"),
        (lambda api, t: api.active_path(t, "x\x00"), "thread_id"),
        (lambda api, t: api.get_messages(t, "x", ["m" * 65]), "ids[0]"),
        (lambda api, t: api.search(t, "q", thread_id="x" * 65), "thread_id"),
        (lambda api, t: api.list_threads(""), "tenant"),
        (lambda api, t: api.bind_turn(t, "k" * (MAX_THREAD_ID_CHARS + 1)), "key"),
    ],
)
def test_bad_ids_are_config_errors_naming_the_field(api: Api, call: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace("[", r"\[")):
        call(api, new_tenant())
