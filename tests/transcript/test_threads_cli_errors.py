"""``convmem threads`` and ``convmem demo --db`` with a careless operator at the keyboard:
no schema yet, a file that is not an export, a server that is not there, a delete
nobody confirmed. Each ends in one line (exit 2 for bad input, 1 for a failed
service or a "no"), never a traceback, and touches nothing it should not."""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from convmem.cli import main
from convmem.testing.servers import free_port
from convmem.testing.transcript_driver import FOREVER, rich_thread
from convmem.transcript import TranscriptStore

ROOT = Path(__file__).resolve().parents[2]


def convmem(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "convmem", *argv], capture_output=True, text=True,
        input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL, timeout=120,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def failed(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stderr


@pytest.fixture
def db(tmp_path: Path) -> tuple[str, str]:
    """(URL of a migrated SQLite record holding one rich thread, that thread's id)."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    store = TranscriptStore(url, retention=FOREVER)
    store.migrate()
    tid = rich_thread(store, "demo")
    store.close()
    return url, tid


# ----------------------------------------------------------------------------- no schema yet


@pytest.mark.sqlite
def test_a_missing_sqlite_file_says_how_to_create_it_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    err = failed(convmem("threads", "--db", f"sqlite:///{path}", "--tenant", "t", "list"), 2)
    assert f"convmem threads --db sqlite:///{path} migrate" in err
    assert not path.exists()


@pytest.mark.sqlite
def test_a_database_never_migrated_says_run_migrate(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    err = failed(convmem("threads", "--db", f"sqlite:///{path}", "--tenant", "t", "show", "x"), 2)
    assert "has no convmem schema yet; run `convmem threads --db" in err and "migrate`" in err


def test_an_unreachable_postgresql_is_one_line() -> None:
    url = f"postgresql://convmem@127.0.0.1:{free_port()}/nothing"
    err = failed(convmem("threads", "--db", url, "--tenant", "t", "list"), 1)
    assert "transcript database unavailable" in err
    failed(convmem("threads", "--db", url, "migrate"), 1)
    failed(convmem("demo", "--db", url), 1)


# ----------------------------------------------------------------------------- import files


def _export(db: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    url, tid = db
    assert main(["threads", "--db", url, "--tenant", "demo", "export", tid]) == 0
    return capsys.readouterr().out


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing", None, "cannot read (No such file or directory)"),
        ("directory", "DIR", "cannot read (Is a directory)"),
        ("truncated", "HALF", "not valid JSON at line 1"),
        ("latin1", b'{"format": "convmem.thread", "title": "caf\xe9"}', "not UTF-8 text (byte 42)"),
        ("nested", '{"thread":' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("empty", "", "empty; expected the JSON of `convmem threads export`"),
        ("array", "[1, 2]", "expected a JSON object (an export), got list"),
        ("other json", '{"hello": 1}', "not a convmem.thread document"),
    ],
)
def test_bad_import_files_are_one_line(
    db: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    name: str, content: str | bytes | None, message: str,
) -> None:
    url, _ = db
    path = tmp_path / "in.json"
    if content == "DIR":
        path.mkdir()
    elif content == "HALF":
        text = _export(db, capsys)
        path.write_text(text[: len(text) // 2])
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    code = main(["threads", "--db", url, "--tenant", "other", "import", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert main(["threads", "--db", url, "--tenant", "other", "list"]) == 0
    assert "has no threads" in capsys.readouterr().out  # nothing half-imported


@pytest.mark.sqlite
def test_truncated_import_in_a_child_process_has_no_traceback(
    db: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _export(db, capsys)
    (tmp_path / "cut.json").write_text(text[:-10])
    err = failed(convmem("threads", "--db", db[0], "--tenant", "x", "import", str(tmp_path / "cut.json")), 2)
    assert "(the file ends early: truncated?)" in err


# ----------------------------------------------------------------------------- list, delete, demo


@pytest.mark.sqlite
def test_list_is_a_table_and_says_when_a_tenant_has_none(
    db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, tid = db
    assert main(["threads", "--db", url, "--tenant", "demo", "list"]) == 0
    out = capsys.readouterr().out
    assert "threads of tenant 'demo'" in out and "thread_id" in out and "updated (UTC)" in out
    assert tid in out
    assert main(["threads", "--db", url, "--tenant", "nobody", "list"]) == 0
    assert capsys.readouterr().out.strip() == "tenant 'nobody' has no threads"


@pytest.mark.sqlite
def test_delete_asks_first(
    db: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, tid = db
    base = ["threads", "--db", url, "--tenant", "demo"]
    for answer in ("", "n\n", "yes please\n"):  # "": stdin at EOF, as in a script
        monkeypatch.setattr(sys, "stdin", io.StringIO(answer))
        assert main([*base, "delete", tid]) == 1
        out, err = capsys.readouterr()
        assert "Delete thread" in out and "nothing deleted (answer y, or pass --yes)" in err
    assert main([*base, "list"]) == 0 and tid in capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert main([*base, "delete", tid]) == 0
    assert f"deleted thread_id={tid}" in capsys.readouterr().out
    assert main([*base, "list"]) == 0 and "has no threads" in capsys.readouterr().out


@pytest.mark.sqlite
def test_delete_with_yes_does_not_ask(db: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url, tid = db
    assert main(["threads", "--db", url, "--tenant", "demo", "delete", tid, "--yes"]) == 0
    assert "Delete thread" not in capsys.readouterr().out


@pytest.mark.sqlite
def test_demo_db_prints_the_tenant_and_a_next_command_that_works(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    out = convmem("demo", "--db", url, "--tenant", "acme")
    assert out.returncode == 0, out.stderr
    (tid,) = re.findall(r"^thread_id=(\S+)$", out.stdout, flags=re.MULTILINE)
    assert re.search(r"^tenant=acme$", out.stdout, flags=re.MULTILINE)
    (next_command,) = re.findall(r"^next: convmem (.+)$", out.stdout, flags=re.MULTILINE)
    assert next_command == f"threads --db {url} --tenant acme show {tid}"
    shown = convmem(*next_command.split())
    assert shown.returncode == 0 and "●" in shown.stdout
    as_json = json.loads(convmem("demo", "--db", url, "--tenant", "acme", "--json").stdout)
    assert as_json["tenant"] == "acme" and as_json["thread_id"] != tid


@pytest.mark.sqlite
def test_a_tenant_with_a_control_character_is_refused(
    db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["threads", "--db", db[0], "--tenant", "a\x01b", "list"]) == 2
    assert "--tenant contains a control character" in capsys.readouterr().err


def test_threads_without_db_or_tenant_say_which(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CONVMEM_DATABASE_URL", raising=False)
    monkeypatch.delenv("CONVMEM_TENANT", raising=False)
    assert main(["threads", "list"]) == 2
    assert "give --db URL" in capsys.readouterr().err
    assert main(["threads", "--db", "sqlite:///x.db", "list"]) == 2
    assert "give --tenant T" in capsys.readouterr().err


def test_postgresql_without_the_driver_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the postgres extra were missing
    url = "postgresql://app@127.0.0.1:1/chat"
    assert main(["threads", "--db", url, "--tenant", "t", "list"]) == 2
    assert 'pip install "convmem[postgres]"' in capsys.readouterr().err
    assert main(["demo", "--db", url]) == 2
    assert 'pip install "convmem[postgres]"' in capsys.readouterr().err
