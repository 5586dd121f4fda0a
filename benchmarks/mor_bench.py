"""Merge-on-read upsert against copy-on-write and delta-rs MERGE (issue 27's speed goal), on the
harness workload (uniform: 1M rows, 100K batch by default), files at size for both table types
(hoodie.parquet.small.file.limit=0), each run a fresh process, the peers interleaved per repeat
so that they share the machine's state.

    python benchmarks/mor_bench.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from harness import run_once  # noqa: E402

PEERS = ("upsertlake-mor", "upsertlake", "delta-rs")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    seconds: dict[str, list[float]] = {p: [] for p in PEERS}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.repeat):
            for peer in PEERS:
                spec = {"peer": peer, "workload": "uniform", "rows": args.rows, "batch": args.batch,
                        "hoodie": {"hoodie.parquet.small.file.limit": 0}, "work": f"{work}/{peer}"}
                out = run_once(spec, args.timeout)
                if out["status"] != "ok":
                    sys.exit(f"{peer}: {out['status']} {out.get('errors')}")
                seconds[peer].append(out["seconds"])
                stages = {k: round(v, 3) for k, v in (out.get("stages") or {}).items()}
                print(f"run {r + 1} {peer:<15} {out['seconds']:.3f} s {stages}", flush=True)
    median = {p: statistics.median(v) for p, v in seconds.items()}
    for p in PEERS:
        print(f"{p:<15} median {median[p]:.3f} s  (min {min(seconds[p]):.3f}, max {max(seconds[p]):.3f})")
    mor = median["upsertlake-mor"]
    print(f"MOR vs CoW upsert: {median['upsertlake'] / mor:.2f}x; MOR vs delta-rs MERGE: {median['delta-rs'] / mor:.2f}x")


if __name__ == "__main__":
    main()
