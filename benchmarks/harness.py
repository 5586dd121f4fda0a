"""Benchmark harness: upsertlake against the engines users would pick instead, on the same data in
the same run, every run verified; plus a scaling series and an index series.

    python benchmarks/harness.py --size medium --repeat 3
    python benchmarks/harness.py --size small --workloads uniform skewed --peers upsertlake delta-rs
    python benchmarks/harness.py --series scaling --scaling-max 5000000
    python benchmarks/harness.py --series index --size medium

Writes results.json, README.md (tables) and PNG charts into --out (default benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from peers import PEERS, make_peer  # noqa: E402
from report import write_report  # noqa: E402
from workloads import SIZES, WORKLOADS  # noqa: E402

RUNNER = Path(__file__).parent / "runner.py"
SCALING_ROWS = (1_000_000, 2_000_000, 5_000_000, 10_000_000)
INDEXES = ("INMEMORY", "BLOOM", "SIMPLE")


def run_once(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One peer run in a fresh process group; killed (JVM included) past `timeout` seconds."""
    proc = subprocess.Popen(
        [sys.executable, str(RUNNER), json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    base = {k: spec[k] for k in ("peer", "workload", "rows", "batch")}
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {**base, "status": "timeout", "errors": [f"over the {timeout:.0f}s cap (build + write + verify)"]}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"]
    return {**base, "status": "error", "errors": tail}


def run_matrix(
    peers: list[str], workloads: list[str], sizes: list[tuple[int, int]], repeat: int, timeout: float, log: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every (size, workload, peer) `repeat` times; a peer that times out or fails is not retried."""
    results = []
    with tempfile.TemporaryDirectory(prefix="upsert-bench-") as tmp:
        for rows, batch in sizes:
            for workload in workloads:
                for peer in peers:
                    runs = []
                    for i in range(repeat):
                        spec = {"peer": peer, "workload": workload, "rows": rows, "batch": batch, "work": f"{tmp}/{i}"}
                        r = run_once(spec, timeout)
                        runs.append(r)
                        shown = f"{r['seconds']:.3f}s" if r["status"] == "ok" else f"{r['status']}: {r['errors']}"
                        print(f"  {workload:<8} {rows:>10,}+{batch:<9,} {peer:<18} run {i + 1}: {shown}", flush=True)
                        if r["status"] != "ok":
                            break
                    results.append({"peer": peer, "workload": workload, "rows": rows, "batch": batch, "runs": runs})
                    log.append(results[-1])
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=SIZES, default="small")
    ap.add_argument("--series", choices=("peers", "scaling", "index", "all"), default="peers")
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    ap.add_argument("--peers", nargs="+", choices=list(PEERS), default=list(PEERS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300, help="per-run cap in seconds (build + write + verify)")
    ap.add_argument("--scaling-max", type=int, default=10_000_000, help="largest table of the scaling series")
    ap.add_argument("--scaling-peers", nargs="+", default=["upsertlake", "delta-rs"])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--label", default="", help="suffix of the results file, to keep runs apart")
    args = ap.parse_args()

    rows, batch = SIZES[args.size]
    skipped = {}
    available = []
    for p in args.peers:
        why = make_peer(p).unavailable()
        if why:
            skipped[p] = why
            print(f"skipping {p}: {why}")
        else:
            available.append(p)
    doc: dict[str, Any] = {"size": args.size, "repeat": args.repeat, "timeout": args.timeout, "skipped": skipped,
                           "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpus": os.cpu_count(),
                           "label": args.label}
    args.out.mkdir(parents=True, exist_ok=True)
    out_json = args.out / f"results-{args.series}-{args.size}{'-' + args.label if args.label else ''}.json"
    log: list[dict[str, Any]] = []
    if args.series in ("peers", "all"):
        print(f"peers: {rows:,} rows + {batch:,} batch")
        doc["peers"] = run_matrix(available, args.workloads, [(rows, batch)], args.repeat, args.timeout, log)
    if args.series in ("scaling", "all"):
        sizes = [(r, 100_000) for r in SCALING_ROWS if r <= args.scaling_max]
        wl = [w for w in args.workloads if w in ("uniform", "skewed")] or ["uniform"]
        print(f"scaling: 100,000 batch into {', '.join(f'{r:,}' for r, _ in sizes)}")
        doc["scaling"] = run_matrix([p for p in args.scaling_peers if p in available], wl, sizes, args.repeat, args.timeout, log)
    if args.series in ("index", "all"):
        print(f"index: {rows:,} rows + {batch:,} batch")
        doc["index"] = run_matrix([f"upsertlake:{i}" for i in INDEXES], ["uniform", "skewed"], [(rows, batch)], args.repeat, args.timeout, log)
    out_json.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out_json}")
    write_report(args.out)


if __name__ == "__main__":
    main()
