"""One import in a process of its own: run by ``test_transcript_import_bounds``.

``python _import_child.py URL TENANT PATH LIMIT_MB`` imports the document at ``PATH``
(a file, so it is streamed, never held) into ``TENANT`` and prints one JSON object:
``outcome`` (``accepted``, or ``refused`` with the refusal's ``path`` and
``problem``) and the process's peak RSS. Peak RSS is ``VmHWM`` of this process's own
address space: ``ru_maxrss`` can carry the parent's peak across fork and exec. A
watchdog ends the process (exit 3) as soon as RSS passes ``LIMIT_MB``, so an
unbounded import fails fast instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from pathlib import Path


def status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def watchdog(limit_kb: int) -> None:
    while True:
        rss = status_kb("VmRSS")
        if rss > limit_kb:
            print(json.dumps({"outcome": "over the memory limit", "peak_kb": rss}), flush=True)
            os._exit(3)
        time.sleep(0.005)


def main(url: str, tenant: str, path: str, limit_mb: str) -> None:
    from convmem.transcript import ImportRefused, RetentionPolicy, TranscriptStore

    store = TranscriptStore(url, retention=RetentionPolicy(max_age=None, owner="test"))
    store.list_threads(tenant)  # the pool and the dialect, before the baseline
    base_kb = status_kb("VmRSS")
    threading.Thread(target=watchdog, args=(int(limit_mb) * 1024,), daemon=True).start()
    out: dict[str, object]
    try:
        thread = store.import_thread(tenant, Path(path))
        out = {"outcome": "accepted", "thread_id": thread.id}
    except ImportRefused as exc:
        out = {"outcome": "refused", "path": exc.path, "problem": exc.problem}
    store.close()
    out |= {
        "base_kb": base_kb,
        "peak_kb": status_kb("VmHWM"),
        "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
