"""``./dev upstream``: LangChain's own history suites, run against ``ConvMemChatMessageHistory``.

For each upstream package below, the version installed here is looked up, its source
distribution downloaded from the package index (``pip download --no-deps --no-binary
:all:``) into a temporary directory and extracted there — upstream code is never
committed to this repository — and the listed test files run under pytest with the
``convmem_upstream_swap`` plugin, which swaps only the history factory (see that
module). The report lists every test: passed, failed (with the failure's last line),
or skipped — a test that cannot apply says why — and whether it exercised the swap.

Exit status: 0 when every test that ran passed, 1 when one failed, 2 when a suite
could not be fetched or run at all.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@dataclass(frozen=True)
class Suite:
    package: str
    files: tuple[str, ...]


SUITES = (
    Suite("langchain-core", (
        "tests/unit_tests/runnables/test_history.py",
        "tests/unit_tests/chat_history/test_chat_history.py",
    )),
    Suite("langchain-postgres", ("tests/unit_tests/v1/test_chat_histories.py",)),
)


def installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def download(package: str, version: str, into: Path) -> Path:
    """The sdist of ``package==version`` from the configured index, extracted under ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"{package}=={version}", "--no-deps",
         "--no-binary", ":all:", "--disable-pip-version-check", "-q", "-d", str(into)],
        check=True, capture_output=True, text=True,
    )
    (archive,) = [p for p in into.iterdir() if p.name.endswith((".tar.gz", ".zip"))]
    target = into / "src"
    if archive.name.endswith(".zip"):
        shutil.unpack_archive(archive, target)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
    (root,) = [p for p in target.iterdir() if p.is_dir()]
    return root


def run_suite(suite: Suite, root: Path, work: Path) -> list[dict[str, object]]:
    """Run the suite's files in ``root`` with the swap plugin; one row per test."""
    rows: list[dict[str, object]] = []
    present = [f for f in suite.files if (root / f).is_file()]
    rows += [{"test": f, "outcome": "cannot apply", "detail": "file not in this sdist",
              "swap_used": None} for f in suite.files if f not in present]
    if not present:
        return rows
    report = work / f"{suite.package}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(HERE), os.environ.get("PYTHONPATH", ""), str(REPO)) if p
        ),
        "CONVMEM_UPSTREAM_REPORT": str(report),
        "LANGSMITH_TRACING": "false",
    }
    cmd = [sys.executable, "-m", "pytest", *present, "-p", "convmem_upstream_swap",
           "-p", "no:cacheprovider", "-q", "--rootdir", str(root), "-o", "addopts=",
           "-W", "ignore::DeprecationWarning"]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    if not report.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"pytest did not run the suite (exit {done.returncode}):\n{tail}")
    rows += json.loads(report.read_text(encoding="utf-8"))
    return rows


def print_report(package: str, version: str, rows: list[dict[str, object]]) -> None:
    print(f"\n== {package} {version}")
    for row in rows:
        swap = {True: "swap used", False: "swap unused", None: ""}[row.get("swap_used")]  # type: ignore[index]
        detail = f"  — {row['detail']}" if row.get("detail") else ""
        print(f"  {str(row['outcome']).upper():13} {row['test']}  [{swap}]{detail}")
    counts: dict[str, int] = {}
    for row in rows:
        counts[str(row["outcome"])] = counts.get(str(row["outcome"]), 0) + 1
    print("  " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the downloaded sources")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="convmem-upstream-"))
    status, everything = 0, {}
    try:
        for suite in SUITES:
            version = installed(suite.package)
            if version is None:
                print(f"\n== {suite.package}: not installed; its suite cannot apply "
                      f"(pip install {suite.package})")
                status = max(status, 2)
                continue
            try:
                root = download(suite.package, version, work / suite.package)
                rows = run_suite(suite, root, work)
            except subprocess.CalledProcessError as exc:
                print(f"\n== {suite.package} {version}: could not download its sdist: "
                      f"{(exc.stderr or exc.stdout or '').strip().splitlines()[-1:]}")
                status = max(status, 2)
                continue
            except RuntimeError as exc:
                print(f"\n== {suite.package} {version}: {exc}")
                status = max(status, 2)
                continue
            everything[suite.package] = {"version": version, "tests": rows}
            if args.json:
                continue
            print_report(suite.package, version, rows)
            if any(r["outcome"] == "failed" for r in rows):
                status = max(status, 1)
        if args.json:
            print(json.dumps(everything, indent=1))
    finally:
        if args.keep:
            print(f"\nsources kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
