"""``convmem threads``: export → import → export through the CLI, and every subcommand."""

from __future__ import annotations

from pathlib import Path

import pytest

from convmem.testing.transcript_driver import FOREVER, rich_thread
from convmem.transcript import NewMessage, TranscriptStore
from convmem.transcript.cli import main


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["threads", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.sqlite
def test_cli_round_trip_and_subcommands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    _cli(capsys, "--db", a, "migrate")
    _cli(capsys, "--db", b, "migrate")
    store = TranscriptStore(a, retention=FOREVER)
    tid = rich_thread(store, "demo")
    store.engine.dispose()
    monkeypatch.setenv("CONVMEM_TENANT", "demo")
    exported = _cli(capsys, "--db", a, "--tenant", "demo", "export", tid)
    (tmp_path / "a.json").write_text(exported, "utf-8")
    assert _cli(capsys, "--db", b, "--tenant", "demo", "import", str(tmp_path / "a.json")) == (
        f"thread_id={tid}\n"
    )
    assert _cli(capsys, "--db", b, "--tenant", "demo", "export", tid) == exported
    assert main(["threads", "--db", b, "--tenant", "demo", "import", str(tmp_path / "a.json")]) == 1
    assert "already exists" in capsys.readouterr().err
    shown = _cli(capsys, "--db", a, "--tenant", "demo", "show", tid, "--execution")
    assert "●" in shown and "○" in shown and "hello again" in shown and "[redacted]" in shown
    assert tid in _cli(capsys, "--db", a, "--tenant", "demo", "list")
    hits = _cli(capsys, "--db", a, "--tenant", "demo", "search", "seen")
    assert tid in hits
    user_view = _cli(capsys, "--db", a, "--tenant", "demo", "export", tid, "--user-view")
    assert '"format":"convmem.user_view"' in user_view
    dry = _cli(
        capsys,
        "--db",
        a,
        "--tenant",
        "demo",
        "sweep",
        "--default-max-age",
        "forever",
        "--owner",
        "ops",
    )
    assert "0 expired" in dry and "dry run" in dry
    deleted = _cli(capsys, "--db", b, "--tenant", "demo", "delete", tid, "--yes")
    assert f"deleted thread_id={tid} messages=6" in deleted
    assert main(["threads", "--db", b, "--tenant", "other", "show", tid]) == 1


@pytest.mark.postgres
@pytest.mark.sqlite
def test_cli_sqlite_export_imports_into_postgres(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    a = f"sqlite:///{tmp_path / 'a.db'}"
    _cli(capsys, "--db", a, "migrate")
    _cli(capsys, "--db", postgres_url, "migrate")
    store = TranscriptStore(a, retention=FOREVER)
    tid = rich_thread(store, "demo")
    store.engine.dispose()
    exported = _cli(capsys, "--db", a, "--tenant", "demo", "export", tid)
    (tmp_path / "a.json").write_text(exported, "utf-8")
    _cli(capsys, "--db", postgres_url, "--tenant", "cli-pg", "import", str(tmp_path / "a.json"))
    assert _cli(capsys, "--db", postgres_url, "--tenant", "cli-pg", "export", tid) == exported
    _cli(capsys, "--db", postgres_url, "--tenant", "cli-pg", "delete", tid, "--yes")


@pytest.mark.sqlite
def test_cli_import_refuses_a_hostile_document_from_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11: ``threads import -`` streams stdin (spooled, read twice) and a refusal
    is one line naming the JSON path, exit code 2 (a bad file), nothing written."""
    import io
    import json

    a = f"sqlite:///{tmp_path / 'a.db'}"
    _cli(capsys, "--db", a, "migrate")
    store = TranscriptStore(a, retention=FOREVER)
    tid = rich_thread(store, "demo")
    doc = json.loads(store.export_thread("demo", tid))
    store.delete_thread("demo", tid)
    doc["messages"][1]["parent_id"] = doc["messages"][1]["id"]  # a self-parent
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(doc).encode()), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    assert main(["threads", "--db", a, "--tenant", "demo", "import", "-"]) == 2
    err = capsys.readouterr().err
    assert "import refused: $.messages[1].parent_id" in err and "Traceback" not in err
    assert store.list_threads("demo") == []
    store.engine.dispose()


@pytest.mark.sqlite
def test_cli_index_moves_queued_search_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'q.db'}"
    _cli(capsys, "--db", db, "migrate")
    store = TranscriptStore(db, retention=FOREVER, search_index="deferred")
    for tenant in ("a", "b"):
        th = store.create_thread(tenant)
        store.append(tenant, th.id, [NewMessage(role="user", content=f"romeo {i}") for i in range(3)])
    assert main(["threads", "--db", db, "index"]) == 2
    assert "give --tenant T or --all-tenants" in capsys.readouterr().err
    assert _cli(capsys, "--db", db, "--tenant", "a", "index", "--batch", "2") == "indexed 3\n"
    assert _cli(capsys, "--db", db, "index", "--all-tenants") == "indexed 3\n"
    assert _cli(capsys, "--db", db, "index", "--all-tenants") == "indexed 0\n"
    store.engine.dispose()
