"""Record flows: the façade's side of the transcript.

A turn is recorded at two commit points (see ``convmem.session``): the user's message
and the model input right before the model is called, then the tool calls, results
and answer in ``end_turn``. Between them the turn is remembered in-process
(``_OpenRecord``). A turn binds to its thread's incarnation when it begins and writes
only there. ``edit_turn``, ``regenerate``, ``redact`` and ``delete_thread`` are flows
here too; they reach the transcript thread whose key is the application's thread id.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypedDict, TypeVar

from convmem.effects import Effect, Failed, Flow, call, do, together, value_of
from convmem.errors import ConfigError, ConvMemError, TranscriptUnavailable
from convmem.identity import clean_data, clean_text
from convmem.session.questions import (
    _question_texts,
    _quoted_forms,
    _quoted_ids,
    question_provenance,
    without_questions,
)
from convmem.session.recall import RECALL_TOOL, RecallHit, recorded_recall, snippet
from convmem.session.records import (
    Clarification,
    ModelCall,
    OnTranscriptError,
    SessionStats,
    TurnContext,
    _optional_text,
)
from convmem.session.turns import (
    MAX_TRIES,
    MAX_TURN_STATES,
    Alongside,
    TurnFlows,
    _no_io,
    _same_message,
    block_for,
)
from convmem.state import SessionState, state_from_dict, state_to_dict
from convmem.tools import ToolResult

if TYPE_CHECKING:  # the transcript (SQL) is imported only when one is configured
    from convmem.transcript import (
        DeletionReceipt,
        Message,
        NewMessage,
        RedactionReceipt,
        TranscriptStore,
        TurnBinding,
        TurnRecord,
    )
    from convmem.transcript.thread_ids import ThreadIds

log = logging.getLogger("convmem.session")

#: How many of a thread's last user messages a binding holds (``bind_turn``'s default).
BOUND_QUESTIONS = 12

#: A model call made from the turn's context (it sends the block the turn renders).
ModelCallFor = Callable[[TurnContext], ModelCall]


def _checked_call(made: object) -> ModelCall:
    if not isinstance(made, ModelCall):
        raise ConfigError(f"model_call must return a convmem.ModelCall, got {type(made).__name__}")
    return made

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class _Edit:
    """A turn asked in place of the recorded user message ``original_id``: its question
    goes under the same parent, and it starts from the state ``restore`` gives."""

    original_id: str
    parent_id: str | None
    restore: Callable[[SessionState], SessionState] = field(compare=False)


@dataclass
class _OpenRecord:
    """The turn between its two commit points, as this process knows it."""

    message_id: str | None
    question: str
    text: str  # the user's message for the record
    state: SessionState
    block: str
    record: TurnRecord | None = None  # commit point 1, once written
    input_skipped: bool = False  # commit point 1 failed and the turn went on (degrade)
    tools: list[NewMessage] = field(default_factory=list)
    done: bool = False  # commit point 2 written
    edit: _Edit | None = None  # the question is a sibling of an earlier one
    binding: TurnBinding | None = None  # the thread (incarnation) the turn began on
    asked: Message | None = None  # the user's message, once recorded
    not_intact: tuple[str, ...] = ()  # quoted messages redacted before point 1 was written

    def same_turn(self, message_id: str | None, question: str) -> bool:
        return _same_message(message_id, question, self.message_id, self.question)


class _Placement(TypedDict, total=False):
    parent_id: str | None  # absent: after the active leaf (the store's default)


def _placement(record: _OpenRecord) -> _Placement:
    """Where the turn's question goes: after the active leaf, or beside the edited one."""
    return {} if record.edit is None else {"parent_id": record.edit.parent_id}


class RecordFlows(TurnFlows):
    """The transcript flows of ``SessionMemory`` (its base class, over ``TurnFlows``)."""

    transcript: TranscriptStore | None
    on_transcript_error: OnTranscriptError
    stats: SessionStats
    _threads: ThreadIds
    _open: dict[tuple[str, str], _OpenRecord]
    # (tenant, thread id) -> the binding of the thread's last turn ended here, and the
    # state that turn saved (``_bind_flow``)
    _bindings: dict[tuple[str, str], tuple[TurnBinding, SessionState]]

    # ------------------------------------------------------------------ the record (once)

    def _turn_flow(
        self,
        thread_id: str,
        question: str,
        message_id: str | None,
        today: date,
        call: ModelCall | ModelCallFor | None,
        full_text: str | None,
        edit: _Edit | None = None,
    ) -> Flow[Clarification | TurnContext]:
        """A turn's beginning in two waits on I/O: the state's load with the record's
        binding, then the state's save with commit point 1 (when ``call`` is given)."""
        if call is not None and not (isinstance(call, ModelCall) or callable(call)):
            raise ConfigError(f"model_call must be a convmem.ModelCall, got {type(call).__name__}")
        question = clean_text(question)
        full_text = _optional_text(full_text, "full_text")
        restore = None if edit is None else edit.restore
        if self.transcript is None:
            return (yield from self._begin_flow(thread_id, question, message_id, today, restore))
        loaded: SessionState | None = None
        binding = self._bound_here(thread_id, question, message_id, edit)
        if binding is None:
            binding, loaded = yield from self._bind_flow(thread_id)
            # read just now: nothing there is an empty state, not a reason to read again
            loaded = loaded or SessionState()

        def side(new: SessionState, started: Clarification | TurnContext) -> Alongside | None:
            record = self._note_turn(thread_id, new, full_text, edit, binding)
            if call is None or record is None or binding is None or not isinstance(started, TurnContext):
                return None
            if record.record is not None or record.input_skipped:
                return None
            model_call = call if isinstance(call, ModelCall) else _checked_call(call(started))
            return Alongside(
                self._input_write(record, model_call, binding),
                lambda written: self._input_written(thread_id, record, written),
            )

        started = yield from self._begin_flow(
            thread_id, question, message_id, today, restore, loaded=loaded, side=side
        )
        record = self._note_turn(thread_id, started.state, full_text, edit, binding)
        if call is None or record is None or not isinstance(started, TurnContext):
            return started
        recorded = yield from self._record_input(thread_id, record, call, started)
        return started if recorded is None else recorded

    def _record_input(
        self,
        thread_id: str,
        record: _OpenRecord,
        call: ModelCall | ModelCallFor,
        started: TurnContext | None,
    ) -> Flow[TurnContext | None]:
        """Commit point 1 unless written already; when a quoted message was redacted
        while the input was rendered, rendered again without it and written (at most
        ``MAX_TRIES`` times). The turn's context as recorded."""
        tries = 0
        while True:
            if record.not_intact:
                if tries == MAX_TRIES:
                    from convmem.transcript.errors import QuotedRedacted

                    raise QuotedRedacted(list(record.not_intact))
                started = self._without_redacted(thread_id, record)
            if record.record is not None or record.input_skipped:
                return started
            tries += 1
            if isinstance(call, ModelCall):
                model_call = call
            else:
                assert started is not None  # a model call made from the context has one
                model_call = _checked_call(call(started))
            yield from self._commit_input(thread_id, record, model_call)

    def _without_redacted(self, thread_id: str, record: _OpenRecord) -> TurnContext:
        """The turn with the questions of its quoted messages that were redacted (after
        its model input was rendered, before it was recorded) taken out: the redaction
        reaches the block, the snapshot and this process's state of the open turn; the
        stored state it reached itself, or it conflicts with our save and reloads."""
        gone = _quoted_forms(record, record.not_intact)
        record.not_intact = ()
        scrubbed = without_questions(record.state, gone)
        if scrubbed.open_turn is None:  # the turn's own question: cannot be taken out
            from convmem.transcript.errors import QuotedRedacted

            raise QuotedRedacted(sorted(gone))
        record.state, record.block = scrubbed, block_for(scrubbed)
        key = (self.tenant, thread_id)
        if key in self._turn_states:
            self._turn_states[key] = scrubbed
        started = self._result(thread_id, scrubbed)
        assert isinstance(started, TurnContext)
        return started

    def _edit_flow(
        self,
        thread_id: str,
        original_id: str,
        question: str,
        message_id: str | None,
        today: date,
        call: ModelCall | ModelCallFor | None,
        full_text: str | None,
    ) -> Flow[Clarification | TurnContext]:
        if self.transcript is None:
            raise ConfigError(
                "edit_turn needs the record of the edited message: this SessionMemory has "
                "no transcript (pass transcript=TranscriptStore(...))"
            )
        if not isinstance(original_id, str) or not original_id:
            raise ConfigError(f"edit_turn: original_id must be a message id, got {original_id!r}")
        t = self._transcript()
        found = yield from self._on_thread(thread_id, t.get_messages, t.aget_messages, [original_id])
        if not found:
            raise ConfigError(
                f"edit_turn: message {original_id!r} is not in the record of thread {thread_id!r}"
            )
        original: Message = found[0]
        if original.role != "user":
            raise ConfigError(
                f"edit_turn: message {original_id!r} is a {original.role} message; "
                "only a user's question can be edited (regenerate replaces an answer)"
            )
        restore = yield from self._state_before(thread_id, original)
        edit = _Edit(original.id, original.parent_id, restore)
        return (
            yield from self._turn_flow(
                thread_id, question, message_id, today, call, full_text, edit
            )
        )

    def _state_before(
        self, thread_id: str, original: Message
    ) -> Flow[Callable[[SessionState], SessionState]]:
        """How to get back the state ``original`` was asked in.

        Its model-input record's snapshot holds the open turn's base: the state before
        the question with the turn counted (``start_turn``), so one is taken back off
        and the edit's own ``start_turn`` lands on the same turn and filters. A message
        with no record (clarified before any model call) gets the live state with its
        question taken out, as redaction does."""
        if original.turn_id is not None:
            t = self._transcript()
            recorded = yield from self._on_thread(
                thread_id, t.reconstruct_model_input, t.areconstruct_model_input, original.turn_id
            )
            ot = recorded.state_snapshot.get("open_turn")
            if isinstance(ot, Mapping) and isinstance(ot.get("base"), Mapping):
                base = state_from_dict(ot["base"])
                before = base.evolve(turn=max(base.turn - 1, 0), open_turn=None, pending=None)
                return lambda current: before.evolve(version=current.version)
        gone = _question_texts([original])
        return lambda current: without_questions(current, gone).evolve(open_turn=None)

    def _regenerate_flow(
        self, thread_id: str, answer_id: str, answer: str | NewMessage
    ) -> Flow[Message]:
        t = self.transcript
        if t is None:
            raise ConfigError(
                "regenerate records a new answer: this SessionMemory has no transcript "
                "(pass transcript=TranscriptStore(...))"
            )
        if isinstance(answer, str):
            answer = clean_text(answer)
        return (yield from self._on_thread(thread_id, t.regenerate, t.aregenerate, answer_id, answer))

    def _model_input_flow(self, thread_id: str, call: ModelCall) -> Flow[TurnRecord | None]:
        if not isinstance(call, ModelCall):
            raise ConfigError(
                f"record_model_input needs a convmem.ModelCall, got {type(call).__name__}"
            )
        if self.transcript is None:
            return None
        record = yield from self._open_record(thread_id)
        if record is None:
            raise ConfigError(
                f"record_model_input: thread {thread_id!r} has no turn in progress; "
                "call begin_turn first"
            )
        yield from self._record_input(thread_id, record, call, None)
        return record.record

    def _finish_flow(self, thread_id: str, answer: str | None) -> Flow[SessionState]:
        """Commit point 2 and the state's last save of the turn, in one wait on I/O."""
        answer = _optional_text(answer, "answer")
        record: _OpenRecord | None = None
        if self.transcript is not None:
            record = yield from self._open_record(thread_id)
        open_record = record if record is not None and not record.done else None

        def side(new: SessionState, result: SessionState) -> Alongside | None:
            if open_record is None or open_record.binding is None:
                return None
            return Alongside(
                self._answer_write(open_record, answer, open_record.binding),
                lambda written: self._answer_written(thread_id, open_record, written),
            )

        own = None if record is None else record.state.open_turn
        state = yield from self._end_flow(thread_id, side, own)
        if open_record is not None and not open_record.done:
            yield from self._commit_answer(thread_id, open_record, answer)
        key = (self.tenant, thread_id)
        if record is not None and self._open.get(key) is record:
            del self._open[key]
        if open_record is not None:
            self._keep_binding(key, open_record, state)
        return state

    def _note_turn(
        self,
        thread_id: str,
        state: SessionState,
        full_text: str | None,
        edit: _Edit | None = None,
        binding: TurnBinding | None = None,
    ) -> _OpenRecord | None:
        """The in-process record of the state's open turn (a new one for a new message)."""
        ot = state.open_turn
        if ot is None:
            return None
        key = (self.tenant, thread_id)
        found = self._open.get(key)
        same_edit = edit is None or found is None or found.edit == edit
        if found is not None and same_edit and found.same_turn(ot.message_id, ot.question):
            if found.record is None:  # not sent yet: keep the latest view of the turn
                found.state, found.block = state, block_for(state, self.recall_tool)
                if full_text is not None:
                    found.text = full_text
            return found
        text = full_text if full_text is not None else ot.question
        record = _OpenRecord(
            ot.message_id, ot.question, text, state, block_for(state, self.recall_tool), edit=edit,
            binding=binding,
        )
        self._open[key] = record
        return record

    def _open_record(self, thread_id: str) -> Flow[_OpenRecord | None]:
        """This process's open turn, else the one the session state says is open."""
        found = self._open.get((self.tenant, thread_id))
        if found is not None:
            return found
        loaded = yield from do(self._load(thread_id))
        return None if loaded is None else self._note_turn(thread_id, loaded, None)

    def _commit_input(
        self, thread_id: str, record: _OpenRecord, model_call: ModelCall
    ) -> Flow[TurnRecord | None]:
        """Commit point 1 on its own (``record_model_input``, or a turn whose binding
        was not at hand when its state was saved): once per turn."""
        from convmem.transcript.errors import QuotedRedacted

        if record.record is not None or record.input_skipped:
            return record.record
        written: TurnRecord | Failed
        try:
            binding = yield from self._turn_binding(thread_id, record)
            written = yield from do(self._input_write(record, model_call, binding))
        except (TranscriptUnavailable, QuotedRedacted) as exc:
            written = Failed(exc)
        self._input_written(thread_id, record, written)
        return record.record

    def _input_write(
        self, record: _OpenRecord, model_call: ModelCall, binding: TurnBinding
    ) -> Effect[TurnRecord]:
        """Commit point 1: the user's message and the model input, into the thread the
        turn began on (``ThreadDeleted`` if it was deleted since)."""
        from convmem.transcript import ModelInput

        mc, t = model_call, self._transcript()
        model_input = ModelInput(
            rendered_block=record.block if mc.block is None else mc.block,
            state_snapshot=state_to_dict(record.state),
            sent_message_ids=mc.history_ids,
            system_prompt=mc.system_prompt,
            tool_schemas=[dict(s) for s in mc.tool_schemas],
            model=mc.model,
            model_params=dict(mc.model_params),
            quoted_message_ids=_quoted_ids(record, mc, binding),
        )
        return call(
            t.begin_turn_record, t.abegin_turn_record,
            self.tenant, binding.thread.id, self._user_message(record, mc.sent_question),
            model_input, incarnation=binding.thread.incarnation, **_placement(record),
        )

    def _input_written(
        self, thread_id: str, record: _OpenRecord, written: TurnRecord | Failed
    ) -> bool:
        """Commit point 1's outcome: the turn's record; or (ThreadDeleted too: nothing
        was written) the failure raised or, degrading, noted and skipped; or the quoted
        messages redacted meanwhile, for the turn to be rendered again without them."""
        from convmem.transcript.errors import QuotedRedacted

        if isinstance(written, Failed) and isinstance(written.error, QuotedRedacted):
            record.not_intact = tuple(written.error.message_ids)
            return False
        if isinstance(written, Failed) and isinstance(written.error, TranscriptUnavailable):
            self._unrecorded(thread_id, "commit point 1 (user message and model input)",
                             written.error)
            record.input_skipped = True
            return False
        record.record = value_of(written)
        record.asked = record.record.user_message
        return True

    def _commit_answer(
        self, thread_id: str, record: _OpenRecord, answer: str | None
    ) -> Flow[None]:
        """Commit point 2 on its own (the state had nothing to save with it)."""
        from convmem.transcript.errors import ThreadNotFound

        written: list[Message] | Failed
        try:
            binding = yield from self._turn_binding(thread_id, record)
            written = yield from do(self._answer_write(record, answer, binding))
        except (TranscriptUnavailable, ThreadNotFound) as exc:
            written = Failed(exc)
        self._answer_written(thread_id, record, written)

    def _answer_write(
        self, record: _OpenRecord, answer: str | None, binding: TurnBinding
    ) -> Effect[list[Message]]:
        """Commit point 2: tool calls, results and the answer, linked to point 1.

        Without point 1 (a clarification: no model call; or point 1 was skipped) the
        user's message goes in the same transaction, ahead of the rest. Either way only
        into the thread the turn began on: after a deletion it writes nothing.
        """
        from convmem.transcript import NewMessage

        t = self._transcript()
        messages = list(record.tools)
        if answer is not None:
            messages.append(NewMessage(role="assistant", content=answer))
        incarnation = binding.thread.incarnation
        if record.record is not None:
            turn = record.record
            return call(
                t.complete_turn, t.acomplete_turn,
                self.tenant, turn.thread_id, turn.turn_id, messages, incarnation=incarnation,
            )
        user = self._user_message(record, None)
        return call(
            t.append, t.aappend, self.tenant, binding.thread.id, [user, *messages],
            incarnation=incarnation, **_placement(record),
        )

    def _answer_written(
        self, thread_id: str, record: _OpenRecord, written: list[Message] | Failed
    ) -> bool:
        """Commit point 2's outcome: the turn is done with the record either way, once
        a failure is raised or, degrading, noted."""
        from convmem.transcript.errors import ThreadNotFound

        if not isinstance(written, Failed):
            if record.record is None and written:
                record.asked = written[0]  # the user's message, written with the answer
        elif isinstance(written.error, TranscriptUnavailable):  # ThreadDeleted too
            self._unrecorded(thread_id, "commit point 2 (tool calls, results, answer)",
                             written.error)
        elif isinstance(written.error, ThreadNotFound):
            log.warning("thread %r: its record was deleted during the turn; "
                        "the rest of the turn is not recorded", thread_id)
        else:
            raise written.error
        record.done = True
        return not isinstance(written, Failed)

    def _bound_here(
        self, thread_id: str, question: str, message_id: str | None, edit: _Edit | None
    ) -> TurnBinding | None:
        """The binding of the turn this process has open, when ``begin_turn`` is called
        again for it (every step of an agent's tool loop): the turn is bound once, and
        ``_note_turn`` keeps that first binding anyway."""
        found = self._open.get((self.tenant, thread_id))
        if found is None or edit is not None or found.edit is not None or found.done:
            return None
        return found.binding if found.same_turn(message_id, question) else None

    def _bind_flow(self, thread_id: str) -> Flow[tuple[TurnBinding | None, SessionState | None]]:
        """Bind a beginning turn to its thread, and load the state for it: one wait.

        The binding is the key's thread (created if need be) and its incarnation, which
        every write of the turn must find again, so a turn that began before
        ``delete_thread`` never writes afterwards. It is read together with the state;
        when this process ended the thread's last turn and the loaded state is the one
        it saved then (equal, version and turn count too: nobody wrote the state since,
        so nobody deleted or redacted the thread either, as both reach the state), the
        binding it kept then is used and only the state is read. A record that cannot be reached now is bound at its first commit point
        instead (a state-only ``begin_turn`` never fails on the record)."""
        t = self._transcript()
        key = (self.tenant, thread_id)
        bind = call(t.bind_turn, t.abind_turn, self.tenant, thread_id)
        kept = self._bindings.pop(key, None)
        loaded: SessionState | None
        if kept is not None:
            loaded = yield from do(self._load(thread_id))
            if loaded is not None and loaded == kept[1]:
                return kept[0], loaded
            (bound,) = yield from do(together(bind))
        else:
            bound, got = yield from do(together(bind, self._load(thread_id)))
            loaded = value_of(got)
        if isinstance(bound, Failed) and isinstance(bound.error, TranscriptUnavailable):
            return None, loaded
        binding: TurnBinding = value_of(bound)
        self._threads.remember(self.tenant, thread_id, binding.thread.id)
        return binding, loaded

    def _keep_binding(self, key: tuple[str, str], record: _OpenRecord, saved: SessionState) -> None:
        """After a turn recorded here whose end saved ``saved``: its binding with the
        turn's question first, for the thread's next turn (``_bind_flow``)."""
        if record.binding is None or record.asked is None or not record.done:
            return
        asked = record.asked
        row = {"id": asked.id, "parts": [{"kind": "text", "text": asked.text}],
               "extra": dict(asked.extra)}
        recent = (row, *record.binding.recent_user_messages)[:BOUND_QUESTIONS]
        kept = self._bindings
        kept[key] = (replace(record.binding, recent_user_messages=recent), saved)
        if len(kept) > MAX_TURN_STATES:
            kept.pop(next(iter(kept)), None)  # oldest first

    def _turn_binding(self, thread_id: str, record: _OpenRecord) -> Flow[TurnBinding]:
        """The turn's binding; bound now if it began elsewhere or the record was down."""
        if record.binding is None:
            t = self._transcript()
            binding = yield from do(call(t.bind_turn, t.abind_turn, self.tenant, thread_id))
            self._threads.remember(self.tenant, thread_id, binding.thread.id)
            record.binding = binding
        return record.binding

    def _transcript(self) -> TranscriptStore:
        """The transcript a record flow writes to (the public methods that need one
        say so in their own words before any flow starts)."""
        if self.transcript is None:
            raise ConfigError(
                "this SessionMemory has no transcript: pass transcript=TranscriptStore(...)"
            )
        return self.transcript

    def _thread_flow(self, thread_id: str) -> Flow[str]:
        """The transcript thread whose key is ``thread_id`` (kept per process)."""
        return (yield from self._threads.lookup(self._transcript(), self.tenant, thread_id))

    def _on_thread(
        self,
        thread_id: str,
        sync: Callable[Concatenate[str, str, P], T],
        async_: Callable[Concatenate[str, str, P], Awaitable[T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Flow[T]:
        """A transcript call on the key's thread, ``sync(tenant, transcript thread,
        *args)`` or its ``async_`` twin, for what is not a turn's write (those go to the
        thread the turn began on). Each of them names a message or the thread, which
        must then be in the key's *current* thread: when the kept thread is gone
        (another instance deleted it), the key is looked up again once (``ThreadIds``)."""

        def body(tid: str) -> Flow[T]:
            return (yield from do(call(sync, async_, self.tenant, tid, *args, **kwargs)))

        return (yield from self._threads.on_thread(self._transcript(), self.tenant, thread_id, body))

    def _user_message(self, record: _OpenRecord, sent_question: str | None) -> NewMessage:
        from convmem.transcript import NewMessage
        from convmem.transcript.provenance import NOTE_KEY

        ours = question_provenance(record.text, record.state, record.message_id, sent_question)
        extra = {NOTE_KEY: dict(ours)} if ours else None
        return NewMessage(role="user", content=record.text, extra=extra)

    def _note_tool(
        self,
        thread_id: str,
        call_id: str | None,
        name: str,
        args: Mapping[str, Any],
        outcome: ToolResult,
    ) -> None:
        """Keep a tool call and its result for commit point 2 (in-process, no I/O)."""
        record = self._open.get((self.tenant, thread_id))
        if self.transcript is None or record is None or record.done:
            return
        from convmem.transcript import NewMessage, ToolCallPart, ToolResultPart

        cid = call_id or f"call_{uuid.uuid4().hex[:16]}"
        arguments = clean_data(json.loads(json.dumps(dict(args), default=str)))
        record.tools.append(
            NewMessage(role="assistant", content=[ToolCallPart(cid, name, arguments)])
        )
        result = clean_text(outcome.record_text())
        if name == RECALL_TOOL:  # copies of earlier messages: kept as links (erasure)
            result = recorded_recall(result)
        record.tools.append(
            NewMessage(role="tool", content=[ToolResultPart(cid, result, not outcome.ok)])
        )

    def _unrecorded(self, thread_id: str, what: str, exc: ConvMemError) -> None:
        """``raise`` mode: re-raise. ``degrade``: WARNING, count, and let the turn go on."""
        if self.on_transcript_error == "raise":
            raise exc
        self.stats.transcript_failures += 1
        log.warning("thread %r: %s not recorded; the turn goes on "
                    "(on_transcript_error='degrade'): %s", thread_id, what, exc)

    def _recall_flow(
        self, thread_id: str, query: str, limit: int, include_tools: bool
    ) -> Flow[list[RecallHit]]:
        """Earlier messages of the key's thread matching ``query`` (``convmem.session.recall``):
        one search on its active path; nothing when the key has no thread (never made one)."""
        t = self.transcript
        if t is None:
            raise ConfigError(
                "recall looks earlier messages up in the record: this SessionMemory has no "
                "transcript (pass transcript=TranscriptStore(...))"
            )
        tid = yield from self._threads.find(t, self.tenant, thread_id)
        if tid is None:
            return []
        roles = ("user", "assistant", "tool") if include_tools else ("user", "assistant")
        # The turn asking is recorded already (commit point 1): its own question matches
        # itself and is not "what was said earlier". One more hit makes up for it.
        open_turn = self._open.get((self.tenant, thread_id))
        asking = None if open_turn is None or open_turn.record is None else (
            open_turn.record.user_message.id
        )
        hits = yield from do(call(
            t.search, t.asearch, self.tenant, query,
            thread_id=tid, limit=limit + 1, match="any", roles=roles, active_path=True,
        ))
        return [
            RecallHit(
                message_id=h.message_id, role=h.role, text=snippet(h.text, query), turn=h.seq,
                created_at=h.received_at, score=h.rank,
            )
            for h in hits
            if h.message_id != asking
        ][:limit]

    def _delete_flow(self, thread_id: str) -> Flow[DeletionReceipt | None]:
        receipt: DeletionReceipt | None = None
        key = (self.tenant, thread_id)
        t = self.transcript
        if t is not None:
            self._open.pop(key, None)
            self._bindings.pop(key, None)
            receipt = yield from self._on_thread(thread_id, t.delete_thread, t.adelete_thread)
            self._threads.forget(self.tenant, thread_id)
        self._turn_states.pop(key, None)
        yield from do(call(self.store.delete, self.store.adelete, self.tenant, thread_id))
        return receipt

    def _redact_flow(
        self, thread_id: str, message_id: str, actor: str, reason: str, replacement: str
    ) -> Flow[RedactionReceipt]:
        t = self._transcript()
        found = yield from self._on_thread(thread_id, t.get_messages, t.aget_messages, [message_id])
        receipt = yield from self._on_thread(
            thread_id, t.redact, t.aredact, message_id,
            actor=actor, reason=reason, replacement=replacement,
        )
        gone = _question_texts(found)
        own = {m.thread_id for m in found}
        keys = [thread_id]
        for tid in receipt.thread_ids:  # forks holding a copy: their keys' state too
            if tid not in own and (key := (yield from self._key_of(tid))) is not None:
                keys.append(key)
        for key in keys:
            yield from self._forget_questions(key, gone, replacement)
        return receipt

    def _key_of(self, transcript_thread_id: str) -> Flow[str | None]:
        """The conversation key a transcript thread is bound to (``None``: none, or the
        thread is gone)."""
        from convmem.transcript.errors import ThreadNotFound

        t = self._transcript()
        try:
            thread = yield from do(call(t.get_thread, t.aget_thread, self.tenant,
                                        transcript_thread_id))
        except ThreadNotFound:
            return None
        return thread.key

    def _forget_questions(self, thread_id: str, gone: set[str], replacement: str) -> Flow[None]:
        """Take the texts ``gone`` out of the key's live state: its kept binding, the
        turn this process has open on it, and the stored state."""
        self._bindings.pop((self.tenant, thread_id), None)  # it may hold the text
        if not gone:
            return
        record = self._open.get((self.tenant, thread_id))
        if record is not None and (record.text in gone or record.question in gone):
            record.text = replacement
        elif record is not None and record.record is None:
            # not sent yet: the turn's model input must not quote the redacted question
            record.state = without_questions(record.state, gone)
            record.block = block_for(record.state, self.recall_tool)

        def compute(current: SessionState) -> tuple[SessionState | None, None]:
            scrubbed = without_questions(current, gone)
            return (None if scrubbed == current else scrubbed), None

        yield from self._save_with_retry(thread_id, _no_io(compute), f"redact {thread_id}")

    # ------------------------------------------------------------------ helpers
