"""The session view under real LlamaIndex engines and agents (a recording mock LLM, no
network), on SQLite and PostgreSQL: in which order each engine and memory class reads
and writes the store, how fresh the block the model gets is, and whether the record's
model input equals what the model received.

The freshness table of ``docs/llamaindex-chat-stores.md`` is ``CASES`` below; the call
orders it quotes are ``ORDER``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.memory.types import BaseMemory
from llama_index.core.storage.chat_store.base_db import MessageStatus
from llama_index.core.tools import FunctionTool

from convmem.errors import ConfigError
from convmem.session import SessionMemory
from llamaindex_convmem import (
    ConvMemChatEngine,
    ConvMemChatStore,
    ConvMemDBChatStore,
    wrap_tools,
)
from llamaindex_convmem.memory import CLARIFY_INSTRUCTION
from tests.llamaindex.li_helpers import CapturingLLM, RecordingRetriever, roles_and_text, sent
from tests.llamaindex.test_li_agent import SYSTEM as AGENT_SYSTEM
from tests.llamaindex.test_li_agent import Script, lookup_customer, lookup_rep, search_customers
from tests.recorded_inputs import arecord, record

SYSTEM = "You are a CRM assistant."
Q1, Q2, Q2R = "Pull up Brightwater Farms.", "Who's their rep?", "Who's Brightwater Farms's rep?"
PINECREST = "How is Pinecrest Clinics doing?"
BLOCK1 = ('## Session context\nCurrently discussing: customer "Brightwater Farms" (C-1080)\n'
          'Earlier in this session: "Pull up Brightwater Farms."')


def _role(message: ChatMessage) -> str:
    return str(message.role.value)


class TracedChatStore(ConvMemChatStore):
    """Logs every read and write a memory class makes (and the LLM logs its calls)."""

    _trace: list[str] = PrivateAttr(default_factory=list)

    def get_messages(self, key: str) -> list[ChatMessage]:
        self._trace.append("get")
        return super().get_messages(key)

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        self._trace.append("get")
        return await super().aget_messages(key)

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        self._trace.append(f"add({_role(message)})")
        super().add_message(key, message, idx)

    async def async_add_message(
        self, key: str, message: ChatMessage, idx: int | None = None
    ) -> None:
        self._trace.append(f"add({_role(message)})")
        await super().async_add_message(key, message, idx)


class TracedDBChatStore(ConvMemDBChatStore):
    _trace: list[str] = PrivateAttr(default_factory=list)

    async def get_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None, offset: int | None = None,
    ) -> list[ChatMessage]:
        self._trace.append("get")
        return await super().get_messages(key, status, limit, offset)

    async def add_message(
        self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        self._trace.append(f"add({_role(message)})")
        await super().add_message(key, message, status)

    async def add_messages(
        self, key: str, messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        self._trace.append("add(" + ",".join(_role(m) for m in messages) + ")")
        await super().add_messages(key, messages, status)


class TracedLLM(CapturingLLM):
    """``CapturingLLM`` that also logs its calls into a store's trace."""

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        self.__dict__.setdefault("trace", []).append("LLM")
        self.__dict__["chatting"] = True  # the mock's chat completes its prompt
        try:
            return super().chat(messages, **kwargs)
        finally:
            self.__dict__["chatting"] = False

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        if not self.__dict__.get("chatting"):
            self.__dict__.setdefault("trace", []).append("LLM(condense)")
        return super().complete(prompt, formatted=formatted, **kwargs)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self.__dict__.setdefault("trace", []).append("LLM(condense)")
        return await super().acomplete(prompt, formatted=formatted, **kwargs)


class Harness:
    """One engine or agent over one memory class over a session-view store."""

    def __init__(self, engine: str, memory: str, session: SessionMemory) -> None:
        self.kind, self.session = engine, session
        retrieving = engine in ("context", "cpc", "wrapped_cpc")
        prompt = None if retrieving else (AGENT_SYSTEM if engine == "agent" else SYSTEM)
        self.skip = 1 if retrieving else 0  # the engine's own context system message
        cls = TracedChatStore if memory == "buffer" else TracedDBChatStore
        self.store = cls(session, view="session", system_prompt=prompt)
        self.trace: list[str] = self.store._trace
        self.key = f"{engine}-{memory}"
        self.memory: BaseMemory = (
            ChatMemoryBuffer.from_defaults(chat_store=self.store, chat_store_key=self.key)
            if memory == "buffer"
            else Memory.from_defaults(session_id=self.key, chat_store=self.store)
        )
        self.retriever = RecordingRetriever()
        self.inputs: list[list[tuple[str, str]]] = []  # the first model input of each turn
        if engine == "agent":
            self.script = Script()

            def step(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
                self.trace.append("LLM")
                return self.script(messages, **kwargs)

            tools = [FunctionTool.from_defaults(fn=f)
                     for f in (lookup_customer, lookup_rep, search_customers)]
            self.agent = FunctionAgent(tools=tools, system_prompt=AGENT_SYSTEM,
                                       llm=MockFunctionCallingLLM(response_generator=step))
            return
        self.llm = TracedLLM()
        self.llm.__dict__["trace"] = self.trace
        if engine == "simple":
            self.engine: Any = SimpleChatEngine.from_defaults(
                llm=self.llm, memory=self.memory, system_prompt=SYSTEM)
        elif engine == "context":
            self.engine = ContextChatEngine.from_defaults(
                retriever=self.retriever, llm=self.llm, memory=self.memory, system_prompt=SYSTEM)
        else:
            self.engine = CondensePlusContextChatEngine.from_defaults(
                retriever=self.retriever, llm=self.llm, memory=self.memory,
                system_prompt=SYSTEM, skip_condense=engine == "wrapped_cpc")
            if engine == "wrapped_cpc":
                self.engine = ConvMemChatEngine(self.engine)

    async def ask(self, question: str) -> None:
        if self.kind == "agent":
            first = len(self.script.inputs)
            await self.agent.run(user_msg=question, memory=self.memory)
            self.inputs.append(roles_and_text(self.script.inputs[first]))
            return
        first = len(self.llm.received)
        await self.engine.achat(question)
        self.inputs.append(self.llm.received[first])


#: (engine, memory class, fresh): does the model get this turn's block and question?
CASES = [
    ("simple", "buffer", True), ("simple", "memory", True),
    ("agent", "buffer", True), ("agent", "memory", True),
    ("context", "buffer", False), ("context", "memory", False),
    ("cpc", "buffer", False), ("cpc", "memory", False),
    ("wrapped_cpc", "buffer", True), ("wrapped_cpc", "memory", True),
]

#: The calls of one turn (the third), in order: store reads/writes and model calls.
ORDER = {
    ("simple", "buffer"): ["add(user)", "get", "LLM", "add(assistant)"],
    ("simple", "memory"): ["add(user)", "get", "get", "LLM", "add(assistant)", "get"],
    ("agent", "buffer"): ["add(user)", "get", "LLM", "add(assistant)", "get"],
    ("agent", "memory"): ["add(user)", "get", "get", "LLM", "add(assistant)", "get", "get"],
    ("context", "buffer"): ["get", "LLM", "add(user)", "add(assistant)"],
    ("context", "memory"): ["get", "LLM", "add(user)", "get", "add(assistant)", "get"],
    ("cpc", "buffer"): ["get", "LLM(condense)", "LLM", "add(user)", "add(assistant)"],
    ("cpc", "memory"): ["get", "LLM(condense)", "LLM", "add(user)", "get", "add(assistant)",
                        "get"],
    ("wrapped_cpc", "buffer"): ["get", "LLM", "add(user)", "add(assistant)"],
    ("wrapped_cpc", "memory"): ["get", "LLM", "add(user)", "get", "add(assistant)", "get"],
}


@pytest.mark.parametrize(("engine", "memory", "fresh"), CASES)
async def test_call_order_freshness_and_record_per_engine(
    recorded: SessionMemory, engine: str, memory: str, fresh: bool
) -> None:
    h = Harness(engine, memory, recorded)
    for question in (Q1, PINECREST):
        await h.ask(question)
    del h.trace[:]
    await h.ask(Q2)
    assert h.trace == ORDER[engine, memory]

    ours = [s[h.skip:] for s in h.inputs]  # what came from the store (and the question)
    blocks = [s[-2][1] if len(s) > 1 and s[-2][0] == "system" else "" for s in ours]
    questions = [sent[-1] for sent in h.inputs]
    if fresh:  # this turn's block (the new focus) and the question rewritten
        assert 'customer "Pinecrest Clinics"' in blocks[1]
        assert questions[2] == ("user", "Who's Pinecrest Clinics's rep?")
    else:  # one turn stale: last turn's block, the question as typed
        assert blocks[0] == "" and blocks[1] == BLOCK1
        assert questions[2] == ("user", Q2)
        assert 'customer "Pinecrest Clinics"' in blocks[2]  # which still names the focus

    found, path = await arecord(recorded, h.key)
    assert [sent(r) for r in found] == ours  # what the model got
    assert [m.text for m in path if m.role == "user"] == [Q1, PINECREST, Q2]
    assert all(r.completed_at is not None for r in found)
    state = await recorded.aget_state(h.key)
    assert state is not None and state.turn == 3 and state.open_turn is None


# ---------------------------------------------------------------- whole conversations


QUESTIONS = [Q1, Q2, "How is Summit doing?", "Munich."]


def _check_conversation(recorded: SessionMemory, key: str, received: list[Any]) -> None:
    found, path = record(recorded, key)
    assert [sent(r) for r in found] == received  # every turn, as the model got it
    assert received[1][-2:] == [("system", BLOCK1), ("user", Q2R)]
    assert received[2][-2][1].startswith(CLARIFY_INSTRUCTION)  # relayed by the model
    assert received[3][-1] == ("user", "How is Summit Outdoor GmbH doing?")
    assert [m.text for m in path if m.role == "user"] == QUESTIONS
    assert [m.role for m in path] == ["user", "assistant"] * 4
    state = recorded.get_state(key)
    assert state is not None and state.focus is not None and state.focus.id == "C-1061"


def test_simple_engine_over_chat_memory_buffer(recorded: SessionMemory) -> None:
    store = ConvMemChatStore(recorded, view="session", system_prompt=SYSTEM)
    llm = CapturingLLM()
    memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="t-buffer")
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt=SYSTEM)
    for q in QUESTIONS:
        engine.chat(q)
    assert [len(r) for r in llm.received] == [3, 3, 3, 3]  # never a history
    _check_conversation(recorded, "t-buffer", llm.received)


def test_memory_sync_chat(recorded: SessionMemory) -> None:
    store = ConvMemDBChatStore(recorded, view="session", system_prompt=SYSTEM)
    llm = CapturingLLM()
    memory = Memory.from_defaults(session_id="t-memory", chat_store=store)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt=SYSTEM)
    for q in QUESTIONS:
        engine.chat(q)
    _check_conversation(recorded, "t-memory", llm.received)


def test_stream_chat_records_the_answer_when_the_stream_ends(recorded: SessionMemory) -> None:
    store = ConvMemChatStore(recorded, view="session", system_prompt=SYSTEM)
    memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="t-stream")
    engine = SimpleChatEngine.from_defaults(llm=CapturingLLM(), memory=memory,
                                            system_prompt=SYSTEM)
    response = engine.stream_chat(Q1)
    answer = "".join(response.response_gen)  # joins LlamaIndex's writer thread at the end
    state = recorded.get_state("t-stream")
    assert state is not None and state.open_turn is None
    assert [m.content for m in store.history("t-stream")] == [Q1, answer.strip()]


async def test_function_agent_over_memory(recorded: SessionMemory) -> None:
    """Tool results reach the state when ``FunctionAgent`` stores its scratchpad: at the
    end of the run. So the block of the step after a tool is the run's first block; the
    next run's is fresh (use ``wrap_tools`` to apply a result at once)."""
    store = ConvMemDBChatStore(recorded, view="session", system_prompt=AGENT_SYSTEM)
    memory = Memory.from_defaults(session_id="t-agent", chat_store=store)
    script = Script()
    tools = [FunctionTool.from_defaults(fn=f)
             for f in (lookup_customer, lookup_rep, search_customers)]
    agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=script),
                          system_prompt=AGENT_SYSTEM)
    firsts = []
    for q in (Q1, Q2, "Find the logistics customer up in the Pacific Northwest.", "Seattle."):
        firsts.append(len(script.inputs))
        await agent.run(user_msg=q, memory=memory)
    inputs = [roles_and_text(m) for m in script.inputs]
    assert inputs[firsts[1]] == [("system", AGENT_SYSTEM), ("system", BLOCK1), ("user", Q2R)]
    assert inputs[firsts[1] + 1][1] == inputs[firsts[1]][1]  # within the run: same block
    assert [r for r, _ in inputs[firsts[1] + 1]] == ["system", "system", "user", "assistant",
                                                     "tool"]
    state = await recorded.aget_state("t-agent")
    assert state is not None and state.focus is not None and state.focus.id == "C-1050"
    assert state.turn == 4 and state.open_turn is None  # "Seattle." picked the candidate

    found, path = await arecord(recorded, "t-agent")
    assert [sent(r) for r in found] == [inputs[i] for i in firsts]
    calls = [p for m in path for p in m.parts if p.kind == "tool_call"]
    results = [p for m in path for p in m.parts if p.kind == "tool_result"]
    assert [c.name for c in calls] == ["lookup_customer", "lookup_rep", "search_customers"]
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    assert "Dana Whitfield" in results[1].content
    assert [m.role for m in path].count("user") == 4


def test_reading_first_engine_cannot_relay_a_clarification(recorded: SessionMemory) -> None:
    """``CondensePlusContextChatEngine`` stores the question after the model answered, so
    the model never gets the clarification instruction; the state still asks, and the
    user's next message can answer it. ``ConvMemChatEngine`` has no such limit."""
    store = ConvMemChatStore(recorded, view="session")
    llm = CapturingLLM()
    memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="t-cpc")
    engine = CondensePlusContextChatEngine.from_defaults(
        retriever=RecordingRetriever(), llm=llm, memory=memory)
    engine.chat("How is Summit doing?")
    assert not any(CLARIFY_INSTRUCTION in t for _, t in llm.received[-1])
    state = recorded.get_state("t-cpc")
    assert state is not None and state.pending is not None
    engine.chat(Q1)
    assert BLOCK1.split("\n")[1] not in llm.received[-1][1][1]  # stale: no focus yet
    engine.chat(Q2)
    assert BLOCK1 in llm.prompts[-1]  # the condense step reads the block as "history"


def test_wrapped_engine_clarifies_without_the_model(recorded: SessionMemory) -> None:
    store = ConvMemChatStore(recorded, view="session")
    llm, retriever = CapturingLLM(), RecordingRetriever()
    memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="t-wrap")
    engine = ConvMemChatEngine(CondensePlusContextChatEngine.from_defaults(
        retriever=retriever, llm=llm, memory=memory, skip_condense=True))
    for q in QUESTIONS:
        engine.chat(q)
    assert len(llm.received) == 3 and len(retriever.queries) == 3  # not for the clarification
    assert retriever.queries == [Q1, Q2R, "How is Summit Outdoor GmbH doing?"]
    found, path = record(recorded, "t-wrap")
    assert [sent(r) for r in found] == [r[1:] for r in llm.received]
    assert [m.text for m in path if m.role == "user"] == QUESTIONS
    assert path[5].text.startswith('Two customers match "Summit"')  # the clarification
    assert engine.chat_history == store.history("t-wrap")


async def test_wrapped_engine_streams_a_clarification(recorded: SessionMemory) -> None:
    store = ConvMemDBChatStore(recorded, view="session")
    llm = CapturingLLM()
    memory = Memory.from_defaults(session_id="t-wrap-stream", chat_store=store)
    engine = ConvMemChatEngine(SimpleChatEngine.from_defaults(llm=llm, memory=memory))
    response = await engine.astream_chat("How is Summit doing?")
    text = "".join([t async for t in response.async_response_gen()])
    assert text.startswith('Two customers match "Summit"') and llm.received == []
    found, path = await arecord(recorded, "t-wrap-stream")
    assert found == [] and [m.role for m in path] == ["user", "assistant"]  # no model input


def test_wrapper_needs_a_session_view_or_a_convmem_memory(recorded: SessionMemory) -> None:
    assert recorded.transcript is not None
    plain = ChatMemoryBuffer.from_defaults(
        chat_store=ConvMemChatStore(recorded.transcript, tenant=recorded.tenant),
        chat_store_key="k")
    with pytest.raises(ConfigError, match="view='session'"):
        ConvMemChatEngine(SimpleChatEngine.from_defaults(llm=CapturingLLM(), memory=plain))


async def test_wrapped_tools_make_a_tool_result_fresh_within_the_run(
    recorded: SessionMemory,
) -> None:
    """With ``wrap_tools(tools, session_memory, thread_id=key)`` the result sets the focus
    the moment the tool returns, so the step after it already sees it; the store applies
    the same result again at the end of the run (no change) and records the turn once."""
    store = ConvMemDBChatStore(recorded, view="session", system_prompt=AGENT_SYSTEM)
    memory = Memory.from_defaults(session_id="t-wrapped", chat_store=store)
    script = Script()
    tools = wrap_tools([FunctionTool.from_defaults(fn=f) for f in (lookup_customer, lookup_rep)],
                       recorded, thread_id="t-wrapped")
    agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=script),
                          system_prompt=AGENT_SYSTEM)
    await agent.run(user_msg=Q1, memory=memory)
    await agent.run(user_msg=Q2, memory=memory)
    after_tool = roles_and_text(script.inputs[-1])
    assert 'rep "Dana Whitfield"' in after_tool[1][1]  # the focus the tool just set
    found, path = await arecord(recorded, "t-wrapped")
    assert len(found) == 2 and [m.role for m in path].count("tool") == 2
    assert len(path) == 8  # each message once
