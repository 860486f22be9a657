"""What both adapters' ``LLMResolver`` must do against the same hand-written OpenAI
cassettes (``tests/*/cassettes/openai_structured_*.yaml``): each adapter's test module
subclasses ``OpenAIResolverCassettes`` with a resolver built on its own real OpenAI
client, and names the cassettes whose answer that client finds unusable.

Every cassette under each ``cassettes/`` folder is HAND-WRITTEN from OpenAI's documented
Chat Completions response object (and its documented refusal shape); none was recorded
from the API and no real key exists here (the client gets a dummy one). They play in
``record_mode="none"`` behind ``network_guard`` (``tests/offline_http.py``): a request
the cassette does not hold raises, any connection off this machine raises, and a
cassette whose interactions were not all played fails the test, so a fallback test
cannot pass by missing its cassette. Requests match on method, URI and the body fields
each cassette states: the model, the core's prompt, and ``response_format`` of type
``json_schema``; each adapter's module says what its client sends there.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, ClassVar

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


class OpenAIResolverCassettes:
    """The shared tests; a subclass named ``Test...`` runs them for one adapter.

    The subclass defines ``resolver()`` (the adapter's ``LLMResolver`` on its real OpenAI
    client, a dummy key, no retries) and ``UNUSABLE``: ``(cassette, cause)`` pairs, each a
    hand-written cassette whose answer is unusable and the text the failure must log.
    Cassettes are read from the ``cassettes/`` folder next to the subclass's module.
    """

    UNUSABLE: ClassVar[list[tuple[str, str]]]

    def resolver(self) -> Any:
        raise NotImplementedError

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "cause" in metafunc.fixturenames:
            metafunc.parametrize(("cassette", "cause"), self.UNUSABLE, indirect=["cassette"])

    @pytest.mark.parametrize("cassette", ["openai_structured_good.yaml"], indirect=True)
    def test_structured_answer_is_used(self, cassette: Cassette, crm: Domain) -> None:
        """A 200 whose content is the JSON resolution: the model's reading is the one used."""
        resolver = self.resolver()
        res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
        assert cassette.play_count == 1
        assert resolver.failures == 0
        assert res.rewritten == "Which Brightwater Farms orders are overdue? Show them in a table."
        assert dict(res.filters) == {"status": "overdue"} and res.format == "table"
        assert [e.id for m in res.mentions for e in m.candidates] == ["C-1080"]
        assert res != rules(crm)  # the rules read no filter and no format here

    def test_unusable_answer_falls_back_to_the_rules(
        self, cassette: Cassette, cause: str, crm: Domain, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An unusable answer: one failure counted, the rules' resolution, ``cause`` logged."""
        resolver = self.resolver()
        res = resolver.resolve(QUESTION, SessionState(), crm, TODAY)
        assert cassette.play_count == 1  # the provider answered; the answer was unusable
        assert resolver.failures == 1
        assert res == rules(crm)
        assert cause in caplog.text  # failed for the reason this cassette is about

    @pytest.fixture
    def async_resolver(self) -> Any:
        # Built outside the event loop, as an application builds its clients at start-up.
        return self.resolver()

    @pytest.mark.parametrize("cassette", ["openai_structured_two_turns.yaml"], indirect=True)
    async def test_async_session_uses_the_models_rewrite(
        self, cassette: Cassette, crm: Domain, async_resolver: Any
    ) -> None:
        """Two async turns (under blockbuster): the second prompt carries the first turn's
        focus, and the model's rewrite is the one used."""
        memory = SessionMemory(
            crm, resolver=async_resolver, clock=lambda: datetime(2026, 11, 30, 12)
        )
        first = await memory.abegin_turn("t", "Pull up Brightwater Farms.")
        assert isinstance(first, TurnContext)
        await memory.aend_turn("t", answer="Brightwater Farms, Fresno.")
        second = await memory.abegin_turn("t", "Who's their rep?")
        assert isinstance(second, TurnContext)
        assert second.rewritten == "Who is the account rep for Brightwater Farms?"
        assert second.state.focus is not None and second.state.focus.id == "C-1080"
        assert cassette.play_count == 2 and async_resolver.failures == 0
