"""The framework-free LLM resolver: schema, validation, fallback."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convmem import RESOLUTION_SCHEMA, Domain, SessionMemory, StructuredResolver, TurnContext
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
