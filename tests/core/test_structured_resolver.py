"""The framework-free LLM resolver: schema, validation, fallback."""

from __future__ import annotations

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
