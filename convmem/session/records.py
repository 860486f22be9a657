"""The façade's public records: what a turn returns and what the adapters hand in.

``TurnContext`` (the model is called) and ``Clarification`` (it is not) are what
``begin_turn`` returns; ``ModelCall`` is what an adapter says the model is about to
receive, normalised and checked here once so the record keeps plain JSON;
``SessionStats`` counts what the façade degraded; ``check_question`` is the rule every
question passes (a string of at most ``MAX_QUESTION_CHARS``). Plain frozen dataclasses,
no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from convmem.errors import ConfigError
from convmem.identity import clean_data, clean_text
from convmem.state import Option, SessionState

OnTranscriptError = Literal["raise", "degrade"]

MAX_QUESTION_CHARS = 4000


def check_question(question: object) -> str:
    """``question`` when it is a string within ``MAX_QUESTION_CHARS``, else ``ConfigError``."""
    if not isinstance(question, str):
        raise ConfigError(f"question must be a string, got {type(question).__name__}")
    if len(question) > MAX_QUESTION_CHARS:
        raise ConfigError(
            f"question is {len(question)} characters; the limit is {MAX_QUESTION_CHARS}"
        )
    return question


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
    resolver_failures: int = 0  # turns the configured resolver raised on (rules answered)


def _optional_text(text: str | None, field: str) -> str | None:
    """Free text from the caller, normalised (``convmem.identity.clean_text``)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ConfigError(f"{field} must be a string, got {type(text).__name__}")
    return clean_text(text)
