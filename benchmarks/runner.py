"""One peer run in its own process (so a run over the time cap can be killed with its JVM):
build the table (untimed), apply the batch (timed), verify, print one JSON line.

    python benchmarks/runner.py '{"peer": "delta-rs", "workload": "late", "rows": 100000, "batch": 10000,
                                  "days": 30, "hoodie": {"hoodie.parquet.max.file.size": 8388608}, "work": "/tmp/w"}'
"""

from __future__ import annotations

import gc
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

from peers import make_peer
from workloads import PARTITIONS, clear_base_cache, make_base, make_batch, verify


def _files(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            st = os.stat(os.path.join(dirpath, n))
            out[os.path.join(dirpath, n)] = (st.st_size, st.st_mtime_ns)
    return out


def _reset_peak_rss() -> bool:
    """Forget the peak RSS so far (Linux: writing 5 to clear_refs resets VmHWM), so that the peak
    measured is the write's and not the build's. False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    """Peak RSS of this process (VmHWM; ru_maxrss where /proc is missing). A JVM is a child
    process, so Spark peers report the Python driver's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(spec: dict) -> dict:
    peer = make_peer(spec["peer"], spec.get("hoodie"))
    work = Path(spec["work"])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    days = spec.get("days", PARTITIONS)
    base = make_base(spec["rows"], days)
    batch, expected = make_batch(spec["workload"], spec["rows"], spec["batch"], spec.get("seed", 7), days)
    path = work / "table"
    peer.build(path, base)
    del base
    clear_base_cache()
    peer.prepare(path, batch, spec["workload"])
    before = _files(work)
    gc.collect()
    pa.default_memory_pool().release_unused()
    since_build = _reset_peak_rss()
    start = time.perf_counter()
    extra = peer.apply(path, batch, spec["workload"])
    seconds = time.perf_counter() - start
    peak_rss_mb = _peak_rss_mb()
    after = _files(work)
    written = sum(size for p, (size, mt) in after.items() if before.get(p) != (size, mt))
    count, ts_sum, found = peer.snapshot(path, list(expected.probes))
    errors = verify(expected, count, ts_sum, found)
    peer.close()
    if not spec.get("keep"):
        shutil.rmtree(work, ignore_errors=True)
    return {
        **{k: spec[k] for k in ("peer", "workload", "rows", "batch")},
        "days": days,
        "status": "ok" if not errors else "WRONG",
        "errors": errors,
        "seconds": seconds,
        "bytes_written": written,
        "peak_rss_mb": peak_rss_mb,
        "peak_rss_of": "write" if since_build else "process",
        **extra,
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(run(json.loads(sys.argv[1]))))
