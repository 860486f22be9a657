"""The path's cases of ``TranscriptStoreSpec``: ordering, concurrency, branches, the query
budget and tenant isolation. The fixtures they use (``api``, ``store``, ``tenant``,
``clock``, ``transcript_url``) are the spec's (``convmem.testing.transcript_spec``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.testing.transcript_driver import FOREVER, Clock, TranscriptDriver, bot, user
from convmem.transcript import (
    AttachmentNotFound,
    AttachmentPart,
    ModelInput,
    NewMessage,
    ThreadExists,
    ThreadNotFound,
    TranscriptStore,
)


class TranscriptPathCases:
    """Mixed into ``TranscriptStoreSpec``; not a suite on its own."""

    # ------------------------------------------------------------ ordering and concurrency

    async def test_order_of_many_messages(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant, title="ordering")
        texts = [f"message {i}" for i in range(7)]
        for i, text in enumerate(texts):
            await api(store.append, tenant, th.id, user(text) if i % 2 == 0 else bot(text))
        path = await api(store.active_path, tenant, th.id)
        assert [m.text for m in path] == texts
        assert [m.seq for m in path] == list(range(1, 8))
        assert [m.parent_id for m in path] == [None] + [m.id for m in path[:-1]]
        assert (await api(store.get_thread, tenant, th.id)).active_leaf == path[-1].id

    async def test_fifty_concurrent_writers_get_a_gapless_sequence(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        await asyncio.gather(*(api(store.append, tenant, th.id, user(f"w{i}")) for i in range(50)))
        path = await api(store.active_path, tenant, th.id)
        assert [m.seq for m in path] == list(range(1, 51))
        assert sorted(m.text for m in path) == sorted(f"w{i}" for i in range(50))
        assert [m.parent_id for m in path[1:]] == [m.id for m in path[:-1]]
        assert len((await api(store.tree, tenant, th.id)).messages) == 50

    async def test_two_devices_share_one_ordered_history(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str, transcript_url: str
    ) -> None:
        # another application server, sync, built off the loop (it reads the file path)
        other = await asyncio.to_thread(TranscriptStore, transcript_url, retention=FOREVER)
        try:
            th = await api(store.get_or_create_thread, tenant, "session-42")
            same = await asyncio.to_thread(other.get_or_create_thread, tenant, "session-42")
            assert same.id == th.id
            for i in range(3):
                await api(store.append, tenant, th.id, user(f"phone {i}"))
                await asyncio.to_thread(other.append, tenant, th.id, user(f"laptop {i}"))
            expected = [f"{d} {i}" for i in range(3) for d in ("phone", "laptop")]
            assert [m.text for m in await api(store.active_path, tenant, th.id)] == expected
            theirs = await asyncio.to_thread(other.active_path, tenant, th.id)
            assert [m.text for m in theirs] == expected
        finally:
            await asyncio.to_thread(other.engine.dispose)

    async def test_get_or_create_is_one_thread_per_key_under_races(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        threads = await asyncio.gather(
            *(api(store.get_or_create_thread, tenant, "lg-thread-7") for _ in range(10))
        )
        assert len({t.id for t in threads}) == 1
        assert threads[0].key == "lg-thread-7"
        with pytest.raises(ThreadExists):
            await api(store.create_thread, tenant, key="lg-thread-7")

    async def test_skewed_client_clocks_never_reorder(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        now = datetime.now(timezone.utc)
        skews = [timedelta(hours=5), timedelta(days=-400), timedelta(0), timedelta(minutes=-3)]
        for i, skew in enumerate(skews):
            await api(store.append, tenant, th.id, user(f"m{i}", client_ts=now + skew))
        path = await api(store.active_path, tenant, th.id)
        assert [m.text for m in path] == ["m0", "m1", "m2", "m3"]
        assert [m.client_ts for m in path] == [now + s for s in skews]
        received = [m.received_at for m in path]
        assert received == sorted(received)

    async def test_skewed_server_clocks_never_reorder(
        self,
        api: TranscriptDriver,
        store: TranscriptStore,
        tenant: str,
        transcript_url: str,
        clock: Clock,
    ) -> None:
        """Two application servers whose clocks disagree by a day still append in order."""
        behind = Clock()
        behind.now = clock.now - timedelta(days=1)
        other = await asyncio.to_thread(
            TranscriptStore, transcript_url, retention=FOREVER, clock=behind
        )
        try:
            th = await api(store.create_thread, tenant)
            for i in range(3):
                await api(store.append, tenant, th.id, user(f"ahead {i}"))
                await asyncio.to_thread(other.append, tenant, th.id, user(f"behind {i}"))
            path = await api(store.active_path, tenant, th.id)
            assert [m.text for m in path] == [
                f"{side} {i}" for i in range(3) for side in ("ahead", "behind")
            ]
            assert [m.seq for m in path] == list(range(1, 7))
            assert path[1].received_at < path[0].received_at  # the stamps disagree, seq rules
        finally:
            await asyncio.to_thread(other.engine.dispose)

    # ------------------------------------------------------------ branches

    async def test_edits_and_regenerations_are_branches(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        q, a = await api(store.append, tenant, th.id, [user("revenue in May?"), bot("12 M")])
        q2 = await api(store.edit, tenant, th.id, q.id, "revenue in June?")
        assert q2.parent_id is None and q2.id != q.id
        assert [m.id for m in await api(store.branches, tenant, th.id, q.id)] == [q.id, q2.id]
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == ["revenue in June?"]
        (a2,) = await api(store.append, tenant, th.id, bot("13 M"))
        a3 = await api(store.regenerate, tenant, th.id, a2.id, "13.1 M")
        assert [m.text for m in await api(store.branches, tenant, th.id, a3.id)] == [
            "13 M",
            "13.1 M",
        ]
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == [
            "revenue in June?",
            "13.1 M",
        ]
        # the original question and answer are still there, unchanged
        leaf = await api(store.switch, tenant, th.id, q.id)
        assert leaf.id == a.id
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == [
            "revenue in May?",
            "12 M",
        ]
        assert len((await api(store.tree, tenant, th.id)).messages) == 5
        with pytest.raises(ConfigError):
            await api(store.regenerate, tenant, th.id, q.id, "a question is not an answer")

    async def test_a_regenerated_answer_keeps_its_turn(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        tr = await api(
            store.begin_turn_record, tenant, th.id, user("revenue in May?"), ModelInput()
        )
        (a,) = await api(store.complete_turn, tenant, th.id, tr.turn_id, [bot("12 M")])
        a2 = await api(store.regenerate, tenant, th.id, a.id, "12.0 M")
        assert a.turn_id == a2.turn_id == tr.turn_id and a2.parent_id == a.parent_id
        # an edited question is not the turn's input: it carries none; a question recorded
        # with its own model input under the same parent is a sibling with its own turn
        q2 = await api(store.edit, tenant, th.id, tr.user_message.id, "revenue in June?")
        assert q2.turn_id is None
        tr3 = await api(
            store.begin_turn_record,
            tenant,
            th.id,
            user("revenue in July?"),
            ModelInput(),
            parent_id=None,
        )
        assert tr3.user_message.parent_id is None and tr3.turn_id != tr.turn_id
        assert [m.id for m in await api(store.branches, tenant, th.id, q2.id)] == [
            tr.user_message.id,
            q2.id,
            tr3.user_message.id,
        ]
        assert await api(store.active_path, tenant, th.id) == [tr3.user_message]
        with pytest.raises(ThreadNotFound):
            await api(
                store.begin_turn_record, tenant, th.id, user("x"), ModelInput(), parent_id="nope"
            )

    async def test_explicit_parent_makes_a_branch(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        a, b = await api(store.append, tenant, th.id, [user("a"), bot("b")])
        (c,) = await api(store.append, tenant, th.id, user("c"), parent_id=a.id, activate=False)
        assert c.parent_id == a.id
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == ["a", "b"]
        await api(store.set_active_leaf, tenant, th.id, c.id)
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == ["a", "c"]
        tree = await api(store.tree, tenant, th.id)
        assert [m.id for m in tree.children(a.id)] == [b.id, c.id]
        assert tree.active_path_ids == (a.id, c.id)

    async def test_clear_empties_the_path_and_keeps_history(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        await api(store.append, tenant, th.id, [user("x"), bot("y")])
        await api(store.set_active_leaf, tenant, th.id, None)
        assert await api(store.active_path, tenant, th.id) == []
        (z,) = await api(store.append, tenant, th.id, user("z"))
        assert z.parent_id is None and z.seq == 3
        assert len((await api(store.tree, tenant, th.id)).messages) == 3

    async def test_rebase_path_reuses_the_prefix(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        msgs = [user("one"), bot("two"), user("three"), bot("four")]
        first = await api(store.rebase_path, tenant, th.id, msgs)
        assert [m.seq for m in first] == [1, 2, 3, 4]
        again = await api(store.rebase_path, tenant, th.id, msgs)
        assert [m.id for m in again] == [m.id for m in first]
        assert len((await api(store.tree, tenant, th.id)).messages) == 4
        # a framework dropped "two": "one" is reused, the rest is a branch of copies
        changed = await api(store.rebase_path, tenant, th.id, [msgs[0], msgs[2], msgs[3]])
        assert changed[0].id == first[0].id
        assert [m.copy_of for m in changed[1:]] == [first[2].id, first[3].id]
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == [
            "one",
            "three",
            "four",
        ]
        shorter = await api(store.rebase_path, tenant, th.id, [msgs[0]])
        assert [m.id for m in shorter] == [first[0].id]
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == ["one"]
        assert await api(store.rebase_path, tenant, th.id, []) == []
        assert await api(store.active_path, tenant, th.id) == []
        assert len((await api(store.tree, tenant, th.id)).messages) == 6

    async def test_archive_is_a_watermark_view(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        await api(store.append, tenant, th.id, [user(str(i)) for i in range(5)])
        assert await api(store.archive_through, tenant, th.id, 3) == 3
        assert await api(store.archive_through, tenant, th.id, 1) == 3  # never lowers
        assert [
            m.text for m in await api(store.active_path, tenant, th.id, include_archived=False)
        ] == [
            "3",
            "4",
        ]
        assert len(await api(store.active_path, tenant, th.id)) == 5

    async def test_fork_copies_the_path_and_leaves_the_source(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant, title="src")
        a, b, c = await api(store.append, tenant, th.id, [user("a"), bot("b"), user("c")])
        fork = await api(store.fork_thread, tenant, th.id, b.id, key="fork-1")
        assert fork.forked_from == th.id and fork.id != th.id
        path = await api(store.active_path, tenant, fork.id)
        assert [(m.text, m.seq, m.copy_of) for m in path] == [("a", 1, a.id), ("b", 2, b.id)]
        assert {m.id for m in path}.isdisjoint({a.id, b.id})
        assert [m.id for m in await api(store.active_path, tenant, th.id)] == [a.id, b.id, c.id]

    # ------------------------------------------------------------ the path as search sees it

    @staticmethod
    async def assert_search_sees_the_path(
        api: TranscriptDriver, store: TranscriptStore, tenant: str, thread_id: str
    ) -> None:
        """``search(active_path=True)`` finds exactly the active path's messages (every
        message here says "zebu"): the segments agree with the parent links."""
        path = await api(store.active_path, tenant, thread_id)
        hits = await api(
            store.search, tenant, "zebu", thread_id=thread_id, limit=100_000, match="any",
            active_path=True,
        )
        assert sorted(h.message_id for h in hits) == sorted(m.id for m in path)

    async def assert_every_leaf(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str, thread_id: str
    ) -> None:
        """``assert_search_sees_the_path`` with each message of the thread as the leaf."""
        tree = await api(store.tree, tenant, thread_id)
        for m in tree.messages:
            await api(store.set_active_leaf, tenant, thread_id, m.id)
            await self.assert_search_sees_the_path(api, store, tenant, thread_id)

    async def test_search_sees_the_path_through_every_kind_of_write(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        """Each way a message is written or the pointer moves, in a seeded random order;
        then every message as the leaf, a fork and an import of the tree."""
        import random

        rnd = random.Random(20261205)
        th = await api(store.create_thread, tenant)
        n = 0

        def text() -> str:
            nonlocal n
            n += 1
            return f"zebu {n}"

        async def messages(role: str | None = None) -> list[Any]:
            tree = await api(store.tree, tenant, th.id)
            return [m for m in tree.messages if role is None or m.role == role]

        for _ in range(40):
            op = rnd.choice(["append", "chain", "under", "leaf", "edit", "regenerate",
                             "switch", "turn", "rebase", "clear"])
            every = await messages()
            if op == "append" or not every:
                await api(store.append, tenant, th.id, user(text()))
            elif op == "chain":
                await api(store.append, tenant, th.id, [user(text()), bot(text())])
            elif op == "under":
                await api(store.append, tenant, th.id, bot(text()),
                          parent_id=rnd.choice(every).id, activate=rnd.random() < 0.5)
            elif op == "leaf":
                await api(store.set_active_leaf, tenant, th.id, rnd.choice(every).id)
            elif op == "edit":
                await api(store.edit, tenant, th.id, rnd.choice(every).id, text())
            elif op == "regenerate" and (answers := await messages("assistant")):
                await api(store.regenerate, tenant, th.id, rnd.choice(answers).id, text())
            elif op == "switch":
                await api(store.switch, tenant, th.id, rnd.choice(every).id)
            elif op == "turn":
                tr = await api(store.begin_turn_record, tenant, th.id, user(text()), ModelInput())
                if rnd.random() < 0.3:  # another device moves the pointer in between
                    await api(store.set_active_leaf, tenant, th.id, rnd.choice(every).id)
                await api(store.complete_turn, tenant, th.id, tr.turn_id, [bot(text())])
            elif op == "rebase":
                path = await api(store.active_path, tenant, th.id)
                keep = [NewMessage(role=m.role, content=m.text) for m in path[: len(path) // 2]]
                await api(store.rebase_path, tenant, th.id, [*keep, user(text())])
            elif op == "clear":
                await api(store.set_active_leaf, tenant, th.id, None)
            await self.assert_search_sees_the_path(api, store, tenant, th.id)
        every = await messages()
        await self.assert_every_leaf(api, store, tenant, th.id)
        fork = await api(store.fork_thread, tenant, th.id, every[len(every) // 2].id)
        await self.assert_search_sees_the_path(api, store, tenant, fork.id)
        await api(store.append, tenant, fork.id, [user(text()), bot(text())])
        await self.assert_search_sees_the_path(api, store, tenant, fork.id)
        other = tenant + "-imported"
        copy = await api(store.import_thread, other, await api(store.export_thread, tenant, th.id))
        await self.assert_every_leaf(api, store, other, copy.id)
        await api(store.append, tenant, th.id, user(text()))
        await self.assert_search_sees_the_path(api, store, tenant, th.id)

    async def test_search_sees_the_path_after_concurrent_branching(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        """Appends on the leaf, regenerations of one answer and branches under an old
        message, all at once: each writer sees the open leaf its predecessor left."""
        th = await api(store.create_thread, tenant)
        q, a = await api(store.append, tenant, th.id, [user("zebu q"), bot("zebu a")])
        writes: list[Awaitable[Any]] = [
            api(store.append, tenant, th.id, user(f"zebu {i}")) for i in range(20)
        ]
        writes += [api(store.regenerate, tenant, th.id, a.id, f"zebu r{i}") for i in range(10)]
        writes += [
            api(store.append, tenant, th.id, bot(f"zebu b{i}"), parent_id=q.id, activate=False)
            for i in range(10)
        ]
        await asyncio.gather(*writes)
        await self.assert_search_sees_the_path(api, store, tenant, th.id)
        await self.assert_every_leaf(api, store, tenant, th.id)

    # ------------------------------------------------------------ the query budget

    async def test_active_path_is_one_select(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        await api(store.append, tenant, th.id, [user(f"m{i}") for i in range(20)])
        first = (await api(store.tree, tenant, th.id)).messages[5]
        await api(
            store.append, tenant, th.id, [bot(f"branch {i}") for i in range(5)], parent_id=first.id
        )
        statements: list[str] = []
        engine = api.engine_events

        def count(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
            statements.append(statement)

        sa.event.listen(engine, "before_cursor_execute", count)
        try:
            path = await api(store.active_path, tenant, th.id)
        finally:
            sa.event.remove(engine, "before_cursor_execute", count)
        selects = [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
        assert len(selects) == 1, statements
        assert [s for s in statements if not s.startswith("BEGIN")] == selects  # SQLite's BEGIN
        assert [m.text for m in path] == [f"m{i}" for i in range(6)] + [
            f"branch {i}" for i in range(5)
        ]

    async def test_a_new_key_costs_one_read_and_one_insert(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        """``get_or_create_thread`` and ``bind_turn`` on a key with no thread: the read
        that finds none, then one insert that returns the row (no upsert-then-read)."""
        statements: list[str] = []

        def count(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
            if not statement.startswith("BEGIN"):  # SQLite's write transaction
                statements.append(statement.lstrip().split(None, 1)[0].upper())

        engine = api.engine_events
        sa.event.listen(engine, "before_cursor_execute", count)
        try:
            made = await api(store.get_or_create_thread, tenant, "new-key")
            made_statements, statements[:] = list(statements), []
            bound = await api(store.bind_turn, tenant, "another-new-key")
        finally:
            sa.event.remove(engine, "before_cursor_execute", count)
        assert made_statements == ["SELECT", "INSERT"], made_statements
        assert statements == ["SELECT", "INSERT"], statements
        assert bound.recent_user_messages == () and bound.thread.key == "another-new-key"
        assert (await api(store.get_or_create_thread, tenant, "new-key")).id == made.id
        assert (await api(store.bind_turn, tenant, "another-new-key")).thread == bound.thread

    # ------------------------------------------------------------ tenants

    async def test_every_call_is_refused_across_tenants(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        (m,) = await api(store.append, tenant, th.id, user("private words"))
        tr = await api(store.begin_turn_record, tenant, th.id, user("q"), ModelInput())
        other = tenant + "-other"
        refused: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = [
            (store.get_thread, (other, th.id), {}),
            (store.append, (other, th.id, user("x")), {}),
            (store.begin_turn_record, (other, th.id, user("x"), ModelInput()), {}),
            (store.complete_turn, (other, th.id, tr.turn_id, [bot("x")]), {}),
            (store.edit, (other, th.id, m.id, "x"), {}),
            (store.regenerate, (other, th.id, m.id, "x"), {}),
            (store.branches, (other, th.id, m.id), {}),
            (store.switch, (other, th.id, m.id), {}),
            (store.set_active_leaf, (other, th.id, None), {}),
            (store.rebase_path, (other, th.id, []), {}),
            (store.archive_through, (other, th.id, 1), {}),
            (store.active_path, (other, th.id), {}),
            (store.tree, (other, th.id), {}),
            (store.reconstruct_model_input, (other, th.id, tr.turn_id), {}),
            (store.export_thread, (other, th.id), {}),
            (store.export_user_view, (other, th.id), {}),
            (store.redact, (other, th.id, m.id), {"actor": "x", "reason": "y"}),
            (store.delete_thread, (other, th.id), {}),
            (store.add_derived, (other, th.id, "fact", "x", [m.id]), {}),
            (store.list_derived, (other, th.id), {}),
            (store.fork_thread, (other, th.id, m.id), {}),
            (store.set_retention, (other, th.id, None), {}),
        ]
        for method, args, kwargs in refused:
            with pytest.raises(ThreadNotFound):
                await api(method, *args, **kwargs)
        assert await api(store.search, other, "private") == []
        assert await api(store.list_threads, other) == []
        assert await api(store.get_messages, other, th.id, [m.id]) == []
        assert [h.message_id for h in await api(store.search, tenant, "private")] == [m.id]
        assert [x.text for x in await api(store.active_path, tenant, th.id)] == [
            "private words",
            "q",
        ]
        # attachments are per tenant: the same bytes elsewhere are not reachable by digest
        secret = AttachmentPart(media_type="text/plain", name="p.txt", data=b"private bytes")
        (with_file,) = await api(
            store.append, tenant, th.id, NewMessage(role="user", content=[secret])
        )
        ref = with_file.parts[0]
        assert isinstance(ref, AttachmentPart)
        with pytest.raises(AttachmentNotFound):
            await api(store.get_attachment, other, ref.sha256)
        # another tenant's key names another thread; ids are per tenant, so importing the
        # export elsewhere makes an unrelated copy (issue 11: no existence oracle)
        assert (await api(store.get_or_create_thread, other, "shared-key")).id != (
            await api(store.get_or_create_thread, tenant, "shared-key")
        ).id
        copy = await api(store.import_thread, other, await api(store.export_thread, tenant, th.id))
        assert copy.id == th.id and {t.key for t in await api(store.list_threads, other)} == {
            "shared-key",
            None,
        }
        await api(store.redact, other, th.id, m.id, actor="other", reason="their copy")
        await api(store.delete_thread, other, th.id)
        assert [x.text for x in await api(store.active_path, tenant, th.id)] == [
            "private words",
            "q",
            "",
        ]
        assert len((await api(store.tree, tenant, th.id)).messages) == 3

