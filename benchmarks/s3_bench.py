"""Upserts on object storage: upsertlake against delta-rs's MERGE on the same S3 server on loopback
(moto, tests/scripts/s3_server.py), a fresh process per run, with the requests each upsert makes, counted
by the server by kind (LIST, GET, HEAD, PUT, multipart POST, DELETE).

    python benchmarks/s3_bench.py                         # 1M rows + 100K uniform, 3 runs a peer
    python benchmarks/s3_bench.py --rows 10000000 --peers upsertlake
    python benchmarks/s3_bench.py --instants 200 --peers upsertlake   # a longer timeline first
    python benchmarks/s3_bench.py --scaling --big 10000000     # requests: 1M vs 10M rows, 10 vs 200 instants
    python benchmarks/s3_bench.py --repeat 1 --py-spy /tmp/spy   # where the time goes (py-spy --idle)
    BENCH_OPTIONS='{"hoodie.table.type": "MERGE_ON_READ"}' python benchmarks/s3_bench.py   # write options (JSON)
                                                                # for upsertlake's table and its upsert

Each run: a new table of --rows rows (bulk insert, then --instants - 1 small upserts of 100 rows,
each in one partition), then one uniform upsert of --batch rows timed inside a fresh process (its
start-up excluded, its first-use costs included), verified against the expected row count and
fare sum. Cleaning and archival are off (hoodie.cleaner.commits.retained and keep.*.commits
above the instants), so every instant stays on the active timeline: its longest form.
Prints one line per run, the requests of the upsert by kind (the server's count, and upsertlake's
own), and a summary; writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

SERVER = Path(__file__).resolve().parents[1] / "tests" / "scripts" / "s3_server.py"
PEERS = ("upsertlake", "delta-rs")

WORKER = r"""
import json, os, sys, time, urllib.request
sys.path.insert(0, sys.argv[1])
import numpy as np, pyarrow as pa, pyarrow.compute as pc
from workloads import make_rows
peer, uri, step, rows, batch_rows, instants = sys.argv[2], sys.argv[3], sys.argv[4], *map(int, sys.argv[5:8])
endpoint = os.environ["AWS_ENDPOINT_URL"]
delta_opts = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "bench",
              "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1", "conditional_put": "etag"}
rng = np.random.default_rng(1)


def server_counts():  # the server's counts by kind since the last reset: the upsert's, not the check's read
    with urllib.request.urlopen(endpoint + "/__requests") as resp:
        return json.loads(resp.read())


KEEP = {"hoodie.cleaner.commits.retained": "1000", "hoodie.keep.min.commits": "1000", "hoodie.keep.max.commits": "1010"}
if step == "build":
    base = make_rows(np.arange(rows), rows, 1, rng)
    day = rows // 20  # each small upsert in one of the 20 partitions, in turn
    small = [make_rows((i % 20) * day + rng.choice(day, 100, replace=False), rows, 1 + i, rng)
             for i in range(1, instants)]
    if peer == "upsertlake":
        import upsertlake
        t = upsertlake.create_table(uri, name="bench", record_key="key", precombine_field="ts",
                                    partition_fields=["part"],
                                    options={**KEEP, **json.loads(os.environ.get("BENCH_OPTIONS", "{}"))})
        t.bulk_insert(base)
        for b in small:
            t.upsert(b)
    else:
        from deltalake import DeltaTable, write_deltalake
        write_deltalake(uri, base, partition_by=["part"], storage_options=delta_opts)
        for b in small:
            (DeltaTable(uri, storage_options=delta_opts)
             .merge(b, predicate="t.key = s.key", source_alias="s", target_alias="t")
             .when_matched_update_all(predicate="s.ts >= t.ts").when_not_matched_insert_all().execute())
    print(json.dumps({}), flush=True)
else:
    ids = rng.choice(rows, batch_rows, replace=False)
    batch = make_rows(ids, rows, 10_000, np.random.default_rng(2))
    if peer == "upsertlake":
        import upsertlake
        from preload import import_upsertlake
        import_upsertlake()  # as delta-rs's library is loaded before its timed merge
        began = time.perf_counter()
        t = upsertlake.open_table(uri, options={**KEEP, **json.loads(os.environ.get("BENCH_OPTIONS", "{}"))})
        r = t.upsert(batch)
        seconds = time.perf_counter() - began
        served = server_counts()
        t2 = upsertlake.open_table(uri).read(columns=["fare", "ts"])
        extra = {"stages": r.stage_seconds, "own_requests": r.store_requests}
    else:
        from deltalake import DeltaTable
        began = time.perf_counter()
        (DeltaTable(uri, storage_options=delta_opts)
         .merge(batch, predicate="t.key = s.key", source_alias="s", target_alias="t")
         .when_matched_update_all(predicate="s.ts >= t.ts").when_not_matched_insert_all().execute())
        seconds = time.perf_counter() - began
        served = server_counts()
        t2 = DeltaTable(uri, storage_options=delta_opts).to_pyarrow_table(columns=["fare", "ts"])
        extra = {}
    updated = pc.sum(pc.equal(t2["ts"], 10_000)).as_py()
    print(json.dumps({"seconds": seconds, "requests": served, "rows": t2.num_rows, "updated": updated, **extra}),
          flush=True)
"""


def counts(endpoint: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{endpoint}/__requests") as resp:
        return json.loads(resp.read())


def run(peer: str, step: str, uri: str, env: dict[str, str], args: argparse.Namespace) -> dict | None:
    """One step in a fresh process; None (reported) when it died before printing its result.
    delta-rs 1.6 often aborts at interpreter exit (`terminate called without an active
    exception`) after its merge committed and its result was printed: that result is kept."""
    cmd = [sys.executable, "-c", WORKER, str(Path(__file__).parent), peer, uri, step, str(args.rows), str(args.batch),
           str(args.instants)]
    if args.py_spy is not None and step == "upsert":
        args.py_spy.mkdir(parents=True, exist_ok=True)
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate", "500", "--idle",
               "--nonblocking", "--output", str(args.py_spy / f"{peer}-{uri.split('/')[2]}.txt"), "--", *cmd]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]  # py-spy writes its own lines too
    if out.returncode != 0:
        print(f"{peer} {step}: exit {out.returncode} ({out.stderr.strip()[-200:]})"
              f"{'; its result was printed before, kept' if lines else ''}", flush=True)
    return json.loads(lines[-1]) if lines else None


def measure(s3, endpoint: str, env: dict[str, str], peer: str, label: str, args: argparse.Namespace) -> dict | None:
    """Build a table in a bucket of its own, then time one upsert in a fresh process."""
    bucket = f"bench-{peer.replace('-', '')}-{label}-{int(time.time() * 1000)}"
    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/t"
    began = time.perf_counter()
    if run(peer, "build", uri, env, args) is None:
        return None
    built = time.perf_counter() - began
    counts(endpoint)  # reset
    got = run(peer, "upsert", uri, env, args)
    if got is None:
        return None
    print(f"{peer:11s} {label}: {got['seconds']:.3f} s, rows {got['rows']}, updated {got['updated']}, "
          f"requests {got['requests']} (table built in {built:.0f} s)", flush=True)
    if "own_requests" in got:
        print(f"            own count {got['own_requests']}", flush=True)
    if "stages" in got:
        print("            stages " + ", ".join(f"{k} {v:.3f}" for k, v in got["stages"].items()), flush=True)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--instants", type=int, default=1, help="completed instants before the timed upsert")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    parser.add_argument("--scaling", action="store_true",
                        help="upsertlake only: --rows vs --big rows (10 instants), 10 vs --long instants (--rows rows)")
    parser.add_argument("--big", type=int, default=10_000_000)
    parser.add_argument("--long", type=int, default=200)
    parser.add_argument(
        "--py-spy", type=Path, help="record each timed upsert's stacks (with idle ones) into this folder"
    )
    args = parser.parse_args()

    server = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True)
    endpoint = f"http://127.0.0.1:{int(server.stdout.readline())}"
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
           "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                      region_name="us-east-1")
    try:
        if args.scaling:
            scaling(s3, endpoint, env, args)
        else:
            versus(s3, endpoint, env, args)
    finally:
        server.terminate()


def scaling(s3, endpoint: str, env: dict[str, str], args: argparse.Namespace) -> None:
    """The requests of one upsert (and its time) as the table grows and as the timeline grows."""
    rows = []
    for n_rows, instants in ((args.rows, 10), (args.big, 10), (args.rows, args.long)):
        cfg = argparse.Namespace(**{**vars(args), "rows": n_rows, "instants": instants})
        got = measure(s3, endpoint, env, "upsertlake", f"{n_rows // 1000}k-rows-{instants}-instants", cfg)
        if got is not None:
            rows.append((n_rows, instants, got))
    print(f"\nrequests of one {args.batch}-row uniform upsert (fresh process; server's count by kind):")
    for n_rows, instants, got in rows:
        print(f"  {n_rows:>10} rows, {instants:>3} instants: {got['seconds']:.3f} s  {got['requests']}")


def versus(s3, endpoint: str, env: dict[str, str], args: argparse.Namespace) -> None:
    results: dict[str, list[dict]] = {p: [] for p in args.peers}
    for i in range(args.repeat):
        for peer in args.peers:  # alternate the peers, each run on a table of its own
            got = measure(s3, endpoint, env, peer, f"run-{i + 1}", args)
            if got is not None:
                results[peer].append(got)
    medians = {p: statistics.median(r["seconds"] for r in rs) for p, rs in results.items() if rs}
    print(f"\n{args.rows} rows + {args.batch} uniform upsert, {args.instants} instants before, "
          f"median of {args.repeat} fresh-process runs:")
    for peer, median in medians.items():
        print(f"  {peer:11s} {median:.3f} s  requests {results[peer][-1]['requests']}")
    if "upsertlake" in medians and "delta-rs" in medians:
        print(f"  upsertlake / delta-rs: {medians['upsertlake'] / medians['delta-rs']:.2f}x")


if __name__ == "__main__":
    main()
