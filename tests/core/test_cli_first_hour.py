"""The ``convmem`` command in a user's first hour: init, domain check, eval's input,
help text, and one-line errors instead of tracebacks."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from convmem import ConfigError, load_domain
from convmem.cli import build_parser, main
from convmem.domain import domain_schema
from convmem.evaluation import domain_loader, read_sessions, replay
from tests.core.conftest import DATA

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -m convmem ARGV`` in a child process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "convmem", *argv], capture_output=True,
                          text=True, cwd=cwd, stdin=subprocess.DEVNULL, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def one_line_error(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


# ----------------------------------------------------------------------------- init


def test_init_writes_a_starter_domain_and_its_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "domain.json"
    assert main(["init", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"convmem domain check {target}" in out
    doc = json.loads(target.read_text())
    assert doc["$schema"] == "./domain.schema.json" and doc["$comment"]
    assert json.loads((tmp_path / "domain.schema.json").read_text()) == json.loads(domain_schema())
    domain = load_domain(target)
    assert domain.tools and domain.entities and domain.filters


def test_init_into_a_directory_and_never_overwrites_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path)]) == 0
    (tmp_path / "domain.json").write_text('{"name": "mine"}')
    assert main(["init", str(tmp_path / "domain.json")]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert load_domain(tmp_path / "domain.json").name == "mine"
    assert main(["init", str(tmp_path / "domain.json"), "--force"]) == 0
    assert load_domain(tmp_path / "domain.json").name == "starter"


def test_init_into_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    one_line_error(run("init", str(tmp_path / "nope" / "domain.json")))


def test_init_defaults_to_domain_json_in_the_current_directory(tmp_path: Path) -> None:
    assert run("init", cwd=tmp_path).returncode == 0
    assert load_domain(tmp_path / "domain.json").name == "starter"


# ----------------------------------------------------------------------------- domain check / schema


def test_domain_check_prints_what_the_domain_defines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["domain", "check", str(DATA / "domains" / "crm.json")]) == 0
    out = capsys.readouterr().out
    assert "domain 'crm' is valid" in out
    for text in ("customer", "30", "order", "20", "product", "12", "rep", "8",  # entity counts
                 "region", "vocab: apac, emea", "all regions",                # filters
                 "in a table", "lookup_customer", "customer: id, name",         # formats, tools
                 "period <- period"):
        assert text in out, text


def test_domain_check_json_and_bundled_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["domain", "check", "helpdesk", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["entities"] == {"application": 2, "device": 6, "employee": 5, "ticket": 3}
    assert doc["filters"]["period"] == "period" and doc["filters"]["site"] == ["lyon", "porto"]
    assert doc["tools"]["lookup_employee"]["focus"] == {
        "type": "employee", "id": "employee_id", "label": "full_name"}
    assert doc["tools"]["search_tickets"]["filters"]["status"] == "state"


def test_domain_check_reports_the_error_with_file_and_path(tmp_path: Path) -> None:
    p = tmp_path / "d.json"
    p.write_text('{"name": "x", "tools": [{"name": "t"}, {"name": "t"}]}')
    err = one_line_error(run("domain", "check", str(p)))
    assert str(p) in err and "$.tools[1].name: duplicate tool" in err


def test_domain_schema_prints_the_published_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["domain", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "convmem domain file"


# ----------------------------------------------------------------------------- eval input


def _session(turns: list[dict[str, object]]) -> str:
    return json.dumps({"id": "s1", "domain": "crm", "today": "2026-11-30", "turns": turns}) + "\n"


def test_eval_refuses_a_labelled_turn_without_expect(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text(_session([{"user": "How is Brightwater Farms doing?", "expect": {"focus": None}},
                           {"user": "And their rep?"}]))
    err = one_line_error(run("eval", str(p), "--domains", str(DATA / "domains")))
    assert f"{p}:1: $.turns[1].expect: expected an object" in err
    with pytest.raises(ConfigError, match=r"\$\.turns\[1\]\.expect"):
        replay([json.loads(p.read_text())], domain_loader(DATA / "domains"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"id": "s", "domain": "crm", "turns": [{"user": "Caf\xe9"}]}\n', "not UTF-8"),
        (b'{"id": "s", "domain": "crm", "turns": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
         "nested too deeply"),
        (b'{"id": "s", "domain": "crm", "turns": [{"user": "x", "exp', "not valid JSON"),
        (b'{"id": "s", "domain": "crm", "turns": [{"user": "x", "expect": {}, "tools": {}}]}\n',
         "$.turns[0].tools"),
    ],
)
def test_eval_bad_sessions_files_are_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "s.jsonl"
    p.write_bytes(content)
    assert message in one_line_error(run("eval", str(p), "--domains", str(DATA / "domains")))


def test_eval_a_directory_as_the_sessions_file(tmp_path: Path) -> None:
    assert "cannot read sessions file" in one_line_error(run("eval", str(tmp_path)))


def test_eval_uses_the_bundled_domains_by_default() -> None:
    sessions = read_sessions(DATA / "crm_dev.jsonl")
    bundled = replay(sessions, domain_loader(None)).summary()
    from_dir = replay(sessions, domain_loader(DATA / "domains")).summary()
    assert bundled["turns_fully_correct"] == from_dir["turns_fully_correct"] == 298


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nocolon", "expected module:factory"),
        ("no_such_module_xyz:make", "No module named"),
        ("json:no_such_factory", "has no attribute"),
        ("json:__doc__", "is not callable"),
        ("broken_resolver_mod:make", "importing broken_resolver_mod raised"),
        ("bad_factory_mod:make", "make() raised"),
        ("bad_factory_mod:not_a_resolver", "has no resolve/aresolve"),
    ],
)
def test_a_bad_resolver_is_one_line(tmp_path: Path, spec: str, message: str) -> None:
    (tmp_path / "broken_resolver_mod.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "bad_factory_mod.py").write_text(
        "def make():\n    raise ValueError('no API key')\n\ndef not_a_resolver():\n    return 42\n")
    proc = subprocess.run(
        [sys.executable, "-m", "convmem", "eval", str(DATA / "crm_dev.jsonl"), "--resolver", spec],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": f"{ROOT}:{tmp_path}"},
    )
    assert message in one_line_error(proc)


# ----------------------------------------------------------------------------- argument types


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["threads", "--db", "demo.db", "--tenant", "t", "list"], "use sqlite:///demo.db"),
        (["threads", "--db", "./data/x.sqlite", "list"], "use sqlite:///./data/x.sqlite"),
        (["threads", "--db", "not a url", "list"], "is not a database URL"),
        (["threads", "--db", "mysql://u@h/db", "list"], "unsupported database 'mysql'"),
        (["threads", "--db", "sqlite://", "list"], "SQLite needs a file"),
        (["demo", "--db", "demo.db"], "use sqlite:///demo.db"),
        (["threads", "--db", "sqlite:///x.db", "--tenant", "t", "list", "--limit", "-1"], "expected 1 or more"),
        (["threads", "--db", "sqlite:///x.db", "--tenant", "t", "list", "--limit", "0"], "expected 1 or more"),
        (["threads", "--db", "sqlite:///x.db", "--tenant", "t", "search", "q", "--limit", "ten"],
         "expected a whole number"),
        (["threads", "--db", "sqlite:///x.db", "sweep", "--default-max-age", "abc", "--owner", "o"],
         "expected a number of days"),
        (["threads", "--db", "sqlite:///x.db", "sweep", "--default-max-age", "nan", "--owner", "o"],
         "finite, non-negative"),
        (["threads", "--db", "sqlite:///x.db", "sweep", "--default-max-age", "-3", "--owner", "o"],
         "finite, non-negative"),
        (["threads", "--db", "sqlite:///x.db", "sweep", "--default-max-age", "1e300", "--owner", "o"],
         "longer than any retention"),
        (["threads", "--db", "sqlite:///x.db", "sweep", "--default-max-age", "2w", "--owner", "o"],
         "expected a number of days"),
        (["state", "--redis", "localhost:6379", "--tenant", "t", "show", "x"], "is not a Redis URL"),
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_durations_in_days() -> None:
    from convmem.cli import max_age_days

    assert max_age_days("1d") == 1 and max_age_days("30") == 30 and max_age_days("0.5d") == 0.5
    assert max_age_days(" Forever ") is None
    for bad in ("1h", "abc", "nan", "inf", "1e300", "-1", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            max_age_days(bad)


def test_a_usage_error_in_a_child_process_has_no_traceback() -> None:
    err = one_line_error(run("threads", "--db", "demo.db", "--tenant", "t", "list"))
    assert "use sqlite:///demo.db" in err


# ----------------------------------------------------------------------------- --help


def _parsers(parser: argparse.ArgumentParser, name: str = "convmem") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found += _parsers(sub, f"{name} {sub_name}")
    return found


def test_help_documents_every_option_and_lists_every_subcommand() -> None:
    parsers = _parsers(build_parser())
    names = {n for n, _ in parsers}
    assert {"convmem init", "convmem domain check", "convmem domain schema", "convmem eval",
            "convmem demo", "convmem state show", "convmem state reset", "convmem threads list",
            "convmem threads delete", "convmem threads migrate"} <= names
    for name, parser in parsers:
        text = parser.format_help()
        assert "``" not in text and ":func:" not in text, name  # no raw reST
        assert parser.description, f"{name} has no description"
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if isinstance(action, argparse._SubParsersAction):
                listed = {a.dest for a in action._choices_actions}
                assert listed == set(action.choices), f"{name}: subcommands without help"
                for sub in action.choices:
                    assert sub in text, f"{name} --help does not list {sub}"
                assert all(a.help for a in action._choices_actions), name
                continue
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)


def test_help_loads_neither_the_sql_stack_nor_rich_nor_redis() -> None:
    code = (
        "import sys\n"
        "from convmem.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "for argv in (['threads', '--help'], ['state', '--help'], ['domain', 'check', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'alembic', 'rich',"
        " 'redis', 'langchain_core', 'llama_index', 'aiosqlite', 'psycopg'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_render_stays_the_function_after_its_module_is_imported() -> None:
    code = ("import convmem.session, convmem, convmem.render; "
            "print(callable(convmem.render) and convmem.render.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "convmem.render"
