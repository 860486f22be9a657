"""Issue 22 on the durable record: values past what the record can hold, and import
entries that contradict the record they come with.

Each test failed on the code before the issue and passes after; all run on SQLite
and PostgreSQL, through the sync methods and their async twins.

- finding 1: a retention past 10,000 years (a deadline past year 9999) is a
  ``ConfigError`` at the API and an ``ImportRefused`` at import, and the sweep skips,
  logs and reports a thread whose stored policy cannot be read (an older version's)
  instead of stopping with a raw ``OverflowError`` for every tenant;
- finding 5: ``seq`` / ``next_seq`` above 2**30 are refused at import on both
  backends (PostgreSQL's integer column would overflow on the next appends);
- finding 8: a redaction log entry for an intact message, and a model input whose
  user message is not a user message, are refused at import (and the latter at
  ``begin_turn_record``).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from convmem.errors import ConfigError
from convmem.testing.transcript_spec import Api
from convmem.transcript import (
    ImportRefused,
    ModelInput,
    NewMessage,
    RecordCorrupt,
    RetentionPolicy,
    TranscriptStore,
)
from convmem.transcript.cli import main as cli_main
from convmem.transcript.models import THREADS
from tests.transcript import test_transcript_boundaries as boundaries

DAY = timedelta(days=1)
#: The longest retention (10,000 years), and the end of ``datetime``.
LONGEST = timedelta(days=3_650_000)
YEAR_9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)


# each test through the sync and the async API, with tenants of its own
api, new_tenant = boundaries.api, boundaries.new_tenant


def user(text: str) -> NewMessage:
    return NewMessage(role="user", content=text)


def bot(text: str) -> NewMessage:
    return NewMessage(role="assistant", content=text)


def exported(api: Api) -> dict[str, Any]:
    """The export of a thread with a question, an answer and a completed turn (whose
    user message is ``messages[2]`` and answer ``messages[3]``), nothing redacted."""
    tenant = new_tenant()
    th = api.create_thread(tenant)
    api.append(tenant, th.id, [user("hello"), bot("hi")])
    tr = api.begin_turn_record(tenant, th.id, user("and now?"), ModelInput(rendered_block="b"))
    api.complete_turn(tenant, th.id, tr.turn_id, [bot("now this")])
    doc: dict[str, Any] = json.loads(api.export_thread(tenant, th.id))
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "user", "assistant"]
    assert doc["redactions"] == [] and doc["thread"]["next_seq"] == 5
    return doc


def refusal(api: Api, doc: dict[str, Any]) -> ImportRefused:
    """The refusal of importing ``doc`` into a fresh tenant, which it leaves empty."""
    tenant = new_tenant()
    with pytest.raises(ImportRefused) as info:
        api.import_thread(tenant, json.dumps(doc))
    assert api.list_threads(tenant) == []
    return info.value


def plant_retention(store: TranscriptStore, tenant: str, thread_id: str, policy: Any) -> None:
    """A stored policy no API of this version writes (an older version's, a hand edit)."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(THREADS)
            .where(THREADS.c.tenant == tenant, THREADS.c.id == thread_id)
            .values(retention=policy)
        )


# --------------------------------------------------------------------------- finding 1


def test_a_retention_past_the_bound_is_a_config_error_and_the_longest_sweeps(api: Api) -> None:
    tenant = new_tenant()
    th = api.create_thread(tenant)
    with pytest.raises(ConfigError, match=r"RetentionPolicy\.max_age: .*3650000 days"):
        api.set_retention(
            tenant, th.id, RetentionPolicy(max_age=timedelta(days=999_999_999), owner="x")
        )
    with pytest.raises(ConfigError, match=r"RetentionPolicy\.max_age"):
        api.create_thread(tenant, retention=RetentionPolicy(max_age=LONGEST + DAY, owner="x"))
    with pytest.raises(ConfigError, match=r"RetentionPolicy\.max_age"):  # stored as 0 seconds
        RetentionPolicy(max_age=timedelta(milliseconds=500), owner="x")
    assert api.get_thread(tenant, th.id).retention is None
    # the longest policy there is: its deadline is past year 9999, and the sweep compares
    # ages, so it runs at any time a datetime can hold
    api.set_retention(tenant, th.id, RetentionPolicy(max_age=LONGEST, owner="x"))
    assert api.get_thread(tenant, th.id).retention == RetentionPolicy(max_age=LONGEST, owner="x")
    for scope in (tenant, None):
        report = api.sweep(scope, now=YEAR_9999)
        assert (tenant, th.id) not in report.expired
    short = api.create_thread(tenant, retention=RetentionPolicy(max_age=DAY, owner="x"))
    assert api.sweep(tenant, now=YEAR_9999).expired == ((tenant, short.id),)


@pytest.mark.parametrize("seconds", [2**62, 999_999_999 * 86_400, 3_650_000 * 86_400 + 1])
def test_an_imported_retention_past_the_bound_is_refused(api: Api, seconds: int) -> None:
    doc = exported(api)
    doc["thread"]["retention"] = {"legal_hold": False, "max_age_seconds": seconds, "owner": "x"}
    refused = refusal(api, doc)
    assert refused.path == "$.thread.retention.max_age_seconds"
    assert f"is {seconds}; must be between 1 and 315360000000" in refused.problem


def test_an_imported_retention_at_the_bound_sweeps(api: Api) -> None:
    doc = exported(api)
    doc["thread"]["retention"] = {
        "legal_hold": False, "max_age_seconds": 3_650_000 * 86_400, "owner": "x",
    }
    tenant = new_tenant()
    th = api.import_thread(tenant, json.dumps(doc))
    assert api.sweep(tenant, now=YEAR_9999).expired == ()
    assert api.get_thread(tenant, th.id).retention == RetentionPolicy(max_age=LONGEST, owner="x")


def test_the_sweep_skips_a_bad_stored_policy_and_goes_on(
    api: Api, transcript: TranscriptStore, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = new_tenant(), new_tenant()
    expiring = RetentionPolicy(max_age=DAY, owner="x")
    unrepresentable, too_long = api.create_thread(a), api.create_thread(a)
    plant_retention(transcript, a, unrepresentable.id,
                    {"legal_hold": False, "max_age_seconds": "1e400", "owner": "old"})
    plant_retention(transcript, a, too_long.id,
                    {"legal_hold": False, "max_age_seconds": "forever", "owner": "old"})
    # an older version's ages past the bound read as the bound: kept, never skipped
    kept_long, kept_huge = api.create_thread(a), api.create_thread(a)
    plant_retention(transcript, a, kept_long.id,
                    {"legal_hold": False, "max_age_seconds": 999_999_999 * 86_400, "owner": "old"})
    plant_retention(transcript, a, kept_huge.id,
                    {"legal_hold": False, "max_age_seconds": 2**62, "owner": "old"})
    a_old = api.create_thread(a, retention=expiring)
    b_old = api.create_thread(b, retention=expiring)
    bad = {(a, unrepresentable.id), (a, too_long.id)}
    later = datetime.now(timezone.utc) + 2 * DAY

    with caplog.at_level(logging.WARNING, logger="convmem.transcript"):
        everyone = api.sweep(None, now=later)  # a dry run: the run's database is shared
    assert {(a, a_old.id), (b, b_old.id)} <= set(everyone.expired)
    assert bad <= {(t, i) for t, i, _ in everyone.skipped}
    assert not bad & set(everyone.expired)
    logged = [r.getMessage() for r in caplog.records if r.name == "convmem.transcript"]
    assert any(unrepresentable.id in m and "skipped" in m for m in logged)
    assert any(too_long.id in m and "skipped" in m for m in logged)

    done = api.sweep(a, now=later, dry_run=False)
    assert done.expired == ((a, a_old.id),)
    assert {(t, i) for t, i, _ in done.skipped} == bad
    assert all("set_retention" in why and "max_age_seconds" in why for _, _, why in done.skipped)
    assert api.sweep(b, now=later, dry_run=False).expired == ((b, b_old.id),)
    assert {t.id for t in api.list_threads(b)} == set()

    url = transcript.engine.url.render_as_string(hide_password=False)
    argv = ["threads", "--db", url, "--tenant", a, "sweep", "--default-max-age", "forever",
            "--owner", "ops"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert f"skipped {a} {unrepresentable.id}" in out and f"skipped {a} {too_long.id}" in out

    # reading such a thread names the policy; set_retention mends it
    with pytest.raises(RecordCorrupt, match="set_retention"):
        api.get_thread(a, unrepresentable.id)
    api.set_retention(a, unrepresentable.id, None)
    api.set_retention(a, too_long.id, RetentionPolicy(max_age=LONGEST, owner="ops"))
    assert api.get_thread(a, unrepresentable.id).retention is None
    assert api.sweep(a, now=later).skipped == ()
    for kept in (kept_long, kept_huge):
        policy = api.get_thread(a, kept.id).retention
        assert policy is not None and policy.max_age == LONGEST and policy.owner == "old"


# --------------------------------------------------------------------------- finding 5


def test_sequence_numbers_past_the_bound_are_refused(api: Api) -> None:
    doc = exported(api)
    top = json.loads(json.dumps(doc))
    top["thread"]["next_seq"] = 2**31 - 1  # every later append would overflow on PostgreSQL
    refused = refusal(api, top)
    assert refused.path == "$.thread.next_seq"
    assert refused.problem == (
        f"is {2**31 - 1}; must be at most {2**30} (2**30), which leaves the thread room for "
        "appends in its integer column"
    )
    high = json.loads(json.dumps(doc))
    high["messages"][3]["seq"], high["thread"]["next_seq"] = 2**30 + 1, 2**30 + 2
    assert refusal(api, high).path == "$.messages[3].seq"

    # at the bound: imported, and appends still fit the column
    edge = json.loads(json.dumps(doc))
    edge["messages"][3]["seq"], edge["thread"]["next_seq"] = 2**30 - 1, 2**30
    tenant = new_tenant()
    th = api.import_thread(tenant, json.dumps(edge))
    assert [m.seq for m in api.append(tenant, th.id, [user("a"), bot("b")])] == [2**30, 2**30 + 1]
    assert [m.seq for m in api.append(tenant, th.id, user("c"))] == [2**30 + 2]


# --------------------------------------------------------------------------- finding 8


def test_a_made_up_redaction_of_an_intact_message_is_refused(api: Api) -> None:
    doc = exported(api)
    intact = doc["messages"][1]
    assert intact["redacted_at"] is None
    doc["redactions"].append({
        "id": "made-up", "message_id": intact["id"], "actor": "nobody", "reason": "cover",
        "at": "2026-01-01T00:00:00.000000Z",
        "affected": {"derived": [], "messages": [intact["id"]], "turns": []},
    })
    refused = refusal(api, doc)
    assert refused.path == "$.redactions[0].message_id"
    assert refused.problem == (
        "names $.messages[1], which is not redacted (its redacted_at is null): the log only "
        "records redactions that happened"
    )


def test_a_model_input_whose_user_message_is_an_assistant_message_is_refused(api: Api) -> None:
    doc = exported(api)
    doc["model_inputs"][0]["user_message_id"] = doc["messages"][3]["id"]  # the answer
    refused = refusal(api, doc)
    assert refused.path == "$.model_inputs[0].user_message_id"
    assert refused.problem == (
        "names $.messages[3], whose role is 'assistant': a model input's user message must "
        "have the role 'user'"
    )
    # nor does the API write one
    tenant = new_tenant()
    th = api.create_thread(tenant)
    with pytest.raises(ConfigError, match=r"user_message\.role is 'assistant'"):
        api.begin_turn_record(tenant, th.id, bot("not a question"), ModelInput())
    assert api.active_path(tenant, th.id) == []
