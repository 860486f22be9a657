"""``extra["convmem"]`` declared once: what the session writes is what redaction reads,
and notes written before the declaration (no ``version``) still read the same."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmem.session import question_provenance
from convmem.state import OpenTurn, SessionState
from convmem.testing.transcript_spec import FOREVER
from convmem.transcript import ModelInput, NewMessage, TranscriptStore
from convmem.transcript.provenance import (
    NOTE_KEY,
    NOTE_VERSION,
    derived_texts,
    question_note,
    read_note,
)

TYPED = "Who's their rep?"
REWRITTEN = "Who's Brightwater Farms's rep?"


def test_a_note_carries_its_version_and_only_the_forms_that_differ() -> None:
    assert question_note(TYPED, message_id=None, rewritten=TYPED, sent_as=TYPED) == {}
    note = question_note(TYPED, message_id="m1", rewritten=REWRITTEN, sent_as=None)
    assert note == {"message_id": "m1", "rewritten": REWRITTEN, "version": NOTE_VERSION}
    assert read_note({NOTE_KEY: dict(note)}) == note


def test_the_session_writes_the_declared_note() -> None:
    state = SessionState(open_turn=OpenTurn(TYPED, REWRITTEN, "m1", SessionState(), False, TYPED))
    note = question_provenance(TYPED, state, "m1", REWRITTEN)
    assert note == {"message_id": "m1", "rewritten": REWRITTEN, "sent_as": REWRITTEN,
                    "version": NOTE_VERSION}
    assert derived_texts({NOTE_KEY: dict(note)}) == [REWRITTEN, REWRITTEN]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, {}),
        ({NOTE_KEY: "not a mapping"}, {}),
        # written before the note was declared: no version, the same keys
        ({NOTE_KEY: {"rewritten": REWRITTEN}}, {"rewritten": REWRITTEN}),
        # a caller's extra may hold anything under our key: only declared keys of the
        # declared type are read; a later version's new keys are ignored
        ({NOTE_KEY: {"version": 2, "rewritten": 3, "sent_as": REWRITTEN, "new": "x"}},
         {"version": 2, "sent_as": REWRITTEN}),
        ({NOTE_KEY: {"version": True, "message_id": "m9"}}, {"message_id": "m9"}),
    ],
)
def test_read_note_takes_the_declared_keys_at_any_version(
    extra: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert read_note(extra) == expected
    note = read_note(extra)
    assert derived_texts(extra) == [t for k in ("rewritten", "sent_as") if (t := note.get(k))]


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
                    st.lists(st.text(max_size=3), max_size=2))


@given(st.one_of(_VALUES, st.dictionaries(
    st.sampled_from(["version", "message_id", "rewritten", "sent_as", "other"]), _VALUES)))
def test_derived_texts_reads_what_read_note_keeps(raw: Any) -> None:
    """``derived_texts`` reads the note's text forms without building the note: the
    same non-empty strings ``read_note`` keeps, for any value under our key."""
    extra = {NOTE_KEY: raw}
    note = read_note(extra)
    assert derived_texts(extra) == [t for k in ("rewritten", "sent_as") if (t := note.get(k))]


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def transcript(request: pytest.FixtureRequest) -> TranscriptStore:
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url"))
    store = TranscriptStore(url, retention=FOREVER)
    store.migrate()
    return store


@pytest.mark.parametrize("note", [{"rewritten": REWRITTEN},  # before the declaration
                                  {"rewritten": REWRITTEN, "version": NOTE_VERSION}])
def test_redaction_reaches_the_forms_a_note_keeps(
    transcript: TranscriptStore, note: dict[str, Any]
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    thread = transcript.get_or_create_thread(tenant, "th")
    user = NewMessage(role="user", content=TYPED, extra={NOTE_KEY: note})
    seen = ModelInput(rendered_block=f"# Earlier questions\n- {REWRITTEN}")
    turn = transcript.begin_turn_record(tenant, thread.id, user, seen)
    transcript.redact(tenant, thread.id, turn.user_message.id, actor="dpo", reason="request")
    block = transcript.reconstruct_model_input(tenant, thread.id, turn.turn_id).rendered_block
    assert REWRITTEN not in block and "[redacted]" in block
