"""Issue 4's acceptance flow through the real ``convmem`` command, in subprocesses.

``convmem demo --db sqlite:///a.db`` prints ``thread_id=T``;
``convmem threads --db sqlite:///a.db --tenant demo export T > a.json``; import into a
fresh SQLite file (and into PostgreSQL), export again: the bytes equal ``a.json``.
``show`` draws the demo's edit and regeneration as branches, active path marked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import convmem

REPO = Path(convmem.__file__).resolve().parent.parent


def convmem_cli(*argv: str, stdout_to: Path | None = None) -> str:
    """Run ``python -m convmem ...``; returns stdout (or writes it, byte for byte, to a file)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env["COLUMNS"] = "200"  # rich wraps at 80 columns without a terminal
    env.pop("CONVMEM_DATABASE_URL", None)
    env.pop("CONVMEM_TENANT", None)
    cmd = [sys.executable, "-m", "convmem", *argv]
    if stdout_to is not None:
        with stdout_to.open("wb") as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, env=env, timeout=300)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        return ""
    run = subprocess.run(cmd, capture_output=True, env=env, timeout=300, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def demo_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """(a.db, T, a.json) made by ``convmem demo --db`` and ``convmem threads export``."""
    tmp = tmp_path_factory.mktemp("acceptance")
    a_db = tmp / "a.db"
    out = convmem_cli("demo", "--db", f"sqlite:///{a_db}")
    (thread_id,) = re.findall(r"^thread_id=(\S+)$", out, flags=re.MULTILINE)
    a_json = tmp / "a.json"
    convmem_cli(
        "threads", "--db", f"sqlite:///{a_db}", "--tenant", "demo", "export", thread_id,
        stdout_to=a_json,
    )
    return a_db, thread_id, a_json


def round_trip(url: str, thread_id: str, a_json: Path, again: Path) -> None:
    convmem_cli("threads", "--db", url, "migrate")
    imported = convmem_cli("threads", "--db", url, "--tenant", "demo", "import", str(a_json))
    assert imported.strip() == f"thread_id={thread_id}"
    convmem_cli(
        "threads", "--db", url, "--tenant", "demo", "export", thread_id, stdout_to=again
    )


@pytest.mark.sqlite
def test_demo_export_import_export_sqlite_to_sqlite(
    demo_export: tuple[Path, str, Path], tmp_path: Path
) -> None:
    _, thread_id, a_json = demo_export
    again = tmp_path / "b.json"
    round_trip(f"sqlite:///{tmp_path / 'b.db'}", thread_id, a_json, again)
    assert again.read_bytes() == a_json.read_bytes()


@pytest.mark.sqlite
@pytest.mark.postgres
def test_demo_export_import_export_sqlite_to_postgres(
    demo_export: tuple[Path, str, Path], tmp_path: Path, postgres_url: str
) -> None:
    _, thread_id, a_json = demo_export
    again = tmp_path / "pg.json"
    round_trip(postgres_url, thread_id, a_json, again)
    try:
        assert again.read_bytes() == a_json.read_bytes()
    finally:
        convmem_cli("threads", "--db", postgres_url, "--tenant", "demo", "delete", thread_id, "--yes")


@pytest.mark.sqlite
def test_demo_thread_holds_the_session_with_one_edit_and_one_regeneration(
    demo_export: tuple[Path, str, Path],
) -> None:
    import json

    _, _, a_json = demo_export
    doc = json.loads(a_json.read_text("utf-8"))
    messages = doc["messages"]
    by_id = {m["id"]: m for m in messages}
    questions = [m for m in messages if m["role"] == "user"]
    assert len(questions) == 7  # six scripted turns and the edited last question
    siblings: dict[str | None, list[str]] = {}
    for m in messages:
        siblings.setdefault(m["parent_id"], []).append(m["role"])
    branch_points = {p: roles for p, roles in siblings.items() if len(roles) > 1}
    assert sorted(branch_points.values()) == [["assistant", "assistant"], ["user", "user"]]
    # five scripted turns reached the model (one clarification came before any call), and
    # so did the edited question: six model inputs
    assert len(doc["model_inputs"]) == 6
    assert all(mi["rendered_block"] and mi["state_snapshot"] for mi in doc["model_inputs"])
    assert all(by_id[mi["user_message_id"]]["role"] == "user" for mi in doc["model_inputs"])
    # the edit is its own turn; both answers to it (first and regenerated) carry that turn
    edited = next(m for m in questions if "export a report to CSV" in m["parts"][0]["text"])
    answers = [m for m in messages if m["parent_id"] == edited["id"]]
    assert len(answers) == 2 and {a["turn_id"] for a in answers} == {edited["turn_id"]}
    assert edited["turn_id"] in {mi["id"] for mi in doc["model_inputs"]}
    assert sum(m["visibility"] == "execution" for m in messages) == 6  # 3 tool calls + results


@pytest.mark.sqlite
def test_show_draws_the_demo_branches_and_marks_the_active_path(
    demo_export: tuple[Path, str, Path],
) -> None:
    a_db, thread_id, _ = demo_export
    shown = convmem_cli(
        "threads", "--db", f"sqlite:///{a_db}", "--tenant", "demo", "show", thread_id
    )
    lines = shown.splitlines()

    def line_of(text: str) -> str:
        (line,) = [ln for ln in lines if text in ln]
        return line

    assert "○" in line_of("The Toronto one.")  # the question before the edit
    assert "●" in line_of("export a report to CSV?")  # the edit, on the active path
    assert "○" in line_of("Answer (edited question)")  # the answer before regeneration
    assert "●" in line_of("Answer (regenerated)")
    assert "●" in line_of("How is Brightwater Farms doing")
    assert sum("├──" in ln for ln in lines) == 2  # exactly two branch points
