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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Any, TypeVar

from convmem.domain import Domain
from convmem.errors import ConfigError, VersionConflict
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
from convmem.resolve import Resolution, Resolver, RuleResolver
from convmem.state import OpenTurn, Option, PendingClarification, SessionState
from convmem.stores.base import SessionStateStore
from convmem.stores.memory import InMemorySessionStateStore
from convmem.tools import ToolResult

log = logging.getLogger("convmem.session")

MAX_TRIES = 3
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


# I/O requests the turn generators yield.
@dataclass(frozen=True)
class _Load:
    pass


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


def block_for(state: SessionState) -> str:
    """The block for the model: during an open turn, the *earlier* questions only."""
    if state.open_turn is not None:
        return render(state.evolve(recent_questions=state.open_turn.base.recent_questions))
    return render(state)


class SessionMemory:
    """Session state for every thread of one tenant, kept in a ``SessionStateStore``."""

    def __init__(
        self,
        domain: Domain,
        *,
        store: SessionStateStore | None = None,
        transcript: Any | None = None,
        resolver: Resolver | None = None,
        config: PolicyConfig | None = None,
        clock: Callable[[], datetime] | None = None,
        tenant: str = "default",
    ) -> None:
        if not isinstance(domain, Domain):
            raise ConfigError(f"SessionMemory: domain must be a convmem.Domain, got {type(domain).__name__}")
        if not isinstance(tenant, str) or not tenant:
            raise ConfigError("SessionMemory: tenant must be a non-empty string")
        self.domain = domain
        self.store: SessionStateStore = store if store is not None else InMemorySessionStateStore()
        self.transcript = transcript
        self.resolver: Resolver = resolver if resolver is not None else RuleResolver()
        self.config = config if config is not None else PolicyConfig()
        self.clock = clock
        self.tenant = tenant

    # ------------------------------------------------------------------ public API (sync)

    def begin_turn(
        self, thread_id: str, question: str, *, message_id: str | None = None, today: date | None = None
    ) -> Clarification | TurnContext:
        """Resolve the user's message and update the state; idempotent per message."""
        self._check(thread_id, question)
        return self._drive(thread_id, self._begin_flow(thread_id, question, message_id, self._today(today)))

    def record_tool(
        self, thread_id: str, name: str, args: Mapping[str, Any] | None, result: Any
    ) -> Clarification | None:
        """Apply the domain's tool rule to one tool call; a candidate list asks which one."""
        self._check(thread_id)
        flow = self._tool_flow(thread_id, name, dict(args or {}), ToolResult.from_any(result))
        return self._drive(thread_id, flow)

    def end_turn(
        self, thread_id: str, *, answer: str | None = None, model_input: Any | None = None
    ) -> SessionState:
        """Close the turn. The answer is never kept in the state (it pollutes, §seed)."""
        self._check(thread_id)
        return self._drive(thread_id, self._end_flow())

    def get_state(self, thread_id: str) -> SessionState | None:
        self._check(thread_id)
        return self.store.load(self.tenant, thread_id)

    def reset(self, thread_id: str) -> None:
        self._check(thread_id)
        self.store.delete(self.tenant, thread_id)

    def block(self, thread_id: str) -> str:
        """The rendered block for the thread's current state (``""`` when empty)."""
        state = self.get_state(thread_id)
        return "" if state is None else block_for(state)

    # ------------------------------------------------------------------ public API (async)

    async def abegin_turn(
        self, thread_id: str, question: str, *, message_id: str | None = None, today: date | None = None
    ) -> Clarification | TurnContext:
        self._check(thread_id, question)
        return await self._adrive(
            thread_id, self._begin_flow(thread_id, question, message_id, self._today(today))
        )

    async def arecord_tool(
        self, thread_id: str, name: str, args: Mapping[str, Any] | None, result: Any
    ) -> Clarification | None:
        self._check(thread_id)
        flow = self._tool_flow(thread_id, name, dict(args or {}), ToolResult.from_any(result))
        return await self._adrive(thread_id, flow)

    async def aend_turn(
        self, thread_id: str, *, answer: str | None = None, model_input: Any | None = None
    ) -> SessionState:
        self._check(thread_id)
        return await self._adrive(thread_id, self._end_flow())

    async def aget_state(self, thread_id: str) -> SessionState | None:
        self._check(thread_id)
        return await self.store.aload(self.tenant, thread_id)

    async def areset(self, thread_id: str) -> None:
        self._check(thread_id)
        await self.store.adelete(self.tenant, thread_id)

    async def ablock(self, thread_id: str) -> str:
        state = await self.aget_state(thread_id)
        return "" if state is None else block_for(state)

    # ------------------------------------------------------------------ drivers

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
                    send = self.store.load(self.tenant, thread_id)
                elif isinstance(request, _Save):
                    send = self.store.save(
                        self.tenant, thread_id, request.state, expected_version=request.expected
                    )
                else:
                    send = self.resolver.resolve(request.question, request.state, self.domain, request.today)
            except VersionConflict as exc:
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
                    send = await self.store.aload(self.tenant, thread_id)
                elif isinstance(request, _Save):
                    send = await self.store.asave(
                        self.tenant, thread_id, request.state, expected_version=request.expected
                    )
                else:
                    send = await self.resolver.aresolve(
                        request.question, request.state, self.domain, request.today
                    )
            except VersionConflict as exc:
                throw = exc

    # ------------------------------------------------------------------ turn logic (once)

    def _save_with_retry(
        self, compute: Callable[[SessionState], tuple[SessionState | None, T]], what: str
    ) -> Generator[Any, Any, T]:
        """Load, compute, compare-and-set save; on conflict reload and recompute."""
        result: T | None = None
        for attempt in range(1, MAX_TRIES + 1):
            loaded = yield _Load()
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
        self, thread_id: str, question: str, message_id: str | None, today: date
    ) -> Generator[Any, Any, Clarification | TurnContext]:
        resolved: dict[int, tuple[str, Resolution]] = {}

        for attempt in range(1, MAX_TRIES + 1):
            loaded = yield _Load()
            current = loaded if loaded is not None else SessionState()
            same = self._same_turn(thread_id, current, question, message_id)
            if same is not None:
                return same
            base = start_turn(current, self.config).evolve(pending=None)
            chosen: Option | None = None
            pending = current.pending
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
            outcome = apply_resolution(base, resolution, self.config, confirmed=chosen)
            if isinstance(outcome, Clarify):
                new = outcome.state.evolve(
                    pending=outcome.pending,
                    open_turn=OpenTurn(question, "", message_id, base, True, asked),
                )
            else:
                rewritten = (
                    answer_rewrite(resolution, pending, chosen)
                    if pending is not None and chosen is not None
                    else resolution.rewritten
                )
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
        if ot is None:
            return None
        if message_id is not None and ot.message_id == message_id:
            return self._result(thread_id, state)
        if message_id is None and ot.message_id is None and ot.question == question:
            return self._result(thread_id, state)
        return None

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

    # ------------------------------------------------------------------ helpers

    def _today(self, today: date | None) -> date:
        if today is not None:
            return today
        if self.clock is not None:
            return self.clock().date()
        return date.today()

    def _check(self, thread_id: str, question: str | None = None) -> None:
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise ConfigError(f"thread_id must be a non-empty string, got {thread_id!r}")
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
