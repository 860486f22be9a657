"""What both adapters' ``LLMResolver`` must do against the same hand-written OpenAI
cassettes (``tests/*/cassettes/openai_structured_*.yaml``): each adapter's test builds
its resolver from its own real OpenAI client and hands it to these checks."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import pytest
from vcr.cassette import Cassette

from convmem.domain import Domain
from convmem.resolve import Resolution, RuleResolver
from convmem.session import SessionMemory, TurnContext
from convmem.state import SessionState

TODAY = date(2026, 11, 30)
QUESTION = "What does Brightwater still owe us? A table please."


def rules(crm: Domain) -> Resolution:
    """What the rule resolver alone makes of ``QUESTION``: the fallback."""
    return RuleResolver().resolve(QUESTION, SessionState(), crm, TODAY)


def check_structured_answer_is_used(resolver: Any, cassette: Cassette, crm: Domain) -> None:
    """A 200 whose content is the JSON resolution: the model's reading is the one used."""
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert cassette.play_count == 1
    assert resolver.failures == 0
    assert res.rewritten == "Which Brightwater Farms orders are overdue? Show them in a table."
    assert dict(res.filters) == {"status": "overdue"} and res.format == "table"
    assert [e.id for m in res.mentions for e in m.candidates] == ["C-1080"]
    assert res != rules(crm)  # the rules read no filter and no format here


def check_falls_back_to_the_rules(
    resolver: Any, cassette: Cassette, crm: Domain, cause: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An unusable answer: one failure counted, the rules' resolution, ``cause`` logged."""
    res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
    assert cassette.play_count == 1  # the provider answered; the answer was unusable
    assert resolver.failures == 1
    assert res == rules(crm)
    assert cause in caplog.text  # failed for the reason this cassette is about


async def check_async_session_uses_the_models_rewrite(
    resolver: Any, cassette: Cassette, crm: Domain
) -> None:
    """Two async turns: the second prompt carries the first turn's focus, and the model's
    rewrite is the one used."""
    memory = SessionMemory(crm, resolver=resolver, clock=lambda: datetime(2026, 11, 30, 12))
    first = await memory.abegin_turn("t", "Pull up Brightwater Farms.")
    assert isinstance(first, TurnContext)
    await memory.aend_turn("t", answer="Brightwater Farms, Fresno.")
    second = await memory.abegin_turn("t", "Who's their rep?")
    assert isinstance(second, TurnContext)
    assert second.rewritten == "Who is the account rep for Brightwater Farms?"
    assert second.state.focus is not None and second.state.focus.id == "C-1080"
    assert cassette.play_count == 2 and resolver.failures == 0
