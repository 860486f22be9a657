"""``extra["convmem"]``: the note convmem keeps on a recorded user message, declared once.

A user's question lives in three forms: as typed (the message's text), as the resolver
rewrote it and as it was sent to the model in place of the typed text. The session
state and the model inputs keep the latter two, so the record keeps them too, in this
note, and every reader finds a question's forms here: the transcript's redaction (the
texts quote the message in other words, so they go wherever its text goes) and the
session façade (redaction reaching the live state, ``edit_turn``, the quoted-message
links of a model input). Writers: ``convmem.session.question_provenance`` (the façade's
commit points, the LlamaIndex chat store's session view).

Versioned: every note written carries ``version``; a note without one was written
before the note was declared (the same keys: version 1). Readers take the keys they
know at any version and ignore the rest, so a later version may only add keys. This
module imports nothing of the store: the session imports it without SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypedDict

__all__ = ["NOTE_KEY", "NOTE_VERSION", "QuestionNote", "derived_texts", "question_note", "read_note"]

#: The key of ``Message.extra`` that holds convmem's note.
NOTE_KEY: Final = "convmem"
#: The version this code writes.
NOTE_VERSION: Final = 1


class QuestionNote(TypedDict, total=False):
    """What ``extra["convmem"]`` holds (every key optional)."""

    version: int  # NOTE_VERSION when written; absent in notes written before version 1
    message_id: str  # the id the session state knows the message by (the framework's)
    rewritten: str  # the resolver's self-contained reading, when it differs from the text
    sent_as: str  # the text sent to the model in place of the typed one, when it differs


_TextKey = Literal["message_id", "rewritten", "sent_as"]
#: The note's keys that hold another form of the question's text.
_DERIVED: Final[tuple[_TextKey, ...]] = ("rewritten", "sent_as")


def question_note(
    text: str, *, message_id: str | None, rewritten: str | None, sent_as: str | None
) -> QuestionNote:
    """The note for a user message typed as ``text``; empty when there is nothing to
    note (no id, and the question was read and sent as typed)."""
    note = QuestionNote()
    if message_id is not None:
        note["message_id"] = message_id
    if rewritten and rewritten != text:
        note["rewritten"] = rewritten
    if sent_as and sent_as != text:
        note["sent_as"] = sent_as
    if note:
        note["version"] = NOTE_VERSION
    return note


def read_note(extra: Mapping[str, Any]) -> QuestionNote:
    """The note in a message's ``extra``: the declared keys that hold the declared type
    (a caller's ``extra`` may hold anything under our key); empty when there is none."""
    raw = extra.get(NOTE_KEY)
    if not isinstance(raw, Mapping):
        return QuestionNote()
    note = QuestionNote()
    version = raw.get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        note["version"] = version
    keys: tuple[_TextKey, ...] = ("message_id", *_DERIVED)
    for key in keys:
        value = raw.get(key)
        if isinstance(value, str):
            note[key] = value
    return note


def derived_texts(extra: Mapping[str, Any]) -> list[str]:
    """The other forms of a recorded question its note keeps (rewritten, sent as): the
    non-empty strings ``read_note`` would keep under those keys, read without building
    the note (a turn asks this of each of the thread's recent questions)."""
    raw = extra.get(NOTE_KEY)
    if not isinstance(raw, Mapping):
        return []
    return [text for key in _DERIVED if isinstance(text := raw.get(key), str) and text]
