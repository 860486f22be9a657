"""``SessionMemory``: the façade adapters code against.

Public methods check their input, build a flow (``convmem.session.turns`` for the
state, ``convmem.session.recording`` for the record) and run it: the sync twin with
``convmem.effects.perform`` (the sync store, transcript and resolver), the async twin
with ``aperform`` (their async methods). Every effect is built by ``call`` from a
sync method and its ``a`` twin, so mypy checks both against the arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from convmem.domain import Domain
from convmem.effects import Flow, aperform, perform
from convmem.errors import ConfigError
from convmem.identity import check_tenant, check_thread_id, clean_text
from convmem.policy import PolicyConfig
from convmem.render import recall_line
from convmem.resolve import Resolver, RuleResolver
from convmem.session.recall import RECALL_TOOL, RecallHit, check_recall
from convmem.session.recording import ModelCallFor, RecordFlows, _OpenRecord
from convmem.session.records import (
    Clarification,
    ModelCall,
    OnTranscriptError,
    SessionStats,
    TurnContext,
    check_question,
)
from convmem.session.turns import _tool_input, block_for
from convmem.state import SessionState
from convmem.stores.base import SessionStateStore
from convmem.stores.memory import InMemorySessionStateStore
from convmem.text import stopwords
from convmem.tokens import encoding

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


def _load_package_data(domain: Domain) -> None:
    """Read the stopword list and tokenizer vocabulary, and index the catalog, now.

    All three are cached per process; loading them here, at construction, keeps file
    reads off the event loop on an async turn (they are lazy otherwise).
    """
    stopwords()
    encoding()
    _ = domain.catalog


class SessionMemory(RecordFlows):
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
        self.recall_tool: str | None = None  # see ``offering_recall``
        from convmem.transcript.thread_ids import ThreadIds  # no SQL: ids and one rule

        # (tenant, thread id) -> transcript thread id / the turn between its commit points.
        # Keyed by tenant too: per-tenant shallow copies (adapters) share these.
        self._threads = ThreadIds()
        self._open: dict[tuple[str, str], _OpenRecord] = {}
        self._bindings: dict[tuple[str, str], tuple[TurnBinding, SessionState]] = {}
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
        model_call: ModelCall | ModelCallFor | None = None,
        full_text: str | None = None,
    ) -> Clarification | TurnContext:
        """Resolve the user's message and update the state; idempotent per message.

        With a transcript and ``model_call``, commit point 1 is written before this
        returns (not for a clarification: the model is not called), in the same wait on
        I/O as the state's save; ``model_call`` may be a function of the turn's context
        (what the model is sent holds its block). ``full_text`` is the whole message
        for the record when ``question`` is a cut of it.
        """
        self._check(thread_id, question)
        flow = self._turn_flow(
            thread_id, question, message_id, self._today(today), model_call, full_text
        )
        return perform(flow)

    def edit_turn(
        self,
        thread_id: str,
        original_id: str,
        question: str,
        *,
        message_id: str | None = None,
        today: date | None = None,
        model_call: ModelCall | ModelCallFor | None = None,
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
        return perform(flow)

    def regenerate(
        self, thread_id: str, answer_id: str, answer: str | NewMessage
    ) -> Message:
        """Record a new answer to the turn that produced ``answer_id`` (a sibling, made
        active, carrying the same ``turn_id``: one model input, two answers). The
        session state is not touched: answers are never kept in it."""
        self._check(thread_id)
        return perform(self._regenerate_flow(thread_id, answer_id, answer))

    def record_model_input(self, thread_id: str, call: ModelCall) -> TurnRecord | None:
        """Commit point 1 for the open turn, right before the model is called.

        Idempotent per turn: the first call writes it, later ones (the next steps of a
        tool loop) return the same record. ``None`` without a transcript, or when the
        write failed under ``on_transcript_error="degrade"``.
        """
        self._check(thread_id)
        return perform(self._model_input_flow(thread_id, call))

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
        return perform(self._checked_tool_flow(thread_id, name, args, result, call_id))

    def end_turn(self, thread_id: str, *, answer: str | None = None) -> SessionState:
        """Close the turn. The answer is never kept in the state (it pollutes, §seed);
        with a transcript it is recorded (commit point 2)."""
        self._check(thread_id)
        return perform(self._finish_flow(thread_id, answer))

    def get_state(self, thread_id: str) -> SessionState | None:
        """The thread's session state; ``None`` when it has none (never begun, reset,
        expired, or the store is down and degrading)."""
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
        return "" if state is None else block_for(state, self.recall_tool)

    def state_only(self) -> SessionMemory:
        """This memory without its transcript: the same state store, tenant, domain and
        policy, recording nothing. For a caller that writes the record itself and only
        needs the session state driven (``ConvMemChatMessageHistory``'s session view)."""
        view = copy.copy(self)
        view.transcript = None
        view._tenants = {view.tenant: view}  # its tenant views record nothing either
        return view

    def offering_recall(self, tool: str | None = RECALL_TOOL) -> SessionMemory:
        """This memory for an agent that offers the model the recall tool ``tool``
        (``recall``): every block then says, in one line, that earlier answers can be
        looked up with it. The same store, transcript, turns in progress and tenant
        views' state; ``None`` gives the view without the line."""
        if tool is not None:
            recall_line(tool)  # a tool identifier, else ConfigError
        if tool == self.recall_tool:
            return self
        view = copy.copy(self)
        view.recall_tool = tool
        view._tenants = {view.tenant: view}  # its tenant views offer the tool too
        return view

    def transcript_thread_id(self, thread_id: str) -> str:
        """The transcript thread recording ``thread_id`` (created on first use)."""
        self._check(thread_id)
        return perform(self._thread_flow(thread_id))

    def delete_thread(self, thread_id: str) -> DeletionReceipt | None:
        """Erase the thread: its whole record (when a transcript is configured) and its
        session-state key. Never degraded: an erasure that cannot reach the record
        raises ``TranscriptUnavailable`` and leaves the state key for a retry."""
        self._check(thread_id)
        return perform(self._delete_flow(thread_id))

    def recall(
        self, thread_id: str, query: str, *, limit: int = 5, include_tools: bool = False
    ) -> list[RecallHit]:
        """What was said earlier in the thread that matches ``query``: the user's messages
        and the answers on its active path, best first (``convmem.session.recall``).

        For the model's ``recall_conversation`` tool: the prompt never holds old answers.
        ``include_tools`` adds tool results. Needs a transcript (``ConfigError``).
        """
        self._check(thread_id)
        query, limit = check_recall(query, limit)
        return perform(self._recall_flow(thread_id, query, limit, include_tools))

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
        return perform(self._checked_redact_flow(thread_id, message_id, actor, reason, replacement))

    # ------------------------------------------------------------------ public API (async)

    async def abegin_turn(
        self,
        thread_id: str,
        question: str,
        *,
        message_id: str | None = None,
        today: date | None = None,
        model_call: ModelCall | ModelCallFor | None = None,
        full_text: str | None = None,
    ) -> Clarification | TurnContext:
        """The async twin of ``begin_turn``: the same flow; store, resolver and record awaited."""
        self._check(thread_id, question)
        flow = self._turn_flow(
            thread_id, question, message_id, self._today(today), model_call, full_text
        )
        return await aperform(flow)

    async def aedit_turn(
        self,
        thread_id: str,
        original_id: str,
        question: str,
        *,
        message_id: str | None = None,
        today: date | None = None,
        model_call: ModelCall | ModelCallFor | None = None,
        full_text: str | None = None,
    ) -> Clarification | TurnContext:
        """The async twin of ``edit_turn``: the same flow; record, resolver and store awaited."""
        self._check(thread_id, question)
        flow = self._edit_flow(
            thread_id, original_id, question, message_id, self._today(today), model_call,
            full_text,
        )
        return await aperform(flow)

    async def aregenerate(
        self, thread_id: str, answer_id: str, answer: str | NewMessage
    ) -> Message:
        """The async twin of ``regenerate``: the same flow; the record awaited."""
        self._check(thread_id)
        return await aperform(self._regenerate_flow(thread_id, answer_id, answer))

    async def arecord_model_input(self, thread_id: str, call: ModelCall) -> TurnRecord | None:
        """The async twin of ``record_model_input``: the same flow; the record awaited."""
        self._check(thread_id)
        return await aperform(self._model_input_flow(thread_id, call))

    async def arecord_tool(
        self,
        thread_id: str,
        name: str,
        args: Mapping[str, Any] | None,
        result: Any,
        *,
        call_id: str | None = None,
    ) -> Clarification | None:
        """The async twin of ``record_tool``: the same flow; the state store awaited."""
        return await aperform(self._checked_tool_flow(thread_id, name, args, result, call_id))

    async def aend_turn(self, thread_id: str, *, answer: str | None = None) -> SessionState:
        """The async twin of ``end_turn``: the same flow; record and state store awaited."""
        self._check(thread_id)
        return await aperform(self._finish_flow(thread_id, answer))

    async def aget_state(self, thread_id: str) -> SessionState | None:
        """The async twin of ``get_state``: the state store awaited."""
        self._check(thread_id)
        return await self.store.aload(self.tenant, thread_id)

    async def areset(self, thread_id: str) -> None:
        """The async twin of ``reset``: the state store awaited."""
        self._check(thread_id)
        self._turn_states.pop((self.tenant, thread_id), None)
        await self.store.adelete(self.tenant, thread_id)

    async def ablock(self, thread_id: str) -> str:
        """The async twin of ``block``: the state store awaited."""
        state = await self.aget_state(thread_id)
        return "" if state is None else block_for(state, self.recall_tool)

    async def atranscript_thread_id(self, thread_id: str) -> str:
        """The async twin of ``transcript_thread_id``: the record awaited."""
        self._check(thread_id)
        return await aperform(self._thread_flow(thread_id))

    async def adelete_thread(self, thread_id: str) -> DeletionReceipt | None:
        """The async twin of ``delete_thread``: the same flow; record and store awaited."""
        self._check(thread_id)
        return await aperform(self._delete_flow(thread_id))

    async def arecall(
        self, thread_id: str, query: str, *, limit: int = 5, include_tools: bool = False
    ) -> list[RecallHit]:
        """The async twin of ``recall``: the same flow; the record awaited."""
        self._check(thread_id)
        query, limit = check_recall(query, limit)
        return await aperform(self._recall_flow(thread_id, query, limit, include_tools))

    async def aredact(
        self,
        thread_id: str,
        message_id: str,
        *,
        actor: str,
        reason: str,
        replacement: str = "[redacted]",
    ) -> RedactionReceipt:
        """The async twin of ``redact``: the same flow; record and state store awaited."""
        return await aperform(
            self._checked_redact_flow(thread_id, message_id, actor, reason, replacement)
        )

    # ------------------------------------------------------------------ twins' arguments
    # The flow a public method and its async twin both run, from their arguments checked
    # and normalised once here, where that takes more than ``_check``.

    def _checked_tool_flow(
        self,
        thread_id: str,
        name: str,
        args: Mapping[str, Any] | None,
        result: Any,
        call_id: str | None,
    ) -> Flow[Clarification | None]:
        self._check(thread_id)
        name, arguments, outcome = _tool_input(name, args, result)
        self._note_tool(thread_id, call_id, name, arguments, outcome)
        return self._tool_flow(thread_id, name, arguments, outcome)

    def _checked_redact_flow(
        self, thread_id: str, message_id: str, actor: str, reason: str, replacement: str
    ) -> Flow[RedactionReceipt]:
        self._check(thread_id)
        actor, reason, replacement = clean_text(actor), clean_text(reason), clean_text(replacement)
        return self._redact_flow(thread_id, message_id, actor, reason, replacement)

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
            check_question(question)
