"""``SessionMemory``: the façade adapters code against.

One identifier, the *thread id* (any string the application uses, unique per tenant):
the session state is the live, expiring view of a thread. A turn is
``begin_turn`` → ``record_tool`` per tool call → ``end_turn``.

The turn logic is written once, as generators that *yield* their I/O (load, resolve,
save) and receive the results; ``_drive`` runs them with the sync methods and
``_adrive`` with the async ones, so the sync and async twins share every rule and
differ only in how I/O is awaited. A compare-and-set conflict is thrown back into the
generator, which reloads and re-applies the turn (at most three tries, then it goes on
with the freshest state and logs).

With a ``TranscriptStore`` (``transcript=``) the façade also keeps the durable record of
each turn, at two commit points. (1) Right before the model is called: the user's
message and what the model receives (``ModelCall``: system prompt, the session block,
the state snapshot, the ids of earlier messages sent, tool schemas, model and
parameters) in one transaction, written by ``begin_turn(..., model_call=...)`` or, when
the adapter learns those only later, by ``record_model_input``. Only the *first* model
call of a turn is recorded: the later calls of a tool loop receive the same input plus
this turn's tool calls and results, which commit point 2 records in order. (2) In
``end_turn``: the tool calls and results ``record_tool`` saw and the answer, in one
transaction linked to (1). A turn that never calls the model (a clarification) records
the user's message and the clarifying answer together in ``end_turn``, with no model
input. If (1) cannot be written the call raises ``TranscriptUnavailable`` before the
model is called; ``on_transcript_error="degrade"`` logs a WARNING, counts it in
``stats.transcript_failures`` and lets the turn go on. The application's thread id is
the transcript thread's *key* (``get_or_create_thread``), so every ``SessionMemory`` of
the tenant (two devices, two workers) appends to one thread. A turn binds to that
thread's incarnation when it begins (one read, ``TranscriptStore.bind_turn``) and its
commit points write only there: a turn that began before ``delete_thread`` fails its
commit point with ``ThreadDeleted`` and writes nothing, so an erased thread never
comes back. Its model input lists the recorded questions its block quotes, the links
redaction follows. The turn in progress is
remembered in-process between the commit points (recovered from the session state's
open turn when another process began it; its tool calls are then not recorded).
``edit_turn`` asks an edited question as a new turn beside the original, from the
state restored out of the original's model-input record; ``regenerate`` records a new
answer to a turn.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from convmem.domain import Domain
from convmem.errors import ConfigError, ConvMemError, TranscriptUnavailable, VersionConflict
from convmem.identity import check_tenant, check_thread_id, clean_data, clean_text
from convmem.policy import (
    Clarify,
    PolicyConfig,
    answer_rewrite,
    apply_resolution,
    apply_tool,
    match_option,
    start_turn,
)
from convmem.render import render
from convmem.resolve import Resolution, Resolver, RuleResolver, carry_focus
from convmem.state import (
    OpenTurn,
    Option,
    PendingClarification,
    SessionState,
    state_from_dict,
    state_to_dict,
)
from convmem.stores.base import SessionStateStore
from convmem.stores.memory import InMemorySessionStateStore
from convmem.text import stopwords
from convmem.tokens import encoding
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

log = logging.getLogger("convmem.session")
OnTranscriptError = Literal["raise", "degrade"]

MAX_TRIES = 3
#: How many threads' open-turn states a SessionMemory keeps (oldest dropped first).
MAX_TURN_STATES = 4096
MAX_QUESTION_CHARS = 4000

T = TypeVar("T")


@dataclass(frozen=True)
class TurnContext:
    """What the model should see this turn: the rendered block and the rewritten question."""

    thread_id: str
    tenant: str
    turn: int
    question: str
    rewritten: str
    block: str
    state: SessionState
    message_id: str | None = None
    answers_clarification: bool = False  # the user's message picked a clarification's option

    def sent_question(self, rewrite: bool) -> str | None:
        """The text to send the model in place of the user's message; ``None``: send it
        as typed.

        With ``rewrite`` the resolver's self-contained rewrite. Whatever ``rewrite``
        says, a turn that answers a clarification sends the original question resolved
        to the chosen entity (spec §3 step 1: "the turn continues with the original
        question"): the user's reply ("The Toronto one.") holds no question at all.
        """
        if (rewrite or self.answers_clarification) and self.rewritten:
            return self.rewritten
        return None


@dataclass(frozen=True)
class Clarification:
    """The turn asks one question instead of calling the model (spec §4)."""

    thread_id: str
    tenant: str
    turn: int
    prompt: str
    options: tuple[Option, ...]
    state: SessionState

    @property
    def text(self) -> str:
        """The clarifying message, options numbered in the order ordinals refer to."""
        lines = [self.prompt] + [f"{i}. {o.describe()}" for i, o in enumerate(self.options, 1)]
        return "\n".join(lines)


@dataclass(frozen=True)
class ModelCall:
    """What the model is about to receive, in the core's terms (adapters translate to it).

    ``system_prompt`` is the application's system prompt or template text *without*
    the session block; ``block`` is the block as sent (``None``: the turn's rendered
    block; an adapter that sends something else in its place, such as an instruction
    to ask a clarifying question, says so here). ``sent_question`` is the user's
    message as sent when it is not what they typed (the rewrite). ``history_ids`` are
    transcript message ids of earlier messages replayed to the model (none when the
    block stands in for the history). ``tool_schemas`` and ``model_params`` must be
    JSON (what the store keeps).
    """

    system_prompt: str | None = None
    block: str | None = None
    sent_question: str | None = None
    history_ids: tuple[str, ...] = ()
    tool_schemas: tuple[Mapping[str, Any], ...] = ()
    model: str | None = None
    model_params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "history_ids", tuple(self.history_ids))
        object.__setattr__(self, "tool_schemas", tuple(clean_data(list(self.tool_schemas))))
        object.__setattr__(self, "model_params", clean_data(self.model_params))
        for name in ("system_prompt", "block", "sent_question", "model"):
            text = getattr(self, name)
            if text is not None:  # normalised like all text at the edge (spec §5)
                object.__setattr__(self, name, _optional_text(text, f"ModelCall.{name}"))
        for name in ("tool_schemas", "model_params"):
            try:
                json.dumps(getattr(self, name), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"ModelCall.{name} must be plain JSON: {exc}") from exc


@dataclass
class SessionStats:
    """Counters of one ``SessionMemory`` (shared by its per-tenant copies)."""

    transcript_failures: int = 0  # commit points skipped under on_transcript_error="degrade"


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

    def same_turn(self, message_id: str | None, question: str) -> bool:
        return _same_message(message_id, question, self.message_id, self.question)


def _same_message(
    message_id: str | None, question: str, known_id: str | None, known_question: str
) -> bool:
    """The same user message again: by id when either side has one, else by text."""
    if message_id is not None or known_id is not None:
        return message_id == known_id
    return question == known_question


# I/O requests the turn generators yield.
@dataclass(frozen=True)
class _Load:
    """Load the state; ``recent``: this process's last save of the thread will do when
    it saved a turn still open (``SessionMemory._turn_states``)."""

    recent: bool = False


@dataclass(frozen=True)
class _DeleteState:
    pass


@dataclass(frozen=True)
class _Transcript:
    """Call ``transcript.<method>`` (``a<method>`` when driven async)."""

    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Save:
    state: SessionState
    expected: int


@dataclass(frozen=True)
class _Resolve:
    question: str
    state: SessionState
    today: date


_Flow = Generator[Any, Any, T]


def _load_package_data(domain: Domain) -> None:
    """Read the stopword list and tokenizer vocabulary, and index the catalog, now.

    All three are cached per process; loading them here, at construction, keeps file
    reads off the event loop on an async turn (they are lazy otherwise).
    """
    stopwords()
    encoding()
    _ = domain.catalog


def block_for(state: SessionState) -> str:
    """The block for the model: during an open turn, the *earlier* questions only."""
    if state.open_turn is not None:
        return render(state.evolve(recent_questions=state.open_turn.base.recent_questions))
    return render(state)


class SessionMemory:
    """Session state for every thread of one tenant, kept in a ``SessionStateStore``.

    With ``transcript=`` (a ``convmem.transcript.TranscriptStore``) each turn is also
    recorded at two commit points (see the module docstring).
    ``on_transcript_error="raise"`` (the default) fails a turn whose commit point cannot
    be written with ``TranscriptUnavailable`` — before the model is called, for point 1;
    ``"degrade"`` logs a WARNING on ``convmem.session``, counts it in
    ``stats.transcript_failures`` and lets the turn go on unrecorded.
    """

    def __init__(
        self,
        domain: Domain,
        *,
        store: SessionStateStore | None = None,
        transcript: TranscriptStore | None = None,
        resolver: Resolver | None = None,
        config: PolicyConfig | None = None,
        clock: Callable[[], datetime] | None = None,
        tenant: str = "default",
        on_transcript_error: OnTranscriptError = "raise",
    ) -> None:
        if not isinstance(domain, Domain):
            raise ConfigError(f"SessionMemory: domain must be a convmem.Domain, got {type(domain).__name__}")
        if on_transcript_error not in ("raise", "degrade"):
            raise ConfigError(
                f"SessionMemory: on_transcript_error must be 'raise' or 'degrade', "
                f"got {on_transcript_error!r}"
            )
        if transcript is not None:
            from convmem.transcript import TranscriptStore

            if not isinstance(transcript, TranscriptStore):
                raise ConfigError(
                    "SessionMemory: transcript must be a convmem.transcript.TranscriptStore, "
                    f"got {type(transcript).__name__}"
                )
        self.domain = domain
        self.store: SessionStateStore = store if store is not None else InMemorySessionStateStore()
        self.transcript = transcript
        self.on_transcript_error: OnTranscriptError = on_transcript_error
        self.resolver: Resolver = resolver if resolver is not None else RuleResolver()
        self.config = config if config is not None else PolicyConfig()
        self.clock = clock
        self.tenant = tenant  # checked by the property (convmem.identity)
        self.stats = SessionStats()
        # (tenant, thread id) -> transcript thread id / the turn between its commit points.
        # Keyed by tenant too: per-tenant shallow copies (adapters) share these dicts.
        self._threads: dict[tuple[str, str], str] = {}
        self._open: dict[tuple[str, str], _OpenRecord] = {}
        # (tenant, thread id) -> the state this process last saved while a turn was
        # open: the next step of that turn (the tool loop's begin_turn, record_tool,
        # end_turn) starts from it instead of a GET. Saves still compare-and-set on
        # its version, so a write from elsewhere makes them conflict and reload.
        self._turn_states: dict[tuple[str, str], SessionState] = {}
        # tenant -> this memory's view for it (shared by every view: see ``for_tenant``)
        self._tenants: dict[str, SessionMemory] = {tenant: self}
        _load_package_data(domain)

    def for_tenant(self, tenant: str) -> SessionMemory:
        """This memory for ``tenant``: the same store, transcript, domain, resolver,
        policy and ``stats``, with every thread id read in ``tenant``'s namespace.

        One view per tenant, made on first use and reused. Adapters that take a
        tenant per call (LangChain's ``configurable["tenant_id"]``) use it, and so does
        the application to read what they wrote: ``memory.for_tenant("acme")
        .get_state("thread-42")`` (``docs/tenancy.md``).
        """
        check_tenant(tenant)
        found = self._tenants.get(tenant)
        if found is not None:
            return found
        view = copy.copy(self)
        view.tenant = tenant
        # setdefault is atomic under the GIL: two racing callers share one view.
        return self._tenants.setdefault(tenant, view)

    @property
    def tenant(self) -> str:
        """Whose threads these are; every read and write is scoped to it."""
        return self._tenant

    @tenant.setter
    def tenant(self, value: str) -> None:
        # The shared identifier rule, also for a per-tenant copy an adapter derives.
        self._tenant = check_tenant(value)

    # ------------------------------------------------------------------ public API (sync)

    def begin_turn(
        self,
        thread_id: str,
        question: str,
        *,
        message_id: str | None = None,
        today: date | None = None,
        model_call: ModelCall | None = None,
        full_text: str | None = None,
    ) -> Clarification | TurnContext:
        """Resolve the user's message and update the state; idempotent per message.

        With a transcript and ``model_call``, commit point 1 is written before this
        returns (not for a clarification: the model is not called). ``full_text`` is
        the whole message for the record when ``question`` is a cut of it.
        """
        self._check(thread_id, question)
        flow = self._turn_flow(
            thread_id, question, message_id, self._today(today), model_call, full_text
        )
        return self._drive(thread_id, flow)

    def edit_turn(
        self,
        thread_id: str,
        original_id: str,
        question: str,
        *,
        message_id: str | None = None,
        today: date | None = None,
        model_call: ModelCall | None = None,
        full_text: str | None = None,
    ) -> Clarification | TurnContext:
        """Ask ``question`` in place of the recorded user message ``original_id``.

        A new turn, like ``begin_turn`` (same arguments; commit point 1 now with
        ``model_call`` or later through ``record_model_input``), whose user message
        is a sibling of the original (same parent; the pointer moves to it). It is
        resolved against the state the original was asked in, restored from the
        original turn's model-input record, not against the abandoned branch's
        questions, focus and filters; without such a record (the original was
        clarified before any model call) the live state minus the original question.
        Then ``record_tool`` and ``end_turn`` as usual. Needs a transcript.
        """
        self._check(thread_id, question)
        flow = self._edit_flow(
            thread_id, original_id, question, message_id, self._today(today), model_call,
            full_text,
        )
        return self._drive(thread_id, flow)

    def regenerate(
        self, thread_id: str, answer_id: str, answer: str | NewMessage
    ) -> Message:
        """Record a new answer to the turn that produced ``answer_id`` (a sibling, made
        active, carrying the same ``turn_id``: one model input, two answers). The
        session state is not touched: answers are never kept in it."""
        self._check(thread_id)
        return self._drive(thread_id, self._regenerate_flow(thread_id, answer_id, answer))

    def record_model_input(self, thread_id: str, call: ModelCall) -> TurnRecord | None:
        """Commit point 1 for the open turn, right before the model is called.

        Idempotent per turn: the first call writes it, later ones (the next steps of a
        tool loop) return the same record. ``None`` without a transcript, or when the
        write failed under ``on_transcript_error="degrade"``.
        """
        self._check(thread_id)
        return self._drive(thread_id, self._model_input_flow(thread_id, call))

    def record_tool(
        self,
        thread_id: str,
        name: str,
        args: Mapping[str, Any] | None,
        result: Any,
        *,
        call_id: str | None = None,
    ) -> Clarification | None:
        """Apply the domain's tool rule to one tool call; a candidate list asks which one.

        ``result`` follows the tool-result contract (``convmem.tools``): a
        ``ToolResult``, the envelope ``{"ok": ..., "data": ...}``, a bare record or a
        list of records (or JSON text of them). A failure never sets focus or filters.
        Framework objects go through the adapters' ``tool_result`` first. With a
        transcript the call and its result join the turn's commit point 2 (``call_id``
        links them; one is made up when the framework has none).
        """
        self._check(thread_id)
        name, arguments, outcome = _tool_input(name, args, result)
        self._note_tool(thread_id, call_id, name, arguments, outcome)
        flow = self._tool_flow(thread_id, name, arguments, outcome)
        return self._drive(thread_id, flow)

    def end_turn(self, thread_id: str, *, answer: str | None = None) -> SessionState:
        """Close the turn. The answer is never kept in the state (it pollutes, §seed);
        with a transcript it is recorded (commit point 2)."""
        self._check(thread_id)
        return self._drive(thread_id, self._finish_flow(thread_id, answer))

    def get_state(self, thread_id: str) -> SessionState | None:
        self._check(thread_id)
        return self.store.load(self.tenant, thread_id)

    def reset(self, thread_id: str) -> None:
        """Drop the session state (the transcript keeps the record: see ``delete_thread``)."""
        self._check(thread_id)
        self._turn_states.pop((self.tenant, thread_id), None)
        self.store.delete(self.tenant, thread_id)

    def block(self, thread_id: str) -> str:
        """The rendered block for the thread's current state (``""`` when empty)."""
        state = self.get_state(thread_id)
        return "" if state is None else block_for(state)

    def state_only(self) -> SessionMemory:
        """This memory without its transcript: the same state store, tenant, domain and
        policy, recording nothing. For a caller that writes the record itself and only
        needs the session state driven (``ConvMemChatMessageHistory``'s session view)."""
        view = copy.copy(self)
        view.transcript = None
        view._tenants = {view.tenant: view}  # its tenant views record nothing either
        return view

    def transcript_thread_id(self, thread_id: str) -> str:
        """The transcript thread recording ``thread_id`` (created on first use)."""
        self._check(thread_id)
        return self._drive(thread_id, self._thread_flow(thread_id))

    def delete_thread(self, thread_id: str) -> DeletionReceipt | None:
        """Erase the thread: its whole record (when a transcript is configured) and its
        session-state key. Never degraded: an erasure that cannot reach the record
        raises ``TranscriptUnavailable`` and leaves the state key for a retry."""
        self._check(thread_id)
        return self._drive(thread_id, self._delete_flow(thread_id))

    def redact(
        self,
        thread_id: str,
        message_id: str,
        *,
        actor: str,
        reason: str,
        replacement: str = "[redacted]",
    ) -> RedactionReceipt:
        """Redact a recorded message (``TranscriptStore.redact``) and take the question
        out of the live state: ``recent_questions``, ``last_rewrite``, the open turn."""
        self._check(thread_id)
        actor, reason, replacement = clean_text(actor), clean_text(reason), clean_text(replacement)
        flow = self._redact_flow(thread_id, message_id, actor, reason, replacement)
        return self._drive(thread_id, flow)

    # ------------------------------------------------------------------ public API (async)

    async def abegin_turn(
        self,
        thread_id: str,
        question: str,
        *,
        message_id: str | None = None,
        today: date | None = None,
        model_call: ModelCall | None = None,
        full_text: str | None = None,
    ) -> Clarification | TurnContext:
        self._check(thread_id, question)
        flow = self._turn_flow(
            thread_id, question, message_id, self._today(today), model_call, full_text
        )
        return await self._adrive(thread_id, flow)

    async def aedit_turn(
        self,
        thread_id: str,
        original_id: str,
        question: str,
        *,
        message_id: str | None = None,
        today: date | None = None,
        model_call: ModelCall | None = None,
        full_text: str | None = None,
    ) -> Clarification | TurnContext:
        self._check(thread_id, question)
        flow = self._edit_flow(
            thread_id, original_id, question, message_id, self._today(today), model_call,
            full_text,
        )
        return await self._adrive(thread_id, flow)

    async def aregenerate(
        self, thread_id: str, answer_id: str, answer: str | NewMessage
    ) -> Message:
        self._check(thread_id)
        return await self._adrive(thread_id, self._regenerate_flow(thread_id, answer_id, answer))

    async def arecord_model_input(self, thread_id: str, call: ModelCall) -> TurnRecord | None:
        self._check(thread_id)
        return await self._adrive(thread_id, self._model_input_flow(thread_id, call))

    async def arecord_tool(
        self,
        thread_id: str,
        name: str,
        args: Mapping[str, Any] | None,
        result: Any,
        *,
        call_id: str | None = None,
    ) -> Clarification | None:
        self._check(thread_id)
        name, arguments, outcome = _tool_input(name, args, result)
        self._note_tool(thread_id, call_id, name, arguments, outcome)
        flow = self._tool_flow(thread_id, name, arguments, outcome)
        return await self._adrive(thread_id, flow)

    async def aend_turn(self, thread_id: str, *, answer: str | None = None) -> SessionState:
        self._check(thread_id)
        return await self._adrive(thread_id, self._finish_flow(thread_id, answer))

    async def aget_state(self, thread_id: str) -> SessionState | None:
        self._check(thread_id)
        return await self.store.aload(self.tenant, thread_id)

    async def areset(self, thread_id: str) -> None:
        self._check(thread_id)
        self._turn_states.pop((self.tenant, thread_id), None)
        await self.store.adelete(self.tenant, thread_id)

    async def ablock(self, thread_id: str) -> str:
        state = await self.aget_state(thread_id)
        return "" if state is None else block_for(state)

    async def atranscript_thread_id(self, thread_id: str) -> str:
        self._check(thread_id)
        return await self._adrive(thread_id, self._thread_flow(thread_id))

    async def adelete_thread(self, thread_id: str) -> DeletionReceipt | None:
        self._check(thread_id)
        return await self._adrive(thread_id, self._delete_flow(thread_id))

    async def aredact(
        self,
        thread_id: str,
        message_id: str,
        *,
        actor: str,
        reason: str,
        replacement: str = "[redacted]",
    ) -> RedactionReceipt:
        self._check(thread_id)
        actor, reason, replacement = clean_text(actor), clean_text(reason), clean_text(replacement)
        flow = self._redact_flow(thread_id, message_id, actor, reason, replacement)
        return await self._adrive(thread_id, flow)

    # ------------------------------------------------------------------ drivers
    # Every request's exception is thrown back into the flow, which handles what it
    # expects (a version conflict, an unavailable transcript) and re-raises the rest.

    def _drive(self, thread_id: str, flow: _Flow[T]) -> T:
        send: Any = None
        throw: BaseException | None = None
        while True:
            try:
                request = flow.throw(throw) if throw is not None else flow.send(send)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            send, throw = None, None
            try:
                if isinstance(request, _Load):
                    send = self._recent_state(thread_id, request)
                    if send is None:
                        send = self.store.load(self.tenant, thread_id)
                elif isinstance(request, _Save):
                    self._turn_states.pop((self.tenant, thread_id), None)  # kept if it saves
                    send = self.store.save(
                        self.tenant, thread_id, request.state, expected_version=request.expected
                    )
                    self._keep_turn_state(thread_id, request.state, send)
                elif isinstance(request, _Transcript):
                    call = getattr(self.transcript, request.method)
                    send = call(*request.args, **request.kwargs)
                elif isinstance(request, _DeleteState):
                    self._turn_states.pop((self.tenant, thread_id), None)
                    self.store.delete(self.tenant, thread_id)
                else:
                    send = self.resolver.resolve(request.question, request.state, self.domain, request.today)
            except Exception as exc:
                throw = exc

    async def _adrive(self, thread_id: str, flow: _Flow[T]) -> T:
        send: Any = None
        throw: BaseException | None = None
        while True:
            try:
                request = flow.throw(throw) if throw is not None else flow.send(send)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            send, throw = None, None
            try:
                if isinstance(request, _Load):
                    send = self._recent_state(thread_id, request)
                    if send is None:
                        send = await self.store.aload(self.tenant, thread_id)
                elif isinstance(request, _Save):
                    self._turn_states.pop((self.tenant, thread_id), None)  # kept if it saves
                    send = await self.store.asave(
                        self.tenant, thread_id, request.state, expected_version=request.expected
                    )
                    self._keep_turn_state(thread_id, request.state, send)
                elif isinstance(request, _Transcript):
                    call = getattr(self.transcript, "a" + request.method)
                    send = await call(*request.args, **request.kwargs)
                elif isinstance(request, _DeleteState):
                    self._turn_states.pop((self.tenant, thread_id), None)
                    await self.store.adelete(self.tenant, thread_id)
                else:
                    send = await self.resolver.aresolve(
                        request.question, request.state, self.domain, request.today
                    )
            except Exception as exc:
                throw = exc

    def _recent_state(self, thread_id: str, request: _Load) -> SessionState | None:
        return self._turn_states.get((self.tenant, thread_id)) if request.recent else None

    def _keep_turn_state(self, thread_id: str, state: SessionState, version: int) -> None:
        """Remember a saved state while its turn is open (see ``_turn_states``)."""
        if state.open_turn is None:
            return  # the turn ended: the next one starts from the store
        states = self._turn_states
        states[(self.tenant, thread_id)] = state.evolve(version=version)
        if len(states) > MAX_TURN_STATES:
            states.pop(next(iter(states)), None)  # oldest first

    # ------------------------------------------------------------------ turn logic (once)

    def _save_with_retry(
        self, compute: Callable[[SessionState], tuple[SessionState | None, T]], what: str
    ) -> Generator[Any, Any, T]:
        """Load, compute, compare-and-set save; on conflict reload and recompute."""
        result: T | None = None
        for attempt in range(1, MAX_TRIES + 1):
            loaded = yield _Load(recent=attempt == 1)
            current = loaded if loaded is not None else SessionState()
            new, result = compute(current)
            if new is None:
                return result
            try:
                version = yield _Save(new, current.version)
            except VersionConflict:
                log.debug("%s: version conflict (try %d of %d)", what, attempt, MAX_TRIES)
                continue
            return _with_version(result, version)
        log.warning("%s: gave up saving after %d version conflicts; going on unsaved", what, MAX_TRIES)
        assert result is not None
        return result

    def _begin_flow(
        self,
        thread_id: str,
        question: str,
        message_id: str | None,
        today: date,
        restore: Callable[[SessionState], SessionState] | None = None,
    ) -> Generator[Any, Any, Clarification | TurnContext]:
        """``restore`` (an edit) maps the loaded state to the one the turn starts from;
        the result is saved over the loaded one in the same compare-and-set."""
        resolved: dict[int, tuple[str, Resolution]] = {}

        for attempt in range(1, MAX_TRIES + 1):
            loaded = yield _Load(recent=attempt == 1 and restore is None)
            current = loaded if loaded is not None else SessionState()
            # An edit is the same turn again only by message id (its text may repeat).
            if restore is None or message_id is not None:
                same = self._same_turn(thread_id, current, question, message_id)
                if same is not None:
                    return same
            origin = current if restore is None else restore(current)
            base = start_turn(origin, self.config).evolve(pending=None)
            chosen: Option | None = None
            pending = origin.pending
            asked = question
            if pending is not None:
                chosen = match_option(pending, question)
                if chosen is not None:
                    asked = pending.question
            key = current.version
            if key not in resolved or resolved[key][0] != asked:
                resolution = yield _Resolve(asked, base, today)
                resolved[key] = (asked, resolution)
            resolution = resolved[key][1]
            outcome = apply_resolution(base, resolution, self.config, confirmed=chosen,
                                       salient_size=self.domain.salient_size)
            if isinstance(outcome, Clarify):
                new = outcome.state.evolve(
                    pending=outcome.pending,
                    open_turn=OpenTurn(question, "", message_id, base, True, asked),
                )
            else:
                if pending is not None and chosen is not None:
                    rewritten = answer_rewrite(resolution, pending, chosen)
                elif resolution.mentions:
                    rewritten = resolution.rewritten
                else:  # named nothing: the kept focus is named in the rewrite
                    rewritten = carry_focus(resolution.rewritten, outcome.state.focus)
                new = outcome.state.evolve(
                    last_rewrite=rewritten if chosen is not None else outcome.state.last_rewrite,
                    open_turn=OpenTurn(question, rewritten, message_id, base, False, asked),
                )
            try:
                version = yield _Save(new, current.version)
            except VersionConflict:
                log.debug("begin_turn %s: version conflict (try %d)", thread_id, attempt)
                continue
            return self._result(thread_id, new.evolve(version=version))
        log.warning("begin_turn %s: gave up after %d version conflicts; going on unsaved",
                    thread_id, MAX_TRIES)
        return self._result(thread_id, new)

    def _same_turn(
        self, thread_id: str, state: SessionState, question: str, message_id: str | None
    ) -> Clarification | TurnContext | None:
        ot = state.open_turn
        if ot is None or not _same_message(message_id, question, ot.message_id, ot.question):
            return None
        return self._result(thread_id, state)

    def _result(self, thread_id: str, state: SessionState) -> Clarification | TurnContext:
        ot = state.open_turn
        assert ot is not None
        if ot.clarified and state.pending is not None:
            return self._clarification(thread_id, state, state.pending)
        return TurnContext(
            thread_id=thread_id,
            tenant=self.tenant,
            turn=state.turn,
            question=ot.question,
            rewritten=ot.rewritten,
            block=block_for(state),
            state=state,
            message_id=ot.message_id,
            # spec §3 step 1: on an answer turn the question processed is the original one
            answers_clarification=bool(ot.resolved_question)
            and ot.resolved_question != ot.question,
        )

    def _clarification(
        self, thread_id: str, state: SessionState, pending: PendingClarification
    ) -> Clarification:
        return Clarification(thread_id, self.tenant, state.turn, pending.prompt, pending.options, state)

    def _tool_flow(
        self, thread_id: str, name: str, args: dict[str, Any], result: ToolResult
    ) -> Generator[Any, Any, Clarification | None]:
        def compute(current: SessionState) -> tuple[SessionState | None, Clarification | None]:
            ot = current.open_turn
            if ot is not None and ot.clarified:
                return None, None  # the turn already ended in a clarification
            base = ot.base if ot is not None else current
            outcome = apply_tool(current, base, self.domain, name, args, result)
            if isinstance(outcome, Clarify):
                new = outcome.state.evolve(
                    pending=outcome.pending,
                    open_turn=replace(ot, clarified=True) if ot is not None else None,
                )
                return new, self._clarification(thread_id, new, outcome.pending)
            if outcome.state == current:
                return None, None
            return outcome.state, None

        return (yield from self._save_with_retry(compute, f"record_tool {thread_id}"))

    def _end_flow(self) -> Generator[Any, Any, SessionState]:
        def compute(current: SessionState) -> tuple[SessionState | None, SessionState]:
            if current.open_turn is None:
                return None, current
            new = current.evolve(open_turn=None)
            return new, new

        return (yield from self._save_with_retry(compute, "end_turn"))

    # ------------------------------------------------------------------ the record (once)

    def _turn_flow(
        self,
        thread_id: str,
        question: str,
        message_id: str | None,
        today: date,
        call: ModelCall | None,
        full_text: str | None,
        edit: _Edit | None = None,
    ) -> _Flow[Clarification | TurnContext]:
        if call is not None and not isinstance(call, ModelCall):
            raise ConfigError(f"model_call must be a convmem.ModelCall, got {type(call).__name__}")
        question = clean_text(question)
        full_text = _optional_text(full_text, "full_text")
        restore = None if edit is None else edit.restore
        binding = None
        if self.transcript is not None:
            binding = self._bound_here(thread_id, question, message_id, edit)
            if binding is None:
                binding = yield from self._bind_flow(thread_id)
        started = yield from self._begin_flow(thread_id, question, message_id, today, restore)
        if self.transcript is None:
            return started
        record = self._note_turn(thread_id, started.state, full_text, edit, binding)
        if call is not None and record is not None and isinstance(started, TurnContext):
            yield from self._commit_input(thread_id, record, call)
        return started

    def _edit_flow(
        self,
        thread_id: str,
        original_id: str,
        question: str,
        message_id: str | None,
        today: date,
        call: ModelCall | None,
        full_text: str | None,
    ) -> _Flow[Clarification | TurnContext]:
        if self.transcript is None:
            raise ConfigError(
                "edit_turn needs the record of the edited message: this SessionMemory has "
                "no transcript (pass transcript=TranscriptStore(...))"
            )
        if not isinstance(original_id, str) or not original_id:
            raise ConfigError(f"edit_turn: original_id must be a message id, got {original_id!r}")
        found = yield from self._on_thread(thread_id, "get_messages", [original_id])
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
    ) -> _Flow[Callable[[SessionState], SessionState]]:
        """How to get back the state ``original`` was asked in.

        Its model-input record's snapshot holds the open turn's base: the state before
        the question with the turn counted (``start_turn``), so one is taken back off
        and the edit's own ``start_turn`` lands on the same turn and filters. A message
        with no record (clarified before any model call) gets the live state with its
        question taken out, as redaction does."""
        if original.turn_id is not None:
            recorded = yield from self._on_thread(
                thread_id, "reconstruct_model_input", original.turn_id
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
    ) -> _Flow[Message]:
        if self.transcript is None:
            raise ConfigError(
                "regenerate records a new answer: this SessionMemory has no transcript "
                "(pass transcript=TranscriptStore(...))"
            )
        if isinstance(answer, str):
            answer = clean_text(answer)
        return (yield from self._on_thread(thread_id, "regenerate", answer_id, answer))  # type: ignore[no-any-return]

    def _model_input_flow(self, thread_id: str, call: ModelCall) -> _Flow[TurnRecord | None]:
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
        return (yield from self._commit_input(thread_id, record, call))

    def _finish_flow(self, thread_id: str, answer: str | None) -> _Flow[SessionState]:
        answer = _optional_text(answer, "answer")
        record: _OpenRecord | None = None
        if self.transcript is not None:
            record = yield from self._open_record(thread_id)
            if record is not None and not record.done:
                yield from self._commit_answer(thread_id, record, answer)
        state = yield from self._end_flow()
        key = (self.tenant, thread_id)
        if record is not None and self._open.get(key) is record:
            del self._open[key]
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
                found.state, found.block = state, block_for(state)
                if full_text is not None:
                    found.text = full_text
            return found
        text = full_text if full_text is not None else ot.question
        record = _OpenRecord(
            ot.message_id, ot.question, text, state, block_for(state), edit=edit, binding=binding
        )
        self._open[key] = record
        return record

    def _open_record(self, thread_id: str) -> _Flow[_OpenRecord | None]:
        """This process's open turn, else the one the session state says is open."""
        found = self._open.get((self.tenant, thread_id))
        if found is not None:
            return found
        loaded = yield _Load()
        return None if loaded is None else self._note_turn(thread_id, loaded, None)

    def _commit_input(
        self, thread_id: str, record: _OpenRecord, call: ModelCall
    ) -> _Flow[TurnRecord | None]:
        """Commit point 1: the user's message and the model input, once per turn, into
        the thread the turn began on (``ThreadDeleted`` if it was deleted since)."""
        if record.record is not None or record.input_skipped:
            return record.record
        from convmem.transcript import ModelInput

        user = self._user_message(record, call.sent_question)
        try:
            binding = yield from self._turn_binding(thread_id, record)
            model_input = ModelInput(
                rendered_block=record.block if call.block is None else call.block,
                state_snapshot=state_to_dict(record.state),
                sent_message_ids=call.history_ids,
                system_prompt=call.system_prompt,
                tool_schemas=[dict(s) for s in call.tool_schemas],
                model=call.model,
                model_params=dict(call.model_params),
                quoted_message_ids=_quoted_ids(record, call, binding),
            )
            record.record = yield _Transcript(
                "begin_turn_record",
                (self.tenant, binding.thread.id, user, model_input),
                {**_placement(record), "incarnation": binding.thread.incarnation},
            )
        except TranscriptUnavailable as exc:  # ThreadDeleted too: nothing was written
            self._unrecorded(thread_id, "commit point 1 (user message and model input)", exc)
            record.input_skipped = True
        return record.record

    def _commit_answer(
        self, thread_id: str, record: _OpenRecord, answer: str | None
    ) -> _Flow[None]:
        """Commit point 2: tool calls, results and the answer, linked to point 1.

        Without point 1 (a clarification: no model call; or point 1 was skipped) the
        user's message goes in the same transaction, ahead of the rest. Either way only
        into the thread the turn began on: after a deletion it writes nothing.
        """
        from convmem.transcript import NewMessage
        from convmem.transcript.errors import ThreadNotFound

        messages = list(record.tools)
        if answer is not None:
            messages.append(NewMessage(role="assistant", content=answer))
        try:
            binding = yield from self._turn_binding(thread_id, record)
            bound = {"incarnation": binding.thread.incarnation}
            if record.record is not None:
                turn = record.record
                yield _Transcript(
                    "complete_turn", (self.tenant, turn.thread_id, turn.turn_id, messages), bound
                )
            else:
                user = self._user_message(record, None)
                yield _Transcript(
                    "append",
                    (self.tenant, binding.thread.id, [user, *messages]),
                    {**_placement(record), **bound},
                )
        except TranscriptUnavailable as exc:  # ThreadDeleted too: nothing was written
            self._unrecorded(thread_id, "commit point 2 (tool calls, results, answer)", exc)
        except ThreadNotFound:
            log.warning("thread %r: its record was deleted during the turn; "
                        "the rest of the turn is not recorded", thread_id)
        record.done = True

    def _bind_flow(self, thread_id: str) -> _Flow[TurnBinding | None]:
        """Bind a beginning turn to its thread: the key's thread (created if need be)
        and its incarnation, which every write of the turn must find again, so a turn
        that began before ``delete_thread`` never writes afterwards. One read per turn.
        A record that cannot be reached now is bound at its first commit point instead
        (a state-only ``begin_turn`` never fails on the record)."""
        try:
            binding: TurnBinding = yield _Transcript("bind_turn", (self.tenant, thread_id))
        except TranscriptUnavailable:
            return None
        self._threads[(self.tenant, thread_id)] = binding.thread.id
        return binding

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

    def _turn_binding(self, thread_id: str, record: _OpenRecord) -> _Flow[TurnBinding]:
        """The turn's binding; bound now if it began elsewhere or the record was down."""
        if record.binding is None:
            binding: TurnBinding = yield _Transcript("bind_turn", (self.tenant, thread_id))
            self._threads[(self.tenant, thread_id)] = binding.thread.id
            record.binding = binding
        return record.binding

    def _thread_flow(self, thread_id: str) -> _Flow[str]:
        """The transcript thread whose key is ``thread_id`` (cached per process)."""
        if self.transcript is None:
            raise ConfigError(
                "this SessionMemory has no transcript: pass transcript=TranscriptStore(...)"
            )
        key = (self.tenant, thread_id)
        found = self._threads.get(key)
        if found is None:
            thread = yield _Transcript("get_or_create_thread", (self.tenant, thread_id))
            found = self._threads.setdefault(key, thread.id)
        return found

    def _on_thread(self, thread_id: str, method: str, *args: Any, **kwargs: Any) -> _Flow[Any]:
        """``transcript.<method>(tenant, transcript thread, *args)`` for what is not a
        turn's write (those go to the turn's own binding); when the cached thread is
        gone (another instance deleted it), look the key up again once."""
        from convmem.transcript.errors import ThreadNotFound

        key = (self.tenant, thread_id)
        for attempt in (1, 2):
            tid = yield from self._thread_flow(thread_id)
            try:
                return (yield _Transcript(method, (self.tenant, tid, *args), kwargs))
            except ThreadNotFound:
                if attempt == 2 or method not in _RETRY_ON_NEW_THREAD:
                    raise
                if self._threads.get(key) == tid:
                    del self._threads[key]
        raise AssertionError("unreachable")  # pragma: no cover

    def _user_message(self, record: _OpenRecord, sent_question: str | None) -> NewMessage:
        from convmem.transcript import NewMessage

        ours = question_provenance(record.text, record.state, record.message_id, sent_question)
        extra = {"convmem": ours} if ours else None
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
        record.tools.append(
            NewMessage(
                role="tool",
                content=[ToolResultPart(cid, clean_text(outcome.record_text()), not outcome.ok)],
            )
        )

    def _unrecorded(self, thread_id: str, what: str, exc: ConvMemError) -> None:
        """``raise`` mode: re-raise. ``degrade``: WARNING, count, and let the turn go on."""
        if self.on_transcript_error == "raise":
            raise exc
        self.stats.transcript_failures += 1
        log.warning("thread %r: %s not recorded; the turn goes on "
                    "(on_transcript_error='degrade'): %s", thread_id, what, exc)

    def _delete_flow(self, thread_id: str) -> _Flow[DeletionReceipt | None]:
        receipt: DeletionReceipt | None = None
        key = (self.tenant, thread_id)
        if self.transcript is not None:
            self._open.pop(key, None)
            receipt = yield from self._on_thread(thread_id, "delete_thread")
            self._threads.pop(key, None)
        yield _DeleteState()
        return receipt

    def _redact_flow(
        self, thread_id: str, message_id: str, actor: str, reason: str, replacement: str
    ) -> _Flow[RedactionReceipt]:
        found = yield from self._on_thread(thread_id, "get_messages", [message_id])
        receipt = yield from self._on_thread(
            thread_id, "redact", message_id, actor=actor, reason=reason, replacement=replacement
        )
        gone = _question_texts(found)
        if not gone:
            return receipt  # type: ignore[no-any-return]
        record = self._open.get((self.tenant, thread_id))
        if record is not None and (record.text in gone or record.question in gone):
            record.text = replacement
        elif record is not None and record.record is None:
            # not sent yet: the turn's model input must not quote the redacted question
            record.state = without_questions(record.state, gone)
            record.block = block_for(record.state)

        def compute(current: SessionState) -> tuple[SessionState | None, None]:
            scrubbed = without_questions(current, gone)
            return (None if scrubbed == current else scrubbed), None

        yield from self._save_with_retry(compute, f"redact {thread_id}")
        return receipt  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ helpers

    def _today(self, today: date | None) -> date:
        if today is not None:
            return today
        if self.clock is not None:
            return self.clock().date()
        return date.today()

    def _check(self, thread_id: str, question: str | None = None) -> None:
        check_thread_id(thread_id)
        if question is not None:
            if not isinstance(question, str):
                raise ConfigError(f"question must be a string, got {type(question).__name__}")
            if len(question) > MAX_QUESTION_CHARS:
                raise ConfigError(
                    f"question is {len(question)} characters; the limit is {MAX_QUESTION_CHARS}"
                )


def _with_version(result: T, version: int) -> T:
    """Results that carry the saved state get its new version."""
    if isinstance(result, SessionState):
        return result.evolve(version=version)  # type: ignore[return-value]
    if isinstance(result, Clarification):
        return replace(result, state=result.state.evolve(version=version))  # type: ignore[return-value]
    return result


def _placement(record: _OpenRecord) -> dict[str, Any]:
    """Where the turn's question goes: after the active leaf, or beside the edited one."""
    return {} if record.edit is None else {"parent_id": record.edit.parent_id}


#: Calls (not a turn's writes: those are bound to the thread the turn began on) that
#: may go to the key's current thread when the cached one was deleted by another
#: instance: they name a message, which must then be in the current thread.
_RETRY_ON_NEW_THREAD = frozenset(
    {"delete_thread", "get_messages", "reconstruct_model_input", "redact", "regenerate"}
)


def _optional_text(text: str | None, field: str) -> str | None:
    """Free text from the caller, normalised (``convmem.identity.clean_text``)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ConfigError(f"{field} must be a string, got {type(text).__name__}")
    return clean_text(text)


def _tool_input(
    name: str, args: Mapping[str, Any] | None, result: Any
) -> tuple[str, dict[str, Any], ToolResult]:
    """A tool call as the state and the record take it: name, arguments and the result's
    data normalised like all text at the edge (NUL, lone surrogates: spec §5)."""
    if not isinstance(name, str):
        raise ConfigError(f"record_tool: name must be a string, got {type(name).__name__}")
    outcome = ToolResult.parse(result)  # the contract: docs/tool-results.md
    data = clean_data(outcome.data)
    if data is not outcome.data:
        outcome = ToolResult(outcome.ok, data, outcome.text)
    return clean_text(name), clean_data(dict(args or {})), outcome


def question_provenance(
    text: str, state: SessionState, message_id: str | None, sent_question: str | None
) -> dict[str, Any]:
    """What a recorded user message keeps under ``extra["convmem"]``: the message id the
    state knows it by, the resolver's reading of it and the text sent in its place.

    Redaction and ``edit_turn`` find a question's other forms here (``_question_texts``),
    so every writer of a user message uses this (the façade's commit points, the
    LlamaIndex chat store's session view)."""
    ours: dict[str, Any] = {}
    if message_id is not None:
        ours["message_id"] = message_id
    ot = state.open_turn
    if ot is not None and ot.rewritten and ot.rewritten != text:
        ours["rewritten"] = ot.rewritten  # the resolver's reading (redaction reaches it)
    if sent_question and sent_question != text:
        ours["sent_as"] = sent_question
    return ours


def _forms_of(text: str, extra: Mapping[str, Any]) -> set[str]:
    """A recorded question as the state may hold it: as typed, as the resolver rewrote it
    and as it was sent (``extra["convmem"]``, written by ``_user_message``)."""
    gone = {text}
    ours = extra.get("convmem")
    if isinstance(ours, Mapping):
        gone.update(v for k in ("rewritten", "sent_as") if isinstance(v := ours.get(k), str))
    gone.discard("")
    return gone


def _question_texts(messages: list[Message]) -> set[str]:
    """The texts recorded questions stand for in a state (``_forms_of``)."""
    gone: set[str] = set()
    for message in messages:
        gone |= _forms_of(message.text, message.extra)
    return gone


def _state_questions(state: SessionState) -> set[str]:
    """Every question text a state carries, so a model input of it quotes."""
    found = set(state.recent_questions)
    if state.last_rewrite:
        found.add(state.last_rewrite)
    if state.pending is not None:
        found.add(state.pending.question)
    ot = state.open_turn
    if ot is not None:
        found.update((ot.question, ot.rewritten, ot.resolved_question))
        found |= _state_questions(ot.base)
    found.discard("")
    return found


def _quoted_ids(
    record: _OpenRecord, call: ModelCall, binding: TurnBinding
) -> list[str] | None:
    """The recorded user messages whose text the turn's block and snapshot quote: the
    links redaction follows (``ModelInput.quoted_message_ids``). ``None`` ("not known",
    and redaction scans the record instead) when the adapter sent a block of its own or
    a quoted question is not among the thread's recent user messages."""
    if call.block is not None and call.block != record.block:
        return None
    ot = record.state.open_turn
    own = {record.text, record.question}
    if ot is not None:
        own.update((ot.question, ot.rewritten, ot.resolved_question))
    rows = [
        (str(r["id"]), _forms_of(_row_text(r["parts"]), r["extra"] or {}))
        for r in binding.recent_user_messages
    ]
    ids: set[str] = set()
    for q in _state_questions(record.state):
        hits = [
            mid
            for mid, forms in rows
            if q in forms or (len(q) >= MAX_QUESTION_CHARS and any(f.startswith(q) for f in forms))
        ]
        if not hits and q not in own:
            return None
        ids.update(hits)
    return sorted(ids)


def _row_text(parts: Any) -> str:
    """A message row's text (its text parts, as ``Message.text`` joins them)."""
    return "\n".join(
        str(p.get("text", "")) for p in parts or () if isinstance(p, Mapping) and p.get("kind") == "text"
    )


def without_questions(state: SessionState, gone: set[str]) -> SessionState:
    """``state`` with the questions in ``gone`` taken out (redaction reaching live state):
    ``recent_questions``, ``last_rewrite`` when it rewrote one of them, an open turn or
    a pending clarification asking it, and the open turn's base state."""

    def hit(q: str | None) -> bool:
        if not q:
            return False
        return q in gone or (len(q) >= MAX_QUESTION_CHARS and any(g.startswith(q) for g in gone))

    last = state.last_rewrite
    if hit(last) or (state.recent_questions and hit(state.recent_questions[-1])):
        last = None
    ot = state.open_turn
    if ot is not None:
        if hit(ot.question) or hit(ot.resolved_question) or hit(ot.rewritten):
            ot = None
        else:
            ot = replace(ot, base=without_questions(ot.base, gone))
    pending = state.pending
    if pending is not None and hit(pending.question):
        pending = None
    return state.evolve(
        recent_questions=tuple(q for q in state.recent_questions if not hit(q)),
        last_rewrite=last,
        open_turn=ot,
        pending=pending,
    )
