"""Merge-on-read upsert against copy-on-write (goal: 4x faster) and delta-rs MERGE (3x), on the
harness workload (uniform: 1M rows, 100K batch by default), files at size for both table types
(hoodie.parquet.small.file.limit=0), each run a fresh process, the peers interleaved per repeat
so that they share the machine's state.

    python benchmarks/mor_bench.py --repeat 5
    python benchmarks/mor_bench.py --repeat 0 --py-spy /tmp/spy   # where the time goes, per peer
    python benchmarks/mor_bench.py --buckets 1      # both upsertlake peers on Hudi's bucket index

`--buckets N`: both upsertlake peers build and upsert with hoodie.index.type=BUCKET and N buckets
per partition (the base table has one 50K-row file group per partition, so 1 keeps that layout).

`--py-spy DIR`: after the timed runs, one more write per upsertlake peer in a process that only
opens the table and writes (built beforehand), its stacks recorded (collapsed) into DIR/<peer>.txt
for `stacks.py --under apply`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from harness import run_once

PEERS = ("upsertlake-mor", "upsertlake", "delta-rs")
HOODIE = {"hoodie.parquet.small.file.limit": 0}


def profile(peer: str, rows: int, batch: int, work: Path, folder: Path, hoodie: dict) -> Path:
    """One write of `peer` under py-spy into folder/<peer>.txt, the table built untimed in this
    process first (in `work`), upsertlake's modules imported before the write as in a harness run."""
    from peers import make_peer
    from workloads import make_base

    table = work / f"spy-{peer}" / "table"
    make_peer(peer, hoodie).build(table, make_base(rows))
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from pathlib import Path\nfrom peers import make_peer\nfrom preload import import_upsertlake\n"
            "import_upsertlake()\n"  # what the harness's build imports before its timed write
            "from workloads import make_batch\n"
            f"b, _ = make_batch('uniform', {rows}, {batch})\n"
            f"make_peer({peer!r}, {hoodie!r}).apply(Path({str(table)!r}), b, 'uniform')\n")
    out = folder / f"{peer}.txt"
    spy = Path(sys.executable).parent / "py-spy"
    subprocess.run([str(spy), "record", "--format", "raw", "--rate", "500", "--nonblocking", "--output", str(out),
                    "--", sys.executable, "-c", code], check=True, capture_output=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--py-spy", type=Path, help="profile one write of each upsertlake peer into this folder")
    ap.add_argument(
        "--buckets", type=int, default=0, help="upsertlake peers use the BUCKET index with this many buckets"
    )
    args = ap.parse_args()
    ours = dict(
        HOODIE,
        **({"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": args.buckets} if args.buckets else {}),
    )
    seconds: dict[str, list[float]] = {p: [] for p in PEERS}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.repeat):
            for peer in PEERS:
                spec = {"peer": peer, "workload": "uniform", "rows": args.rows, "batch": args.batch,
                        "hoodie": ours if peer.startswith("upsertlake") else HOODIE, "work": f"{work}/{peer}"}
                out = run_once(spec, args.timeout)
                if out["status"] != "ok":
                    sys.exit(f"{peer}: {out['status']} {out.get('errors')}")
                seconds[peer].append(out["seconds"])
                stages = {k: round(v, 3) for k, v in (out.get("stages") or {}).items()}
                print(f"run {r + 1} {peer:<15} {out['seconds']:.3f} s {stages}", flush=True)
        if args.py_spy:
            args.py_spy.mkdir(parents=True, exist_ok=True)
            for peer in ("upsertlake-mor", "upsertlake"):
                print(f"py-spy: {profile(peer, args.rows, args.batch, Path(work), args.py_spy, ours)}", flush=True)
    if not args.repeat:
        return
    median = {p: statistics.median(v) for p, v in seconds.items()}
    for p in PEERS:
        print(f"{p:<15} median {median[p]:.3f} s  (min {min(seconds[p]):.3f}, max {max(seconds[p]):.3f})")
    mor = median["upsertlake-mor"]
    print(
        f"MOR vs CoW upsert: {median['upsertlake'] / mor:.2f}x; MOR vs delta-rs MERGE: {median['delta-rs'] / mor:.2f}x"
    )


if __name__ == "__main__":
    main()
