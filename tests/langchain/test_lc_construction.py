"""Constructing our LangChain classes raises no warning (the deprecated
``RunnableWithMessageHistory`` warns on every construction; ours must not), and the
public names are pinned."""

from __future__ import annotations

import warnings

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
from convmem.errors import ConfigError
from convmem.session import SessionMemory
from langchain_convmem import LLMResolver, RunnableWithSessionMemory, SessionMemoryMiddleware
from tests.offline_http import DUMMY_OPENAI_KEY


def test_runnable_is_not_the_deprecated_class() -> None:
    assert not issubclass(RunnableWithSessionMemory, RunnableWithMessageHistory)


def test_public_names() -> None:
    assert sorted(langchain_convmem.__all__) == sorted(
        ["LLMResolver", "RunnableWithSessionMemory", "SessionMemoryMiddleware"]
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
