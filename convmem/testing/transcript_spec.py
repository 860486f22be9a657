"""``TranscriptStoreSpec``: the conformance suite every transcript backend runs.

Subclass it in a test module and provide a ``transcript_url`` fixture (a database
the suite may write to; every test uses its own random tenants, so one database
can serve a whole session). Each test runs twice, through the sync methods and
through their ``a``-prefixed twins; in async mode the calls run on one event loop
with ``blockbuster`` active, so an async method that blocks the loop fails.

A backend may override ``residue(store)`` to add raw bytes that must not hold
redacted or deleted content (SQLite adds its database and WAL files).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.transcript import (
    AttachmentNotFound,
    AttachmentPart,
    ModelInput,
    NewMessage,
    RetentionPolicy,
    TextPart,
    ThreadExists,
    ThreadNotFound,
    ToolCallPart,
    ToolResultPart,
    TranscriptStore,
)

_MIGRATED: set[str] = set()
_LOCK = threading.Lock()

FOREVER = RetentionPolicy(max_age=None, owner="convmem-tests")


class Clock:
    """A settable clock (sweeps are tested without sleeping)."""

    def __init__(self) -> None:
        self.now = datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now


Call = tuple[str, tuple[Any, ...], dict[str, Any]]


class Api:
    """Calls ``store.x`` (sync mode) or runs ``store.ax`` on a loop (async mode)."""

    def __init__(self, store: TranscriptStore, mode: str) -> None:
        self.store = store
        self.mode = mode
        self.loop = asyncio.new_event_loop() if mode == "async" else None

    def run(self, coro: Any) -> Any:
        """Run a coroutine on this API's loop."""
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if self.loop is None:
            fn: Callable[..., Any] = getattr(self.store, name)
            return fn
        afn = getattr(self.store, "a" + name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.run(afn(*args, **kwargs))

        return call

    def concurrently(self, calls: list[Call]) -> list[Any]:
        """Run many calls at once: threads in sync mode, ``gather`` in async mode."""
        if self.loop is None:
            with ThreadPoolExecutor(max_workers=len(calls)) as pool:
                futures = [pool.submit(getattr(self.store, n), *a, **k) for n, a, k in calls]
                return [f.result() for f in futures]

        async def all_at_once() -> list[Any]:
            return list(
                await asyncio.gather(*(getattr(self.store, "a" + n)(*a, **k) for n, a, k in calls))
            )

        return list(self.run(all_at_once()))

    def close(self) -> None:
        """Dispose of pools (the async one on its own loop)."""
        if self.loop is not None:
            self.run(self.store.async_engine.dispose())
            self.loop.close()
        self.store.engine.dispose()


def user(text: str, **kw: Any) -> NewMessage:
    """A user message."""
    return NewMessage(role="user", content=text, **kw)


def bot(text: str, **kw: Any) -> NewMessage:
    """An assistant message."""
    return NewMessage(role="assistant", content=text, **kw)


class TranscriptStoreSpec:
    """Run with a ``transcript_url`` fixture; see the module docstring."""

    # ------------------------------------------------------------ fixtures and hooks

    @pytest.fixture
    def clock(self) -> Clock:
        """The store's clock."""
        return Clock()

    @pytest.fixture
    def store(self, transcript_url: str, clock: Clock) -> Iterator[TranscriptStore]:
        """A migrated store on the backend under test."""
        store = TranscriptStore(transcript_url, retention=FOREVER, clock=clock)
        with _LOCK:
            if transcript_url not in _MIGRATED:
                store.migrate()
                _MIGRATED.add(transcript_url)
        yield store
        store.engine.dispose()

    @pytest.fixture(params=["sync", "async"])
    def api(self, request: pytest.FixtureRequest, store: TranscriptStore) -> Iterator[Api]:
        """The store through its sync or its async methods."""
        api = Api(store, request.param)
        with ExitStack() as stack:
            if request.param == "async":
                from blockbuster import blockbuster_ctx

                stack.enter_context(blockbuster_ctx())
            yield api
        api.close()

    @pytest.fixture
    def tenant(self) -> str:
        """A tenant no other test uses."""
        return f"t-{uuid.uuid4().hex[:12]}"

    def residue(self, store: TranscriptStore) -> bytes:
        """Every live row of every table, as text: where erased content must be absent."""
        out: list[str] = []
        with store.engine.connect() as conn:
            for table in sa.inspect(conn).get_table_names():
                if store.dialect == "sqlite" and table.startswith("convmem_search_"):
                    continue  # FTS5 shadow tables: covered by the raw file bytes
                for row in conn.execute(sa.text(f'SELECT * FROM "{table}"')):
                    out.append(repr(tuple(row)))
        return "\n".join(out).encode()

    # ------------------------------------------------------------ ordering and concurrency

    def test_order_of_many_messages(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant, title="ordering")
        texts = [f"message {i}" for i in range(7)]
        for i, text in enumerate(texts):
            api.append(tenant, th.id, user(text) if i % 2 == 0 else bot(text))
        path = api.active_path(tenant, th.id)
        assert [m.text for m in path] == texts
        assert [m.seq for m in path] == list(range(1, 8))
        assert [m.parent_id for m in path] == [None] + [m.id for m in path[:-1]]
        assert api.get_thread(tenant, th.id).active_leaf == path[-1].id

    def test_fifty_concurrent_writers_get_a_gapless_sequence(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        calls: list[Call] = [("append", (tenant, th.id, user(f"w{i}")), {}) for i in range(50)]
        api.concurrently(calls)
        path = api.active_path(tenant, th.id)
        assert [m.seq for m in path] == list(range(1, 51))
        assert sorted(m.text for m in path) == sorted(f"w{i}" for i in range(50))
        assert [m.parent_id for m in path[1:]] == [m.id for m in path[:-1]]
        assert len(api.tree(tenant, th.id).messages) == 50

    def test_two_devices_share_one_ordered_history(
        self, api: Api, tenant: str, transcript_url: str
    ) -> None:
        other = TranscriptStore(transcript_url, retention=FOREVER)
        try:
            th = api.get_or_create_thread(tenant, "session-42")
            same = other.get_or_create_thread(tenant, "session-42")
            assert same.id == th.id
            for i in range(3):
                api.append(tenant, th.id, user(f"phone {i}"))
                other.append(tenant, th.id, user(f"laptop {i}"))
            expected = [f"{d} {i}" for i in range(3) for d in ("phone", "laptop")]
            assert [m.text for m in api.active_path(tenant, th.id)] == expected
            assert [m.text for m in other.active_path(tenant, th.id)] == expected
        finally:
            other.engine.dispose()

    def test_get_or_create_is_one_thread_per_key_under_races(self, api: Api, tenant: str) -> None:
        calls: list[Call] = [
            ("get_or_create_thread", (tenant, "lg-thread-7"), {}) for _ in range(10)
        ]
        threads = api.concurrently(calls)
        assert len({t.id for t in threads}) == 1
        assert threads[0].key == "lg-thread-7"
        with pytest.raises(ThreadExists):
            api.create_thread(tenant, key="lg-thread-7")

    def test_skewed_client_clocks_never_reorder(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        now = datetime.now(timezone.utc)
        skews = [timedelta(hours=5), timedelta(days=-400), timedelta(0), timedelta(minutes=-3)]
        for i, skew in enumerate(skews):
            api.append(tenant, th.id, user(f"m{i}", client_ts=now + skew))
        path = api.active_path(tenant, th.id)
        assert [m.text for m in path] == ["m0", "m1", "m2", "m3"]
        assert [m.client_ts for m in path] == [now + s for s in skews]
        received = [m.received_at for m in path]
        assert received == sorted(received)

    def test_skewed_server_clocks_never_reorder(
        self, api: Api, tenant: str, transcript_url: str, clock: Clock
    ) -> None:
        """Two application servers whose clocks disagree by a day still append in order."""
        behind = Clock()
        behind.now = clock.now - timedelta(days=1)
        other = TranscriptStore(transcript_url, retention=FOREVER, clock=behind)
        try:
            th = api.create_thread(tenant)
            for i in range(3):
                api.append(tenant, th.id, user(f"ahead {i}"))
                other.append(tenant, th.id, user(f"behind {i}"))
            path = api.active_path(tenant, th.id)
            assert [m.text for m in path] == [
                f"{side} {i}" for i in range(3) for side in ("ahead", "behind")
            ]
            assert [m.seq for m in path] == list(range(1, 7))
            assert path[1].received_at < path[0].received_at  # the stamps disagree, seq rules
        finally:
            other.engine.dispose()

    # ------------------------------------------------------------ branches

    def test_edits_and_regenerations_are_branches(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        q, a = api.append(tenant, th.id, [user("revenue in May?"), bot("12 M")])
        q2 = api.edit(tenant, th.id, q.id, "revenue in June?")
        assert q2.parent_id is None and q2.id != q.id
        assert [m.id for m in api.branches(tenant, th.id, q.id)] == [q.id, q2.id]
        assert [m.text for m in api.active_path(tenant, th.id)] == ["revenue in June?"]
        (a2,) = api.append(tenant, th.id, bot("13 M"))
        a3 = api.regenerate(tenant, th.id, a2.id, "13.1 M")
        assert [m.text for m in api.branches(tenant, th.id, a3.id)] == ["13 M", "13.1 M"]
        assert [m.text for m in api.active_path(tenant, th.id)] == ["revenue in June?", "13.1 M"]
        # the original question and answer are still there, unchanged
        leaf = api.switch(tenant, th.id, q.id)
        assert leaf.id == a.id
        assert [m.text for m in api.active_path(tenant, th.id)] == ["revenue in May?", "12 M"]
        assert len(api.tree(tenant, th.id).messages) == 5
        with pytest.raises(ConfigError):
            api.regenerate(tenant, th.id, q.id, "a question is not an answer")

    def test_a_regenerated_answer_keeps_its_turn(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        tr = api.begin_turn_record(tenant, th.id, user("revenue in May?"), ModelInput())
        (a,) = api.complete_turn(tenant, th.id, tr.turn_id, [bot("12 M")])
        a2 = api.regenerate(tenant, th.id, a.id, "12.0 M")
        assert a.turn_id == a2.turn_id == tr.turn_id and a2.parent_id == a.parent_id
        # an edited question is not the turn's input: it carries none; a question recorded
        # with its own model input under the same parent is a sibling with its own turn
        q2 = api.edit(tenant, th.id, tr.user_message.id, "revenue in June?")
        assert q2.turn_id is None
        tr3 = api.begin_turn_record(
            tenant, th.id, user("revenue in July?"), ModelInput(), parent_id=None
        )
        assert tr3.user_message.parent_id is None and tr3.turn_id != tr.turn_id
        assert [m.id for m in api.branches(tenant, th.id, q2.id)] == [
            tr.user_message.id, q2.id, tr3.user_message.id]
        assert api.active_path(tenant, th.id) == [tr3.user_message]
        with pytest.raises(ThreadNotFound):
            api.begin_turn_record(tenant, th.id, user("x"), ModelInput(), parent_id="nope")

    def test_explicit_parent_makes_a_branch(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        a, b = api.append(tenant, th.id, [user("a"), bot("b")])
        (c,) = api.append(tenant, th.id, user("c"), parent_id=a.id, activate=False)
        assert c.parent_id == a.id
        assert [m.text for m in api.active_path(tenant, th.id)] == ["a", "b"]
        api.set_active_leaf(tenant, th.id, c.id)
        assert [m.text for m in api.active_path(tenant, th.id)] == ["a", "c"]
        tree = api.tree(tenant, th.id)
        assert [m.id for m in tree.children(a.id)] == [b.id, c.id]
        assert tree.active_path_ids == (a.id, c.id)

    def test_clear_empties_the_path_and_keeps_history(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        api.append(tenant, th.id, [user("x"), bot("y")])
        api.set_active_leaf(tenant, th.id, None)
        assert api.active_path(tenant, th.id) == []
        (z,) = api.append(tenant, th.id, user("z"))
        assert z.parent_id is None and z.seq == 3
        assert len(api.tree(tenant, th.id).messages) == 3

    def test_rebase_path_reuses_the_prefix(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        msgs = [user("one"), bot("two"), user("three"), bot("four")]
        first = api.rebase_path(tenant, th.id, msgs)
        assert [m.seq for m in first] == [1, 2, 3, 4]
        again = api.rebase_path(tenant, th.id, msgs)
        assert [m.id for m in again] == [m.id for m in first]
        assert len(api.tree(tenant, th.id).messages) == 4
        # a framework dropped "two": "one" is reused, the rest is a branch of copies
        changed = api.rebase_path(tenant, th.id, [msgs[0], msgs[2], msgs[3]])
        assert changed[0].id == first[0].id
        assert [m.copy_of for m in changed[1:]] == [first[2].id, first[3].id]
        assert [m.text for m in api.active_path(tenant, th.id)] == ["one", "three", "four"]
        shorter = api.rebase_path(tenant, th.id, [msgs[0]])
        assert [m.id for m in shorter] == [first[0].id]
        assert [m.text for m in api.active_path(tenant, th.id)] == ["one"]
        assert api.rebase_path(tenant, th.id, []) == []
        assert api.active_path(tenant, th.id) == []
        assert len(api.tree(tenant, th.id).messages) == 6

    def test_archive_is_a_watermark_view(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        api.append(tenant, th.id, [user(str(i)) for i in range(5)])
        assert api.archive_through(tenant, th.id, 3) == 3
        assert api.archive_through(tenant, th.id, 1) == 3  # never lowers
        assert [m.text for m in api.active_path(tenant, th.id, include_archived=False)] == [
            "3",
            "4",
        ]
        assert len(api.active_path(tenant, th.id)) == 5

    def test_fork_copies_the_path_and_leaves_the_source(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant, title="src")
        a, b, c = api.append(tenant, th.id, [user("a"), bot("b"), user("c")])
        fork = api.fork_thread(tenant, th.id, b.id, key="fork-1")
        assert fork.forked_from == th.id and fork.id != th.id
        path = api.active_path(tenant, fork.id)
        assert [(m.text, m.seq, m.copy_of) for m in path] == [("a", 1, a.id), ("b", 2, b.id)]
        assert {m.id for m in path}.isdisjoint({a.id, b.id})
        assert [m.id for m in api.active_path(tenant, th.id)] == [a.id, b.id, c.id]

    # ------------------------------------------------------------ the query budget

    def test_active_path_is_one_select(self, api: Api, store: TranscriptStore, tenant: str) -> None:
        th = api.create_thread(tenant)
        api.append(tenant, th.id, [user(f"m{i}") for i in range(20)])
        first = api.tree(tenant, th.id).messages[5]
        api.append(tenant, th.id, [bot(f"branch {i}") for i in range(5)], parent_id=first.id)
        statements: list[str] = []
        engine = store.engine if api.mode == "sync" else store.async_engine.sync_engine

        def count(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
            statements.append(statement)

        sa.event.listen(engine, "before_cursor_execute", count)
        try:
            path = api.active_path(tenant, th.id)
        finally:
            sa.event.remove(engine, "before_cursor_execute", count)
        selects = [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
        assert len(selects) == 1, statements
        assert [s for s in statements if not s.startswith("BEGIN")] == selects  # SQLite's BEGIN
        assert [m.text for m in path] == [f"m{i}" for i in range(6)] + [
            f"branch {i}" for i in range(5)
        ]

    # ------------------------------------------------------------ tenants

    def test_every_call_is_refused_across_tenants(self, api: Api, tenant: str) -> None:
        th = api.create_thread(tenant)
        (m,) = api.append(tenant, th.id, user("private words"))
        tr = api.begin_turn_record(tenant, th.id, user("q"), ModelInput())
        other = tenant + "-other"
        refused: list[Call] = [
            ("get_thread", (other, th.id), {}),
            ("append", (other, th.id, user("x")), {}),
            ("begin_turn_record", (other, th.id, user("x"), ModelInput()), {}),
            ("complete_turn", (other, th.id, tr.turn_id, [bot("x")]), {}),
            ("edit", (other, th.id, m.id, "x"), {}),
            ("regenerate", (other, th.id, m.id, "x"), {}),
            ("branches", (other, th.id, m.id), {}),
            ("switch", (other, th.id, m.id), {}),
            ("set_active_leaf", (other, th.id, None), {}),
            ("rebase_path", (other, th.id, []), {}),
            ("archive_through", (other, th.id, 1), {}),
            ("active_path", (other, th.id), {}),
            ("tree", (other, th.id), {}),
            ("reconstruct_model_input", (other, th.id, tr.turn_id), {}),
            ("export_thread", (other, th.id), {}),
            ("export_user_view", (other, th.id), {}),
            ("redact", (other, th.id, m.id), {"actor": "x", "reason": "y"}),
            ("delete_thread", (other, th.id), {}),
            ("add_derived", (other, th.id, "fact", "x", [m.id]), {}),
            ("list_derived", (other, th.id), {}),
            ("fork_thread", (other, th.id, m.id), {}),
            ("set_retention", (other, th.id, None), {}),
        ]
        for name, args, kwargs in refused:
            with pytest.raises(ThreadNotFound):
                getattr(api, name)(*args, **kwargs)
        assert api.search(other, "private") == []
        assert api.list_threads(other) == []
        assert api.get_messages(other, th.id, [m.id]) == []
        assert [h.message_id for h in api.search(tenant, "private")] == [m.id]
        assert [x.text for x in api.active_path(tenant, th.id)] == ["private words", "q"]
        # attachments are per tenant: the same bytes elsewhere are not reachable by digest
        secret = AttachmentPart(media_type="text/plain", name="p.txt", data=b"private bytes")
        (with_file,) = api.append(tenant, th.id, NewMessage(role="user", content=[secret]))
        ref = with_file.parts[0]
        assert isinstance(ref, AttachmentPart)
        with pytest.raises(AttachmentNotFound):
            api.get_attachment(other, ref.sha256)
        # another tenant's key names another thread; ids are per tenant, so importing the
        # export elsewhere makes an unrelated copy (issue 11: no existence oracle)
        assert api.get_or_create_thread(other, "shared-key").id != api.get_or_create_thread(
            tenant, "shared-key"
        ).id
        copy = api.import_thread(other, api.export_thread(tenant, th.id))
        assert copy.id == th.id and {t.key for t in api.list_threads(other)} == {"shared-key", None}
        api.redact(other, th.id, m.id, actor="other", reason="their copy")
        api.delete_thread(other, th.id)
        assert [x.text for x in api.active_path(tenant, th.id)] == ["private words", "q", ""]
        assert len(api.tree(tenant, th.id).messages) == 3

    # ------------------------------------------------------------ turns

    def test_two_commit_points(self, api: Api, store: TranscriptStore, tenant: str) -> None:
        th = api.create_thread(tenant)
        (hello,) = api.append(tenant, th.id, user("hello"))
        tr = api.begin_turn_record(
            tenant,
            th.id,
            user("revenue of ACME?"),
            ModelInput(
                rendered_block="focus: ACME (tentative)",
                state_snapshot={"recent_questions": ["revenue of ACME?"]},
                sent_message_ids=[hello.id],
                system_prompt="You are terse.",
                tool_schemas=[{"name": "crm", "parameters": {}}],
                model="gpt-x",
                model_params={"temperature": 0},
            ),
        )
        # a crash here leaves exactly commit point 1
        rec = api.reconstruct_model_input(tenant, th.id, tr.turn_id)
        assert rec.completed_at is None and rec.answer_message_id is None
        assert rec.system_prompt == "You are terse."
        assert [m.id for m in rec.messages] == [hello.id]
        assert rec.user_message.text == "revenue of ACME?"
        # a failure inside commit point 2 leaves nothing of it
        with pytest.raises(ConfigError):
            api.complete_turn(
                tenant,
                th.id,
                tr.turn_id,
                [bot("half"), NewMessage(role="robot", content="?")],  # type: ignore[arg-type]
            )
        assert [m.text for m in api.active_path(tenant, th.id)] == ["hello", "revenue of ACME?"]
        call = ToolCallPart(call_id="c1", name="crm", arguments={"q": "ACME"})
        out = api.complete_turn(
            tenant,
            th.id,
            tr.turn_id,
            [
                NewMessage(role="assistant", content=[call]),
                NewMessage(role="tool", content=[ToolResultPart(call_id="c1", content="4.2 M")]),
                bot("ACME made 4.2 M."),
            ],
        )
        assert [m.seq for m in out] == [3, 4, 5]
        assert [m.visibility for m in out] == ["execution", "execution", "conversation"]
        assert all(m.turn_id == tr.turn_id for m in out)
        rec = api.reconstruct_model_input(tenant, th.id, tr.turn_id)
        assert rec.answer_message_id == out[-1].id and rec.completed_at is not None
        with pytest.raises(ConfigError):
            api.complete_turn(tenant, th.id, tr.turn_id, [bot("twice")])
        view = api.export_user_view(tenant, th.id)
        assert "4.2 M." in view and "crm" not in view

    def test_system_prompt_is_stored_once(
        self, api: Api, store: TranscriptStore, tenant: str
    ) -> None:
        th = api.create_thread(tenant)
        for i in range(3):
            api.begin_turn_record(tenant, th.id, user(f"q{i}"), ModelInput(system_prompt="S" * 500))
        with store.engine.connect() as conn:
            n = conn.execute(
                sa.text("SELECT count(*) FROM convmem_templates WHERE tenant = :t"), {"t": tenant}
            ).scalar_one()
        assert n == 1

    # ------------------------------------------------------------ attachments, search

    def test_attachments_are_deduplicated_per_tenant(
        self, api: Api, store: TranscriptStore, tenant: str
    ) -> None:
        data = b"%PDF- quarterly report"
        part = AttachmentPart(media_type="application/pdf", name="q.pdf", data=data)
        th = api.create_thread(tenant)
        (m1,) = api.append(tenant, th.id, NewMessage(role="user", content=[TextPart("see"), part]))
        api.append(tenant, th.id, NewMessage(role="user", content=[part]))
        other = api.create_thread(tenant + "-b")
        api.append(tenant + "-b", other.id, NewMessage(role="user", content=[part]))
        ref = m1.parts[1]
        assert isinstance(ref, AttachmentPart) and ref.data is None and ref.size == len(data)
        assert api.get_attachment(tenant, ref.sha256) == data
        with store.engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT tenant, refcount FROM convmem_attachments WHERE sha256 = :s"),
                {"s": ref.sha256},
            ).all()
        assert sorted(tuple(r) for r in rows if r[0].startswith(tenant)) == [
            (tenant, 2),
            (tenant + "-b", 1),
        ]

    def test_search_is_tenant_scoped_and_forgets_deleted_threads(
        self, api: Api, tenant: str
    ) -> None:
        th = api.create_thread(tenant)
        (m,) = api.append(tenant, th.id, user("the quarterly invoice for Globex"))
        api.append(tenant, th.id, bot("nothing relevant"))
        hits = api.search(tenant, "invoice Globex")
        assert [h.message_id for h in hits] == [m.id] and hits[0].seq == 1
        assert api.search(tenant, "invoice", thread_id=th.id)[0].thread_id == th.id
        assert api.search(tenant, 'invoice" OR "x') == []  # words only, no query syntax
        api.delete_thread(tenant, th.id)
        assert api.search(tenant, "invoice") == []

    # ------------------------------------------------------------ export / import

    def _rich_thread(self, api: Api, tenant: str) -> str:
        th = api.create_thread(tenant, key="rich", title="Rich", metadata={"x": [1, 2.5, None]})
        q, a = api.append(tenant, th.id, [user("héllo ✓"), bot("hi")])
        api.edit(tenant, th.id, q.id, "hello again")
        pdf = AttachmentPart(media_type="application/pdf", name="r.pdf", data=bytes(range(256)))
        tr = api.begin_turn_record(
            tenant,
            th.id,
            NewMessage(role="user", content=[TextPart("see file"), pdf], extra={"k": {"v": 1}}),
            ModelInput(rendered_block="block", state_snapshot={"s": 1}, system_prompt="sys"),
        )
        out = api.complete_turn(tenant, th.id, tr.turn_id, [bot("seen")])
        api.regenerate(tenant, th.id, out[-1].id, "seen it")
        api.add_derived(tenant, th.id, "fact", "likes files", [tr.user_message.id])
        api.redact(tenant, th.id, a.id, actor="ops", reason="test")
        api.archive_through(tenant, th.id, 2)
        return str(th.id)

    def test_export_import_export_is_byte_identical(self, api: Api, tenant: str) -> None:
        tid = self._rich_thread(api, tenant)
        first = api.export_thread(tenant, tid)
        assert first.endswith("\n") and '"format":"convmem.thread"' in first
        with pytest.raises(ThreadExists):
            api.import_thread(tenant, first)  # the same ids in the same tenant
        copy = api.import_thread(tenant, first, new_id=True)
        assert copy.id != tid
        copied = api.export_thread(tenant, copy.id)
        assert copied != first and '"key":null' in copied
        assert api.import_thread(tenant + "-x", first).id == tid  # ids are per tenant
        assert api.export_thread(tenant + "-x", tid) == first
        api.delete_thread(tenant, tid)
        api.import_thread(tenant, first)
        assert api.export_thread(tenant, tid) == first

    # ------------------------------------------------------------ redaction and deletion

    def test_redaction_reaches_every_copy(
        self, api: Api, store: TranscriptStore, tenant: str
    ) -> None:
        card = f"4111-{uuid.uuid4().int % 10**12:012d}"
        secret = f"my card is {card}"
        th = api.create_thread(tenant)
        pdf = AttachmentPart(media_type="image/png", name="card.png", data=f"PNG {card}".encode())
        api.append(tenant, th.id, user("hi"))
        tr = api.begin_turn_record(
            tenant,
            th.id,
            NewMessage(role="user", content=[TextPart(secret), pdf], extra={"raw": secret}),
            ModelInput(
                rendered_block=f"recent: {secret}",
                state_snapshot={"recent_questions": [secret, "other"]},
            ),
        )
        target = tr.user_message
        api.complete_turn(tenant, th.id, tr.turn_id, [bot("noted")])
        fork = api.fork_thread(tenant, th.id, target.id)
        mem = api.add_derived(tenant, th.id, "fact", f"card {card}", [target.id])
        keep = api.add_derived(tenant, th.id, "fact", "says hi", [])
        assert api.search(tenant, card)
        receipt = api.redact(tenant, th.id, target.id, actor="dpo@example", reason="PCI")
        copy_id = api.active_path(tenant, fork.id)[-1].id
        assert set(receipt.message_ids) == {target.id, copy_id}
        assert receipt.turn_ids == (tr.turn_id,) and receipt.derived_ids == (mem.id,)
        assert receipt.attachments_removed == 1
        for tid, mid in ((th.id, target.id), (fork.id, copy_id)):
            (msg,) = api.get_messages(tenant, tid, [mid])
            assert msg.redacted and msg.text == "[redacted]" and msg.seq == 2
            assert isinstance(msg.parts[1], AttachmentPart) and msg.parts[1].sha256 == ""
        rec = api.reconstruct_model_input(tenant, th.id, tr.turn_id)
        assert rec.rendered_block == "recent: [redacted]"
        assert rec.state_snapshot == {"recent_questions": ["[redacted]", "other"]}
        derived = {d.id: d for d in api.list_derived(tenant, th.id)}
        assert derived[mem.id].tombstoned_at is not None and derived[mem.id].content == ""
        assert derived[keep.id].tombstoned_at is None
        assert api.search(tenant, card) == []
        export = api.export_thread(tenant, th.id)
        assert card not in export and '"actor":"dpo@example"' in export
        assert [m.text for m in api.active_path(tenant, th.id)] == ["hi", "[redacted]", "noted"]
        residue = self.residue(store)
        assert card.encode() not in residue
        assert card.split("-")[1].encode() not in residue  # the search index keeps words
        api.delete_thread(tenant, th.id)
        assert api.list_derived(tenant, fork.id) == []

    def test_delete_leaves_zero_rows(self, api: Api, store: TranscriptStore, tenant: str) -> None:
        tid = self._rich_thread(api, tenant)
        marker = f"erase-me-{tenant}"
        blob = f"shared bytes {tenant}".encode()
        shared = AttachmentPart(media_type="text/plain", name="s.txt", data=blob)
        other = api.create_thread(tenant)
        api.append(tenant, other.id, NewMessage(role="user", content=[shared]))
        api.append(tenant, tid, NewMessage(role="user", content=[TextPart(marker), shared]))
        receipt = api.delete_thread(tenant, tid)
        assert receipt.messages == 7 and receipt.turns == 1 and receipt.derived == 1
        assert receipt.attachments_removed == 1  # the pdf; the shared file lives on
        assert api.get_attachment(tenant, _sha(blob)) == blob
        with pytest.raises(ThreadNotFound):
            api.get_thread(tenant, tid)
        api.delete_thread(tenant, other.id)
        with store.engine.connect() as conn:
            for table in sa.inspect(conn).get_table_names():
                if not table.startswith("convmem_") or table.startswith(
                    ("convmem_search_", "convmem_alembic")
                ):
                    continue
                n = conn.execute(
                    sa.text(f"SELECT count(*) FROM {table} WHERE tenant = :t"), {"t": tenant}
                ).scalar_one()
                assert n == 0, table
        residue = self.residue(store)
        assert marker.encode() not in residue and blob not in residue

    # ------------------------------------------------------------ retention

    def test_retention_needs_an_owner(self, transcript_url: str) -> None:
        with pytest.raises(TypeError):
            TranscriptStore(transcript_url)  # type: ignore[call-arg]
        with pytest.raises(ConfigError):
            RetentionPolicy(max_age=None, owner=" ")

    def test_sweep_dry_run_then_delete(
        self, api: Api, store: TranscriptStore, tenant: str, clock: Clock
    ) -> None:
        day = timedelta(days=1)
        old = api.create_thread(tenant, retention=RetentionPolicy(max_age=day, owner="legal"))
        held = api.create_thread(
            tenant, retention=RetentionPolicy(max_age=day, owner="legal", legal_hold=True)
        )
        young = api.create_thread(tenant, retention=RetentionPolicy(max_age=30 * day, owner="x"))
        forever = api.create_thread(tenant)
        for th in (old, held, young, forever):
            api.append(tenant, th.id, user("content"))
        later = clock.now + 2 * day
        report = api.sweep(tenant, now=later)
        assert report.dry_run and report.expired == ((tenant, old.id),) and report.held == 1
        assert api.get_thread(tenant, old.id).id == old.id
        seen: list[tuple[int, int]] = []
        done = api.sweep(
            tenant, now=later, dry_run=False, progress=lambda i, n: seen.append((i, n))
        )
        assert done.expired == ((tenant, old.id),) and seen == [(1, 1)]
        assert {t.id for t in api.list_threads(tenant)} == {held.id, young.id, forever.id}
        api.set_retention(tenant, young.id, RetentionPolicy(max_age=day, owner="x"))
        assert api.sweep(tenant, now=later).expired == ((tenant, young.id),)


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
