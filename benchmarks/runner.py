"""One peer run in its own process (so a run over the time cap can be killed with its JVM):
build the table (untimed), apply the batch (timed), verify, print one JSON line.

    python benchmarks/runner.py '{"peer": "delta-rs", "rows": 100000, "batch": 10000, ...}'
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from peers import make_peer  # noqa: E402
from workloads import make_base, make_batch, verify  # noqa: E402


def _files(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            st = os.stat(os.path.join(dirpath, n))
            out[os.path.join(dirpath, n)] = (st.st_size, st.st_mtime_ns)
    return out


def _peak_rss_mb() -> float:
    # ru_maxrss is KiB on Linux; children covers a JVM only once it has exited, so Spark peers
    # report the Python driver's peak.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return own / 1024


def run(spec: dict) -> dict:
    peer = make_peer(spec["peer"])
    work = Path(spec["work"])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    base = make_base(spec["rows"])
    batch, expected = make_batch(spec["workload"], spec["rows"], spec["batch"], spec.get("seed", 7))
    path = work / "table"
    peer.build(path, base)
    del base
    before = _files(work)
    start = time.perf_counter()
    extra = peer.apply(path, batch, spec["workload"])
    seconds = time.perf_counter() - start
    after = _files(work)
    written = sum(size for p, (size, mt) in after.items() if before.get(p) != (size, mt))
    count, found = peer.snapshot(path, list(expected.probes))
    errors = verify(expected, count, found)
    peer.close()
    if not spec.get("keep"):
        shutil.rmtree(work, ignore_errors=True)
    return {
        **{k: spec[k] for k in ("peer", "workload", "rows", "batch")},
        "status": "ok" if not errors else "WRONG",
        "errors": errors,
        "seconds": seconds,
        "bytes_written": written,
        "peak_rss_mb": _peak_rss_mb(),
        **extra,
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(run(json.loads(sys.argv[1]))))
