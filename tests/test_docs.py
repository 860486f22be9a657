"""Every code block in README.md and docs/*.md runs as pasted.

The convention, for anyone adding a block (tests/README.md repeats it):

* ```python blocks run, each in a fresh namespace with a fresh temporary directory as
  the working directory: imports included, no network, no API key (use a scripted
  model). Top-level ``await`` works, as in ``python -m asyncio`` or a notebook.
* A block that builds on the one before starts with the visible line
  ``# continues the previous block`` and runs in that block's namespace and
  directory (after a ```bash block: in the directory its commands ran in).
* A block that needs a server reads ``os.environ["REDIS_URL"]`` or
  ``os.environ["DATABASE_URL"]`` (PostgreSQL); the test sets them to the run's
  servers and marks the block ``redis`` / ``postgres``.
* A block that genuinely cannot run here (a real provider, a server elsewhere)
  starts with the visible line ``# not run: <why>``; the reason is required.
* ```bash blocks: each line that starts with ``convmem`` runs (``set -e``; ``tests/``
  of this checkout is reachable from the directory) and must exit 0. Other lines
  (``pip install``, ``./dev``) are shown, not run: ``tests/test_fresh_venv.py``
  installs the package as the README says.
* ```json blocks must parse; ```text and unlabelled blocks are not checked.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONTINUES = "# continues the previous block"
NOT_RUN = re.compile(r"#\s*not run:\s*(\S.*)")
_FENCE = re.compile(r"^(?P<indent> {0,3})```(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=indent)```\s*$",
                    re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    lang: str
    source: str
    index: int  # position among the file's blocks

    @property
    def id(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"

    @property
    def first_line(self) -> str:
        return self.source.lstrip().split("\n", 1)[0].strip()

    @property
    def continues(self) -> bool:
        return self.first_line.startswith(CONTINUES)


def blocks(path: Path) -> list[Block]:
    text = path.read_text("utf-8")
    found = []
    for i, m in enumerate(_FENCE.finditer(text)):
        lang = (m.group("info").strip().split() or [""])[0].lower()
        found.append(Block(path, text.count("\n", 0, m.start()) + 1, lang, m.group("body"), i))
    return found


ALL = [b for path in DOCS for b in blocks(path)]
RUN = [b for b in ALL if b.lang in ("python", "py", "bash", "sh", "shell", "console")]


def _marks(block: Block) -> list[pytest.MarkDecorator]:
    chain = _chain(block)
    text = "\n".join(b.source for b in chain)
    marks = []
    if "REDIS_URL" in text:
        marks.append(pytest.mark.redis)
    if "DATABASE_URL" in text:
        marks.append(pytest.mark.postgres)
    return marks


def _chain(block: Block) -> list[Block]:
    """The block and every block it continues, first first."""
    same_file = [b for b in ALL if b.file == block.file]
    chain = [block]
    while chain[0].continues:
        previous = [b for b in same_file if b.index < chain[0].index and b.lang in
                    ("python", "py", "bash", "sh", "shell", "console")]
        assert previous, f"{chain[0].id} continues nothing"
        chain.insert(0, previous[-1])
    return chain


def test_the_docs_have_blocks_to_run() -> None:
    assert {b.file.name for b in RUN} >= {"README.md"}
    assert len([b for b in RUN if b.lang.startswith("py")]) >= 5


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "json"], ids=lambda b: b.id)
def test_json_blocks_parse(block: Block) -> None:
    json.loads(block.source)


@pytest.mark.parametrize("block", [pytest.param(b, marks=_marks(b), id=b.id) for b in RUN])
def test_block_runs_as_pasted(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    chain = _chain(block)
    skipped = [b for b in chain if NOT_RUN.match(b.first_line)]
    if skipped:
        pytest.skip(f"{skipped[0].id} is marked: {skipped[0].first_line}")
    assert not block.first_line.startswith("# not run") or NOT_RUN.match(block.first_line), (
        f"{block.id}: '# not run:' needs a reason")
    text = "\n".join(b.source for b in chain)
    if "REDIS_URL" in text:
        monkeypatch.setenv("REDIS_URL", request.getfixturevalue("redis_url"))
    if "DATABASE_URL" in text:
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("postgres_url"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for b in chain:
        if b.lang.startswith("py"):
            _run_python(b, namespace)
        else:
            _run_shell(b, tmp_path)


def _run_python(block: Block, namespace: dict[str, Any]) -> None:
    source = "\n" * (block.line) + block.source  # tracebacks point at the doc's lines
    code = compile(source, str(block.file), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


def _run_shell(block: Block, cwd: Path) -> None:
    commands = [line for line in block.source.splitlines() if line.strip().startswith("convmem")]
    if not commands:
        return
    bin_dir = cwd / ".bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "convmem"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m convmem "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for command in commands:
        proc = subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=300)
        assert proc.returncode == 0, f"{block.id}: `{command}` exited {proc.returncode}:\n{proc.stderr}"


# ----------------------------------------------------------------------------- no internal text

#: A backticked repository path (``docs/transcript.md``, ``tests/data/*.jsonl``,
#: ``tests/data/domains/<domain>.json``) or a relative markdown link.
_PATH = re.compile(r"`((?:\.\./|\./)?[A-Za-z0-9_.*<>-]+(?:/[A-Za-z0-9_.*<>-]*)+)`")
_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)#\s]+)")
_INTERNAL = ("issue note", "../seeds", "../eval", "/work/", "shared/docs", "seed chapter")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_point_only_at_files_in_the_repository(path: Path) -> None:
    text = path.read_text("utf-8")
    for phrase in _INTERNAL:
        assert phrase not in text, f"{path.name} speaks of {phrase!r}, which no user has"
    missing = []
    for target in [*_PATH.findall(text), *_LINK.findall(text)]:
        pattern = re.sub(r"<[^>]*>", "*", target).rstrip("/")
        bases = [path.parent] if pattern.startswith(("./", "../")) else [ROOT, path.parent]
        if pattern.startswith("/") or not any(
            any(base.glob(pattern)) if "*" in pattern else (base / pattern).exists() for base in bases
        ):
            missing.append(target)
    assert missing == [], f"{path.name} points at paths not in the repository: {missing}"
