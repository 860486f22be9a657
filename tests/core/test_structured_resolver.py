"""The framework-free LLM resolver: schema, validation, fallback."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from convmem import (
    RESOLUTION_SCHEMA,
    ConvMemError,
    Domain,
    ResolverError,
    SessionMemory,
    StructuredResolver,
    TurnContext,
)
from convmem.state import SessionState
from tests.core.conftest import TODAY
from tests.hostile_answers import (
    HOSTILE_REWRITE,
    CountingCatalog,
    assert_inert,
    nested,
    nested_json,
)

GOOD = {"rewritten": "What did Brightwater Farms buy in 2026-Q3?", "entities": ["Brightwater Farms"],
        "filters": {"period": "2026-Q3"}, "clear_filters": [], "format": "short", "refers_back": False}


def test_valid_answer_becomes_a_resolution(crm: Domain) -> None:
    seen: list[Any] = []

    def complete(prompt: str, schema: dict[str, object]) -> Any:
        seen.append((prompt, schema))
        return json.dumps(GOOD)

    res = StructuredResolver(complete).resolve("what did brightwater buy last quarter, briefly",
                                               SessionState(), crm, TODAY)
    assert res.rewritten == GOOD["rewritten"] and res.filters == {"period": "2026-Q3"}
    assert res.format == "short" and res.mentions[0].candidates[0].id == "C-1080"
    assert seen[0][1] is RESOLUTION_SCHEMA and "Today is 2026-11-30" in seen[0][0]


@pytest.mark.parametrize("answer", [
    "not json", [], {"rewritten": ""}, {**GOOD, "filters": {"period": "last quarter"}},
    {**GOOD, "filters": {"region": "mars"}}, {**GOOD, "format": "poem"}, {**GOOD, "refers_back": "yes"},
    {**GOOD, "entities": "Brightwater"},
])
def test_garbage_falls_back_to_rules(crm: Domain, answer: Any) -> None:
    resolver = StructuredResolver(lambda p, s: answer)
    state = SessionState()
    res = resolver.resolve("Pull up Brightwater Farms last quarter", state, crm, TODAY)
    assert resolver.failures == 1
    assert res.filters == {"period": "2026-Q3"}  # the rule resolver's reading


@pytest.mark.parametrize(("answer", "named"), [
    ("not json", "the answer is not JSON: Expecting value: line 1 column 1 (char 0)"),
    ({**GOOD, "filters": {"region": "mars"}}, "filter region='mars' is not valid for this domain"),
    ({**GOOD, "refers_back": "yes"}, "'refers_back' must be a boolean"),
    ({**GOOD, "entities": "Brightwater"}, "'entities' must be a list of strings"),
])
async def test_a_failed_answer_is_logged_as_a_resolver_error_naming_the_field(
    crm: Domain, caplog: pytest.LogCaptureFixture, answer: Any, named: str
) -> None:
    resolver = StructuredResolver(lambda p, s: answer)
    with caplog.at_level(logging.WARNING, logger="convmem.resolve"):
        resolver.resolve("Pull up Brightwater Farms", SessionState(), crm, TODAY)
        await resolver.aresolve("Pull up Brightwater Farms", SessionState(), crm, TODAY)
    assert resolver.failures == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"structured resolver failed (ResolverError: {named}); using the fallback resolver"] * 2


def test_an_async_completion_called_sync_is_a_resolver_failure(crm: Domain) -> None:
    async def complete(prompt: str, schema: dict[str, object]) -> Any:
        return GOOD

    resolver = StructuredResolver(complete)
    res = resolver.resolve("Pull up Brightwater Farms", SessionState(), crm, TODAY)
    assert resolver.failures == 1 and res.mentions[0].candidates[0].id == "C-1080"


def test_resolver_error_is_a_convmem_error_and_a_value_error() -> None:
    assert issubclass(ResolverError, ConvMemError) and issubclass(ResolverError, ValueError)


def test_raising_model_falls_back(crm: Domain) -> None:
    def boom(prompt: str, schema: dict[str, object]) -> Any:
        raise ValueError("rate limited")

    mem = SessionMemory(crm, resolver=StructuredResolver(boom))
    ctx = mem.begin_turn("t", "Pull up Brightwater Farms.", today=TODAY)
    assert isinstance(ctx, TurnContext) and ctx.state.focus is not None


async def test_async_completion(crm: Domain) -> None:
    async def complete(prompt: str, schema: dict[str, object]) -> Any:
        return GOOD

    mem = SessionMemory(crm, resolver=StructuredResolver(complete))
    ctx = await mem.abegin_turn("t", "what did brightwater buy last quarter", today=TODAY)
    assert isinstance(ctx, TurnContext) and ctx.rewritten == GOOD["rewritten"]
    assert ctx.state.focus is not None and ctx.state.focus.id == "C-1080"


def _typed() -> Domain:
    from convmem import load_domain
    from tests.core.conftest import DATA

    return load_domain(DATA / "domains" / "crm_typed.json")


def test_salient_answer_is_the_entity_the_first_reference_points_at() -> None:
    """Spec §10: the schema's ``salient`` names an 'Also in this conversation' entity."""
    from convmem.state import Focus

    bf, ben = Focus("customer", "C-1080", "Brightwater Farms", "tool"), Focus("rep", "R-08", "Ben Carter", "tool")
    state = SessionState(focus=ben, salient=(bf,))
    seen: list[str] = []

    def complete(prompt: str, schema: dict[str, object]) -> Any:
        seen.append(prompt)
        return {**GOOD, "rewritten": "What did Brightwater Farms order last quarter?", "entities": [],
                "filters": {}, "format": None, "refers_back": True, "salient": "C-1080"}

    res = StructuredResolver(complete).resolve("What did they order last quarter?", state, _typed(), TODAY)
    assert res.refers_to_salient == bf
    assert "Also in this conversation: customer 'Brightwater Farms' (id C-1080)" in seen[0]
    assert "salient" in RESOLUTION_SCHEMA["required"]  # type: ignore[operator]


def test_prompt_without_salient_is_unchanged(crm: Domain) -> None:
    seen: list[str] = []
    resolver = StructuredResolver(lambda p, s: seen.append(p) or GOOD)
    # the model names an entity the question does not contain: no crash, no fallback
    res = resolver.resolve("hi", SessionState(), crm, TODAY)
    assert "Also in this conversation" not in seen[0] and "'salient'" not in seen[0]
    assert resolver.failures == 0 and res.mentions[0].candidates[0].id == "C-1080"
    assert (res.mentions[0].start, res.mentions[0].end) == (0, 0) and res.residual == "hi"


@pytest.mark.parametrize("salient", ["C-9999", 7, ["C-1080"]])
def test_a_salient_id_not_in_the_state_falls_back(salient: Any) -> None:
    from convmem.state import Focus

    state = SessionState(focus=Focus("rep", "R-08", "Ben Carter"),
                         salient=(Focus("customer", "C-1080", "Brightwater Farms"),))
    resolver = StructuredResolver(lambda p, s: {**GOOD, "salient": salient})
    res = resolver.resolve("What did they order last quarter?", state, _typed(), TODAY)
    assert resolver.failures == 1
    assert res.refers_to_salient is not None and res.refers_to_salient.id == "C-1080"  # the rules' reading


# --------------------------------------------------------------------------- issue 22, finding 4


class _Deep:
    """A structured-output object whose ``model_dump`` recurses past the limit."""

    def model_dump(self) -> Any:
        return self.model_dump()


@pytest.mark.parametrize("answer", [
    pytest.param(nested_json(40_000), id="json-text-40000-deep"),
    pytest.param({**GOOD, "filters": {"region": nested(100_000)}}, id="filter-100000-deep"),
    pytest.param({**GOOD, "entities": nested(100_000)}, id="entities-100000-deep"),
    pytest.param({**GOOD, "salient": nested(100_000)}, id="salient-100000-deep"),
    pytest.param(_Deep(), id="model-dump-recursing"),
])
async def test_a_hostile_nested_answer_falls_back_to_the_rules(
    crm: Domain, caplog: pytest.LogCaptureFixture, answer: Any
) -> None:
    """A reply nested 100,000 deep raised ``RecursionError`` out of the resolver and
    failed the user's turn; now it is a failed answer like any garbage, sync and async."""
    resolver = StructuredResolver(lambda p, s: answer)
    with caplog.at_level(logging.WARNING, logger="convmem.resolve"):
        res = resolver.resolve("Pull up Brightwater Farms last quarter", SessionState(), crm, TODAY)
        ares = await resolver.aresolve("Pull up Brightwater Farms last quarter", SessionState(),
                                       crm, TODAY)
    assert res == ares and res.filters == {"period": "2026-Q3"}  # the rule resolver's reading
    assert resolver.failures == 2 and len(caplog.records) == 2
    assert all(len(r.getMessage()) < 500 for r in caplog.records)


@pytest.mark.parametrize("error", [RuntimeError("provider down"), RecursionError("deep"),
                                   ConnectionError("reset"), MemoryError()])
async def test_any_exception_from_the_completion_falls_back(crm: Domain, error: Exception) -> None:
    def complete(prompt: str, schema: dict[str, object]) -> Any:
        raise error

    async def acomplete(prompt: str, schema: dict[str, object]) -> Any:
        raise error

    res = StructuredResolver(complete).resolve("Pull up Brightwater Farms", SessionState(), crm, TODAY)
    ares = await StructuredResolver(acomplete).aresolve("Pull up Brightwater Farms", SessionState(),
                                                        crm, TODAY)
    assert res == ares and res.mentions[0].candidates[0].id == "C-1080"


@pytest.mark.parametrize("error", [KeyboardInterrupt, asyncio.CancelledError])
async def test_cancellation_is_not_a_resolver_failure(crm: Domain, error: type[BaseException]) -> None:
    async def acomplete(prompt: str, schema: dict[str, object]) -> Any:
        raise error

    resolver = StructuredResolver(acomplete)
    with pytest.raises(error):
        await resolver.aresolve("Pull up Brightwater Farms", SessionState(), crm, TODAY)
    assert resolver.failures == 0


class _Broken:
    """A custom resolver (not a ``StructuredResolver``) that raises."""

    def resolve(self, question: str, state: SessionState, domain: Domain, today: Any) -> Any:
        raise RuntimeError("my resolver is broken")

    async def aresolve(self, question: str, state: SessionState, domain: Domain, today: Any) -> Any:
        raise RuntimeError("my resolver is broken")


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_raising_resolver_never_fails_the_turn(
    crm: Domain, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The façade answers with the rule resolver, logs one WARNING and counts it."""
    mem = SessionMemory(crm, resolver=_Broken())
    with caplog.at_level(logging.WARNING, logger="convmem.resolve"):
        if mode == "sync":
            ctx = mem.begin_turn("t", "Pull up Brightwater Farms.", today=TODAY)
        else:
            ctx = await mem.abegin_turn("t", "Pull up Brightwater Farms.", today=TODAY)
    assert isinstance(ctx, TurnContext) and ctx.state.focus is not None
    assert ctx.state.focus.id == "C-1080" and mem.stats.resolver_failures == 1
    assert [r.getMessage() for r in caplog.records] == [
        "resolver _Broken failed (RuntimeError: my resolver is broken); using the rule resolver"]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_models_rewrite_is_made_inert_before_the_state_and_the_model(
    crm: Domain, mode: str
) -> None:
    """The rewrite replaces the user's question in what the model receives and is kept in
    the state: one line, no heading, fence, role marker, chat-template token, NUL or lone
    surrogate (``convmem.render.inert``), however the model wrote it."""
    answer = {**GOOD, "rewritten": HOSTILE_REWRITE + " pad" * 2000}
    mem = SessionMemory(crm, resolver=StructuredResolver(lambda p, s: answer))
    if mode == "sync":
        ctx = mem.begin_turn("t", "what did brightwater buy last quarter", today=TODAY)
    else:
        ctx = await mem.abegin_turn("t", "what did brightwater buy last quarter", today=TODAY)
    assert isinstance(ctx, TurnContext)
    stored = mem.get_state("t")
    assert stored is not None and stored.open_turn is not None
    for text in (ctx.rewritten, ctx.sent_question(True), stored.open_turn.rewritten):
        assert_inert(text)
    assert mem.resolver.failures == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("names", [
    pytest.param(["Brightwater Farms"] * 20_000, id="one-name-20000-times"),
    pytest.param([f"Customer {i}" for i in range(20_000)], id="20000-names"),
    pytest.param(["Brightwater Farms Northline Foods Pinecrest Clinics " * 9] * 100,
                 id="many-mentions-per-name"),
])
async def test_a_20000_entity_answer_costs_a_bounded_number_of_lookups(
    crm: Domain, names: list[str]
) -> None:
    """Every name the model listed was looked up in the catalog (4-6 s for 20,000):
    now at most ``MAX_ANSWER_NAMES`` distinct names are read, and as many mentions kept."""
    from convmem.resolve.structured import MAX_ANSWER_NAMES

    catalog = CountingCatalog(crm.catalog)
    domain = crm.with_catalog(catalog)  # type: ignore[arg-type]
    resolver = StructuredResolver(lambda p, s: {**GOOD, "entities": names})
    res = resolver.resolve("How is Brightwater Farms doing?", SessionState(), domain, TODAY)
    ares = await resolver.aresolve("How is Brightwater Farms doing?", SessionState(), domain, TODAY)
    assert res == ares and resolver.failures == 0
    assert catalog.calls <= 2 * MAX_ANSWER_NAMES and len(res.mentions) <= MAX_ANSWER_NAMES


def test_an_oversized_answer_is_refused_unparsed(crm: Domain) -> None:
    from convmem.resolve.structured import MAX_ANSWER_CHARS

    text = json.dumps({**GOOD, "rewritten": "x" * MAX_ANSWER_CHARS})
    resolver = StructuredResolver(lambda p, s: text)
    res = resolver.resolve("Pull up Brightwater Farms", SessionState(), crm, TODAY)
    assert resolver.failures == 1 and res.mentions[0].candidates[0].id == "C-1080"
