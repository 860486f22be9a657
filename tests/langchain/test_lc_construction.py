"""Constructing our LangChain classes raises no warning (the deprecated
``RunnableWithMessageHistory`` warns on every construction; ours must not), and the
public names are pinned."""

from __future__ import annotations

import warnings

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from lc_fakes import ScriptedChatModel

import convmem.resolve as core_resolve
import langchain_convmem
from convmem.session import SessionMemory
from langchain_convmem import RunnableWithSessionMemory, SessionMemoryMiddleware


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


@pytest.mark.skipif(not hasattr(core_resolve, "StructuredResolver"),
                    reason="the core's StructuredResolver has not been merged into this branch")
def test_llm_resolver_construction_raises_no_warning() -> None:
    model = ScriptedChatModel(responses=[AIMessage("x")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        langchain_convmem.LLMResolver(model)
