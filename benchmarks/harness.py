"""Benchmark harness: upsertlake against the engines users would pick instead, on the same data in
the same run, every run verified; plus a scaling series and an index series.

    python benchmarks/harness.py --size medium --repeat 3
    python benchmarks/harness.py --size small --workloads uniform skewed --peers upsertlake delta-rs
    python benchmarks/harness.py --workloads late --repeat 3            # 100K late rows into 10M, 30 days
    python benchmarks/harness.py --series scaling --scaling-max 10000000
    python benchmarks/harness.py --series index --size medium

The late-arriving workload has its own size (--late-rows, --late-batch, --days; 10M + 100K over 30
days by default) and writes upsertlake's files at --late-file-mb (8 MB), so each day holds several.
A peer over --timeout is killed and reported as capped; the scaling series then skips its larger
tables.

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

from peers import PEERS, make_peer
from report import write_report
from workloads import PARTITIONS, SIZES, WORKLOADS

RUNNER = Path(__file__).parent / "runner.py"
SCALING_ROWS = (1_000_000, 2_000_000, 5_000_000, 10_000_000)
INDEXES = ("INMEMORY", "BLOOM", "SIMPLE")


def tree_commit() -> str:
    """The last commit that changed the upsertlake package being measured (plus "+changes" if its
    work tree differs from it)."""
    import upsertlake

    where = Path(upsertlake.__file__).parent
    try:
        head = subprocess.run(
            ["git", "-C", str(where), "log", "-1", "--format=%h", "--", "."], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--", "."], capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def run_once(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One peer run in a fresh process group; killed (JVM included) past `timeout` seconds."""
    proc = subprocess.Popen(
        [sys.executable, str(RUNNER), json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    base = {k: spec[k] for k in ("peer", "workload", "rows", "batch")} | {"days": spec.get("days", PARTITIONS)}
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {
            **base,
            "status": "timeout",
            "errors": [f"capped: over the {timeout:.0f}s cap (build + write + verify)"],
        }
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"]
    return {**base, "status": "error", "errors": tail}


def run_matrix(
    peers: list[str], cases: list[dict[str, Any]], repeat: int, timeout: float, log: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every (case, peer) `repeat` times; a case is a workload, rows, batch and optionally days and
    write options. A peer that fails is not retried, and a peer that hits the cap is not run on
    larger tables of the same workload."""
    results = []
    capped: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="upsert-bench-") as tmp:
        for case in cases:
            w, rows, batch = case["workload"], case["rows"], case["batch"]
            for peer in peers:
                runs = []
                if (peer, w) in capped and rows > capped[peer, w]:
                    runs.append(
                        {
                            "peer": peer,
                            "workload": w,
                            "rows": rows,
                            "batch": batch,
                            "status": "timeout",
                            "errors": [f"capped: not run, over the {timeout:.0f}s cap at {capped[peer, w]:,} rows"],
                        }
                    )
                for i in range(repeat if not runs else 0):
                    r = run_once({**case, "peer": peer, "work": f"{tmp}/{i}"}, timeout)
                    runs.append(r)
                    shown = f"{r['seconds']:.3f}s" if r["status"] == "ok" else f"{r['status']}: {r['errors']}"
                    print(f"  {w:<8} {rows:>10,}+{batch:<9,} {peer:<18} run {i + 1}: {shown}", flush=True)
                    if r["status"] != "ok":
                        if r["status"] == "timeout":
                            capped[peer, w] = min(rows, capped.get((peer, w), rows))
                        break
                results.append({**{k: v for k, v in case.items() if k != "hoodie"}, "peer": peer, "runs": runs})
                log.append(results[-1])
    return results


LATE_RECORD_BYTES = 70  # on disk, meta columns included (measured at 1M rows)


def late_case(args: argparse.Namespace) -> dict[str, Any]:
    """The late-arriving workload as the issues size it: `--days` days, upsertlake files of about
    `--late-file-mb` so that each day holds several. The first commit sizes its files by
    hoodie.copyonwrite.record.size.estimate (1024 bytes unless set: files 15× too small), so the
    build is told the real record size."""
    return {"workload": "late", "rows": args.late_rows, "batch": args.late_batch, "days": args.days,
            "hoodie": {"hoodie.parquet.max.file.size": int(args.late_file_mb * 1024 * 1024),
                       "hoodie.copyonwrite.record.size.estimate": LATE_RECORD_BYTES}}


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
    ap.add_argument("--late-rows", type=int, default=10_000_000, help="table rows of the late-arriving workload")
    ap.add_argument("--late-batch", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=30, help="day partitions of the late-arriving workload")
    ap.add_argument(
        "--late-file-mb", type=float, default=8, help="upsertlake's hoodie.parquet.max.file.size (MB) for it"
    )
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
    doc: dict[str, Any] = {
        "tree": tree_commit(),
        "size": args.size,
        "repeat": args.repeat,
        "timeout": args.timeout,
        "skipped": skipped,
        "late": {k: v for k, v in late_case(args).items() if k != "workload"},
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "label": args.label,
        "command": " ".join(["python", "benchmarks/harness.py", *sys.argv[1:]]),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    if args.series == "peers" and args.workloads == ["late"]:  # the late-arriving workload has its own size
        doc["size"] = f"late {args.late_rows / 1e6:g}M + {args.late_batch / 1e3:g}K, {args.days} days"
    size = "late" if args.workloads == ["late"] else args.size
    out_json = args.out / f"results-{args.series}-{size}{'-' + args.label if args.label else ''}.json"
    log: list[dict[str, Any]] = []
    if args.series in ("peers", "all"):
        print(f"peers: {rows:,} rows + {batch:,} batch; late-arriving {args.late_batch:,} into {args.late_rows:,}")
        cases = [
            late_case(args) if w == "late" else {"workload": w, "rows": rows, "batch": batch} for w in args.workloads
        ]
        doc["peers"] = run_matrix(available, cases, args.repeat, args.timeout, log)
    if args.series in ("scaling", "all"):
        sizes = [r for r in SCALING_ROWS if r <= args.scaling_max]
        wl = [w for w in args.workloads if w in ("uniform", "skewed")] or ["uniform"]
        print(f"scaling: 100,000 batch into {', '.join(f'{r:,}' for r in sizes)}")
        cases = [{"workload": w, "rows": r, "batch": 100_000} for w in wl for r in sizes]
        doc["scaling"] = run_matrix(
            [p for p in args.scaling_peers if p in available], cases, args.repeat, args.timeout, log
        )
    if args.series in ("index", "all"):
        print(f"index: {rows:,} rows + {batch:,} batch")
        cases = [{"workload": w, "rows": rows, "batch": batch} for w in ("uniform", "skewed")]
        doc["index"] = run_matrix([f"upsertlake:{i}" for i in INDEXES], cases, args.repeat, args.timeout, log)
    out_json.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out_json}")
    write_report(args.out)


if __name__ == "__main__":
    main()
