"""``TranscriptStoreSpec``: the conformance suite every transcript backend runs.

Built like ``SessionStateStoreSpec``: a backend's test module subclasses the spec,
names itself (``backend_id``) and provides a ``transcript_url`` fixture (a database
the suite may write to; every test uses its own random tenant, so one database can
serve a whole session). Each test is a coroutine and runs twice, with ids
``[<backend>-sync]`` and ``[<backend>-async]``: through the sync methods in a worker
thread, and through their ``a`` twins on the event loop under blockbuster, so an async
method that blocks the loop fails. Calls go through the typed
``convmem.testing.transcript_driver.TranscriptDriver``. This module holds the fixtures,
the hooks and the record's cases (turns, attachments, search, export and import,
redaction, deletion, retention); ``convmem.testing.transcript_cases`` holds the
path's (ordering, concurrency, branches, the query budget, tenants).

A backend may override ``residue(store)`` to add raw bytes that must not hold
redacted or deleted content (SQLite adds its database and WAL files).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import timedelta
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.testing._modes import EveryMode
from convmem.testing.transcript_cases import TranscriptPathCases
from convmem.testing.transcript_driver import (
    FOREVER,
    Api,
    Clock,
    TranscriptDriver,
    bot,
    build_rich_thread,
    sha256,
    user,
)
from convmem.transcript import (
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


class TranscriptStoreSpec(EveryMode, TranscriptPathCases):
    """Subclass with ``backend_id = "..."`` and a ``transcript_url`` fixture; see the
    module docstring."""

    #: Keyword arguments of the store under test: a subclass runs the suite on another
    #: configuration of the same backend (``{"search_index": "deferred"}``).
    store_options: ClassVar[Mapping[str, Any]] = {}

    # ------------------------------------------------------------ fixtures and hooks

    @pytest.fixture
    def clock(self) -> Clock:
        """The store's clock."""
        return Clock()

    @pytest.fixture
    def store(self, transcript_url: str, clock: Clock) -> Iterator[TranscriptStore]:
        """A migrated store on the backend under test."""
        store = TranscriptStore(
            transcript_url, retention=FOREVER, clock=clock, **self.store_options
        )
        with _LOCK:
            if transcript_url not in _MIGRATED:
                store.migrate()
                _MIGRATED.add(transcript_url)
        yield store
        store.engine.dispose()

    @pytest.fixture
    async def api(
        self, request: pytest.FixtureRequest, store: TranscriptStore
    ) -> AsyncIterator[TranscriptDriver]:
        """The store through its sync or its async methods."""
        driver = TranscriptDriver(store, request.param)
        yield driver
        await driver.close()

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

    @staticmethod
    async def query(store: TranscriptStore, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` read straight from the database (off the event loop)."""

        def read() -> list[tuple[Any, ...]]:
            with store.engine.connect() as conn:
                return [tuple(r) for r in conn.execute(sa.text(sql), params)]

        return await asyncio.to_thread(read)

    # ------------------------------------------------------------ turns

    async def test_two_commit_points(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        (hello,) = await api(store.append, tenant, th.id, user("hello"))
        tr = await api(
            store.begin_turn_record,
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
        rec = await api(store.reconstruct_model_input, tenant, th.id, tr.turn_id)
        assert rec.completed_at is None and rec.answer_message_id is None
        assert rec.system_prompt == "You are terse."
        assert [m.id for m in rec.messages] == [hello.id]
        assert rec.user_message.text == "revenue of ACME?"
        # a failure inside commit point 2 leaves nothing of it
        with pytest.raises(ConfigError):
            await api(
                store.complete_turn,
                tenant,
                th.id,
                tr.turn_id,
                [bot("half"), NewMessage(role="robot", content="?")],  # type: ignore[arg-type]
            )
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == [
            "hello",
            "revenue of ACME?",
        ]
        call = ToolCallPart(call_id="c1", name="crm", arguments={"q": "ACME"})
        out = await api(
            store.complete_turn,
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
        rec = await api(store.reconstruct_model_input, tenant, th.id, tr.turn_id)
        assert rec.answer_message_id == out[-1].id and rec.completed_at is not None
        with pytest.raises(ConfigError):
            await api(store.complete_turn, tenant, th.id, tr.turn_id, [bot("twice")])
        view = await api(store.export_user_view, tenant, th.id)
        assert "4.2 M." in view and "crm" not in view

    async def test_system_prompt_is_stored_once(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        for i in range(3):
            await api(
                store.begin_turn_record,
                tenant,
                th.id,
                user(f"q{i}"),
                ModelInput(system_prompt="S" * 500),
            )
        rows = await self.query(
            store, "SELECT count(*) FROM convmem_templates WHERE tenant = :t", t=tenant
        )
        assert rows == [(1,)]

    # ------------------------------------------------------------ attachments, search

    async def test_attachments_are_deduplicated_per_tenant(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        data = b"%PDF- quarterly report"
        part = AttachmentPart(media_type="application/pdf", name="q.pdf", data=data)
        th = await api(store.create_thread, tenant)
        (m1,) = await api(
            store.append, tenant, th.id, NewMessage(role="user", content=[TextPart("see"), part])
        )
        await api(store.append, tenant, th.id, NewMessage(role="user", content=[part]))
        other = await api(store.create_thread, tenant + "-b")
        await api(store.append, tenant + "-b", other.id, NewMessage(role="user", content=[part]))
        ref = m1.parts[1]
        assert isinstance(ref, AttachmentPart) and ref.data is None and ref.size == len(data)
        assert await api(store.get_attachment, tenant, ref.sha256) == data
        rows = await self.query(
            store,
            "SELECT tenant, refcount FROM convmem_attachments WHERE sha256 = :s",
            s=ref.sha256,
        )
        assert sorted(r for r in rows if r[0].startswith(tenant)) == [
            (tenant, 2),
            (tenant + "-b", 1),
        ]

    async def test_search_is_tenant_scoped_and_forgets_deleted_threads(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        (m,) = await api(store.append, tenant, th.id, user("the quarterly invoice for Globex"))
        await api(store.append, tenant, th.id, bot("nothing relevant"))
        hits = await api(store.search, tenant, "invoice Globex")
        assert [h.message_id for h in hits] == [m.id] and hits[0].seq == 1
        assert (await api(store.search, tenant, "invoice", thread_id=th.id))[0].thread_id == th.id
        assert (
            await api(store.search, tenant, 'invoice" OR "x') == []
        )  # words only, no query syntax
        await api(store.delete_thread, tenant, th.id)
        assert await api(store.search, tenant, "invoice") == []

    # ------------------------------------------------------------ export / import

    async def test_index_pending_moves_what_is_queued_and_search_stays_complete(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        th = await api(store.create_thread, tenant)
        msgs = await api(store.append, tenant, th.id, [user(f"papa {i}") for i in range(5)])
        hits = await api(store.search, tenant, "papa", limit=10)
        assert sorted(h.message_id for h in hits) == sorted(m.id for m in msgs)
        more = await api(store.append, tenant, th.id, [user(f"papa more {i}") for i in range(5)])
        queued = 5 if store.search_index == "deferred" else 0
        assert await api(store.index_pending, tenant, batch=2) == queued
        assert await api(store.index_pending, tenant) == 0
        hits = await api(store.search, tenant, "papa", limit=20)
        assert sorted(h.message_id for h in hits) == sorted(m.id for m in msgs + more)

    async def test_export_import_export_is_byte_identical(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        tid = await build_rich_thread(api, tenant)
        first = await api(store.export_thread, tenant, tid)
        assert first.endswith("\n") and '"format":"convmem.thread"' in first
        with pytest.raises(ThreadExists):
            await api(store.import_thread, tenant, first)  # the same ids in the same tenant
        copy = await api(store.import_thread, tenant, first, new_id=True)
        assert copy.id != tid
        copied = await api(store.export_thread, tenant, copy.id)
        assert copied != first and '"key":null' in copied
        assert (
            await api(store.import_thread, tenant + "-x", first)
        ).id == tid  # ids are per tenant
        assert await api(store.export_thread, tenant + "-x", tid) == first
        await api(store.delete_thread, tenant, tid)
        await api(store.import_thread, tenant, first)
        assert await api(store.export_thread, tenant, tid) == first

    # ------------------------------------------------------------ redaction and deletion

    async def test_redaction_reaches_every_copy(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        card = f"4111-{uuid.uuid4().int % 10**12:012d}"
        secret = f"my card is {card}"
        th = await api(store.create_thread, tenant)
        pdf = AttachmentPart(media_type="image/png", name="card.png", data=f"PNG {card}".encode())
        await api(store.append, tenant, th.id, user("hi"))
        tr = await api(
            store.begin_turn_record,
            tenant,
            th.id,
            NewMessage(role="user", content=[TextPart(secret), pdf], extra={"raw": secret}),
            ModelInput(
                rendered_block=f"recent: {secret}",
                state_snapshot={"recent_questions": [secret, "other"]},
            ),
        )
        target = tr.user_message
        await api(store.complete_turn, tenant, th.id, tr.turn_id, [bot("noted")])
        fork = await api(store.fork_thread, tenant, th.id, target.id)
        mem = await api(store.add_derived, tenant, th.id, "fact", f"card {card}", [target.id])
        keep = await api(store.add_derived, tenant, th.id, "fact", "says hi", [])
        assert await api(store.search, tenant, card)
        receipt = await api(
            store.redact, tenant, th.id, target.id, actor="dpo@example", reason="PCI"
        )
        copy_id = (await api(store.active_path, tenant, fork.id))[-1].id
        assert set(receipt.message_ids) == {target.id, copy_id}
        assert receipt.turn_ids == (tr.turn_id,) and receipt.derived_ids == (mem.id,)
        assert receipt.attachments_removed == 1
        for tid, mid in ((th.id, target.id), (fork.id, copy_id)):
            (msg,) = await api(store.get_messages, tenant, tid, [mid])
            assert msg.redacted and msg.text == "[redacted]" and msg.seq == 2
            assert isinstance(msg.parts[1], AttachmentPart) and msg.parts[1].sha256 == ""
        rec = await api(store.reconstruct_model_input, tenant, th.id, tr.turn_id)
        assert rec.rendered_block == "recent: [redacted]"
        assert rec.state_snapshot == {"recent_questions": ["[redacted]", "other"]}
        derived = {d.id: d for d in await api(store.list_derived, tenant, th.id)}
        assert derived[mem.id].tombstoned_at is not None and derived[mem.id].content == ""
        assert derived[keep.id].tombstoned_at is None
        assert await api(store.search, tenant, card) == []
        export = await api(store.export_thread, tenant, th.id)
        assert card not in export and '"actor":"dpo@example"' in export
        assert [m.text for m in await api(store.active_path, tenant, th.id)] == [
            "hi",
            "[redacted]",
            "noted",
        ]
        residue = await asyncio.to_thread(self.residue, store)
        assert card.encode() not in residue
        assert card.split("-")[1].encode() not in residue  # the search index keeps words
        await api(store.delete_thread, tenant, th.id)
        assert await api(store.list_derived, tenant, fork.id) == []

    async def test_delete_leaves_zero_rows(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str
    ) -> None:
        tid = await build_rich_thread(api, tenant)
        marker = f"erase-me-{tenant}"
        blob = f"shared bytes {tenant}".encode()
        shared = AttachmentPart(media_type="text/plain", name="s.txt", data=blob)
        other = await api(store.create_thread, tenant)
        await api(store.append, tenant, other.id, NewMessage(role="user", content=[shared]))
        await api(
            store.append, tenant, tid, NewMessage(role="user", content=[TextPart(marker), shared])
        )
        receipt = await api(store.delete_thread, tenant, tid)
        assert receipt.messages == 7 and receipt.turns == 1 and receipt.derived == 1
        assert receipt.attachments_removed == 1  # the pdf; the shared file lives on
        assert await api(store.get_attachment, tenant, sha256(blob)) == blob
        with pytest.raises(ThreadNotFound):
            await api(store.get_thread, tenant, tid)
        await api(store.delete_thread, tenant, other.id)
        assert await asyncio.to_thread(_tenant_rows, store, tenant) == {}
        residue = await asyncio.to_thread(self.residue, store)
        assert marker.encode() not in residue and blob not in residue

    # ------------------------------------------------------------ retention

    async def test_retention_needs_an_owner(self, transcript_url: str) -> None:
        with pytest.raises(TypeError):
            TranscriptStore(transcript_url)  # type: ignore[call-arg]
        with pytest.raises(ConfigError):
            RetentionPolicy(max_age=None, owner=" ")

    async def test_sweep_dry_run_then_delete(
        self, api: TranscriptDriver, store: TranscriptStore, tenant: str, clock: Clock
    ) -> None:
        day = timedelta(days=1)
        old = await api(
            store.create_thread, tenant, retention=RetentionPolicy(max_age=day, owner="legal")
        )
        held = await api(
            store.create_thread,
            tenant,
            retention=RetentionPolicy(max_age=day, owner="legal", legal_hold=True),
        )
        young = await api(
            store.create_thread, tenant, retention=RetentionPolicy(max_age=30 * day, owner="x")
        )
        forever = await api(store.create_thread, tenant)
        for th in (old, held, young, forever):
            await api(store.append, tenant, th.id, user("content"))
        later = clock.now + 2 * day
        report = await api(store.sweep, tenant, now=later)
        assert report.dry_run and report.expired == ((tenant, old.id),) and report.held == 1
        assert (await api(store.get_thread, tenant, old.id)).id == old.id
        seen: list[tuple[int, int]] = []
        done = await api(
            store.sweep, tenant, now=later, dry_run=False, progress=lambda i, n: seen.append((i, n))
        )
        assert done.expired == ((tenant, old.id),) and seen == [(1, 1)]
        assert {t.id for t in await api(store.list_threads, tenant)} == {
            held.id,
            young.id,
            forever.id,
        }
        await api(store.set_retention, tenant, young.id, RetentionPolicy(max_age=day, owner="x"))
        assert (await api(store.sweep, tenant, now=later)).expired == ((tenant, young.id),)


def _tenant_rows(store: TranscriptStore, tenant: str) -> dict[str, int]:
    """Rows ``tenant`` still has, by table (the search index and version table aside)."""
    left: dict[str, int] = {}
    with store.engine.connect() as conn:
        for table in sa.inspect(conn).get_table_names():
            if not table.startswith("convmem_") or table.startswith(
                ("convmem_search_", "convmem_alembic")
            ):
                continue
            n = conn.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE tenant = :t"), {"t": tenant}
            ).scalar_one()
            if n:
                left[table] = n
    return left


__all__ = ["FOREVER", "Api", "TranscriptStoreSpec", "bot", "build_rich_thread", "user"]
