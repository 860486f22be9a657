"""The shared identifier and text rule (``convmem.identity``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmem import ConfigError
from convmem.identity import (
    MAX_TENANT_CHARS,
    MAX_THREAD_ID_CHARS,
    check_tenant,
    check_thread_id,
    clean_text,
)


@pytest.mark.parametrize(
    "value",
    ["acme", "acme:eu", "{tenant}", "a*b?c[d]", "https://x.example/t/1?q=2#f", "Zoë Åström",
     "mail@example.com", "a b", "}{", "x" * MAX_TENANT_CHARS],
)
def test_separators_and_letters_are_legal(value: str) -> None:
    assert check_tenant(value) == value
    assert check_thread_id(value) == value


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (None, "must be a string"),
        (42, "must be a string"),
        ("", "non-empty"),
        ("   ", "non-empty"),
        ("a\x00b", "U+0000"),
        ("a\nb", "U+000A"),
        ("a\x7fb", "U+007F"),
        ("a\ud800b", "lone surrogate"),
        ("x" * (MAX_TENANT_CHARS + 1), "the limit is 200"),
    ],
)
def test_bad_tenants_are_config_errors_naming_the_field(value: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match="tenant") as info:
        check_tenant(value)
    assert fragment in str(info.value)


def test_thread_id_limit_is_its_own() -> None:
    check_thread_id("t" * MAX_THREAD_ID_CHARS)
    with pytest.raises(ConfigError, match=r"thread_id is 501 characters"):
        check_thread_id("t" * (MAX_THREAD_ID_CHARS + 1))


def test_clean_text_replaces_nul_and_lone_surrogates() -> None:
    assert clean_text("a\x00b\ud800c\udfffd") == "a\ufffdb\ufffdc\ufffdd"
    plain = "ordinary text, émoji 🙂"
    assert clean_text(plain) is plain


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
def test_clean_text_always_encodes(text: str) -> None:
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert "\x00" not in cleaned
    assert len(cleaned) == len(text)


#: Every character ``str.splitlines`` breaks a line at (LF, CR, VT, FF, U+001C-U+001E,
#: NEL, U+2028, U+2029), found by asking it, so a separator Python adds is caught too.
LINE_BREAKS = [chr(c) for c in range(0x110000)
               if not 0xD800 <= c <= 0xDFFF and len(f"a{chr(c)}b".splitlines()) > 1]


def test_the_line_breaks_are_the_known_ones() -> None:
    assert {f"U+{ord(c):04X}" for c in LINE_BREAKS} >= {"U+2028", "U+2029", "U+0085", "U+000B"}


@pytest.mark.parametrize("ch", LINE_BREAKS, ids=lambda c: f"U+{ord(c):04X}")
def test_every_line_break_is_refused_by_name(ch: str) -> None:
    """Issue 22, finding 9: U+2028 / U+2029 passed the rule that refused a newline."""
    for check, field in ((check_tenant, "tenant"), (check_thread_id, "thread_id")):
        with pytest.raises(ConfigError, match=field) as info:
            check(f"acme{ch}eu")
        message = str(info.value)
        assert f"U+{ord(ch):04X} " in message and "at position 4" in message
    if ch in "\u2028\u2029":
        assert ("LINE SEPARATOR" if ch == "\u2028" else "PARAGRAPH SEPARATOR") in message
