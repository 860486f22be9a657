"""The session-state codec: what every store keeps, and the version compare-and-set reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem.errors import CorruptState
from convmem.state import (
    MAX_STATE_BYTES,
    STATE_HEAD,
    FilterValue,
    Focus,
    OpenTurn,
    Option,
    PendingClarification,
    SessionState,
    decode_state,
    encode_state,
    state_to_dict,
    stored_version,
)

TEXT = st.text(max_size=80)

states = st.builds(
    SessionState,
    focus=st.one_of(st.none(), st.builds(Focus, type=TEXT, id=TEXT, label=TEXT,
                                         source=st.sampled_from(["user", "tool", "confirmed"]))),
    filters=st.dictionaries(TEXT, st.builds(FilterValue, value=TEXT,
                                            set_at_turn=st.integers(0, 10**6)), max_size=4),
    format=st.sampled_from([None, "short", "detailed", "table"]),
    recent_questions=st.lists(TEXT, max_size=3).map(tuple),
    turn=st.integers(0, 10**6),
    pending=st.one_of(st.none(), st.builds(
        PendingClarification, question=TEXT, prompt=TEXT,
        options=st.lists(st.builds(Option, type=TEXT, id=TEXT, label=TEXT,
                                   attrs=st.dictionaries(TEXT, TEXT, max_size=2)),
                         max_size=3).map(tuple),
        origin=st.sampled_from(["name", "tool"]), mention=st.one_of(st.none(), TEXT))),
    version=st.integers(0, 2**53 - 1),  # the stored version's rule (convmem.state)
    last_rewrite=st.one_of(st.none(), TEXT),
    salient=st.lists(st.builds(Focus, type=TEXT, id=TEXT, label=TEXT,
                               source=st.sampled_from(["user", "tool", "confirmed"])),
                     max_size=2).map(tuple),
)


def _with_open_turn(state: SessionState) -> SessionState:
    return state.evolve(open_turn=OpenTurn("q?", "q about X?", "m-1", state.evolve(turn=1)))


@settings(max_examples=300, deadline=None)
@given(states, st.booleans())
def test_round_trip_and_head(state: SessionState, open_turn: bool) -> None:
    if open_turn:
        state = _with_open_turn(state)
    raw = encode_state(state)
    assert decode_state(raw) == state
    assert raw.startswith(STATE_HEAD + str(state.version).encode())
    assert stored_version(raw) == state.version
    # Any other serialisation of the same object is still ours, with the same version.
    reordered = json.dumps(dict(reversed(state_to_dict(state).items()))).encode()
    assert decode_state(reordered) == state
    assert stored_version(reordered) == state.version


def test_encoding_is_compact_utf8() -> None:
    raw = encode_state(SessionState(recent_questions=("Café Ünter?",), version=7))
    assert raw.startswith(b'{"v":2,"version":7,"focus":null,')
    assert "Café Ünter?".encode() in raw and b" " not in raw.replace(b"Caf\xc3\xa9 ", b"")


@pytest.mark.parametrize(
    ("raw", "version"),
    [
        (None, 0),
        (b"", 0),
        (b"garbage", 0),
        (b"[1,2]", 0),
        (b'{"v":3,"version":4}', 0),  # another format
        (b'{"v":2,"version":4}', 4),  # format 2 (salient)
        (b'{"version":4,"v":2}', 4),
        (b'{"version":4,"v":true}', 0),
        (b'{"v":1}', 0),
        (b'{"version":"3","v":1}', 0),  # not a number
        (b'{"version":-3,"v":1}', 0),
        (b'{"version":true,"v":1}', 0),
        (b'{"version":3,"v":1}', 3),
        (b'{"v":1,"version":12}', 12),
        (b'{"v":1,"version":12,"focus":', 12),  # the head decides; loading it is corrupt
        (b'{"v":1,"version":5,"x":"' + b"y" * MAX_STATE_BYTES + b'"}', 0),  # too big
    ],
)
def test_stored_version(raw: bytes | None, version: int) -> None:
    assert stored_version(raw) == version


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe",
        b"[1,2]",
        b'{"v":3,"version":4}',
        b'{"v":true,"version":4}',
        b'{"v":1,"version":12,"focus":',
        b'{"v":2,"version":1,"salient":[{"type":"a","id":"1","label":"A"},'
        b'{"type":"b","id":"2","label":"B"},{"type":"c","id":"3","label":"C"}]}',  # over 2
        b'{"v":2,"version":1,"salient":{"type":"a"}}',
        b'{"v":2,"version":1,"salient":[null]}',
        b'{"v":2,"version":1,"salient":[{"type":"a","id":"1","label":"A","source":"x"}]}',
        b'{"v":1,"version":5,"version":6}',  # two versions: CAS and load would disagree
        b'{"v":1,"version":5,"x":"' + b"y" * MAX_STATE_BYTES + b'"}',
        b'{"v":1,"format":"poem"}',
    ],
)
def test_decode_rejects_what_is_not_a_state(raw: bytes) -> None:
    with pytest.raises(CorruptState):
        decode_state(raw)


def test_a_format_1_state_still_loads_without_salient() -> None:
    """Spec §5/§10: a value an older release wrote (format 1, no ``salient``) loads, keeps
    its version for compare-and-set, and is written back in the current format."""
    old = (b'{"v":1,"version":9,"focus":{"type":"customer","id":"C-1","label":"Acme",'
           b'"source":"tool"},"filters":{"period":{"value":"2026-Q3","set_at_turn":2}},'
           b'"format":"short","recent_questions":["How is Acme?"],"turn":2,"pending":null,'
           b'"last_rewrite":"How is Acme?","open_turn":null}')
    assert stored_version(old) == 9
    state = decode_state(old)
    assert state.focus == Focus("customer", "C-1", "Acme", "tool") and state.salient == ()
    assert state.version == 9 and state.filter_values() == {"period": "2026-Q3"}
    again = encode_state(state)
    assert again.startswith(b'{"v":2,"version":9,') and decode_state(again) == state
    # a "salient" member in a format-1 value is not read: format 1 has none
    assert decode_state(old[:-1] + b',"salient":[{"type":"a","id":"1","label":"A"}]}').salient == ()


def test_salient_round_trips() -> None:
    state = SessionState(focus=Focus("rep", "R-8", "Ben Carter", "tool"),
                         salient=(Focus("customer", "C-1", "Acme", "tool"),
                                  Focus("order", "O-1", "O-1", "user")), version=3)
    raw = encode_state(state)
    assert b'"salient":[{"type":"customer"' in raw and decode_state(raw) == state


def test_evolve_is_replace() -> None:
    from dataclasses import replace

    state = _with_open_turn(SessionState(focus=Focus("t", "1", "One"), turn=4, version=2))
    assert state.evolve(version=3, format="short") == replace(state, version=3, format="short")
    assert state.evolve() == state and state.evolve() is not state
    with pytest.raises(TypeError, match="no field"):
        state.evolve(versoin=3)
