"""Constructing our LangChain classes raises no warning (the deprecated
``RunnableWithMessageHistory`` warns on every construction; ours must not), and the
public names are pinned."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_openai import ChatOpenAI
from lc_fakes import ScriptedChatModel

import langchain_convmem
from convmem.domain import Domain
from convmem.errors import ConfigError
from convmem.session import SessionMemory
from convmem.transcript import RetentionPolicy, TranscriptStore
from langchain_convmem import (
    ConvMemChatMessageHistory,
    LLMResolver,
    RunnableWithSessionMemory,
    SessionMemoryMiddleware,
)
from tests.offline_http import DUMMY_OPENAI_KEY


def test_runnable_is_not_the_deprecated_class() -> None:
    assert not issubclass(RunnableWithSessionMemory, RunnableWithMessageHistory)


def test_public_names() -> None:
    assert sorted(langchain_convmem.__all__) == sorted(
        ["ConvMemChatMessageHistory", "LLMResolver", "RunnableWithSessionMemory",
         "SessionMemoryMiddleware", "inline_untraced_spans", "recall_tool", "tool_result"]
    )


def test_construction_raises_no_warning(memory: SessionMemory) -> None:
    model = FakeMessagesListChatModel(responses=[AIMessage("x")])
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | model
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SessionMemoryMiddleware(memory)
        SessionMemoryMiddleware(memory, rewrite=True)
        RunnableWithSessionMemory(chain, memory, input_messages_key="q")
        LLMResolver(ScriptedChatModel(responses=[AIMessage("x")]))
        LLMResolver(ChatOpenAI(model="gpt-4o-mini", api_key=DUMMY_OPENAI_KEY))  # type: ignore[arg-type]


def test_bad_arguments_name_what_was_wrong(memory: SessionMemory) -> None:
    with pytest.raises(ConfigError, match="BaseChatModel, got str"):
        LLMResolver("gpt-4o-mini")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="FakeListChatModel has no with_structured_output"):
        LLMResolver(FakeListChatModel(responses=["x"]))
    with pytest.raises(ConfigError, match="wraps a Runnable, got dict"):
        RunnableWithSessionMemory({}, memory)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="SessionMemory, got str"):
        SessionMemoryMiddleware("memory")  # type: ignore[arg-type]


def test_chat_message_history_construction_raises_no_warning(
    tmp_path: Path, crm: Domain
) -> None:
    """langchain-core deprecates ``BaseChatMessageHistory`` (1.6.4+); its decorator warns
    only on direct instances, and ours is a subclass: nothing may be emitted, in any view.
    Construction does no I/O, so the database file need not exist."""
    store = TranscriptStore(
        f"sqlite:///{tmp_path / 'x.db'}", retention=RetentionPolicy(None, owner="tests")
    )
    memory = SessionMemory(crm, transcript=store)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ConvMemChatMessageHistory(store, "s-1")
        ConvMemChatMessageHistory(store, "s-1", tenant="acme")
        ConvMemChatMessageHistory(memory, "s-1")
        ConvMemChatMessageHistory(memory, "s-1", view="session", tenant="acme")
    assert [str(w.message) for w in seen] == []
    assert not (tmp_path / "x.db").exists()
    store.engine.dispose()
