"""The state key layout (spec §5): one key per (tenant, thread), exactly one hash tag.

Properties over arbitrary identifiers, checked without a server: distinct pairs never
share a key, the pair reads back out of the key, and the cluster hash tag is the whole
encoded pair whatever braces the ids hold (so a thread lands on one slot, and one
tenant's threads spread over all of them).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from redis.crc import key_slot

from convmem.errors import ConfigError
from convmem.identity import MAX_TENANT_CHARS, MAX_THREAD_ID_CHARS
from convmem.stores.base import (
    KEY_FORMAT_VERSION,
    state_key,
    tenant_key_head,
    thread_of_key,
)

# Legal ids, biased towards the characters the layout gives a meaning to.
_SPECIAL = st.sampled_from(list(":{}%*?[]\\/ é3A7B7D25"))
_ANY = st.characters(exclude_categories=("Cc", "Cs"))
ids = st.lists(st.one_of(_SPECIAL, _ANY), min_size=1, max_size=40).map("".join).filter(
    lambda s: bool(s.strip()))


def test_layout_is_versioned_and_readable() -> None:
    assert KEY_FORMAT_VERSION == "v2"
    assert state_key("acme", "t1") == "convmem:v2:state:{acme:t1}"
    assert state_key("acme:eu", "42", "app") == "app:v2:state:{acme%3Aeu:42}"
    assert state_key("acme", "eu:42", "app") == "app:v2:state:{acme:eu%3A42}"
    assert state_key("a}b", "{%}") == "convmem:v2:state:{a%7Db:%7B%25%7D}"


@given(ids, ids, ids, ids)
def test_distinct_pairs_never_share_a_key(t1: str, th1: str, t2: str, th2: str) -> None:
    assert (state_key(t1, th1) == state_key(t2, th2)) == ((t1, th1) == (t2, th2))


@given(ids, ids)
def test_one_hash_tag_spans_the_whole_pair(tenant: str, thread_id: str) -> None:
    key = state_key(tenant, thread_id)
    assert key.count("{") == 1 and key.count("}") == 1 and key.endswith("}")
    tag = key[key.index("{") + 1 : -1]
    assert key_slot(key.encode()) == key_slot(tag.encode())
    head = tenant_key_head(tenant)
    assert key.startswith(head)
    assert thread_of_key(key, head) == thread_id


@given(ids, ids, ids)
@example("acme", "acme:eu", "42")
@example("acme", "acme%3Aeu", "42")
@example("a", "a*", "x")
def test_one_tenants_head_never_starts_another_tenants_key(
    tenant: str, other: str, thread_id: str
) -> None:
    if tenant != other:
        assert not state_key(other, thread_id).startswith(tenant_key_head(tenant))


@pytest.mark.parametrize(
    ("tenant", "thread_id", "field"),
    [("x" * (MAX_TENANT_CHARS + 1), "t", "tenant"), ("t", "x" * (MAX_THREAD_ID_CHARS + 1),
     "thread_id"), ("a\nb", "t", "tenant"), ("t", "\x00", "thread_id"), ("", "t", "tenant")],
)
def test_keys_exist_only_for_legal_ids(tenant: str, thread_id: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        state_key(tenant, thread_id)
