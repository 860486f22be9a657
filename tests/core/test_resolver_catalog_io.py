"""Catalog lookups are effects: ``aresolve`` awaits ``afind`` for every lookup, ``resolve``
calls ``find``, and both read the same.

The catalog here stands for one backed by a database or an API: its sync ``find``
blocks (a sleep), and refuses outright when called with an event loop running, so a
sync lookup left on the async path fails the test with or without blockbuster. The
elliptical repeat ("And Pinecrest Clinics?") looks the *previous* question up too; that
second lookup is the one that used to be sync on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from datetime import date

import pytest

from convmem import (
    Domain,
    Focus,
    InMemoryCatalog,
    Mention,
    RuleResolver,
    SessionMemory,
    SessionState,
    StructuredResolver,
    load_domain,
)
from convmem.state import FilterValue
from convmem.text import stopwords
from convmem.tokens import encoding
from tests.core.conftest import DATA, TODAY
from tests.core.test_rewrite import CASES, state_from_case


class RemoteCatalog:
    """A catalog whose ``find`` does blocking I/O; it logs which form each lookup used."""

    def __init__(self, inner: InMemoryCatalog) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []

    def find(self, text: str) -> list[Mention]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise AssertionError(f"sync Catalog.find({text!r}) called on the event loop")
        self.calls.append(("find", text))
        time.sleep(0.001)  # the round trip a remote catalog makes
        return self.inner.find(text)

    async def afind(self, text: str) -> list[Mention]:
        self.calls.append(("afind", text))
        await asyncio.sleep(0.001)
        return self.inner.find(text)


def _remote(domain: Domain) -> tuple[Domain, RemoteCatalog]:
    """``domain`` over a ``RemoteCatalog``; the package data a resolver reads is loaded
    now, in sync code, as ``SessionMemory`` does at construction."""
    stopwords()
    encoding()
    catalog = RemoteCatalog(InMemoryCatalog(domain.entities))
    return domain.with_catalog(catalog), catalog


@pytest.fixture
def crm_remote(crm: Domain) -> tuple[Domain, RemoteCatalog]:
    return _remote(crm)


PREVIOUS = "What did Bluejay Retail order in Q3?"
REPEAT_STATE = SessionState(
    focus=Focus("customer", "C-1093", "Bluejay Retail", "tool"),
    filters={"period": FilterValue("2026-Q3", 1)},
    recent_questions=(PREVIOUS,),
    last_rewrite=PREVIOUS,
    turn=1,
)


@pytest.mark.parametrize(("question", "rewritten"), [
    ("And Pinecrest Clinics?", "What did Pinecrest Clinics order in Q3? (period 2026-Q3)"),
    ("And in Q2?", "What did Bluejay Retail order in Q2? (period 2026-Q2)"),
])
async def test_an_elliptical_repeat_awaits_every_lookup(
    crm_remote: tuple[Domain, RemoteCatalog], question: str, rewritten: str
) -> None:
    domain, catalog = crm_remote
    got = await RuleResolver().aresolve(question, REPEAT_STATE, domain, TODAY)
    assert got.rewritten == rewritten
    assert catalog.calls == [("afind", question), ("afind", PREVIOUS)]


def test_the_sync_resolver_makes_the_same_lookups_with_find(
    crm_remote: tuple[Domain, RemoteCatalog],
) -> None:
    domain, catalog = crm_remote
    got = RuleResolver().resolve("And Pinecrest Clinics?", REPEAT_STATE, domain, TODAY)
    assert got.rewritten == "What did Pinecrest Clinics order in Q3? (period 2026-Q3)"
    assert catalog.calls == [("find", "And Pinecrest Clinics?"), ("find", PREVIOUS)]


@pytest.fixture
def typed_remote() -> tuple[Domain, RemoteCatalog]:
    return _remote(load_domain(DATA / "domains" / "crm_typed.json"))


async def test_a_typed_domain_repeat_awaits_its_lookups(
    typed_remote: tuple[Domain, RemoteCatalog],
) -> None:
    domain, catalog = typed_remote
    state = REPEAT_STATE.evolve()
    got = await RuleResolver().aresolve("And Pinecrest Clinics?", state, domain, TODAY)
    assert got.rewritten.startswith("What did Pinecrest Clinics order in Q3?")
    assert [form for form, _ in catalog.calls] == ["afind", "afind"]


async def test_both_drivers_read_every_rewrite_case_alike(crm: Domain) -> None:
    for case in CASES:
        state, today = state_from_case(case), date.fromisoformat(case["today"])
        domain, catalog = _remote(crm)
        asynchronous = await RuleResolver().aresolve(case["question"], state, domain, today)
        synchronous = await asyncio.to_thread(
            RuleResolver().resolve, case["question"], state, domain, today)
        assert asynchronous == synchronous, case["question"]
        assert asynchronous.rewritten == case["rewritten"]
        forms = [form for form, _ in catalog.calls]
        assert forms.count("afind") == forms.count("find") >= 1


async def test_the_structured_resolver_awaits_its_lookups(
    crm_remote: tuple[Domain, RemoteCatalog],
) -> None:
    domain, catalog = crm_remote

    async def complete(prompt: str, schema: dict[str, object]) -> object:
        return {"rewritten": "What did Pinecrest Clinics order in Q3?",
                "entities": ["Pinecrest Clinics"], "filters": {"period": "2026-Q3"},
                "clear_filters": [], "format": None, "refers_back": True}

    resolver = StructuredResolver(complete)
    got = await resolver.aresolve("And Pinecrest Clinics?", REPEAT_STATE, domain, TODAY)
    assert resolver.failures == 0 and got.mentions[0].text == "Pinecrest Clinics"
    assert catalog.calls == [("afind", "Pinecrest Clinics")]


async def test_an_async_turn_never_calls_the_sync_catalog(
    crm_remote: tuple[Domain, RemoteCatalog],
) -> None:
    domain, catalog = crm_remote
    memory = SessionMemory(domain, tenant="t1")
    await memory.abegin_turn("t", PREVIOUS, today=TODAY)
    await memory.aend_turn("t")
    ctx = await memory.abegin_turn("t", "And Pinecrest Clinics?", today=TODAY)
    assert ctx.rewritten.startswith("What did Pinecrest Clinics order in Q3?")
    assert {form for form, _ in catalog.calls} == {"afind"}
    assert ("afind", PREVIOUS) in catalog.calls
