"""``./dev``: an install is skipped when nothing it depends on changed, and git ignores
what ``./dev`` creates; the pytest configuration keeps the summary readable.

The install logic is exercised with a stand-in interpreter that records what ``./dev``
asks of it (``-m venv``, ``-m pip install``) instead of installing: the test is about
when ``./dev`` installs, not about pip. Real installs are tested in
``tests/test_fresh_venv.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$DEV_LOG"
case "$1 $2" in
  "--version "*) echo "Python 3.x (stand-in)" ;;
  "-m venv") mkdir -p "$3/bin"; cp "$0" "$3/bin/python"
             printf '#!/usr/bin/env bash\\necho "convmem $*"\\n' > "$3/bin/convmem"
             chmod +x "$3/bin/convmem" ;;
  "-m pip") ;;
  *) echo "unexpected: $*" >&2; exit 3 ;;
esac
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of ./dev, pyproject.toml and the package sources."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy2(ROOT / "dev", repo / "dev")
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copytree(ROOT / "convmem", repo / "convmem",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return repo


def _demo(repo: Path) -> tuple[str, list[str]]:
    log = repo.parent / "calls.log"
    log.write_text("")
    proc = subprocess.run(
        ["bash", str(repo / "dev"), "demo", "--json"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHON": str(repo.parent / "python3"), "DEV_LOG": str(log)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "convmem demo --json"
    return proc.stderr, [line for line in log.read_text().splitlines() if "pip install" in line]


def test_dev_demo_installs_once_and_again_only_when_something_changed(checkout: Path) -> None:
    said, installs = _demo(checkout)
    assert "installing . into .venv-demo" in said and any(i.endswith(" .") for i in installs)

    said, installs = _demo(checkout)
    assert installs == [] and ".venv-demo is up to date" in said

    (checkout / "convmem" / "render.py").write_text(
        (checkout / "convmem" / "render.py").read_text() + "\n# changed\n")
    _, installs = _demo(checkout)
    assert installs, "a source change must reinstall (pip install . copies the sources)"
    assert _demo(checkout)[1] == []

    (checkout / "pyproject.toml").write_text((checkout / "pyproject.toml").read_text() + "\n")
    assert _demo(checkout)[1], "a pyproject.toml change must reinstall"


def test_git_ignores_what_dev_creates() -> None:
    ignored = {line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()}
    assert {".venv/", ".venv-demo/", ".bench-venv/"} <= ignored


def test_dev_test_says_how_long_it_takes_and_times_its_stages() -> None:
    text = (ROOT / "dev").read_text()
    assert "about 10-20 minutes on 2 cores" in text and 'stage "ruff"' in text
    assert "--group dev" in text  # contributors' tools come from the dev dependency group


# ----------------------------------------------------------------------------- warnings


def _filterwarnings() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["pytest"]["ini_options"]["filterwarnings"])


def test_upstream_deprecations_are_quiet_and_ours_are_errors(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # only the warning filters matter
    pytester.makeini("[pytest]\nfilterwarnings =\n" + "".join(f"    {f}\n" for f in _filterwarnings()))
    pytester.makepyfile(test_w="""
        import warnings

        def _warn(module, category=DeprecationWarning):
            warnings.warn_explicit("old API", category, "x.py", 1, module=module)

        def test_upstream():
            _warn("langchain_core.something")
            _warn("llama_index.core.something", PendingDeprecationWarning)
            _warn("pydantic.main")

        def test_ours_core():
            _warn("convmem.session")

        def test_ours_adapter():
            _warn("langchain_convmem.middleware")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=1, failed=2)
    assert "warnings summary" not in result.stdout.str()
