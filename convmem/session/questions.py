"""Questions in the record: what a recorded user message notes about itself, which
recorded questions a model input quotes, and taking redacted questions out of a state.

A question lives in three forms: as typed, as the resolver rewrote it and as it was
sent to the model. The session state keeps the latter two; the record keeps the first
as the message's text and the others in its ``extra["convmem"]`` note, so redaction
and ``edit_turn`` can find every form of a question again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from convmem.session.records import MAX_QUESTION_CHARS, ModelCall
from convmem.state import SessionState, is_stored_cut

if TYPE_CHECKING:
    from convmem.session.recording import _OpenRecord
    from convmem.transcript import Message, TurnBinding
    from convmem.transcript.provenance import QuestionNote


def question_provenance(
    text: str, state: SessionState, message_id: str | None, sent_question: str | None
) -> QuestionNote:
    """What a recorded user message keeps under ``extra["convmem"]``
    (``convmem.transcript.provenance``): the message id the state knows it by, the
    resolver's reading of it and the text sent in its place.

    Redaction and ``edit_turn`` find a question's other forms there (``_question_texts``),
    so every writer of a user message uses this (the façade's commit points, the
    LlamaIndex chat store's session view)."""
    from convmem.transcript.provenance import question_note

    ot = state.open_turn
    rewritten = ot.rewritten if ot is not None else None
    return question_note(text, message_id=message_id, rewritten=rewritten, sent_as=sent_question)


def _forms_of(text: str, extra: Mapping[str, Any]) -> set[str]:
    """A recorded question as the state may hold it: as typed, as the resolver rewrote it
    and as it was sent (its ``extra["convmem"]`` note)."""
    from convmem.transcript.provenance import derived_texts

    gone = {text, *derived_texts(extra)}
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
        hits = [mid for mid, forms in rows if _stands_for(q, forms)]
        if not hits and q not in own:
            return None
        ids.update(hits)
    return sorted(ids)


def _quoted_forms(record: _OpenRecord, message_ids: tuple[str, ...]) -> set[str]:
    """The forms (``_forms_of``) of the quoted user messages ``message_ids``, as the
    turn's binding read them, but not the turn's own question."""
    wanted = set(message_ids)
    rows = () if record.binding is None else record.binding.recent_user_messages
    gone: set[str] = set()
    for r in rows:
        if r["id"] in wanted:
            gone |= _forms_of(_row_text(r["parts"]), r["extra"] or {})
    ot = record.state.open_turn
    gone -= {record.text, record.question}
    if ot is not None:
        gone -= {ot.question, ot.rewritten, ot.resolved_question}
    return gone


def _stands_for(q: str, texts: set[str]) -> bool:
    """Whether the state's question ``q`` is one of ``texts``, or the cut-off start of
    one: a question at ``MAX_QUESTION_CHARS`` may have been longer where it came from, and
    a stored state keeps a long one cut (``is_stored_cut``)."""
    return q in texts or any(
        t.startswith(q) and (len(q) >= MAX_QUESTION_CHARS or is_stored_cut(q, t)) for t in texts)


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
        return _stands_for(q, gone)

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
