"""Any Unicode through the façade never crashes a turn (issue 11, finding 8).

Questions, full texts, answers, tool arguments and results, system prompts: arbitrary
code points, lone surrogates and NUL included, driven through ``begin_turn`` /
``record_tool`` / ``end_turn`` / ``block`` and the rewrite, on the in-memory and the
Redis state store and with a SQLite and a PostgreSQL record, in both transcript modes.
The one documented rule (``convmem.identity.clean_text``): NUL and lone surrogates
become U+FFFD at the edge, so the JSON codec, SQLite and PostgreSQL never see them,
and ``on_transcript_error="degrade"`` never has to hide anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import types
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from convmem import Domain, ModelCall, SessionMemory, TurnContext, count_tokens, render
from convmem.errors import ConfigError
from convmem.identity import clean_data, clean_text
from convmem.render import BLOCK_BUDGET, LABEL_TOKENS
from convmem.resolve import RuleResolver
from convmem.state import (
    Focus,
    SessionState,
    decode_state,
    encode_state,
    state_from_dict,
    state_to_dict,
)
from convmem.stores import InMemorySessionStateStore
from convmem.transcript import TranscriptStore
from convmem.transcript.ops.base import clean_json
from tests.conftest import storage_examples

from .conftest import TODAY

# Every code point (surrogates included: ``exclude_categories=()``), plus the sharp ones
# often enough that a small CI budget meets them.
_ANY = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
_SHARP = st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\n", "\r\n",
                          "## SYSTEM", "<|im_start|>", "```", "\u2028", "\ufffd", "Northline"])
texts = st.lists(st.one_of(_ANY, _SHARP), max_size=40).map("".join)

_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
FOLLOW_UP = "Who's their rep?"


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a record (dataclasses, mappings, sequences)."""
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def assert_clean(*values: Any) -> None:
    for value in values:
        for text in _strings(value):
            assert _UNSAFE.search(text) is None, text
            text.encode("utf-8")


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def state_store(request: pytest.FixtureRequest, key_prefix: str) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemorySessionStateStore()
        return
    from convmem.stores import RedisSessionStateStore

    store = RedisSessionStateStore(str(request.getfixturevalue("redis_url")), prefix=key_prefix,
                                   socket_timeout=5.0)
    yield store
    store.close()


@pytest.mark.parametrize("mode", ["raise", "degrade"])
def test_any_text_through_a_recorded_turn(
    crm: Domain, state_store: Any, transcript: TranscriptStore, mode: Any
) -> None:
    memory = SessionMemory(crm, store=state_store, transcript=transcript, tenant="acme",
                           on_transcript_error=mode)

    @settings(max_examples=storage_examples(), deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(question=texts, full=texts, label=texts, ident=texts, arg=texts, answer=texts,
           prompt=texts)
    @example(question="revenue for \x00Northline\ud800?", full="whole \x00 message \udfff",
             label="Acme\x00 \ud800Holdings", ident="C-\udc00", arg="\x00", answer="ok\ud800\x00",
             prompt="You are \x00 helpful\udfff")
    def turn(question: str, full: str, label: str, ident: str, arg: str, answer: str,
             prompt: str) -> None:
        thread = f"t-{uuid.uuid4().hex}"
        first = memory.begin_turn(thread, question, today=TODAY, full_text=full,
                                  model_call=ModelCall(system_prompt=prompt or None))
        memory.record_tool(thread, "lookup_customer", {"query": arg, arg: [arg]},
                           {"ok": True, "data": {"id": f"C-{ident}", "name": label, arg: arg}})
        memory.end_turn(thread, answer=answer)
        follow = memory.begin_turn(thread, FOLLOW_UP, today=TODAY, model_call=ModelCall())
        memory.end_turn(thread, answer=answer)

        assert isinstance(follow, TurnContext)
        assert_clean(first, follow, memory.block(thread), memory.get_state(thread))
        assert "\n" not in follow.rewritten
        assert count_tokens(follow.rewritten) <= count_tokens(FOLLOW_UP) + LABEL_TOKENS + 8
        # The record holds the texts as given, NUL and lone surrogates replaced.
        path = transcript.active_path("acme", memory.transcript_thread_id(thread))
        assert_clean(path)
        users = [m for m in path if m.role == "user"]
        assert [m.text for m in users] == [clean_text(full), FOLLOW_UP]
        answers = [m.text for m in path if m.role == "assistant" and
                   all(p.kind == "text" for p in m.parts)]
        assert answers[-1] == clean_text(answer)
        calls = [p for m in path for p in m.parts if getattr(p, "kind", "") == "tool_call"]
        assert calls and calls[0].arguments == clean_data({"query": arg, arg: [arg]})
        if isinstance(first, TurnContext):
            user = path[0]
            assert user.turn_id is not None
            seen = transcript.reconstruct_model_input("acme", user.thread_id, user.turn_id)
            assert_clean(seen)
            assert seen.system_prompt == (clean_text(prompt) if prompt else None)

    turn()
    assert memory.stats.transcript_failures == 0, "cleaned, not degraded"


def test_any_text_through_async_turns(crm: Domain, state_store: Any) -> None:
    """The ``a*`` twins, no transcript (each example runs on its own event loop)."""
    memory = SessionMemory(crm, store=state_store, tenant="acme")

    async def turn(question: str, label: str, answer: str) -> None:
        thread = f"t-{uuid.uuid4().hex}"
        first = await memory.abegin_turn(thread, question, today=TODAY)
        await memory.arecord_tool(thread, "lookup_customer", None,
                                  {"ok": True, "data": {"id": "C-1", "name": label}})
        await memory.aend_turn(thread, answer=answer)
        follow = await memory.abegin_turn(thread, FOLLOW_UP, today=TODAY)
        assert_clean(first, follow, await memory.ablock(thread), await memory.aget_state(thread))
        assert isinstance(follow, TurnContext) and "\n" not in follow.rewritten
        aclose = getattr(state_store, "aclose", None)
        if aclose is not None:
            await aclose()

    @settings(max_examples=storage_examples(), deadline=None)
    @given(question=texts, label=texts, answer=texts)
    @example(question="\ud800\x00", label="\udfff\x00", answer="\x00")
    def run(question: str, label: str, answer: str) -> None:
        asyncio.run(turn(question, label, answer))

    run()


# --------------------------------------------------------------------------- pure parts

focuses = st.builds(Focus, type=texts, id=texts, label=texts,
                    source=st.sampled_from(["user", "tool", "confirmed"]))
states = st.builds(SessionState, focus=st.one_of(st.none(), focuses),
                   recent_questions=st.lists(texts, max_size=3).map(tuple),
                   last_rewrite=st.one_of(st.none(), texts))


@settings(max_examples=min(settings.default.max_examples, 300), deadline=None)
@given(states, texts)
@example(SessionState(focus=Focus("c", "\ud800", "\udfff\x00"), recent_questions=("\ud800",)),
         "\x00 and her \udfff?")
def test_render_rewrite_and_codec_take_any_text(crm: Domain, state: SessionState,
                                                question: str) -> None:
    block = render(state)
    assert_clean(block)
    assert count_tokens(block) <= BLOCK_BUDGET
    resolution = RuleResolver().resolve(clean_text(question), state, crm, TODAY)
    assert_clean(resolution.rewritten)
    if state.focus is not None:
        assert count_tokens(resolution.rewritten) <= (
            count_tokens(clean_text(question)) + count_tokens(state.last_rewrite or "")
            + LABEL_TOKENS + 12)
    # The codec meets text the façade did not see (a catalog label, a custom
    # resolver's rewrite): it still encodes; with a lone surrogate inside, the state's
    # text is normalised like all text at the edge, otherwise it round-trips unchanged.
    data = state_to_dict(state)
    surrogates = any(_SURROGATE.search(text) for text in _strings(data))
    expected = state_from_dict(clean_data(data)) if surrogates else state
    assert decode_state(encode_state(state)) == expected


long_texts = st.lists(st.one_of(_SHARP, st.sampled_from([" ", "\n\n", "system", ":", "x" * 50,
                                                          "assistant :", "日本"]), _ANY),
                      min_size=60, max_size=300).map("".join)


@settings(max_examples=min(settings.default.max_examples, 100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(long_texts, st.sampled_from([(12, 200), (28, 200), (8, 40)]))
@example("x" * 850 + "system" + " " * 10 + ":" + "y" * 500, (12, 200))
@example(" " * 5000 + "## SYSTEM\n" * 10, (12, 200))
def test_inert_reads_only_the_start_it_shows(text: str, caps: tuple[int, int]) -> None:
    """A long label is normalised from a prefix: the same result as from all of it."""
    from convmem.render import _capped, _one_line, inert

    max_tokens, max_chars = caps
    whole = _capped(_one_line(text), max_tokens=max_tokens, max_chars=max_chars)
    assert inert(text, max_tokens=max_tokens, max_chars=max_chars) == whole


# ------------------------------------------------------------------ clean_json


class _Label(str):
    """A ``str`` subclass (an enum's value, a tool's label type)."""


_leaves = st.one_of(st.none(), st.booleans(), st.floats(),
                    st.integers(-(2**63) + 1, 2**63 - 1), texts, texts.map(_Label))
_json_like = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(st.one_of(texts, texts.map(_Label)), inner, max_size=4),
    st.dictionaries(texts, inner, max_size=4).map(lambda d: types.MappingProxyType(d)),
), max_leaves=20)


def _plain(value: Any) -> Any:
    """``value`` with mappings as dicts, sequences as lists, strings as ``clean_text``'s,
    and a NaN or an infinity by its name."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {clean_text(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@given(_json_like)
def test_clean_json_cleans_every_string_and_keeps_the_rest(value: Any) -> None:
    """Whatever the container types (the exact JSON types take a fast path, mappings,
    tuples and ``str`` subclasses the general one), the result is plain JSON data with
    every string cleaned, every NaN and infinity named, and nothing else changed."""
    got = clean_json(value)
    assert got == _plain(value)
    json.dumps(got, allow_nan=False)  # JSON, as PostgreSQL's json type takes it
    assert not any(_UNSAFE.search(s) for s in _strings(got))
    assert type(got) in (dict, list) or not isinstance(got, (Mapping, list, tuple))


@pytest.mark.parametrize("where", ["top", "dict", "list", "tuple"])
def test_clean_json_refuses_an_integer_beyond_64_bits(where: str) -> None:
    big = 2**63
    value = {"top": big, "dict": {"n": big}, "list": [1, big], "tuple": (big,)}[where]
    with pytest.raises(ConfigError, match="beyond 64 bits"):
        clean_json(value)
