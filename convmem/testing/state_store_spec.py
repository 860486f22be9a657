"""``SessionStateStoreSpec``: the conformance suite every session-state store runs.

A backend's test module subclasses the spec, names itself (``backend_id``) and
provides a ``make_store`` fixture: a factory taking ``ttl=`` and ``strict=`` keyword
arguments (and ``prefix=``, for a store with a key prefix) that builds a fresh,
isolated store and cleans it up after the test. Each
test runs twice, through the sync methods and through the ``a*`` methods, with ids
``[<backend>-sync]`` and ``[<backend>-async]``. The tests are coroutines either way:
the sync side runs in a worker thread (as a sync web app would call it), the async
side on the event loop under blockbuster, so a blocking call in an ``a*`` method
fails. A few hooks reach under the protocol (write raw bytes, read or shorten a
key's TTL, let time pass); their defaults fit the in-memory store and a backend
overrides what it must. The suite pins: round trip, absent -> None, compare-and-set
(0 means "must not exist", a wrong version raises ``VersionConflict``, versions
count up), TTL set and refreshed by save but not by load, concurrent writers with
retry losing nothing, tenant isolation (also when tenants and thread ids hold the key's
separators, braces or glob characters: spec §5 stored layout), deletion, listing a
tenant's threads (``iter_threads`` / ``aiter_threads``, for stores that have them), the
shared identifier rule (``convmem.identity``: a ``ConfigError`` naming the field, the
same on every backend), and degradation on corrupt values
(empty state, one WARNING per incident on ``convmem.stores``, ``stats.degraded``
counted, ``strict=True`` raising ``StateUnavailable``; a corrupt value is replaced by
the next save), one rule for the stored version in the decoder and in compare-and-set
(a version outside it is corrupt to both, so the next save lands), that a state with
the largest legal questions in every text that can hold one still saves, and that a state
serialised in another key order is still read, version included.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from convmem.errors import ConfigError, StateUnavailable, VersionConflict
from convmem.identity import MAX_TENANT_CHARS, MAX_THREAD_ID_CHARS
from convmem.session.records import MAX_QUESTION_CHARS
from convmem.state import (
    MAX_STATE_BYTES,
    FilterValue,
    Focus,
    OpenTurn,
    Option,
    PendingClarification,
    SessionState,
    encode_state,
    is_stored_cut,
    state_to_dict,
)
from convmem.stores.base import SessionStateStore
from convmem.testing._modes import EveryMode, Mode

StoreFactory = Callable[..., Any]

TENANT = "acme"


def rich_state(turn: int = 3) -> SessionState:
    """A state using every slot, so a codec or store that drops a field is caught."""
    return SessionState(
        focus=Focus("project", "C-40112", "Alder Works", "confirmed"),
        filters={"stage": FilterValue("beta", 2), "period": FilterValue("2024-Q3", 3)},
        format="table",
        recent_questions=("revenue for Alder?", "only beta", "and in Q3?"),
        turn=turn,
        pending=PendingClarification(
            question="show Alder",
            prompt="Which Alder?",
            options=(
                Option("project", "C-40112", "Alder Works", {"city": "Toronto"}),
                Option("project", "C-51800", "Alder Works", {"city": "Leeds"}),
            ),
            mention="Alder",
        ),
        last_rewrite="revenue for Alder Works in beta, 2024-Q3",
        salient=(Focus("team", "T-7", "Platform Team", "tool"),),
    )


def worst_case_state(q: str) -> SessionState:
    """``rich_state()`` with every text that can hold a question's words set to ``q`` (the
    rewrite to two of it): the recent questions, the last rewrite, a pending
    clarification's question, mention and prompt, the open turn's question, rewrite and
    resolved question, and all of these again in the open turn's base."""
    base = rich_state().evolve(
        recent_questions=(q, q, q), last_rewrite=2 * q,
        pending=PendingClarification(q, q, rich_state().pending.options, mention=q),  # type: ignore[union-attr]
    )
    return base.evolve(open_turn=OpenTurn(q, 2 * q, "m-1", base, False, q))


class StoreDriver:
    """Calls one store through its sync methods (in a worker thread) or its ``a*`` methods."""

    def __init__(self, store: Any, mode: Mode) -> None:
        self.store = store
        self.mode = mode

    async def load(self, tenant: str, thread_id: str) -> SessionState | None:
        if self.mode == "sync":
            return await asyncio.to_thread(self.store.load, tenant, thread_id)
        result: SessionState | None = await self.store.aload(tenant, thread_id)
        return result

    async def save(
        self, tenant: str, thread_id: str, state: SessionState, *, expected_version: int
    ) -> int:
        if self.mode == "sync":
            return await asyncio.to_thread(
                lambda: self.store.save(tenant, thread_id, state,
                                        expected_version=expected_version))
        version: int = await self.store.asave(tenant, thread_id, state,
                                              expected_version=expected_version)
        return version

    async def delete(self, tenant: str, thread_id: str) -> None:
        if self.mode == "sync":
            await asyncio.to_thread(self.store.delete, tenant, thread_id)
        else:
            await self.store.adelete(tenant, thread_id)

    async def threads(self, tenant: str, *, count: int = 500) -> set[str]:
        """The tenant's thread ids with live state (``iter_threads`` / ``aiter_threads``)."""
        if not hasattr(self.store, "iter_threads"):
            pytest.skip(f"{type(self.store).__name__} does not list threads")
        if self.mode == "sync":
            return await asyncio.to_thread(
                lambda: set(self.store.iter_threads(tenant, count=count)))
        return {t async for t in self.store.aiter_threads(tenant, count=count)}

    async def ask(self, tenant: str, thread_id: str, question: str, *, attempts: int = 1000
                  ) -> int:
        """One turn the way the façade does it: load, change, compare-and-set, retry."""
        for _ in range(attempts):
            base = await self.load(tenant, thread_id) or SessionState()
            new = base.evolve(recent_questions=(*base.recent_questions, question),
                              turn=base.turn + 1)
            try:
                return await self.save(tenant, thread_id, new, expected_version=base.version)
            except VersionConflict:
                await asyncio.sleep(random.uniform(0, 0.001))  # de-synchronise the herd
        raise AssertionError(f"{question!r} was never saved in {attempts} attempts")


def _store_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "convmem.stores" and r.levelno == logging.WARNING]


#: Stored versions outside the rule (spec §5: a JSON number with a whole value
#: 0 <= v < 2**53): a fraction, a string, a negative, an exponent beyond the range, a
#: boolean, null, past 64 bits, the first number a Lua double cannot tell from its
#: successor, a list.
BAD_VERSIONS = [b"5.5", b'"5"', b"-3", b"1e300", b"true", b"null", b"18446744073709551616",
                b"9007199254740992", b"[5]"]


def _with_version(literal: bytes, *, head: bool) -> bytes:
    """``rich_state()`` as stored bytes whose ``version`` is the JSON text ``literal``:
    at the head where ``encode_state`` puts it, or last (a value in another key order)."""
    data = state_to_dict(rich_state().evolve(version=777))
    if not head:
        data = dict(reversed(data.items()))
    raw = json.dumps(data, separators=(",", ":")).encode()
    assert raw.count(b'"version":777') == 1
    return raw.replace(b'"version":777', b'"version":' + literal)


class SessionStateStoreSpec(EveryMode):
    """Subclass with ``backend_id = "..."`` and a ``make_store`` fixture; see module doc."""

    #: TTL (seconds) for the expiry test; the test waits a bit over twice this.
    short_ttl: ClassVar[float] = 0.3

    # ------------------------------------------------------------------ plumbing

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        raise NotImplementedError("a SessionStateStoreSpec subclass must define make_store")

    @pytest.fixture
    def store(self, make_store: StoreFactory) -> Any:
        return make_store()

    @pytest.fixture
    def api(self, request: pytest.FixtureRequest, store: Any) -> StoreDriver:
        return StoreDriver(store, request.param)

    # ------------------------------------------------------------------ hooks (sync)

    def write_raw(self, store: Any, tenant: str, thread_id: str, raw: bytes) -> None:
        """Store ``raw`` bytes under the thread's key, bypassing the codec."""
        store.put_raw(tenant, thread_id, raw)

    def remaining_ttl(self, store: Any, tenant: str, thread_id: str) -> float | None:
        """Seconds until the thread's value expires (None when absent)."""
        result: float | None = store.remaining_ttl(tenant, thread_id)
        return result

    def set_remaining_ttl(self, store: Any, tenant: str, thread_id: str, seconds: float
                          ) -> None:
        """Shorten the remaining lifetime of a stored value."""
        store.expire(tenant, thread_id, seconds)

    async def let_time_pass(self, store: Any, seconds: float) -> None:
        """Wait ``seconds`` of store time (real time unless the backend has a clock)."""
        await asyncio.sleep(seconds)

    # ------------------------------------------------------------------ basics

    async def test_implements_the_protocol(self, store: Any) -> None:
        assert isinstance(store, SessionStateStore)

    async def test_missing_thread_loads_none(self, api: StoreDriver) -> None:
        assert await api.load(TENANT, "never-saved") is None

    async def test_round_trip_keeps_every_field(self, api: StoreDriver) -> None:
        state = rich_state()
        version = await api.save(TENANT, "t1", state, expected_version=0)
        assert version == 1
        assert await api.load(TENANT, "t1") == state.evolve(version=1)

    async def test_versions_count_up(self, api: StoreDriver) -> None:
        v1 = await api.save(TENANT, "t1", rich_state(1), expected_version=0)
        v2 = await api.save(TENANT, "t1", rich_state(2), expected_version=v1)
        v3 = await api.save(TENANT, "t1", rich_state(3), expected_version=v2)
        assert (v1, v2, v3) == (1, 2, 3)
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None and loaded.version == 3 and loaded.turn == 3

    # ------------------------------------------------------------------ compare-and-set

    async def test_expected_zero_means_must_not_exist(self, api: StoreDriver) -> None:
        await api.save(TENANT, "t1", rich_state(1), expected_version=0)
        with pytest.raises(VersionConflict) as info:
            await api.save(TENANT, "t1", rich_state(9), expected_version=0)
        assert (info.value.expected, info.value.actual) == (0, 1)
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None and loaded.turn == 1
        assert api.store.stats.conflicts == 1

    async def test_wrong_version_raises_and_keeps_the_value(self, api: StoreDriver) -> None:
        await api.save(TENANT, "t1", rich_state(1), expected_version=0)
        await api.save(TENANT, "t1", rich_state(2), expected_version=1)
        for stale in (1, 3, 17):
            with pytest.raises(VersionConflict) as info:
                await api.save(TENANT, "t1", rich_state(99), expected_version=stale)
            assert info.value.actual == 2
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None and (loaded.version, loaded.turn) == (2, 2)

    async def test_nonzero_expected_on_missing_thread_conflicts(self, api: StoreDriver) -> None:
        with pytest.raises(VersionConflict) as info:
            await api.save(TENANT, "t1", rich_state(), expected_version=4)
        assert info.value.actual == 0
        assert await api.load(TENANT, "t1") is None

    async def test_two_concurrent_writers_lose_nothing(self, api: StoreDriver) -> None:
        await asyncio.gather(api.ask(TENANT, "t1", "first"), api.ask(TENANT, "t1", "second"))
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None
        assert sorted(loaded.recent_questions) == ["first", "second"]
        assert (loaded.turn, loaded.version) == (2, 2)

    async def test_fifty_concurrent_writers_lose_nothing(self, api: StoreDriver) -> None:
        questions = [f"q{i:02d}" for i in range(50)]
        versions = await asyncio.gather(*(api.ask(TENANT, "t1", q) for q in questions))
        assert sorted(versions) == list(range(1, 51))  # every write won exactly once
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None
        assert sorted(loaded.recent_questions) == questions
        assert (loaded.turn, loaded.version) == (50, 50)

    # ------------------------------------------------------------------ TTL

    async def test_value_expires_after_ttl(self, make_store: StoreFactory, api: StoreDriver
                                           ) -> None:
        short = StoreDriver(make_store(ttl=self.short_ttl), api.mode)
        await short.save(TENANT, "t1", rich_state(), expected_version=0)
        assert await short.load(TENANT, "t1") is not None
        await self.let_time_pass(short.store, self.short_ttl * 2 + 0.1)
        assert await short.load(TENANT, "t1") is None
        # An expired thread starts over at version 0.
        assert await short.save(TENANT, "t1", rich_state(), expected_version=0) == 1

    async def test_save_refreshes_ttl_and_load_does_not(self, api: StoreDriver) -> None:
        store = api.store
        await api.save(TENANT, "t1", rich_state(1), expected_version=0)
        full = await asyncio.to_thread(self.remaining_ttl, store, TENANT, "t1")
        assert full is not None and full > store.ttl * 0.9
        await asyncio.to_thread(self.set_remaining_ttl, store, TENANT, "t1", 60.0)
        assert await api.load(TENANT, "t1") is not None
        after_load = await asyncio.to_thread(self.remaining_ttl, store, TENANT, "t1")
        assert after_load is not None and after_load <= 60.0
        await api.save(TENANT, "t1", rich_state(2), expected_version=1)
        after_save = await asyncio.to_thread(self.remaining_ttl, store, TENANT, "t1")
        assert after_save is not None and after_save > store.ttl * 0.9

    # ------------------------------------------------------------------ isolation, deletion

    async def test_tenants_are_isolated(self, api: StoreDriver) -> None:
        await api.save("tenant-a", "shared-id", rich_state(1), expected_version=0)
        assert await api.load("tenant-b", "shared-id") is None
        await api.save("tenant-b", "shared-id", SessionState(format="short", turn=7),
                       expected_version=0)
        a = await api.load("tenant-a", "shared-id")
        b = await api.load("tenant-b", "shared-id")
        assert a is not None and b is not None
        assert (a.turn, a.format, b.turn, b.format) == (1, "table", 7, "short")
        await api.delete("tenant-a", "shared-id")
        assert await api.load("tenant-a", "shared-id") is None
        assert await api.load("tenant-b", "shared-id") == b

    async def test_delete_then_start_over(self, api: StoreDriver) -> None:
        await api.save(TENANT, "t1", rich_state(), expected_version=0)
        await api.delete(TENANT, "t1")
        assert await api.load(TENANT, "t1") is None
        await api.delete(TENANT, "t1")  # deleting nothing is fine
        assert await api.save(TENANT, "t1", rich_state(), expected_version=0) == 1

    # ------------------------------------------------------------------ hostile ids

    @pytest.mark.parametrize(
        "pairs",
        [
            # One key each in v1 (``{<tenant>:<thread>}`` unescaped): issue 11, finding 1.
            pytest.param([("acme", "eu:42"), ("acme:eu", "42")], id="colon"),
            pytest.param([("a:b:c", "d"), ("a:b", "c:d"), ("a", "b:c:d")], id="colons"),
            # An escape that did not escape its own escape character would merge these.
            pytest.param([("a:b", "c"), ("a%3Ab", "c"), ("a%253Ab", "c")], id="escape"),
            # Braces end or open a cluster hash tag.
            pytest.param([("ac}me", "x"), ("ac", "me}:x"), ("{acme}", "{x}"), ("}", "{")],
                         id="braces"),
            pytest.param([("acme", "*"), ("acme*", "x"), ("acme", "[x]"), ("acme\\", "?")],
                         id="glob"),
            pytest.param([("Zoë Åström", "https://x.example/t/1?q=2#f"),
                          ("Zoë", "Åström:https://x.example/t/1?q=2#f")], id="non-ascii-url"),
        ],
    )
    async def test_separators_in_ids_never_share_state(
        self, api: StoreDriver, pairs: list[tuple[str, str]]
    ) -> None:
        for turn, (tenant, thread_id) in enumerate(pairs, 1):
            await api.save(tenant, thread_id, SessionState(turn=turn), expected_version=0)
        for turn, (tenant, thread_id) in enumerate(pairs, 1):
            loaded = await api.load(tenant, thread_id)
            assert loaded is not None and loaded.turn == turn, (tenant, thread_id)
        for tenant in {t for t, _ in pairs}:
            assert await api.threads(tenant) == {th for t, th in pairs if t == tenant}
        # reset / delete_thread reach one (tenant, thread) and nothing else
        gone_tenant, gone_thread = pairs[0]
        await api.delete(gone_tenant, gone_thread)
        assert await api.load(gone_tenant, gone_thread) is None
        for turn, (tenant, thread_id) in enumerate(pairs[1:], 2):
            loaded = await api.load(tenant, thread_id)
            assert loaded is not None and loaded.turn == turn, (tenant, thread_id)
        assert gone_thread not in await api.threads(gone_tenant)

    async def test_listing_matches_glob_characters_literally(self, api: StoreDriver) -> None:
        tenants = ["a", "a*", "a?", "[a]", "a\\", "*", "a:b", "a}", "%"]
        threads = ["t", "t*", "t?x", "[t]", "t\\", "t:1", "t}", "{t", "%7D"]
        for i, tenant in enumerate(tenants):
            for thread_id in (threads[i], f"{threads[-1 - i]}-{i}"):
                await api.save(tenant, thread_id, SessionState(turn=i), expected_version=0)
        for i, tenant in enumerate(tenants):
            assert await api.threads(tenant) == {threads[i], f"{threads[-1 - i]}-{i}"}, tenant
        assert await api.threads("b") == set()

    @pytest.mark.parametrize(
        ("tenant", "thread_id", "field"),
        [
            pytest.param("x" * (MAX_TENANT_CHARS + 1), "t1", "tenant", id="tenant-too-long"),
            pytest.param(TENANT, "t" * (MAX_THREAD_ID_CHARS + 1), "thread_id",
                         id="thread-too-long"),
            pytest.param("", "t1", "tenant", id="tenant-empty"),
            pytest.param(TENANT, " ", "thread_id", id="thread-blank"),
            pytest.param("ac\x00me", "t1", "tenant", id="tenant-nul"),
            pytest.param(TENANT, "t\n1", "thread_id", id="thread-newline"),
            pytest.param(TENANT, "t\u20281", "thread_id", id="thread-line-separator"),
            pytest.param("ac\x85me", "t1", "tenant", id="tenant-next-line"),
            pytest.param(TENANT, "t\ud8001", "thread_id", id="thread-lone-surrogate"),
            pytest.param(7, "t1", "tenant", id="tenant-not-str"),
        ],
    )
    async def test_ids_outside_the_shared_rule_are_config_errors(
        self, api: StoreDriver, tenant: Any, thread_id: Any, field: str
    ) -> None:
        """Every backend refuses the same ids the same way (``convmem.identity``)."""
        calls = [
            api.load(tenant, thread_id),
            api.save(tenant, thread_id, rich_state(), expected_version=0),
            api.delete(tenant, thread_id),
        ]
        for call in calls:
            with pytest.raises(ConfigError, match=field):
                await call
        if field == "tenant" and hasattr(api.store, "iter_threads"):
            with pytest.raises(ConfigError, match=field):
                await api.threads(tenant)
        assert api.store.stats.degraded == 0

    # ------------------------------------------------------------------ misuse

    @pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), "60", None])
    async def test_a_bad_ttl_is_refused_at_construction(
        self, make_store: StoreFactory, ttl: object
    ) -> None:
        with pytest.raises(ConfigError, match="ttl"):
            make_store(ttl=ttl)

    @pytest.mark.parametrize("prefix", ["", "a{b", "b}", 7])
    async def test_a_bad_key_prefix_is_refused_at_construction(
        self, make_store: StoreFactory, prefix: object
    ) -> None:
        """Braces would break the hash tag every key carries (spec §5 stored layout)."""
        if "prefix" not in inspect.signature(make_store).parameters:
            pytest.skip("this backend's make_store takes no prefix= (its store has none)")
        with pytest.raises(ConfigError, match="prefix"):
            make_store(prefix=prefix)

    @pytest.mark.parametrize("expected", [-1, 1.5, "0", True, None])
    async def test_a_bad_expected_version_is_refused_before_any_write(
        self, api: StoreDriver, expected: Any
    ) -> None:
        with pytest.raises(ConfigError, match="expected_version"):
            await api.save(TENANT, "t1", rich_state(), expected_version=expected)
        assert await api.load(TENANT, "t1") is None
        assert (api.store.stats.degraded, api.store.stats.conflicts) == (0, 0)

    @pytest.mark.parametrize("count", [0, -5, "10", 2.5])
    async def test_a_bad_listing_page_size_is_refused(self, api: StoreDriver, count: Any) -> None:
        await api.save(TENANT, "t1", rich_state(), expected_version=0)
        with pytest.raises(ConfigError, match="count"):
            await api.threads(TENANT, count=count)
        assert await api.threads(TENANT, count=1) == {"t1"}
        assert api.store.stats.degraded == 0

    async def test_longest_legal_ids_work(self, api: StoreDriver) -> None:
        tenant, thread_id = "é" * MAX_TENANT_CHARS, "{:}" * (MAX_THREAD_ID_CHARS // 3)
        assert await api.save(tenant, thread_id, rich_state(), expected_version=0) == 1
        assert await api.load(tenant, thread_id) == rich_state().evolve(version=1)
        assert await api.threads(tenant) == {thread_id}

    @pytest.mark.parametrize("char", ["\U0001f600", "\x01", '"'],
                             ids=["four-byte", "escaped-control", "escaped-quote"])
    async def test_the_largest_legal_questions_always_fit(
        self, api: StoreDriver, char: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Spec §5 / issue 22, finding 10: every text of a state that can hold a question
        at the largest length a question may have (``MAX_QUESTION_CHARS`` of characters
        that take 4 or 6 bytes of JSON) still saves: the stored copy of each is cut to
        ``MAX_STATE_TEXT_BYTES`` (the turn's own question ``MAX_TURN_TEXT_BYTES``) at a
        character boundary, with room to spare."""
        q = char * MAX_QUESTION_CHARS
        state = worst_case_state(q)
        with caplog.at_level(logging.WARNING, logger="convmem.stores"):
            assert await api.save(TENANT, "t1", state, expected_version=0) == 1
        assert api.store.stats.degraded == 0 and not _store_warnings(caplog)
        assert len(encode_state(state.evolve(version=1))) <= MAX_STATE_BYTES * 3 // 4
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None and loaded.version == 1 and loaded.open_turn is not None
        kept = [*loaded.recent_questions, loaded.last_rewrite, loaded.open_turn.question,
                loaded.open_turn.rewritten, loaded.open_turn.resolved_question,
                *loaded.open_turn.base.recent_questions]
        for text in kept:  # a store may hand back the state it wrote, or the stored copy
            assert text is not None
            assert text in (q, 2 * q) or is_stored_cut(text, q) or is_stored_cut(text, 2 * q)
        # the next save over it lands too
        assert await api.save(TENANT, "t1", loaded, expected_version=1) == 2

    # ------------------------------------------------------------------ corrupt values

    @pytest.mark.parametrize(
        "raw",
        [
            pytest.param(b"\x00\xffnot json at all", id="garbage"),
            pytest.param(b'{"v": 999, "version": 3}', id="unknown-format"),
            pytest.param(b"[1, 2, 3]", id="not-an-object"),
            pytest.param(
                b'{"v":1,"version":5,"recent_questions":["' + b"x" * (MAX_STATE_BYTES + 10)
                + b'"]}',
                id="over-64KB",
            ),
            # Our head, then junk: compare-and-set reads version 5 from the head, so the
            # load must discard the value for the turn's save (expected 0) to land.
            pytest.param(b'{"v":1,"version":5,"focus":{"type":', id="truncated"),
            pytest.param(b'{"v":1,"version":5,"turn":2,"version":6}', id="two-versions"),
        ],
    )
    async def test_corrupt_value_degrades_then_is_replaced(
        self, api: StoreDriver, raw: bytes, caplog: pytest.LogCaptureFixture
    ) -> None:
        await asyncio.to_thread(self.write_raw, api.store, TENANT, "t1", raw)
        with caplog.at_level(logging.WARNING, logger="convmem.stores"):
            assert await api.load(TENANT, "t1") is None
        assert api.store.stats.degraded == 1
        assert len(_store_warnings(caplog)) == 1
        # The turn goes on from an empty state, and its save replaces the bad value.
        assert await api.save(TENANT, "t1", rich_state(), expected_version=0) == 1
        assert await api.load(TENANT, "t1") == rich_state().evolve(version=1)

    @pytest.mark.parametrize("head", [True, False], ids=["head", "reordered"])
    # a leading zero is not JSON at all: corrupt to the decoder, discarded by the load
    @pytest.mark.parametrize("literal", [*BAD_VERSIONS, b"007"], ids=lambda b: b.decode())
    async def test_a_version_outside_the_rule_is_corrupt(
        self, api: StoreDriver, literal: bytes, head: bool, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Spec §5: one rule for the stored version (a JSON whole number 0 <= v < 2**53) in
        the decoder and in compare-and-set. A value outside it loads as corrupt (empty
        state, one warning), and the turn's save over it lands: before issue 22 (finding
        6) ``5.5``, ``"5"`` or ``true`` were read as 5 by one and as something else by the
        other (never saved), ``-3`` raised ``ConfigError`` on every save, ``1e300`` a raw
        encoding error."""
        raw = _with_version(literal, head=head)
        await asyncio.to_thread(self.write_raw, api.store, TENANT, "t1", raw)
        with caplog.at_level(logging.WARNING, logger="convmem.stores"):
            assert await api.load(TENANT, "t1") is None
        assert (api.store.stats.degraded, len(_store_warnings(caplog))) == (1, 1)
        assert await api.save(TENANT, "t1", rich_state(), expected_version=0) == 1
        assert await api.load(TENANT, "t1") == rich_state().evolve(version=1)

    @pytest.mark.parametrize("head", [True, False], ids=["head", "reordered"])
    @pytest.mark.parametrize("literal", BAD_VERSIONS, ids=lambda b: b.decode())
    async def test_compare_and_set_reads_a_version_outside_the_rule_as_no_value(
        self, api: StoreDriver, literal: bytes, head: bool
    ) -> None:
        """The compare-and-set (Lua on Redis) reads such a value as the decoder does: not
        a state of ours, version 0, so a save expecting 0 replaces it even unread."""
        raw = _with_version(literal, head=head)
        await asyncio.to_thread(self.write_raw, api.store, TENANT, "t1", raw)
        with pytest.raises(VersionConflict) as info:
            await api.save(TENANT, "t1", rich_state(), expected_version=5)
        assert info.value.actual == 0
        assert await api.save(TENANT, "t1", rich_state(), expected_version=0) == 1
        assert await api.load(TENANT, "t1") == rich_state().evolve(version=1)
        assert api.store.stats.degraded == 0

    @pytest.mark.parametrize("head", [True, False], ids=["head", "reordered"])
    @pytest.mark.parametrize("literal", [b"0", b"5.0", b"9007199254740991"],
                             ids=["zero", "five-point-zero", "largest"])
    async def test_a_version_inside_the_rule_is_read_alike(
        self, api: StoreDriver, literal: bytes, head: bool
    ) -> None:
        """The edges of the rule: decoder and compare-and-set agree on the number."""
        raw = _with_version(literal, head=head)
        await asyncio.to_thread(self.write_raw, api.store, TENANT, "t1", raw)
        loaded = await api.load(TENANT, "t1")
        number = int(float(literal))
        assert loaded is not None and loaded.version == number
        if number:
            with pytest.raises(VersionConflict) as info:
                await api.save(TENANT, "t1", rich_state(), expected_version=number - 1)
            assert info.value.actual == number
        assert await api.save(TENANT, "t1", rich_state(), expected_version=number) == number + 1
        assert api.store.stats.degraded == 0

    async def test_value_in_another_key_order_is_still_ours(self, api: StoreDriver) -> None:
        """Any serialisation of a state object loads, and compare-and-set reads its version."""
        state = rich_state().evolve(version=4)
        reordered = json.dumps(dict(reversed(state_to_dict(state).items()))).encode()
        await asyncio.to_thread(self.write_raw, api.store, TENANT, "t1", reordered)
        assert await api.load(TENANT, "t1") == state
        with pytest.raises(VersionConflict) as info:
            await api.save(TENANT, "t1", rich_state(), expected_version=0)
        assert info.value.actual == 4
        assert await api.save(TENANT, "t1", rich_state(9), expected_version=4) == 5
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None and (loaded.version, loaded.turn) == (5, 9)
        assert api.store.stats.degraded == 0

    async def test_a_value_an_older_release_wrote_still_loads(self, api: StoreDriver) -> None:
        """Format 1 (before ``salient``) loads with no salient entities, compare-and-set
        reads its version from the head, and the next save writes the current format."""
        old = (b'{"v":1,"version":3,"focus":{"type":"project","id":"C-40112","label":"Alder Works",'
               b'"source":"tool"},"filters":{"stage":{"value":"beta","set_at_turn":2}},"format":null,'
               b'"recent_questions":["revenue for Alder?"],"turn":2,"pending":null,'
               b'"last_rewrite":null,"open_turn":null}')
        await asyncio.to_thread(self.write_raw, api.store, TENANT, "t1", old)
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None and loaded.version == 3 and loaded.salient == ()
        assert loaded.focus == Focus("project", "C-40112", "Alder Works", "tool")
        with pytest.raises(VersionConflict) as info:
            await api.save(TENANT, "t1", rich_state(), expected_version=0)
        assert info.value.actual == 3
        assert await api.save(TENANT, "t1", loaded.evolve(turn=3), expected_version=3) == 4
        again = await api.load(TENANT, "t1")
        assert again == loaded.evolve(turn=3, version=4)
        assert api.store.stats.degraded == 0

    async def test_state_too_large_to_load_back_is_not_written(
        self, api: StoreDriver, caplog: pytest.LogCaptureFixture
    ) -> None:
        await api.save(TENANT, "t1", rich_state(1), expected_version=0)
        # (a label: question-derived texts are cut to fit: test_the_largest_legal_questions_...)
        huge = rich_state(2).evolve(focus=Focus("project", "C-1", "x" * MAX_STATE_BYTES))
        with caplog.at_level(logging.WARNING, logger="convmem.stores"):
            assert await api.save(TENANT, "t1", huge, expected_version=1) == 2
        assert (api.store.stats.degraded, len(_store_warnings(caplog))) == (1, 1)
        loaded = await api.load(TENANT, "t1")
        assert loaded is not None and (loaded.version, loaded.turn) == (1, 1)

    async def test_one_warning_per_incident(
        self, api: StoreDriver, caplog: pytest.LogCaptureFixture
    ) -> None:
        for thread_id in ("bad-1", "bad-2", "bad-3"):
            await asyncio.to_thread(self.write_raw, api.store, TENANT, thread_id, b"garbage")
        with caplog.at_level(logging.WARNING, logger="convmem.stores"):
            assert await api.load(TENANT, "bad-1") is None
            assert await api.load(TENANT, "bad-2") is None  # same incident: no new warning
            assert (api.store.stats.degraded, len(_store_warnings(caplog))) == (1, 1)
            await api.save(TENANT, "good", rich_state(), expected_version=0)  # incident over
            assert await api.load(TENANT, "bad-3") is None  # a new incident
        assert (api.store.stats.degraded, len(_store_warnings(caplog))) == (2, 2)

    async def test_strict_store_raises_state_unavailable(
        self, make_store: StoreFactory, api: StoreDriver
    ) -> None:
        strict = StoreDriver(make_store(strict=True), api.mode)
        await asyncio.to_thread(self.write_raw, strict.store, TENANT, "t1", b"garbage")
        with pytest.raises(StateUnavailable):
            await strict.load(TENANT, "t1")
