"""``TranscriptStore``'s public methods, written once: ``_async_store.py`` by hand (the
async twins), ``_sync_store.py`` generated from it by ``scripts/unasync.py`` (``await``
dropped, ``aname`` to ``name``). ``./dev test`` and ``tests/transcript/test_store_twins.py``
fail when the generated file differs from what the script makes of this one. What
really differs between the two (connecting, the drivers, file I/O) is
``convmem.transcript.engine``'s.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, BinaryIO

import sqlalchemy as sa

from convmem.errors import ConfigError, TranscriptUnavailable
from convmem.transcript import ops
from convmem.transcript.document import ImportLimits
from convmem.transcript.engine import Content, ImportSource, Progress, StoreEngine, collided
from convmem.transcript.export import canonical_dumps
from convmem.transcript.records import (
    DeletionReceipt,
    DerivedMemory,
    Message,
    ModelInput,
    NewMessage,
    ReconstructedInput,
    RedactionReceipt,
    RetentionPolicy,
    SearchHit,
    SweepReport,
    Thread,
    ThreadTree,
    TurnBinding,
    TurnRecord,
)


class AsyncTwins(StoreEngine):
    """One half of ``TranscriptStore``'s public methods (see the module docstring)."""

    # ------------------------------------------------------------ threads

    async def acreate_thread(
        self,
        tenant: str,
        *,
        key: str | None = None,
        owner: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        retention: RetentionPolicy | None = None,
        thread_id: str | None = None,
    ) -> Thread:
        """A new thread (``ThreadExists`` if the id or key is taken)."""
        return await self._arun(
            ops.create_thread(
                self._ctx,
                tenant,
                thread_id=thread_id,
                key=key,
                owner=owner,
                title=title,
                metadata=metadata,
                retention=retention,
            ),
            write=True,
        )

    async def aget_or_create_thread(
        self,
        tenant: str,
        key: str,
        *,
        owner: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """The one thread of ``tenant`` for the application's ``key`` (any string):
        one read when it exists (the common case), one insert when it does not."""
        found = await self._arun(ops.find_thread(tenant, key))
        return found or await self._acreate_keyed(tenant, key, owner, title, metadata)

    async def _acreate_keyed(
        self,
        tenant: str,
        key: str,
        owner: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Create the key's thread, found missing just now; when another writer created
        it meanwhile, theirs (committed before our insert gave way, so a read finds it).
        A few tries: the thread may also be deleted again between the two."""
        for _ in range(3):
            made = await self._arun(
                ops.create_thread_for_key(
                    self._ctx, tenant, key, owner=owner, title=title, metadata=metadata
                ),
                write=True,
            )
            found = made or await self._arun(ops.find_thread(tenant, key))
            if found is not None:
                return found
        raise TranscriptUnavailable(
            f"the thread for key {key!r} was created and deleted again while it was "
            "being created: try again"
        )

    async def afind_thread(self, tenant: str, key: str) -> Thread | None:
        """The tenant's thread for the application's ``key``, if it has one (never
        creates it: for reads that must not bring an erased thread back)."""
        return await self._arun(ops.find_thread(tenant, key))

    async def abind_turn(self, tenant: str, key: str, *, recent: int = 12) -> TurnBinding:
        """What a turn binds to when it begins (``SessionMemory`` calls this once per
        turn): the key's thread, created if need be, whose ``incarnation`` the turn's
        writes must find again (``incarnation=`` on ``begin_turn_record``,
        ``complete_turn``, ``append``), and the ids, parts and ``extra`` of its last
        ``recent`` user messages (what the turn's block may quote). One read when the
        thread exists."""
        found = await self._arun(ops.bind_turn(tenant, key, recent))
        if found is None:  # a new key: a new thread has no user messages yet
            return TurnBinding(await self._acreate_keyed(tenant, key), ())
        return TurnBinding(found[0], tuple(found[1]))

    async def aget_thread(self, tenant: str, thread_id: str) -> Thread:
        """One thread."""
        return await self._arun(ops.get_thread(tenant, thread_id))

    async def alist_threads(self, tenant: str, *, limit: int | None = None) -> list[Thread]:
        """The tenant's threads, most recently active first."""
        return await self._arun(ops.list_threads(tenant, limit))

    async def aset_retention(
        self, tenant: str, thread_id: str, policy: RetentionPolicy | None
    ) -> None:
        """Per-thread retention override (``None``: the store default)."""
        await self._arun(ops.set_retention(tenant, thread_id, policy), write=True)

    async def afork_thread(
        self,
        tenant: str,
        thread_id: str,
        at_message_id: str,
        *,
        key: str | None = None,
        title: str | None = None,
    ) -> Thread:
        """Split: a new thread with copies of the path up to ``at_message_id``.

        There is no merge: two histories cannot be interleaved without rewriting
        sequence numbers somebody may already have quoted.
        """
        return await self._arun(
            ops.fork_thread(self._ctx, tenant, thread_id, at_message_id, key, title), write=True
        )

    # ------------------------------------------------------------ appends

    async def aappend(
        self,
        tenant: str,
        thread_id: str,
        messages: NewMessage | Sequence[NewMessage],
        *,
        parent_id: str | ops.ActiveLeaf | None = ops.ACTIVE,
        activate: bool = True,
        incarnation: str | None = None,
    ) -> list[Message]:
        """Append after the active leaf (locked), or under ``parent_id`` as a branch.
        ``incarnation`` (a turn's binding): only into that incarnation of the thread,
        else ``ThreadDeleted`` and nothing written."""
        batch = [messages] if isinstance(messages, NewMessage) else list(messages)
        return await self._arun(
            ops.append(self._ctx, tenant, thread_id, batch, parent_id, activate, incarnation),
            write=True,
        )

    async def abegin_turn_record(
        self,
        tenant: str,
        thread_id: str,
        user_message: NewMessage,
        model_input: ModelInput,
        *,
        parent_id: str | ops.ActiveLeaf | None = ops.ACTIVE,
        incarnation: str | None = None,
    ) -> TurnRecord:
        """Commit point 1, before the model call (``TranscriptUnavailable`` if it fails;
        ``ThreadDeleted`` if ``incarnation`` is no longer the thread's)."""
        return await self._arun(
            ops.begin_turn_record(
                self._ctx, tenant, thread_id, user_message, model_input, parent_id, incarnation
            ),
            write=True,
        )

    async def acomplete_turn(
        self,
        tenant: str,
        thread_id: str,
        turn_id: str,
        messages: Sequence[NewMessage],
        *,
        incarnation: str | None = None,
    ) -> list[Message]:
        """Commit point 2: tool calls, results and answer in one transaction (on
        PostgreSQL one statement, unless another device appended since point 1)."""
        batch = list(messages)
        done = await self._arun(
            ops.complete_turn_on_leaf(self._ctx, tenant, thread_id, turn_id, batch, incarnation),
            write=True,
        )
        if done is not None:
            return done
        return await self._arun(
            ops.complete_turn(self._ctx, tenant, thread_id, turn_id, batch, incarnation),
            write=True,
        )

    async def aedit(
        self,
        tenant: str,
        thread_id: str,
        message_id: str,
        content: Content,
        *,
        author: str | None = None,
    ) -> Message:
        """A new sibling with the new content, made active; the old message stays."""
        return await self._arun(
            ops.sibling(
                self._ctx, tenant, thread_id, message_id, self._editor(content, author), None
            ),
            write=True,
        )

    async def aregenerate(
        self, tenant: str, thread_id: str, message_id: str, answer: NewMessage | Content
    ) -> Message:
        """A new sibling answer to the same question, made active; the old answer stays.
        It keeps the old answer's ``turn_id``: the turn's model input produced both."""
        return await self._arun(
            ops.sibling(
                self._ctx, tenant, thread_id, message_id, self._regenerator(answer), "assistant",
                keep_turn=True,
            ),
            write=True,
        )

    async def abranches(self, tenant: str, thread_id: str, message_id: str) -> list[Message]:
        """The alternatives at ``message_id``'s position (itself and its siblings)."""
        return await self._arun(ops.branches(tenant, thread_id, message_id))

    async def aswitch(self, tenant: str, thread_id: str, message_id: str) -> Message:
        """Activate the branch through ``message_id`` (to its newest leaf); returns the leaf."""
        return await self._arun(ops.switch(tenant, thread_id, message_id), write=True)

    async def aset_active_leaf(self, tenant: str, thread_id: str, message_id: str | None) -> None:
        """Move the pointer; ``None`` = empty active path (a framework's ``clear()``)."""
        await self._arun(ops.set_active_leaf(tenant, thread_id, message_id), write=True)

    async def arebase_path(
        self, tenant: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[Message]:
        """Make the active path equal ``messages`` (prefix reused, rest as a branch)."""
        return await self._arun(
            ops.rebase_path(self._ctx, tenant, thread_id, list(messages)), write=True
        )

    async def aarchive_through(self, tenant: str, thread_id: str, seq: int) -> int:
        """Raise the archive watermark to ``seq``; returns the watermark."""
        return await self._arun(ops.archive_through(tenant, thread_id, seq), write=True)

    # ------------------------------------------------------------ reads

    async def aactive_path(
        self, tenant: str, thread_id: str, *, include_archived: bool = True
    ) -> list[Message]:
        """Root → active leaf, in one SELECT."""
        return await self._arun(ops.read_path(tenant, thread_id, include_archived=include_archived))

    async def atree(self, tenant: str, thread_id: str) -> ThreadTree:
        """Every message of every branch and the active path."""
        return await self._arun(ops.tree(tenant, thread_id))

    async def aget_messages(self, tenant: str, thread_id: str, ids: Sequence[str]) -> list[Message]:
        """Messages by id, in seq order."""
        return await self._arun(ops.get_messages(tenant, thread_id, list(ids)))

    async def aget_attachment(self, tenant: str, sha256: str) -> bytes:
        """Attachment bytes by digest."""
        return await self._arun(ops.get_attachment(tenant, sha256))

    async def areconstruct_model_input(
        self, tenant: str, thread_id: str, turn_id: str
    ) -> ReconstructedInput:
        """What the model received on ``turn_id``, rebuilt from the record."""
        return await self._arun(ops.reconstruct_model_input(tenant, thread_id, turn_id))

    async def asearch(
        self,
        tenant: str,
        query: str,
        *,
        thread_id: str | None = None,
        limit: int = 20,
        match: str = "all",
        roles: Sequence[str] | None = None,
        active_path: bool = False,
    ) -> list[SearchHit]:
        """Full-text search over the tenant's messages: every word (``match="all"``) or
        any content word, best first (``"any"``); only ``roles``; only the thread's
        active path (``active_path``, with ``thread_id``). See ``ops.search``. It
        indexes the tenant's (or the thread's) queued messages first
        (``search_index="deferred"``), in its transaction: its answer is never stale."""
        return await self._arun(
            ops.search(
                self._ctx, tenant, query, thread_id, limit,
                match=match, roles=roles, active_path=active_path,
            ),
            write=True,
        )

    async def aindex_pending(
        self, tenant: str | None = None, *, limit: int | None = None, batch: int = 500
    ) -> int:
        """Move queued search text (``search_index="deferred"``) into the full-text index,
        ``batch`` rows per transaction, until the queue is empty or ``limit`` rows moved;
        returns how many. ``tenant=None``: every tenant's. Safe beside other indexers and
        searches (no row is indexed twice); searches never need it, it keeps the index
        from lagging behind rows nobody searched yet."""
        if tenant is not None:
            ops.edge(tenant)
        for name, value in (("batch", batch), ("limit", limit)):
            if value is not None and (type(value) is not int or value < 1):
                raise ConfigError(f"index_pending: {name} must be a positive integer, "
                                  f"got {value!r}")
        done = 0
        while limit is None or done < limit:
            n = batch if limit is None else min(batch, limit - done)
            moved = await self._arun(ops.index_batch(self._ctx, tenant, n), write=True)
            done += moved
            if moved < n:
                break
        return done

    # ------------------------------------------------------------ derived memories

    async def aadd_derived(
        self,
        tenant: str,
        thread_id: str,
        kind: str,
        content: str,
        source_message_ids: Sequence[str],
    ) -> DerivedMemory:
        """Record a memory derived from the thread (redaction and deletion reach it)."""
        return await self._arun(
            ops.add_derived(self._ctx, tenant, thread_id, kind, content, list(source_message_ids)),
            write=True,
        )

    async def alist_derived(self, tenant: str, thread_id: str) -> list[DerivedMemory]:
        """The thread's derived memories (tombstones included)."""
        return await self._arun(ops.list_derived(tenant, thread_id))

    # ------------------------------------------------------------ export / import

    async def aexport_thread(self, tenant: str, thread_id: str) -> str:
        """The whole thread as canonical JSON (``convmem.thread`` v1); for big threads
        ``export_thread_to`` streams it instead."""
        out = io.BytesIO()
        await self.aexport_thread_to(tenant, thread_id, out)
        return out.getvalue().decode("utf-8")

    async def aexport_thread_to(self, tenant: str, thread_id: str, sink: BinaryIO) -> None:
        """Write the canonical export to a binary stream, a page at a time: memory holds
        one page of the thread, never all of it (``convmem.transcript.ops.portability``);
        the async form writes to a file off the event loop."""
        from convmem.transcript.ops import portability

        export = portability.export_thread(self._ctx, tenant, thread_id, sink)
        await self._arun(export, snapshot=True)

    async def aexport_user_view(self, tenant: str, thread_id: str) -> str:
        """The user's view (active path, conversation only) as canonical JSON."""
        return canonical_dumps(await self._arun(ops.export_user_view(tenant, thread_id)))

    async def aimport_thread(
        self,
        tenant: str,
        data: ImportSource,
        *,
        new_id: bool = False,
        limits: ImportLimits | None = None,
    ) -> Thread:
        """Load an export into ``tenant``: ``data`` is the document (text, bytes, a
        parsed mapping, a binary stream or a path). The whole document is validated
        before anything is written; a refusal is one ``ImportRefused`` naming the JSON
        path, and nothing is written. An id or key this tenant already has raises
        ``ThreadExists`` unless ``new_id=True`` (fresh ids, key dropped); ids are per
        tenant, so another tenant's ids are free. Memory stays bounded whatever the
        document's size (two passes over it; a stream that cannot seek is spooled to
        a temporary file first). The async form reads files off the event loop."""
        from convmem.transcript.ops import portability

        source, owned = await self._aopen_document(data)
        limits = limits or ImportLimits()
        try:
            return await self._arun(
                portability.import_thread(self._ctx, tenant, source, new_id, limits), write=True
            )
        except sa.exc.IntegrityError as exc:
            raise collided(exc) from exc
        finally:
            await self._aclose_document(source, owned)

    # ------------------------------------------------------------ redaction, deletion, retention

    async def aredact(
        self,
        tenant: str,
        thread_id: str,
        message_id: str,
        *,
        actor: str,
        reason: str,
        replacement: str = "[redacted]",
    ) -> RedactionReceipt:
        """Remove a message's content everywhere it reached (see ``ops.redact``)."""
        await self._aload_tokenizer()
        receipt = await self._arun(
            ops.redact(self._ctx, tenant, thread_id, message_id, actor, reason, replacement),
            write=True,
        )
        await self._aerase_residue()
        return receipt

    async def adelete_thread(self, tenant: str, thread_id: str) -> DeletionReceipt:
        """Remove the thread and everything of it (the session-state key is the caller's)."""
        receipt = await self._arun(ops.delete_thread(self._ctx, tenant, thread_id), write=True)
        await self._aerase_residue()
        return receipt

    async def asweep(
        self,
        tenant: str | None,
        *,
        dry_run: bool = True,
        now: datetime | None = None,
        progress: Progress | None = None,
    ) -> SweepReport:
        """Delete threads past their retention (``dry_run`` first: it is the default).

        ``tenant=None`` sweeps every tenant (an operator's job). Threads on legal
        hold are counted, never deleted; a thread whose stored policy cannot be read
        is logged, reported in ``skipped`` and left alone.
        """
        at = now or self._ctx.clock()
        expired, held, skipped = await self._arun(ops.expired_threads(self._ctx, tenant, at))
        if not dry_run:
            for i, (ten, tid) in enumerate(expired, 1):
                await self._arun(ops.delete_thread(self._ctx, ten, tid), write=True)
                if progress is not None:
                    progress(i, len(expired))
            if expired:
                await self._aerase_residue()
        return SweepReport(
            expired=tuple(expired), held=held, dry_run=dry_run, skipped=tuple(skipped)
        )
