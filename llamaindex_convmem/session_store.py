"""The session view of the LlamaIndex chat stores: the model sees the state, not the history.

``ConvMemChatStore(memory, view="session")`` and ``ConvMemDBChatStore(memory,
view="session")`` (``memory``: a ``SessionMemory`` with a transcript) are drop-ins for
an application that configures only its chat store: ``ChatMemoryBuffer`` and
``Memory`` read "the history" from the store and send it, so the store answers with
what the model should see instead — the session block as a system message, then the
current turn: the question (rewritten when ``rewrite=True``) and this turn's tool calls
and results. Between turns that is the block alone. Earlier turns are never returned,
so the prompt stays flat however long the conversation runs.

Writes go to the record and drive the state, per key (= thread), in order:

* a user message begins the turn (``begin_turn`` with a fresh message id);
* assistant tool calls and tool results are this turn's steps; a result answering a
  call goes through the domain's tool rule (``record_tool``, via ``tool_result``);
* an assistant message without tool calls is the answer: it ends the turn
  (``end_turn``);
* outside a turn (a greeting, a system message) a message is appended as it is.

The record has the same two commit points as ``SessionMemory`` (``docs/transcript.md``),
written here with the messages exactly as LlamaIndex gave them (``_records``): (1) the
user message with the model input — the block (or the clarification instruction) and
the question as sent, the state snapshot, the system prompt given to the store — at the
*first read of the open turn*, which for engines that store the question and then read
(``SimpleChatEngine``, agents) is the read right before the model call (``Memory`` reads
its store back after every write, its token check: the DB store does not count that
read, ``reads_back``); (2) the steps and the answer, one transaction. An engine that reads before it writes
(``ContextChatEngine``, ``CondensePlusContextChatEngine``) was shown the view of the
read *before* the question arrived — one turn stale — so when the answer follows the
question with no read in between, that earlier view is what commit point 1 records.
Until commit point 1 the user message is held in this process, as ``ConvMemMemory``
holds it; a turn that no model saw (no read at all) is appended whole at the answer.
The state's ``message_id`` for the turn is kept in the user message's
``extra["convmem"]`` (``question_provenance``), so redaction and ``edit_turn`` work.

``Memory``'s machinery applies to the view: its token check counts the view; archiving
(``archive_oldest_messages``) hides the oldest of the *current turn's* messages from
later reads of the turn (the block is rebuilt on every read and is never archived),
and touches no record row. Earlier turns are not in the view, so nothing archived is
ever replayed. Positional edits of a history (insert at ``idx``, ``delete_message``,
``delete_last_message``, ``delete_oldest_messages``) and ``ARCHIVED`` writes have no
meaning on a view and raise ``ConfigError``; ``set_messages`` replaces the history (the
record is rebased, the state rebuilt from it; the view handed back is a no-op);
``delete_messages`` empties the active path and resets the state; ``delete_thread``
erases the record and the state.

This module drives the turns (``SessionOps``, and ``KeyTurns`` for ``ConvMemChatEngine``);
what an open turn and a served view hold, and how a stored message is read (its tool
result, its tool calls), is ``llamaindex_convmem._session_view``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory.types import BaseMemory
from llama_index.core.storage.chat_store.base_db import MessageStatus

from convmem.effects import Flow, aperform, call, do, perform
from convmem.errors import ConfigError, ConvMemError, TranscriptUnavailable
from convmem.identity import check_thread_id
from convmem.session import (
    Clarification,
    SessionMemory,
    TurnContext,
    block_for,
    question_provenance,
)
from convmem.state import SessionState, state_to_dict
from convmem.transcript import (
    DeletionReceipt,
    Message,
    ModelInput,
    NewMessage,
    ThreadNotFound,
    TranscriptStore,
)
from llamaindex_convmem._record_ops import RecordOps, again
from llamaindex_convmem._records import same_record, to_new_message
from llamaindex_convmem._session_view import (
    ACTIVE,
    ARCHIVED,
    OpenTurn,
    Served,
    SessionView,
    engine_question,
    refuse_edit,
    state_question,
    tool_calls,
    tool_result,
    trailing_turn,
    unmarked,
    with_text,
)
from llamaindex_convmem.memory import has_tool_calls, message_text, turn_messages

log = logging.getLogger("llamaindex_convmem.session_store")

_CACHE_LIMIT = 4096


class SessionOps:
    """The session view's operations, as flows (same names as ``RecordOps``)."""

    def __init__(
        self,
        memory: SessionMemory,
        *,
        rewrite: bool = True,
        system_prompt: str | None = None,
        reads_back: bool = False,
    ) -> None:
        if not isinstance(memory, SessionMemory):
            raise ConfigError(
                "chat store (view='session'): memory must be a convmem.SessionMemory, "
                f"got {type(memory).__name__}"
            )
        if not isinstance(memory.transcript, TranscriptStore):
            raise ConfigError(
                "chat store (view='session'): the SessionMemory has no transcript; build it "
                "with SessionMemory(domain, transcript=TranscriptStore(url, retention=...))"
            )
        if not isinstance(rewrite, bool):
            raise ConfigError(f"chat store: rewrite must be True or False, got {rewrite!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ConfigError("chat store: system_prompt must be a string or None")
        self.memory = memory
        # This store writes the record itself; the memory only drives the state (a memory
        # with a transcript would record every turn a second time).
        self.state = memory.state_only()
        self.record = RecordOps(memory.transcript, memory.tenant)
        self.rewrite = rewrite
        self.system_prompt = system_prompt
        # ``Memory`` reads its store back after every write (``_manage_queue``, its token
        # check); that read is not the one before a model call.
        self.reads_back = reads_back
        self._turns: dict[str, OpenTurn] = {}
        self._idle: dict[str, Served] = {}
        self._described: dict[str, tuple[str | None, str | None]] = {}

    @property
    def store(self) -> TranscriptStore:
        return self.record.store

    @property
    def tenant(self) -> str:
        return self.record.tenant


    # ------------------------------------------------------------ the view

    def _view(self, key: str, *, serve: bool) -> Flow[SessionView]:
        """What the model should see for ``key`` now; ``serve``: this read is sent (it
        writes commit point 1 on the turn's first one)."""
        check_thread_id(key, "chat store key")
        turn = self._turns.get(key)
        if turn is None:
            state = yield from do(call(self.state.get_state, self.state.aget_state, key))
            block = block_for(state, self.state.recall_tool) if state is not None else ""
            if serve:
                if len(self._idle) >= _CACHE_LIMIT:
                    self._idle.clear()
                self._idle[key] = Served(block, state)
            system = ChatMessage(role=MessageRole.SYSTEM, content=block) if block else None
            return SessionView(system, [])
        started = yield from self._begin(key, turn)
        head = turn_messages(started, turn.text, include_question=turn.stored, rewrite=self.rewrite)
        system = head[0] if head and head[0].role == MessageRole.SYSTEM else None
        items = [with_text(turn.message, message_text(head[-1]))] if turn.stored else []
        items += [m.model_copy(deep=True) for m, _ in turn.steps]
        if serve and turn.read_back:
            turn.read_back = False
        elif serve and not turn.input_done:
            # The question as the model gets it: ours, or the engine's own (it reads first
            # and appends it; ConvMemChatEngine hands it the rewrite).
            sent = message_text(items[0]) if turn.stored else engine_question(started, turn.text)
            block = message_text(system) if system is not None else ""
            yield from self._commit_input(key, turn, block, started.state, sent)
        return SessionView(system, items, turn.archived, turn.dropped)

    def _begin(self, key: str, turn: OpenTurn) -> Flow[Clarification | TurnContext]:
        """The turn's current context (idempotent per message: a tool's focus shows)."""
        st = self.state
        started = yield from do(call(
            st.begin_turn, st.abegin_turn, key, turn.question, message_id=turn.message_id
        ))
        turn.started = started
        if isinstance(started, TurnContext) and started.rewritten:
            turn.aliases.add(started.rewritten)
        return started

    # ------------------------------------------------------------ reads

    def get_messages(
        self, key: str, status: MessageStatus | None = None,
        limit: int | None = None, offset: int | None = None,
    ) -> Flow[list[ChatMessage]]:
        view = yield from self._view(key, serve=True)
        out = view.select(status)[offset or 0 :]
        return out if limit is None else out[:limit]

    def count_messages(self, key: str, status: MessageStatus | None) -> Flow[int]:
        view = yield from self._view(key, serve=False)
        return len(view.select(status))

    def get_keys(self) -> Flow[list[str]]:
        return (yield from self.record.get_keys())

    def history(self, key: str) -> Flow[list[ChatMessage]]:
        """The conversation as recorded (the key's active path), for a UI or an export."""
        return (yield from self.record.history(key))

    def thread(self, key: str) -> Flow[str]:
        return (yield from self.record.thread(key))

    # ------------------------------------------------------------ writes

    def add(
        self, key: str, messages: Sequence[ChatMessage], status: MessageStatus = ACTIVE,
        idx: int | None = None,
    ) -> Flow[None]:
        """Record and drive the state, message by message (all checked before any write)."""
        check_thread_id(key, "chat store key")
        if idx is not None:
            raise refuse_edit("add_message(idx=...)")
        if status == ARCHIVED:
            raise refuse_edit("adding ARCHIVED messages")
        batch = [(m, to_new_message(m)) for m in messages]
        loose: list[NewMessage] = []  # outside any turn: appended together
        for message, new in batch:
            turn = self._turns.get(key)
            if message.role == MessageRole.USER:
                if turn is not None and not turn.stored and message_text(message) in turn.aliases:
                    turn.stored = True  # the question of a turn ConvMemChatEngine opened
                    continue
                yield from self._append(key, loose)
                if turn is not None:
                    yield from self._flush(key, turn)
                yield from self._open(key, message, new, stored=True)
            elif turn is None:
                loose.append(new)
            elif message.role == MessageRole.ASSISTANT and not has_tool_calls(message):
                yield from self._answer(key, turn, message, new)
            else:
                yield from self._step(key, turn, message, new)
        yield from self._append(key, loose)
        self._idle.pop(key, None)  # an earlier read no longer stands for the next question
        turn = self._turns.get(key)
        if turn is not None and self.reads_back:
            turn.read_back = True

    def _open(
        self, key: str, message: ChatMessage, new: NewMessage, *, stored: bool
    ) -> Flow[OpenTurn]:
        text = message_text(message)
        question, message_id = state_question(text), uuid.uuid4().hex
        st = self.state
        started = yield from do(call(
            st.begin_turn, st.abegin_turn, key, question, message_id=message_id
        ))
        stale = self._idle.pop(key, None) if stored else None
        turn = OpenTurn(message, new, question, message_id, stored, stale, started, {text, question})
        if isinstance(started, TurnContext) and started.rewritten:
            turn.aliases.add(started.rewritten)
        self._turns[key] = turn
        return turn

    def _step(self, key: str, turn: OpenTurn, message: ChatMessage, new: NewMessage) -> Flow[None]:
        """A tool call, a tool result or another message inside the turn."""
        turn.steps.append((message, new))
        if message.role == MessageRole.ASSISTANT:
            turn.calls.update(tool_calls(message))
            return
        if message.role == MessageRole.TOOL:
            yield from self._tool_done(key, turn.calls, message)

    def _tool_done(
        self, key: str, calls: dict[str, tuple[str, dict[str, Any]]], message: ChatMessage
    ) -> Flow[None]:
        """``record_tool`` for a tool message answering one of ``calls`` (else nothing)."""
        call_id = message.additional_kwargs.get("tool_call_id")
        tool = calls.get(call_id) if isinstance(call_id, str) else None
        if tool is not None:
            name, args = tool
            st, outcome = self.state, tool_result(message)
            yield from do(call(
                st.record_tool, st.arecord_tool, key, name, args, outcome, call_id=call_id
            ))

    def _answer(self, key: str, turn: OpenTurn, message: ChatMessage, new: NewMessage) -> Flow[None]:
        """Commit point 2 (and 1 when the engine read before it wrote), then end the turn."""
        if not turn.input_done and turn.stale is not None:
            yield from self._commit_input(key, turn, turn.stale.block, turn.stale.state, None)
        yield from self._commit_rest(key, turn, [*(n for _, n in turn.steps), new])
        self._turns.pop(key, None)  # only now: a failed write leaves the turn to retry
        answer = message_text(message) or None
        yield from do(call(self.state.end_turn, self.state.aend_turn, key, answer=answer))

    def _flush(self, key: str, turn: OpenTurn) -> Flow[None]:
        """Record an open turn that ends unanswered (a new question, a reset, a new history)."""
        if turn.record is None or turn.steps:
            yield from self._commit_rest(key, turn, [n for _, n in turn.steps])
        self._turns.pop(key, None)

    def _user_record(self, turn: OpenTurn, sent: str | None) -> NewMessage:
        ours = question_provenance(turn.text, turn.started.state, turn.message_id, sent)
        extra = {**(turn.new.extra or {}), "convmem": ours}
        return replace(turn.new, extra=extra)

    def _commit_input(
        self, key: str, turn: OpenTurn, block: str, state: SessionState | None, sent: str | None
    ) -> Flow[None]:
        """Commit point 1: the user message and what the model is about to receive."""
        system_prompt, model = self._described.get(key, (self.system_prompt, None))
        model_input = ModelInput(
            rendered_block=block,
            state_snapshot=state_to_dict(state) if state is not None else {},
            system_prompt=system_prompt,
            model=model,
        )
        user = self._user_record(turn, sent)
        try:
            turn.record = yield from self.record.ask_on(
                key, self.store.begin_turn_record, self.store.abegin_turn_record, user, model_input
            )
        except TranscriptUnavailable as exc:
            self._unrecorded(key, "commit point 1 (user message and model input)", exc)
        turn.input_done = True

    def _commit_rest(self, key: str, turn: OpenTurn, messages: list[NewMessage]) -> Flow[None]:
        """Commit point 2 after commit point 1; without it (no model saw this store's view,
        or point 1 was skipped) the user message goes first in the same transaction."""
        try:
            if turn.record is not None:
                rec = turn.record
                yield from self.record.ask(
                    self.store.complete_turn, self.store.acomplete_turn,
                    rec.thread_id, rec.turn_id, messages,
                )
            else:
                user = self._user_record(turn, None)
                batch = [user, *messages]
                yield from self.record.ask_on(key, self.store.append, self.store.aappend, batch)
        except ThreadNotFound:
            log.warning("chat store key %r: its record was deleted during the turn; "
                        "the rest of the turn is not recorded", key)
        except TranscriptUnavailable as exc:
            self._unrecorded(key, "commit point 2 (steps and answer)", exc)

    def _append(self, key: str, loose: list[NewMessage]) -> Flow[None]:
        if not loose:
            return
        batch = list(loose)
        loose.clear()
        try:
            yield from self.record.ask_on(key, self.store.append, self.store.aappend, batch)
        except TranscriptUnavailable as exc:
            self._unrecorded(key, "messages outside a turn", exc)

    def _unrecorded(self, key: str, what: str, exc: ConvMemError) -> None:
        """The memory's ``on_transcript_error``: re-raise, or WARNING + count and go on."""
        if self.memory.on_transcript_error == "raise":
            raise exc
        self.memory.stats.transcript_failures += 1
        log.warning("chat store key %r: %s not recorded; the turn goes on "
                    "(on_transcript_error='degrade'): %s", key, what, exc)

    # ------------------------------------------------------------ replacing and clearing

    def set(
        self, key: str, messages: Sequence[ChatMessage], status: MessageStatus = ACTIVE
    ) -> Flow[None]:
        """Replace the history: rebase the record onto ``messages`` and rebuild the state
        from them. A trailing unanswered question becomes the open turn; the view handed
        back unchanged (``chat_history=engine.chat_history``) changes nothing."""
        check_thread_id(key, "chat store key")
        if status == ARCHIVED:
            raise refuse_edit("set_messages(status=ARCHIVED)")
        batch = [(m, to_new_message(m)) for m in messages]
        if batch:
            shown = yield from self._view(key, serve=False)
            if list(messages) == shown.select(None):
                return
        turn = self._turns.get(key)
        if turn is not None:
            yield from self._flush(key, turn)
        self._idle.pop(key, None)
        cut = trailing_turn([m for m, _ in batch])
        history, trailing = batch[:cut], batch[cut:]

        def body(tid: str) -> Flow[None]:
            path, archived = yield from self.record.marked_path(tid)
            new = [n for _, n in history]
            same = 0
            while (
                same < min(len(path), len(new))
                and same_record(new[same], unmarked(path[same]))
            ):
                same += 1
            if same == len(path) == len(new) and not archived:
                return  # the record already is this history; so is the state
            merged = [again(m) for m in path[:same]] + new[same:]
            rebased = yield from self.record.replace(tid, path, archived, merged, 0)
            if same < len(path) or archived:
                # not an extension: the state starts over
                yield from do(call(self.state.reset, self.state.areset, key))
                same = 0
            yield from self._replay(key, history[same:], rebased[same:])

        yield from self.record.on_thread(key, body)
        if trailing:
            yield from self.add(key, [m for m, _ in trailing])

    def _replay(
        self, key: str, pairs: Sequence[tuple[ChatMessage, NewMessage]], records: Sequence[Message]
    ) -> Flow[None]:
        """Drive the state through recorded messages (nothing is written to the record)."""
        st = self.state
        calls: dict[str, tuple[str, dict[str, Any]]] = {}
        for (message, _), rec in zip(pairs, records, strict=True):
            if message.role == MessageRole.USER:
                question = state_question(message_text(message))
                yield from do(call(
                    st.begin_turn, st.abegin_turn, key, question, message_id=rec.id
                ))
            elif message.role == MessageRole.ASSISTANT and has_tool_calls(message):
                calls.update(tool_calls(message))
            elif message.role == MessageRole.ASSISTANT:
                yield from do(call(st.end_turn, st.aend_turn, key))
            elif message.role == MessageRole.TOOL:
                yield from self._tool_done(key, calls, message)

    def clear(self, key: str) -> Flow[list[ChatMessage] | None]:
        """Empty the active path (the record keeps every message) and reset the state;
        returns the view that was shown (``None`` if it was empty)."""
        shown = yield from self._view(key, serve=False)
        turn = self._turns.get(key)
        if turn is not None:
            yield from self._flush(key, turn)
        self._idle.pop(key, None)
        s = self.store
        yield from self.record.ask_on(key, s.set_active_leaf, s.aset_active_leaf, None)
        yield from do(call(self.state.reset, self.state.areset, key))
        return shown.select(None) or None

    def delete_status(self, key: str, status: MessageStatus) -> Flow[None]:
        """``ARCHIVED``: forget the turn's archived messages (the record keeps them);
        ``ACTIVE``: as ``clear``."""
        if status == ARCHIVED:
            check_thread_id(key, "chat store key")
            turn = self._turns.get(key)
            if turn is not None:
                turn.dropped = turn.archived
            return
        yield from self.clear(key)

    def archive_oldest(self, key: str, n: int) -> Flow[list[ChatMessage]]:
        """Hide the ``n`` oldest active messages of the view for the rest of the turn (the
        block, rebuilt on every read, is skipped); returns those hidden."""
        view = yield from self._view(key, serve=False)
        taken = view.select(ACTIVE)[: max(n, 0)]
        moved = [m for m in taken if m is not view.system]
        turn = self._turns.get(key)
        if turn is not None:
            turn.archived += len(moved)
        return moved

    def delete_at(self, key: str, idx: int) -> Flow[ChatMessage | None]:
        raise refuse_edit("delete_message(idx)")

    def delete_last(self, key: str) -> Flow[ChatMessage | None]:
        raise refuse_edit("delete_last_message")

    def delete_oldest(self, key: str, n: int) -> Flow[list[ChatMessage]]:
        raise refuse_edit("delete_oldest_messages")

    def delete_thread(self, key: str) -> Flow[DeletionReceipt | None]:
        """Erase the key's record and its session state (``SessionMemory.delete_thread``)."""
        check_thread_id(key, "chat store key")
        self._turns.pop(key, None)
        self._idle.pop(key, None)
        memory = self.memory
        receipt = yield from do(call(memory.delete_thread, memory.adelete_thread, key))
        self.record.forget(key)
        return receipt

    # ------------------------------------------------------------ ConvMemChatEngine

    def start(self, key: str, text: str) -> Flow[Clarification | TurnContext]:
        """Open the turn for a user message before the engine reads (``ConvMemChatEngine``):
        the engine then gets the fresh block and the rewrite, and a clarification can be
        answered without calling it. The engine's own copy of the question (the rewrite)
        is recognised when it stores it."""
        check_thread_id(key, "chat store key")
        turn = self._turns.get(key)
        if turn is not None and text in turn.aliases:
            return (yield from self._begin(key, turn))
        if turn is not None:
            yield from self._flush(key, turn)
        message = ChatMessage(role=MessageRole.USER, content=text)
        opened = yield from self._open(key, message, to_new_message(message), stored=False)
        return opened.started

    def no_model_call(self, key: str) -> None:
        """The open turn is answered without a model call (a clarification): it records no
        model input, whatever reads follow."""
        turn = self._turns.get(key)
        if turn is not None:
            turn.input_done = True

    def describe(self, key: str, *, system_prompt: str | None, model: str | None) -> None:
        """The system prompt and model the key's model inputs record (``ConvMemChatEngine``
        fills them from the engine it wraps)."""
        if len(self._described) >= _CACHE_LIMIT:
            self._described.clear()
        self._described[key] = (
            system_prompt if system_prompt is not None else self.system_prompt, model
        )


class KeyTurns:
    """One key of a session-view store, as ``ConvMemChatEngine`` drives it."""

    def __init__(self, ops: SessionOps, key: str) -> None:
        self.ops = ops
        self.key = check_thread_id(key, "chat store key")

    @property
    def rewrite(self) -> bool:
        """The store's ``rewrite`` setting (``ConvMemChatEngine`` honours it)."""
        return self.ops.rewrite

    def start(self, message: str) -> Clarification | TurnContext:
        return perform(self.ops.start(self.key, message))

    async def astart(self, message: str) -> Clarification | TurnContext:
        return await aperform(self.ops.start(self.key, message))

    def describe(self, *, system_prompt: str | None, model: str | None) -> None:
        self.ops.describe(self.key, system_prompt=system_prompt, model=model)

    def no_model_call(self) -> None:
        self.ops.no_model_call(self.key)

    def history(self) -> list[ChatMessage]:
        return perform(self.ops.history(self.key))


def session_turns(memory: BaseMemory | None) -> KeyTurns | None:
    """The session-view store behind a ``ChatMemoryBuffer`` / ``Memory``, for its key."""
    store = getattr(memory, "chat_store", None)
    key = getattr(memory, "chat_store_key", None)
    if store is None:
        store, key = getattr(memory, "sql_store", None), getattr(memory, "session_id", None)
    ops = getattr(store, "_ops", None) if store is not None else None
    if isinstance(ops, SessionOps) and isinstance(key, str):
        return KeyTurns(ops, key)
    return None
