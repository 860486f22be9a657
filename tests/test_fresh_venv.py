"""A user's first hour, from the README only, in a fresh virtualenv.

Build the wheel as the README's Install section says, install it (no extras) into a new
virtualenv — dependencies come from pip's cache, else the index — and run the README's
Quick start there, outside the checkout: ``convmem init``, ``convmem domain check``, then
the agent on the starter domain. This proves what the editable install of the test
environment cannot: the package metadata, the console script and every data file
(examples, schema, vocabulary, stopwords, notices) are in the wheel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")

pytestmark = pytest.mark.slow


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def _blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip wheel --no-deps -w dist .`` (the README's line), from a copy of the checkout."""
    (line,) = [x for x in _blocks(_section("Install"), "bash")[1].splitlines() if "pip wheel" in x]
    argv = line.split("#")[0].split()
    assert argv[:2] == ["pip", "wheel"] and argv[-1] == "."
    dist = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    argv = [sys.executable, "-m", *argv[:-1], str(ROOT)]
    argv[argv.index("dist")] = str(dist)
    _run(argv, ROOT, env)
    (built,) = dist.glob("convmem-*.whl")
    return built


def test_the_wheel_carries_the_data_files_and_the_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(meta_name).decode())
    for name in ("convmem/examples/crm.json", "convmem/examples/crm_typed.json",
                 "convmem/examples/helpdesk.json",
                 "convmem/examples/starter.json", "convmem/data/domain.schema.json",
                 "convmem/data/stopwords_en.txt", "convmem/data/cl100k_base.tiktoken",
                 "convmem/data/NOTICE", "convmem/data/LICENSE-Apache-2.0", "convmem/py.typed",
                 "convmem/transcript/migrations/versions/0001_initial.py",
                 "langchain_convmem/py.typed", "llamaindex_convmem/py.typed"):
        assert name in names, name
    licenses = {n.rsplit("/", 1)[-1] for n in names if ".dist-info/licenses/" in n}
    assert {"LICENSE", "NOTICE", "LICENSE-Apache-2.0"} <= licenses
    assert meta["License-Expression"] == "MIT"
    assert set(meta.get_all("Provides-Extra")) == {"redis", "postgres", "langchain", "llamaindex"}
    requires = meta.get_all("Requires-Dist")
    for bound in ("langchain-core<2,>=1.0", "langchain<2,>=1.0", "langgraph<2,>=1.0",
                  "llama-index-core<0.15,>=0.14", "redis<9,>=5.0"):
        assert any(r.replace(" ", "").startswith(bound) for r in requires), bound
    assert not any(r.split(";")[0].strip().startswith(("pytest", "ruff", "mypy")) for r in requires)
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.10" in classifiers


def test_the_readme_quick_start_in_a_fresh_virtualenv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)], tmp_path, dict(os.environ))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], tmp_path, env)

    work = tmp_path / "app"
    work.mkdir()
    bash, python = _blocks(_section("Quick start"), "bash")[0], _blocks(_section("Quick start"), "python")[0]
    outputs = []
    for line in bash.splitlines():
        if line.strip().startswith("convmem"):
            outputs.append(_run(["bash", "-e", "-c", line], work, env, timeout=300))
    assert (work / "domain.json").is_file() and (work / "domain.schema.json").is_file()
    assert "domain 'starter' is valid" in outputs[1]
    (work / "agent.py").write_text(python)
    out = _run([str(venv / "bin" / "python"), "agent.py"], work, env, timeout=300)
    assert "Two accounts match \"Acme\"" in out and "Acme Corp" in out and "Globex" in out
    where = _run([str(venv / "bin" / "python"), "-c", "import convmem; print(convmem.__file__)"],
                 work, env)
    assert where.startswith(str(venv)), "the package under test must be the installed wheel"
