"""Peak memory of exporting and importing a whole thread, as the thread grows.

    python bench/transcript_memory.py            # 10,000 and 200,000 messages, SQLite + PostgreSQL
    python bench/transcript_memory.py --smoke    # 1,000 and 5,000 messages, SQLite, seconds
    python bench/transcript_memory.py --json

For each size a thread is filled (appends of 1,000 messages of ~300 characters, each
batch a branch beside the last message), then three child processes each do one
thing and report their peak RSS over their own baseline (RSS after importing convmem
and opening the store): ``export`` streams the canonical export to a file
(``TranscriptStore.export_thread_to``), ``import`` loads that file into another tenant
(``import_thread(path)``: two passes, validated whole before any write), and
``whole document`` is the reference the issue measured — the export read and parsed
in one piece (``json.loads``), what export and import held before. Bounded means the
first two stay flat as the thread grows 20-fold while the reference grows with it:
``*_200000_over_10000`` near 1. PostgreSQL comes from ``DATABASE_URL`` (default the
local server); the benchmark creates its own database and drops it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POLICY_OWNER = "bench"


def _status_kb(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of this process (``ru_maxrss`` would carry the parent's
    peak across fork and exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def child(args: argparse.Namespace) -> None:
    """One measured operation in a fresh process; prints JSON."""
    from convmem.transcript import RetentionPolicy, TranscriptStore

    store = TranscriptStore(args.db, retention=RetentionPolicy(max_age=None, owner=POLICY_OWNER))
    store.list_threads("warm-up")  # pool, dialect, first statement
    base = _status_kb("VmRSS")
    t0 = time.perf_counter()
    if args.child == "export":
        with open(args.file, "wb") as out:
            store.export_thread_to(args.tenant, args.thread, out)
    elif args.child == "import":
        store.import_thread(args.tenant, Path(args.file))
    else:  # the whole document in memory, as before
        with open(args.file, "rb") as f:
            doc = json.loads(f.read())
        assert doc["messages"]
    seconds = time.perf_counter() - t0
    peak = _status_kb("VmHWM")
    store.close()
    print(json.dumps({"delta_mb": (peak - base) / 1024, "peak_mb": peak / 1024,
                      "seconds": seconds}))


def _run_child(kind: str, db: str, tenant: str, thread: str, file: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--db", db, "--tenant", tenant,
         "--thread", thread, "--file", file],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def fill(db: str, tenant: str, n: int) -> str:
    """A thread of ``n`` messages (a branch every 1,000) and its id."""
    from convmem.transcript import NewMessage, RetentionPolicy, TranscriptStore

    store = TranscriptStore(db, retention=RetentionPolicy(max_age=None, owner=POLICY_OWNER))
    store.migrate()
    th = store.create_thread(tenant, key=f"bench-{n}", title="memory bench")
    body = "the quarterly figures for the northern region, once more with feeling " * 4
    done = 0
    previous: list[Any] = []
    while done < n:
        batch = min(1000, n - done)
        msgs = [
            NewMessage(role="user" if (done + i) % 2 == 0 else "assistant",
                       content=f"{done + i}: {body}", extra={"i": done + i})
            for i in range(batch)
        ]
        if len(previous) > 1:  # each batch branches off beside the last message
            previous = store.append(tenant, th.id, msgs, parent_id=previous[-2].id)
        else:
            previous = store.append(tenant, th.id, msgs)
        done += batch
    store.close()
    return str(th.id)


def measure(db: str, sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            tenant = f"mem-{uuid.uuid4().hex[:8]}"
            thread = fill(db, tenant, n)
            file = str(Path(tmp) / f"thread-{n}.json")
            exp = _run_child("export", db, tenant, thread, file)
            size_mb = Path(file).stat().st_size / 1024 / 1024
            imp = _run_child("import", db, tenant + "-copy", thread, file)
            ref = _run_child("whole", db, tenant, thread, file)
            out[str(n)] = {
                "document_mb": round(size_mb, 1),
                "export_delta_mb": round(exp["delta_mb"], 1),
                "import_delta_mb": round(imp["delta_mb"], 1),
                "whole_document_delta_mb": round(ref["delta_mb"], 1),
                "export_s": round(exp["seconds"], 2),
                "import_s": round(imp["seconds"], 2),
            }
    lo, hi = str(sizes[0]), str(sizes[-1])
    for key in ("export_delta_mb", "import_delta_mb", "whole_document_delta_mb"):
        out[f"{key}_{hi}_over_{lo}"] = round(
            out[hi][key] / max(out[lo][key], 1.0), 2
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="small sizes, SQLite only")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--child", choices=["export", "import", "whole"], help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--tenant", help=argparse.SUPPRESS)
    p.add_argument("--thread", help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    sizes = [1_000, 5_000] if args.smoke else [10_000, 200_000]
    results: dict[str, Any] = {"sizes": sizes}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = measure(f"sqlite:///{tmp}/bench.db", sizes)
    if not args.smoke and not args.no_postgres:
        import sqlalchemy as sa

        from convmem.testing.servers import DEFAULT_DATABASE_URL, postgres_ping

        admin_url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
        if postgres_ping(admin_url):
            name = f"convmem_bench_mem_{uuid.uuid4().hex[:8]}"
            admin = sa.create_engine(sa.make_url(admin_url).set(drivername="postgresql+psycopg"),
                                     isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            try:
                url = sa.make_url(admin_url).set(database=name).render_as_string(
                    hide_password=False)
                results["postgresql"] = measure(url, sizes)
            finally:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
                admin.dispose()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for backend in ("sqlite", "postgresql"):
        if backend not in results:
            continue
        r = results[backend]
        print(f"\n{backend}: peak RSS over the process baseline (MB)")
        print(f"{'messages':>10} {'doc MB':>8} {'export':>8} {'import':>8} {'whole doc':>10}"
              f" {'export s':>9} {'import s':>9}")
        for n in sizes:
            x = r[str(n)]
            print(f"{n:>10} {x['document_mb']:>8} {x['export_delta_mb']:>8} "
                  f"{x['import_delta_mb']:>8} {x['whole_document_delta_mb']:>10} "
                  f"{x['export_s']:>9} {x['import_s']:>9}")
        lo, hi = sizes[0], sizes[-1]
        print(f"growth {hi}/{lo}: export x{r[f'export_delta_mb_{hi}_over_{lo}']}, import "
              f"x{r[f'import_delta_mb_{hi}_over_{lo}']}, whole document "
              f"x{r[f'whole_document_delta_mb_{hi}_over_{lo}']}")


if __name__ == "__main__":
    main()
