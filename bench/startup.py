"""Start-up cost: ``convmem --help`` and the package imports, in fresh interpreters.

Each case runs N times in a new process; the table shows the best wall-clock time and the
best CPU time (user + sys of the child, steadier than wall time on a busy machine). Pass
``--compare PATH`` (another checkout, e.g. a worktree of an older commit) to print both
trees side by side, with the ratio. Every tree runs with the same interpreter: this one.

    python bench/startup.py                      # this checkout, 5 runs per case
    python bench/startup.py --compare ../old     # old vs this checkout
    python bench/startup.py --smoke              # one run of the two cheap cases
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES: dict[str, list[str]] = {
    "convmem --help": ["-m", "convmem", "--help"],
    "import convmem": ["-c", "import convmem"],
    "import langchain_convmem": ["-c", "import langchain_convmem"],
    "import llamaindex_convmem": ["-c", "import llamaindex_convmem"],
    "SessionMemoryMiddleware": ["-c", "from langchain_convmem import SessionMemoryMiddleware"],
    "ConvMemMemory": ["-c", "from llamaindex_convmem import ConvMemMemory"],
}
SMOKE = ("convmem --help", "import convmem")


def measure(tree: Path, argv: list[str], runs: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds) of ``python ARGV`` with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    wall = cpu = float("inf")
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], env=env, cwd=tree, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = min(wall, time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = min(cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per case (best is kept)")
    parser.add_argument("--compare", type=Path, help="another checkout to measure first")
    parser.add_argument("--smoke", action="store_true", help="one run of the cheap cases")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    cases = {k: v for k, v in CASES.items() if not args.smoke or k in SMOKE}
    trees = ([args.compare.resolve()] if args.compare else []) + [ROOT]
    results = {str(t): {name: measure(t, argv, runs) for name, argv in cases.items()} for t in trees}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    header = f"{'case':28s}" + "".join(f"{'wall / CPU s':>18s}" for _ in trees)
    print(f"best of {runs}; trees: " + " | ".join(str(t) for t in trees))
    print(header + ("   CPU ratio" if len(trees) == 2 else ""))
    for name in cases:
        row = [results[str(t)][name] for t in trees]
        line = f"{name:28s}" + "".join(f"{w:9.2f} / {c:5.2f}" + " " * 2 for w, c in row)
        if len(trees) == 2:
            line += f"   {row[0][1] / max(row[1][1], 1e-9):6.1f}x"
        print(line)


if __name__ == "__main__":
    main()
