"""``RunnableWithSessionMemory`` around real LCEL chains (prompt template, fake model)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableParallel
from lc_fakes import ScriptedChatModel, shape

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from langchain_convmem import RunnableWithSessionMemory

SYSTEM = "You are a CRM assistant."
BLOCK1 = '## Session context\nCurrently discussing: customer "Brightwater Farms" (C-1080)'
SUMMIT_OPTIONS = (
    'Two customers match "Summit". Which one?\n'
    "1. Summit Outdoor Co. — Denver, acct 52210\n"
    "2. Summit Outdoor GmbH — Munich, acct 52877"
)
PROMPT = ChatPromptTemplate.from_messages([
    ("system", SYSTEM),
    MessagesPlaceholder("history"),
    ("human", "{question}"),
])


def _cfg(session: str = "s-1") -> Any:
    return {"configurable": {"session_id": session}}


def _model(*answers: str) -> ScriptedChatModel:
    return ScriptedChatModel(responses=[AIMessage(a) for a in answers])


def test_prompt_template_chain_gets_block_in_history_slot(memory: SessionMemory) -> None:
    model = _model("Loaded.", "Ben Carter.")
    chain = RunnableWithSessionMemory(
        PROMPT | model | StrOutputParser(), memory,
        input_messages_key="question", history_messages_key="history", rewrite=True,
    )
    assert chain.invoke({"question": "Pull up Brightwater Farms."}, _cfg()) == "Loaded."
    assert shape(model.received[0]) == [
        ("system", SYSTEM), ("system", BLOCK1), ("human", "Pull up Brightwater Farms."),
    ]
    assert chain.invoke({"question": "Who's their rep?"}, _cfg()) == "Ben Carter."
    assert shape(model.received[1]) == [
        ("system", SYSTEM),
        ("system", f'{BLOCK1}\nEarlier in this session: "Pull up Brightwater Farms."'),
        ("human", "Who's Brightwater Farms's rep?"),
    ]
    # A clarification comes back as the chain's own output type (str), no model call.
    assert chain.invoke({"question": "How is Summit doing?"}, _cfg()) == SUMMIT_OPTIONS
    assert len(model.received) == 2
    state = memory.get_state("s-1")
    assert state is not None and state.open_turn is None and state.pending is not None


def test_empty_block_means_empty_history(memory: SessionMemory) -> None:
    model = _model("Hello.")
    chain = RunnableWithSessionMemory(PROMPT | model, memory, input_messages_key="question",
                                      history_messages_key="history")
    out = chain.invoke({"question": "Hi there."}, _cfg())
    assert isinstance(out, AIMessage) and out.text == "Hello."
    assert shape(model.received[0]) == [("system", SYSTEM), ("human", "Hi there.")]


def test_clarification_shapes(memory: SessionMemory) -> None:
    as_message = RunnableWithSessionMemory(PROMPT | _model(), memory,
                                           input_messages_key="question",
                                           history_messages_key="history")
    out = as_message.invoke({"question": "How is Summit doing?"}, _cfg("a"))
    assert isinstance(out, AIMessage) and out.text == SUMMIT_OPTIONS

    as_dict = RunnableWithSessionMemory(
        RunnableParallel(answer=PROMPT | _model()), memory,
        input_messages_key="question", history_messages_key="history",
        output_messages_key="answer",
    )
    out = as_dict.invoke({"question": "How is Summit doing?"}, _cfg("b"))
    assert set(out) == {"answer"} and out["answer"].text == SUMMIT_OPTIONS


def test_without_history_key_the_block_leads_the_messages(memory: SessionMemory) -> None:
    model = _model("Loaded.", "Fresno.")
    chain = RunnableWithSessionMemory(model, memory, rewrite=False)
    chain.invoke([HumanMessage("Pull up Brightwater Farms.")], _cfg())
    assert shape(model.received[0]) == [("system", BLOCK1), ("human", "Pull up Brightwater Farms.")]
    chain.invoke("Where are they?", _cfg())  # a plain string works too
    assert shape(model.received[1])[-1] == ("human", "Where are they?")
    assert len(model.received[1]) == 2  # no replayed history


def test_stream_yields_chunks_and_closes_the_turn(memory: SessionMemory) -> None:
    chain = RunnableWithSessionMemory(PROMPT | _model("Fresno, CA.") | StrOutputParser(), memory,
                                      input_messages_key="question",
                                      history_messages_key="history")
    chunks = list(chain.stream({"question": "Pull up Brightwater Farms."}, _cfg()))
    assert "".join(chunks) == "Fresno, CA."
    state = memory.get_state("s-1")
    assert state is not None and state.open_turn is None and state.focus is not None
    assert list(chain.stream({"question": "How is Summit doing?"}, _cfg())) == [SUMMIT_OPTIONS]


def test_batch_keeps_sessions_apart(memory: SessionMemory) -> None:
    chain = RunnableWithSessionMemory(PROMPT | _model("ok", "ok") | StrOutputParser(), memory,
                                      input_messages_key="question",
                                      history_messages_key="history")
    out = chain.batch(
        [{"question": "Pull up Brightwater Farms."}, {"question": "Pull up Cobalt Freight."}],
        [_cfg("x"), _cfg("y")],
    )
    assert out == ["ok", "ok"]
    focus = {s: memory.get_state(s).focus.id for s in ("x", "y")}  # type: ignore[union-attr]
    assert focus == {"x": "C-1080", "y": "C-1081"}


def test_missing_session_id_names_the_key(memory: SessionMemory) -> None:
    chain = RunnableWithSessionMemory(PROMPT | _model("x"), memory,
                                      input_messages_key="question",
                                      history_messages_key="history")
    with pytest.raises(ConfigError, match=r'\["session_id"\]'):
        chain.invoke({"question": "Hi."})


def test_config_specs_follow_the_history_convention(memory: SessionMemory) -> None:
    chain = RunnableWithSessionMemory(PROMPT | _model(), memory)
    assert {s.id for s in chain.config_specs} >= {"session_id", "tenant_id"}


async def test_async_invoke_stream_and_batch(memory: SessionMemory) -> None:
    model = _model("Loaded.", "Ben Carter.", "one", "two")
    chain = RunnableWithSessionMemory(PROMPT | model, memory, input_messages_key="question",
                                      history_messages_key="history", rewrite=True)
    await chain.ainvoke({"question": "Pull up Brightwater Farms."}, _cfg())
    chunks = [c async for c in chain.astream({"question": "Who's their rep?"}, _cfg())]
    assert "".join(c.text for c in chunks) == "Ben Carter."
    assert shape(model.received[1])[-1] == ("human", "Who's Brightwater Farms's rep?")
    clar = [c async for c in chain.astream({"question": "How is Summit doing?"}, _cfg())]
    assert len(clar) == 1 and isinstance(clar[0], AIMessageChunk)
    assert clar[0].text == SUMMIT_OPTIONS
    out = await chain.abatch([{"question": "Pull up Cobalt Freight."},
                              {"question": "Pull up Redwood Analytics."}], [_cfg("p"), _cfg("q")])
    assert sorted(o.text for o in out) == ["one", "two"]
    state = await memory.aget_state("q")
    assert state is not None and state.focus is not None and state.focus.id == "C-1082"
