"""Turn flows: the session state's side of a turn, written once for both drivers.

Each flow is a generator that yields its I/O as typed effects (``convmem.effects``:
load the state, resolve the question, compare-and-set save) and receives the results;
``perform`` runs them with the sync store and resolver, ``aperform`` with the async
ones. A compare-and-set conflict is
thrown back into the flow, which reloads and re-applies the turn (at most
``MAX_TRIES`` tries, then it goes on with the freshest state and logs): one loop,
``_save_with_retry``, for every flow that saves (``begin_turn`` resolves inside it).
Nothing here touches the transcript.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import date
from typing import Any, TypeVar

from convmem.domain import Domain
from convmem.effects import Effect, Flow, call, do, together, value_of
from convmem.errors import ConfigError, VersionConflict
from convmem.identity import clean_data, clean_text
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
from convmem.session.records import Clarification, SessionStats, TurnContext
from convmem.state import OpenTurn, Option, PendingClarification, SessionState, is_stored_cut
from convmem.stores.base import SessionStateStore
from convmem.tools import ToolResult

log = logging.getLogger("convmem.session")
_resolve_log = logging.getLogger("convmem.resolve")
#: What a turn falls back to when the configured resolver raises (spec §3 step 3).
_RULES = RuleResolver()

MAX_TRIES = 3
#: How many threads' open-turn states a SessionMemory keeps (oldest dropped first).
MAX_TURN_STATES = 4096

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Alongside:
    """A write made together with a flow's first save (one wait on I/O for both): the
    record's commit point at the same step of the turn. ``settle`` takes its outcome
    (its value or ``Failed``) before the save's is looked at, and says whether it
    was written."""

    effect: Effect[Any]
    settle: Callable[[Any], bool]


#: What gives the write to make with a try's save, from the state to save and the
#: try's result (``None``: nothing to make).
Side = Callable[[SessionState, Any], Alongside | None]


def _same_message(
    message_id: str | None, question: str, known_id: str | None, known_question: str
) -> bool:
    """The same user message again: by id when either side has one, else by text (a
    long one as the stored state keeps it on either side: ``is_stored_cut``)."""
    if message_id is not None or known_id is not None:
        return message_id == known_id
    return (question == known_question or is_stored_cut(known_question, question)
            or is_stored_cut(question, known_question))




def block_for(state: SessionState, recall_tool: str | None = None) -> str:
    """The block for the model: during an open turn, the *earlier* questions only;
    with ``recall_tool``, a line saying the model may look earlier answers up with it."""
    if state.open_turn is not None:
        return render(
            state, questions=state.open_turn.base.recent_questions, recall_tool=recall_tool
        )
    return render(state, recall_tool=recall_tool)


def _with_version(result: T, version: int) -> T:
    """Results that carry the saved state get its new version."""
    if isinstance(result, SessionState):
        return result.evolve(version=version)  # type: ignore[return-value]
    if isinstance(result, Clarification):
        return replace(result, state=result.state.evolve(version=version))  # type: ignore[return-value]
    return result


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


def _no_io(compute: Callable[[SessionState], R]) -> Callable[[SessionState], Flow[R]]:
    """``compute`` as a flow that yields nothing (for ``_save_with_retry``)."""

    def flow(current: SessionState) -> Flow[R]:
        yield from ()
        return compute(current)

    return flow


class TurnFlows:
    """The state-only flows of ``SessionMemory`` (its base class)."""

    domain: Domain
    config: PolicyConfig
    tenant: str
    store: SessionStateStore
    resolver: Resolver
    stats: SessionStats
    recall_tool: str | None  # the model is offered this recall tool: the block says so
    # (tenant, thread id) -> the state this process last saved while a turn was open:
    # the next step of that turn (the tool loop's begin_turn, record_tool, end_turn)
    # starts from it instead of a GET. Saves still compare-and-set on its version, so
    # a write from elsewhere makes them conflict and reload from the store.
    _turn_states: dict[tuple[str, str], SessionState]

    def _load(self, thread_id: str) -> Effect[SessionState | None]:
        return call(self.store.load, self.store.aload, self.tenant, thread_id)

    def _save(self, thread_id: str, state: SessionState, expected: int) -> Effect[int]:
        store = self.store
        return call(store.save, store.asave, self.tenant, thread_id, state, expected_version=expected)

    def _resolve(self, question: str, state: SessionState, today: date) -> Effect[Resolution]:
        resolver = self.resolver
        return call(resolver.resolve, resolver.aresolve, question, state, self.domain, today)

    def _fallback_resolve(
        self, question: str, state: SessionState, today: date, exc: Exception
    ) -> Effect[Resolution]:
        """The rule resolver's reading, when the configured resolver raised: logged
        (WARNING on ``convmem.resolve``) and counted in ``stats.resolver_failures``."""
        self.stats.resolver_failures += 1
        _resolve_log.warning(
            "resolver %s failed (%s: %.300s); using the rule resolver",
            type(self.resolver).__name__, type(exc).__name__, exc,
        )
        return call(_RULES.resolve, _RULES.aresolve, question, state, self.domain, today)

    def _save_with_retry(
        self,
        thread_id: str,
        compute: Callable[[SessionState], Flow[tuple[SessionState | None, T]]],
        what: str,
        *,
        recent: bool = True,
        loaded: SessionState | None = None,
        side: Side | None = None,
    ) -> Flow[T]:
        """The one compare-and-set loop: load, compute, save over the loaded version; on a
        conflict reload and recompute (``MAX_TRIES`` tries, then go on unsaved and log).

        ``compute`` is a flow (``begin_turn`` resolves inside it; ``_no_io`` wraps a
        plain function) returning the state to save (``None``: nothing to save) and the
        result; a result carrying the saved state gets its new version. ``recent``: the
        first try may start from this process's last save of the open turn
        (``_turn_states``) instead of loading it; ``loaded``: the first try starts from
        this state, loaded by the caller (with the record's binding, in one wait).
        ``side``: a write to make together with the first try's save (``Alongside``);
        once it is written, the first try's result is the flow's even if the save
        conflicts and a later try saves: what was written with it (the model input)
        is what the caller goes on with."""
        result: T | None = None
        first: T | None = None  # the first try's result, when its side write was written
        key = (self.tenant, thread_id)
        for attempt in range(1, MAX_TRIES + 1):
            current: SessionState | None = None
            if attempt == 1:
                current = loaded if loaded is not None else (
                    self._turn_states.get(key) if recent else None)
            if current is None:
                current = (yield from do(self._load(thread_id))) or SessionState()
            new, result = yield from compute(current)
            if new is None:
                return result if first is None else first
            self._turn_states.pop(key, None)  # kept again only if this save lands
            save = self._save(thread_id, new, current.version)
            extra = side(new, result) if side is not None and attempt == 1 else None
            try:
                if extra is None:
                    version = yield from do(save)
                else:
                    saved, outcome = yield from do(together(save, extra.effect))
                    if extra.settle(outcome):
                        first = result
                    version = value_of(saved)
            except VersionConflict:
                log.debug("%s: version conflict (try %d of %d)", what, attempt, MAX_TRIES)
                continue
            self._keep_turn_state(key, new, version)
            return _with_version(result if first is None else first, version)
        log.warning("%s: gave up saving after %d version conflicts; going on unsaved", what, MAX_TRIES)
        assert result is not None
        return result if first is None else first

    def _keep_turn_state(self, key: tuple[str, str], state: SessionState, version: int) -> None:
        """Remember a saved state while its turn is open (see ``_turn_states``)."""
        if state.open_turn is None:
            return  # the turn ended: the next one starts from the store
        states = self._turn_states
        states[key] = state.evolve(version=version)
        if len(states) > MAX_TURN_STATES:
            states.pop(next(iter(states)), None)  # oldest first

    def _begin_flow(
        self,
        thread_id: str,
        question: str,
        message_id: str | None,
        today: date,
        restore: Callable[[SessionState], SessionState] | None = None,
        *,
        loaded: SessionState | None = None,
        side: Side | None = None,
    ) -> Flow[Clarification | TurnContext]:
        """``restore`` (an edit) maps the loaded state to the one the turn starts from;
        the result is saved over the loaded one in the same compare-and-set. ``loaded``
        and ``side``: as ``_save_with_retry`` takes them (``side`` gets the turn's
        result as ``_result`` makes it)."""
        resolved: dict[int, tuple[str, Resolution]] = {}

        def compute(current: SessionState) -> Flow[tuple[SessionState | None, SessionState]]:
            # The same message again: the turn already began. An edit is the same turn
            # again only by message id (its text may repeat).
            ot = current.open_turn
            if (restore is None or message_id is not None) and ot is not None and _same_message(
                message_id, question, ot.message_id, ot.question
            ):
                return None, current
            origin = current if restore is None else restore(current)
            base = start_turn(origin, self.config).evolve(pending=None)
            chosen: Option | None = None
            pending = origin.pending
            asked = question
            if pending is not None:
                chosen = match_option(pending, question)
                if chosen is not None:
                    asked = pending.question
            key = current.version  # resolved again only when a conflict changed the state
            if key not in resolved or resolved[key][0] != asked:
                try:
                    resolution = yield from do(self._resolve(asked, base, today))
                except Exception as exc:  # a resolver failure never fails the turn
                    resolution = yield from do(self._fallback_resolve(asked, base, today, exc))
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
            return new, new

        state = yield from self._save_with_retry(
            thread_id, compute, f"begin_turn {thread_id}", recent=restore is None,
            loaded=loaded,
            side=None if side is None else (lambda new, _: side(new, self._result(thread_id, new))),
        )
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
            block=block_for(state, self.recall_tool),
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
    ) -> Flow[Clarification | None]:
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

        what = f"record_tool {thread_id}"
        return (yield from self._save_with_retry(thread_id, _no_io(compute), what))

    def _end_flow(
        self, thread_id: str, side: Side | None = None, own: OpenTurn | None = None
    ) -> Flow[SessionState]:
        """Close the open turn; with ``own`` (the turn this process began), only that
        one: after ``delete_thread`` the key's open turn may be a new conversation's."""
        if own is None:
            kept = self._turn_states.get((self.tenant, thread_id))
            own = None if kept is None else kept.open_turn

        def compute(current: SessionState) -> tuple[SessionState | None, SessionState]:
            ot = current.open_turn
            if ot is None or (own is not None and not _same_message(
                    own.message_id, own.question, ot.message_id, ot.question)):
                return None, current
            new = current.evolve(open_turn=None)
            return new, new

        return (yield from self._save_with_retry(thread_id, _no_io(compute), "end_turn", side=side))
