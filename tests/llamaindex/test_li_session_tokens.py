"""The 50-turn reference session through real LlamaIndex classes where only the chat
store changed (``view="session"``), on SQLite and PostgreSQL: the prompt the LLM
receives stays flat, pronoun questions reach it resolved (or, for a reading-first
engine, beside a block that names what they refer to), and the record holds every
message of every turn with a model input equal to what the LLM received.

The session is ``convmem.reference`` (4,000-token system prompt + context per turn,
17–27-token questions, 2,000-token answers, a focus-setting tool call on most turns).
The engine is rebuilt each turn with that turn's system prompt (a server building its
engine per request); the memory and its store live across turns. Figures:
``pytest -s tests/llamaindex/test_li_session_tokens.py -m sqlite``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, time
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.chat_engine import CondensePlusContextChatEngine, SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.memory.types import BaseMemory
from llama_index.core.tools import FunctionTool

from convmem import count_message_tokens
from convmem.reference import TODAY, ReferenceTurn, reference_domain, reference_session
from convmem.session import SessionMemory
from convmem.transcript import TranscriptStore
from llamaindex_convmem import ConvMemChatStore, ConvMemDBChatStore
from tests.llamaindex.li_helpers import CapturingLLM, RecordingRetriever, roles_and_text, sent
from tests.recorded_inputs import arecord

WINDOW = 128_000
SHOWN = (1, 3, 6, 10, 20, 50)
CONFIGS = ["simple+ChatMemoryBuffer", "simple+Memory", "FunctionAgent+Memory",
           "CondensePlusContext+ChatMemoryBuffer"]
Received = list[tuple[str, str]]


PROJECTS = {e.id: e.label for e in reference_domain().entities if e.type == "project"}


def get_project(id: str) -> dict[str, Any]:  # the reference tool's argument name
    """Look a project up by id."""
    return {"id": id, "name": PROJECTS[id]}


@pytest.fixture(scope="module")
def turns() -> list[ReferenceTurn]:
    return list(reference_session())


@pytest.fixture
def reference(transcript: TranscriptStore, tenant: str) -> SessionMemory:
    """Built outside the event loop (it loads package data once)."""
    return SessionMemory(reference_domain(), transcript=transcript, tenant=tenant,
                         clock=lambda: datetime.combine(TODAY, time(12)))


class Agent:
    """``FunctionAgent`` over a scripted model: the turn's tool call, then its answer."""

    def __init__(self) -> None:
        self.turn: ReferenceTurn | None = None
        self.inputs: list[Received] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        assert self.turn is not None
        self.inputs.append(roles_and_text(messages))
        if self.turn.tool is None or messages[-1].role.value == "tool":
            return ChatMessage(role="assistant", content=self.turn.answer)
        name, args, _ = self.turn.tool
        return ChatMessage(role="assistant", blocks=[ToolCallBlock(
            tool_call_id=f"call-{self.turn.turn}", tool_name=name, tool_kwargs=args)])


async def run(config: str, memory: BaseMemory, turns: list[ReferenceTurn]) -> list[Received]:
    """The first model input of every turn."""
    firsts: list[Received] = []
    if config.startswith("FunctionAgent"):
        script = Agent()
        llm = MockFunctionCallingLLM(response_generator=script)
        for t in turns:
            script.turn, first = t, len(script.inputs)
            agent = FunctionAgent(tools=[FunctionTool.from_defaults(fn=get_project)], llm=llm,
                                  system_prompt=t.system)
            await agent.run(user_msg=t.question, memory=memory)
            firsts.append(script.inputs[first])
        return firsts
    chat = CapturingLLM(answers=[t.answer for t in turns], window=WINDOW)
    for t in turns:
        first = len(chat.received)
        engine: Any
        if config.startswith("CondensePlusContext"):
            engine = CondensePlusContextChatEngine.from_defaults(
                retriever=RecordingRetriever(), llm=chat, memory=memory, system_prompt=t.system)
        else:
            engine = SimpleChatEngine.from_defaults(llm=chat, memory=memory,
                                                    system_prompt=t.system)
        await engine.achat(t.question)
        firsts.append(chat.received[first])
    return firsts


def memory_for(config: str, store: Any, key: str) -> BaseMemory:
    if config.endswith("ChatMemoryBuffer"):  # sized as from_defaults(llm=...) sizes it
        return ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key=key,
                                              token_limit=int(0.75 * WINDOW))
    return Memory.from_defaults(session_id=key, chat_store=store)


def tokens(firsts: list[Received], turns: list[ReferenceTurn]) -> list[tuple[int, int]]:
    """``(prompt tokens, memory-added tokens)``: added = prompt - (the engine's own system
    message + the question as typed)."""
    rows = []
    for received, t in zip(firsts, turns, strict=True):
        prompt = count_message_tokens(received)
        rows.append((prompt, prompt - count_message_tokens([received[0], ("user", t.question)])))
    return rows


def show(name: str, rows: list[tuple[int, int]]) -> None:
    cells = "  ".join(f"t{t}={rows[t - 1][0]:,}({rows[t - 1][1]:,})" for t in SHOWN)
    print(f"{name:50s} {cells}  max added={max(a for _, a in rows):,}  "
          f"t50/t1={rows[49][0] / rows[0][0]:.3f}")


@pytest.mark.parametrize("config", CONFIGS)
async def test_only_the_chat_store_changes_and_the_prompt_stays_flat(
    reference: SessionMemory, turns: list[ReferenceTurn], config: str
) -> None:
    session = reference
    assert session.transcript is not None
    cls = ConvMemChatStore if config.endswith("ChatMemoryBuffer") else ConvMemDBChatStore
    store = cls(session, view="session")  # <- the one change
    firsts = await run(config, memory_for(config, store, "ref"), turns)
    rows = tokens(firsts, turns)
    print(f"\nprompt tokens (memory-added) per turn, convmem.reference, "
          f"{session.transcript.dialect}")
    show(f"session view: {config}", rows)

    assert max(added for _, added in rows) <= 160
    assert rows[49][0] / rows[0][0] <= 1.05
    assert any(added > 0 for _, added in rows)

    found, path = await arecord(session, "ref")
    assert [sent(r) for r in found] == [f[1:] for f in firsts]  # every turn, as received
    assert [m.text for m in path if m.role == "user"] == [t.question for t in turns]
    assert [m.text for m in path if m.role == "assistant" and m.text] == [t.answer for t in turns]
    if config.startswith("FunctionAgent"):
        with_tools = sum(t.tool is not None for t in turns)
        assert sum(p.kind == "tool_result" for m in path for p in m.parts) == with_tools

    fresh = not config.startswith("CondensePlusContext")
    pronouns = 0
    for r, received, t in zip(found, firsts, turns, strict=True):
        rewritten = (r.user_message.extra.get("convmem") or {}).get("rewritten")
        if " their " not in t.question or not rewritten:
            continue
        pronouns += 1
        if fresh:  # the model gets the question resolved
            assert received[-1] == ("user", rewritten) and " their " not in rewritten
        else:  # one turn stale: the question as typed, beside the block naming the focus
            assert received[-1] == ("user", t.question)
            assert "Currently discussing: project" in received[-2][1]
    assert pronouns >= 10


async def test_replay_for_comparison(
    transcript: TranscriptStore, tenant: str, turns: list[ReferenceTurn]
) -> None:
    """The record view behind the engines' default ``Memory`` sizing replays the history."""
    store = ConvMemDBChatStore(transcript, tenant=tenant)
    memory = Memory.from_defaults(session_id="ref", chat_store=store, token_limit=WINDOW - 256)
    rows = tokens(await run("simple+Memory", memory, turns), turns)
    show("record view (replay): simple+Memory", rows)
    assert rows[49][0] / rows[0][0] > 20
