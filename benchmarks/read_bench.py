"""Reads (issue 44): upsertlake's scans against delta-rs, hudi-rs (the `hudi` package) and pyarrow
reading just the snapshot's current files, on the same rows, each read in a fresh process with
its libraries imported before the clock, every result verified.

    python benchmarks/read_bench.py                        # 4M rows in 10 partitions + a 10% upsert
    python benchmarks/read_bench.py --rows 200000 --repeat 1   # a quick correctness run
    python benchmarks/read_bench.py --s3                   # the same on the loopback S3 server,
                                                           # with each read's requests counted
    python benchmarks/read_bench.py --layout spread        # keys spread over every file

The tables (built untimed): a copy-on-write table of --rows rows (`make_rows`' trip columns plus
`pickup`, a time that grows with the key, so that files hold ranges of it) in --partitions
partitions, then a uniform upsert of 10% of its keys; the same rows written by delta-rs (then its
MERGE of the same upsert); a merge-on-read table of the same rows after 5 deltacommits of 5% each,
and a compacted copy of it. `--layout spread`: 10 columns with a 64-character string, keys spread
over the partitions by `id % partitions`, so every file holds keys (and `pickup` times) from the
whole range, in order: no file and no row group at Hudi's 120 MB can be skipped by a range.

Queries: the whole snapshot; two columns; a 1% key range; a 1% range of `pickup` (a data column
clustered by file); the merge-on-read snapshot and the compacted one; the whole snapshot's peak
memory (`to_arrow` against `to_batches`, and each peer's). Each result is checked: its rows and
the sum of `ts` (which counts the rows holding each update), against what the generator says.
Prints per query and peer the median seconds (wall, and the process's CPU, which a shared machine
disturbs less), the peak RSS of the process (MB, imports included) and pyarrow's peak allocation
(MB); with --s3 the requests the server counted by kind.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).parent))

from workloads import keys_of, make_rows

SERVER = Path(__file__).resolve().parents[1] / "tests" / "scripts" / "s3_server.py"
PEERS = ("upsertlake", "upsertlake-batches", "delta-rs", "hudi-rs", "hudi-rs-stream", "pyarrow")
QUERIES = ("snapshot", "columns", "key_range", "clustered", "mor", "mor_compacted")
MOR_COMMITS, MOR_SHARE, UPSERT_SHARE = 5, 0.05, 0.10
EPOCH = 1_700_000_000  # pickup: seconds, EPOCH + id
NO_SERVICES = {"hoodie.compact.inline": "false", "hoodie.clean.automatic": "false", "hoodie.archive.automatic": "false"}


# -- the rows and what each query must return ------------------------------------------------------
def rows_of(ids: np.ndarray, n: int, ts: int, seed: int, partitions: int, layout: str = "sorted") -> pa.Table:
    """The rows of `ids`: `make_rows`' trips in contiguous key ranges per partition (`sorted`), or
    10 columns with keys spread over the partitions by `id % partitions` (`spread`)."""
    rng = np.random.default_rng(seed)
    pickup = pa.array(EPOCH + ids.astype(np.int64))
    if layout == "sorted":
        return make_rows(ids, n, ts, rng, partitions).append_column("pickup", pickup)
    m = len(ids)
    hexed = np.frombuffer(b"0123456789abcdef", np.uint8)[np.frombuffer(rng.bytes(32 * m), np.uint8).reshape(-1, 1)
                                                       >> np.array([4, 0], np.uint8) & 15]
    note = pa.Array.from_buffers(pa.binary(64), m, [None, pa.py_buffer(hexed.tobytes())]).cast(pa.string())
    return pa.table({
        "key": keys_of(ids), "ts": pa.array(np.full(m, ts, np.int64)),
        "part": pc.utf8_lpad(pc.cast(pa.array(ids % partitions), pa.string()), 2, "0"),
        "fare": pa.array(rng.random(m) * 100), "tip": pa.array(rng.random(m) * 10),
        "distance_km": pa.array(rng.random(m).astype(np.float32) * 30),
        "passengers": pa.array(rng.integers(1, 6, m, dtype=np.int32)), "paid": pa.array(rng.random(m) < 0.9),
        "pickup": pickup, "note": note,
    })


def updates(n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The copy-on-write upsert's ids (10%) and the merge-on-read table's 5 deltacommits' (5% each)."""
    rng = np.random.default_rng(11)
    cow = rng.choice(n, int(n * UPSERT_SHARE), replace=False)
    mor = [rng.choice(n, int(n * MOR_SHARE), replace=False) for _ in range(MOR_COMMITS)]
    return np.sort(cow), [np.sort(ids) for ids in mor]


def ranges(n: int) -> dict[str, tuple[int, int]]:
    """The id ranges of the 1% queries: the key range, the pickup range."""
    width = max(n // 100, 1)
    return {"key_range": (n // 2, n // 2 + width), "clustered": (n // 3, n // 3 + width)}


def expected(query: str, n: int) -> tuple[int, int]:
    """(rows, sum of ts) a query must return."""
    cow, mor = updates(n)
    ts = np.ones(n, np.int64)
    if query.startswith("mor"):
        for i, ids in enumerate(mor):
            ts[ids] = 2 + i  # later deltacommits carry larger ts: the last write of a key wins
    else:
        ts[cow] = 2
    if query in ranges(n):
        lo, hi = ranges(n)[query]
        ts = ts[lo:hi]
    return len(ts), int(ts.sum())


# -- building the tables (untimed) -----------------------------------------------------------------
def build(
    work: str, n: int, partitions: int, store: dict[str, str] | None, delta_opts: dict[str, str] | None,
    pairs: list[tuple[str, str]], block_mb: float = 0, layout: str = "sorted",
) -> None:
    """The tables the measured (query, peer) pairs read; upsertlake's parquet row groups of at most
    `block_mb` MB when given (`hoodie.parquet.block.size`, else Hudi's 120 MB)."""
    import upsertlake

    options = dict(NO_SERVICES, **({"hoodie.parquet.block.size": str(int(block_mb * 2**20))} if block_mb else {}))
    base = rows_of(np.arange(n), n, 1, 1, partitions, layout)
    cow, mor = updates(n)
    began = time.perf_counter()
    t = upsertlake.create_table(f"{work}/cow", "trips", "key", "ts", "part", options=options, storage_options=store)
    t.bulk_insert(base)
    t.upsert(rows_of(cow, n, 2, 2, partitions, layout))
    print(f"built upsertlake copy-on-write in {time.perf_counter() - began:.1f} s", flush=True)
    if any(p == "delta-rs" for _, p in pairs):
        build_delta(work, base, rows_of(cow, n, 2, 2, partitions, layout), delta_opts)
    if not any(q.startswith("mor") for q, _ in pairs):
        return
    began = time.perf_counter()
    m = upsertlake.create_table(f"{work}/mor", "trips", "key", "ts", "part", table_type="MERGE_ON_READ",
                                options=options)
    m.bulk_insert(base)
    for i, ids in enumerate(mor):
        m.upsert(rows_of(ids, n, 2 + i, 3 + i, partitions, layout))
    shutil.copytree(f"{work}/mor", f"{work}/mor_compacted")
    done = upsertlake.open_table(f"{work}/mor_compacted", options=NO_SERVICES).compact()
    assert done.instant_time is not None, done
    print(f"built merge-on-read (and compacted) in {time.perf_counter() - began:.1f} s", flush=True)


def build_delta(work: str, base: pa.Table, upsert: pa.Table, delta_opts: dict[str, str] | None) -> None:
    from deltalake import DeltaTable, write_deltalake

    began = time.perf_counter()
    write_deltalake(f"{work}/delta", base, partition_by=["part"], storage_options=delta_opts)
    (DeltaTable(f"{work}/delta", storage_options=delta_opts).merge(
        upsert, predicate="t.key = s.key", source_alias="s", target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    print(f"built delta-rs in {time.perf_counter() - began:.1f} s", flush=True)


# -- one read, in a fresh process ------------------------------------------------------------------
def worker(spec: dict) -> dict:
    """Import the peer's libraries, then time its read of the query; verify outside the clock."""
    peer, query, work, n = spec["peer"], spec["query"], spec["work"], spec["rows"]
    store, delta_opts = spec.get("store"), spec.get("delta_opts")
    table_dir = f"{work}/{query}" if query.startswith("mor") else f"{work}/cow"
    lo_hi = ranges(n).get(query)
    columns = ["fare", "ts"] if query == "columns" else None
    import pyarrow.dataset as ds

    if peer.startswith("upsertlake"):
        from preload import import_upsertlake

        import upsertlake

        import_upsertlake()
    elif peer == "delta-rs":
        from deltalake import DeltaTable, QueryBuilder
    elif peer.startswith("hudi-rs"):
        from hudi import HudiReadOptions, HudiTableBuilder
    elif peer == "pyarrow":
        import upsertlake  # lists the current files, before the clock

        files = upsertlake.open_table(table_dir, storage_options=store).files()
        fs = None
        if store is not None:
            fs = pa.fs.S3FileSystem(access_key=store["aws_access_key_id"], secret_key=store["aws_secret_access_key"],
                                    region=store["aws_region"], endpoint_override=store["aws_endpoint"], scheme="http")
            files = [f.removeprefix("s3://") for f in files]
    counts(spec.get("endpoint"))
    base_rss = peak_rss_mb()
    key_filter = pickup_filter = None
    if query == "key_range":
        key_filter = (keys_of(np.array([lo_hi[0]]))[0].as_py(), keys_of(np.array([lo_hi[1]]))[0].as_py())
    if query == "clustered":
        pickup_filter = (EPOCH + lo_hi[0], EPOCH + lo_hi[1])
    began, cpu = time.perf_counter(), time.process_time()
    if peer.startswith("upsertlake"):
        filters = None
        if key_filter:
            filters = [("key", ">=", key_filter[0]), ("key", "<", key_filter[1])]
        if pickup_filter:
            filters = [("pickup", ">=", pickup_filter[0]), ("pickup", "<", pickup_filter[1])]
        scan = upsertlake.open_table(table_dir, storage_options=store).scan(columns=columns, filters=filters)
        if peer == "upsertlake":
            result = Summary.of(scan.to_arrow())
        else:
            result = Summary.of_batches(scan.to_batches())
    elif peer == "delta-rs":
        dt = DeltaTable(f"{work}/delta", storage_options=delta_opts)
        if key_filter or pickup_filter:  # DataFusion, with its row-group statistics (pyarrow's filter fails on
            # the Utf8View columns delta-rs's MERGE writes: no kernel for string against string_view)
            column, (lo, hi) = ("key", [f"'{v}'" for v in key_filter]) if key_filter else ("pickup", pickup_filter)
            sql = f"select * from t where {column} >= {lo} and {column} < {hi}"
            result = Summary.of_batches(pa.RecordBatchReader.from_stream(QueryBuilder().register("t", dt).execute(sql)))
        else:
            result = Summary.of(dt.to_pyarrow_table(columns=columns))
    elif peer.startswith("hudi-rs"):
        builder = HudiTableBuilder.from_base_uri(table_dir if store else Path(table_dir).resolve().as_uri())
        if store is not None:
            builder = builder.with_storage_options({"aws_endpoint_url": store["aws_endpoint"], "aws_allow_http": "true",
                                                    "aws_access_key_id": store["aws_access_key_id"],
                                                    "aws_secret_access_key": store["aws_secret_access_key"],
                                                    "aws_region": store["aws_region"]})
        opts = HudiReadOptions()
        if columns:
            opts = opts.with_projection(columns)
        if key_filter:
            opts = opts.with_filters([("key", ">=", key_filter[0]), ("key", "<", key_filter[1])])
        if pickup_filter:
            opts = opts.with_filters([("pickup", ">=", str(pickup_filter[0])), ("pickup", "<", str(pickup_filter[1]))])
        table = builder.build()
        if peer == "hudi-rs":
            result = Summary.of_batches(iter(table.read(opts)))
        else:
            result = Summary.of_batches(table.read_stream(opts))
    else:  # pyarrow, the current files
        expression = None
        if key_filter:
            expression = (pc.field("key") >= key_filter[0]) & (pc.field("key") < key_filter[1])
        if pickup_filter:
            expression = (pc.field("pickup") >= pickup_filter[0]) & (pc.field("pickup") < pickup_filter[1])
        dataset = ds.dataset(files, format="parquet", filesystem=fs)
        result = Summary.of(dataset.to_table(columns=columns, filter=expression))
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {"seconds": seconds, "cpu_seconds": cpu, "rows": result.rows, "ts_sum": result.ts_sum,
            "peak_rss_mb": peak_rss_mb(), "rss_growth_mb": peak_rss_mb() - base_rss,
            "pool_mb": pa.default_memory_pool().max_memory() / 2**20, "requests": counts(spec.get("endpoint"))}


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: getrusage's ru_maxrss carries a parent's peak
    over fork and exec, so a small worker of a big driver would report the driver's)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Summary:
    """What a read returned, kept small: its rows and the sum of its `ts`."""

    def __init__(self, rows: int, ts_sum: int) -> None:
        self.rows, self.ts_sum = rows, ts_sum

    @classmethod
    def of(cls, table: pa.Table) -> Summary:
        return cls(table.num_rows, int(pc.sum(table["ts"]).as_py() or 0))

    @classmethod
    def of_batches(cls, batches: object) -> Summary:
        rows = ts_sum = 0
        for batch in batches:
            rows += batch.num_rows
            ts_sum += int(pc.sum(batch.column("ts")).as_py() or 0)
        return cls(rows, ts_sum)


def counts(endpoint: str | None) -> dict[str, int]:
    """The S3 server's request counts since the last call (which resets them); {} off S3."""
    if not endpoint:
        return {}
    with urllib.request.urlopen(f"{endpoint}/__requests") as reply:
        return json.loads(reply.read())


def run(spec: dict, timeout: float) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                         timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": (out.stderr.strip() or f"exit {out.returncode}")[-400:]}
    return json.loads(lines[-1])  # (delta-rs may abort at exit after printing: its result stands)


# -- the runs --------------------------------------------------------------------------------------
def plan(peers: list[str], queries: list[str], s3: bool) -> list[tuple[str, str]]:
    """The (query, peer) pairs measured: every peer reads the copy-on-write queries; the merge-on-read
    ones are read by upsertlake and hudi-rs (the others cannot merge logs)."""
    pairs = []
    for q in queries:
        if s3 and q.startswith("mor"):
            continue
        for p in peers:
            if q.startswith("mor") and p not in ("upsertlake", "upsertlake-batches", "hudi-rs", "hudi-rs-stream"):
                continue
            pairs.append((q, p))
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    ap.add_argument("--queries", nargs="+", default=list(QUERIES), choices=QUERIES)
    ap.add_argument("--s3", action="store_true", help="tables on the loopback S3 server; requests counted")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--block-mb", type=float, default=0, help="upsertlake's row groups (hoodie.parquet.block.size), MB")
    ap.add_argument("--layout", choices=("sorted", "spread"), default="sorted",
                    help="keys in contiguous ranges per partition (sorted) or spread over every file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))), flush=True)
        return
    server = None
    store = delta_opts = endpoint = None
    with tempfile.TemporaryDirectory() as tmp:
        work = tmp
        if args.s3:
            server = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True)
            endpoint = f"http://127.0.0.1:{int(server.stdout.readline())}"
            store = {"aws_endpoint": endpoint, "aws_access_key_id": "bench", "aws_secret_access_key": "bench",
                     "aws_region": "us-east-1"}
            delta_opts = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "bench",
                          "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1", "conditional_put": "etag"}
            import boto3

            boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                         region_name="us-east-1").create_bucket(Bucket="reads")
            work = "s3://reads"
        try:
            pairs = plan(args.peers, args.queries, args.s3)
            build(work, args.rows, args.partitions, store, delta_opts, pairs, args.block_mb, args.layout)
            report(args, pairs, work, store, delta_opts, endpoint)
        finally:
            if server is not None:
                server.terminate()


def report(
    args: argparse.Namespace, pairs: list[tuple[str, str]], work: str, store: dict | None, delta_opts: dict | None,
    endpoint: str | None,
) -> None:
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.repeat):
        for query, peer in pairs:  # round robin: the peers share the machine's state
            spec = {"peer": peer, "query": query, "work": work, "rows": args.rows, "store": store,
                    "delta_opts": delta_opts, "endpoint": endpoint}
            got = run(spec, args.timeout)
            want = expected(query, args.rows)
            if "error" not in got:
                got["verified"] = (got["rows"], got["ts_sum"]) == want
            results.setdefault((query, peer), []).append(got)
            line = got.get("error") or (f"{got['seconds']:.3f} s  cpu {got['cpu_seconds']:.3f} s  rows {got['rows']}  "
                                        f"{'ok' if got['verified'] else f'WRONG (want {want})'}  "
                                        f"rss {got['peak_rss_mb']:.0f} MB  pool {got['pool_mb']:.0f} MB"
                                        + (f"  requests {got['requests']}" if got["requests"] else ""))
            print(f"run {r + 1} {query:14s} {peer:19s} {line}", flush=True)
    print(f"\n{args.rows:,} rows in {args.partitions} partitions ({args.layout}) + a {UPSERT_SHARE:.0%} upsert"
          f"{' (loopback S3)' if args.s3 else ''}: median of {args.repeat} fresh-process reads\n")
    print("| query | peer | seconds | CPU seconds | rows ok | peak RSS MB | RSS growth MB | pyarrow peak MB |"
          + (" requests |" if args.s3 else ""))
    print("| --- | --- | ---: | ---: | :---: | ---: | ---: | ---: |" + (" --- |" if args.s3 else ""))
    for (query, peer), runs in results.items():
        good = [g for g in runs if "error" not in g]
        if not good:
            print(f"| {query} | {peer} | failed: {runs[-1]['error'][:80]} | | | | | |")
            continue
        med = statistics.median(g["seconds"] for g in good)
        cpu = statistics.median(g["cpu_seconds"] for g in good)
        ok = "yes" if all(g["verified"] for g in good) and len(good) == len(runs) else "NO"
        print(f"| {query} | {peer} | {med:.3f} | {cpu:.3f} | {ok} | {max(g['peak_rss_mb'] for g in good):.0f} | "
              f"{max(g['rss_growth_mb'] for g in good):.0f} | {max(g['pool_mb'] for g in good):.0f} |"
              + (f" {good[-1]['requests']} |" if args.s3 else ""))
    wrong = [k for k, runs in results.items() if any("error" in g or not g["verified"] for g in runs)]
    if wrong:
        sys.exit(f"\nfailed or unverified: {wrong}")


if __name__ == "__main__":
    main()
