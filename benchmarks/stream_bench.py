"""Streaming ingestion: micro-batches upserted into a table as a Spark Structured
Streaming query would write them, per-batch latency and throughput.

    python benchmarks/stream_bench.py                                  # 20 x 50K over 2M rows, local[2]
    python benchmarks/stream_bench.py --rows 20000 --batch 1000 --batches 3   # a quick correctness run
    python benchmarks/stream_bench.py --line 250000 500000 1000000     # the sink's one-process line
    python benchmarks/stream_bench.py --peers engine engine-mor --option hoodie.index.type=BUCKET

The stream: a folder of parquet files, one a micro-batch (`maxFilesPerTrigger=1`, `availableNow`),
each 90% updates of records in the newest 2 of 20 day partitions and 10% inserts on the newest
day, its `ts` the batch's number (so every batch wins). Peers, each on a fresh copy of one base
table (built untimed with bulk_insert):

- `sink`, `sink-mor`, `sink-mor-c5`: `writeStream.format("upsertlake")` on copy-on-write, on
  merge-on-read without compaction, and with inline compaction every 5 deltacommits;
- `foreach`, `foreach-mor`: `foreachBatch(lambda df, n: upsertlake.spark.upsert(df, path, batch_id=n))`,
  the distributed batch API;
- `engine`, `engine-mor`: `Table.upsert` of each batch's file in this process, no Spark: what the
  sink's commit runs, so `sink` over `engine` is the sink's own overhead (staging, the worker);
- `delta-rs`: `DeltaTable.merge` of each batch in this process (delta-rs 1.x has no
  `write_deltalake(mode="merge")`: this is its merge).

A Spark peer's latency is Spark's own `triggerExecution` of each batch (planning, reading the
file, the write and both commits); an in-process peer's is the wall time of its write. Every peer's
table is verified afterwards (row count, and the sum of `ts`, which counts the rows holding each
batch's version). The first batch of a Spark peer starts Python workers and is shown apart.

`--line N...`: the sink's commit merges a micro-batch in one Python worker; for each size a fresh
process does what that commit does (read the staged rows, upsert them into a copy of the base
table) and reports its peak RSS and time: where `upsertlake.save.max.records` should sit.
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
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

from workloads import PARTITIONS, first_id_of_day, make_base, make_rows

SPARK_PEERS = ("sink", "sink-mor", "sink-mor-c5", "foreach", "foreach-mor")
PEERS = (*SPARK_PEERS, "engine", "engine-mor", "delta-rs")
KEYS = {"table": "bench", "record_key": "key", "precombine_field": "ts", "partition_fields": "part"}
HOT_DAYS = 2
MOR = {"hoodie.table.type": "MERGE_ON_READ", "hoodie.compact.inline": "false"}
TABLE_OPTIONS = {
    "sink": {}, "foreach": {}, "engine": {},
    "sink-mor": MOR, "foreach-mor": MOR, "engine-mor": MOR,
    "sink-mor-c5": {**MOR, "hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": "5"},
}


def micro_batches(rows: int, batch: int, batches: int, seed: int = 45) -> list[pa.Table]:
    """Each batch: 90% updates in the newest HOT_DAYS days (more days for a batch larger than
    they are), 10% new keys, ts = its number + 1."""
    rng = np.random.default_rng(seed)
    inserts = batch // 10
    # The newest days, or as many more as a batch larger than they are needs.
    hot = min(first_id_of_day(PARTITIONS - HOT_DAYS, rows, PARTITIONS), max(rows - (batch - inserts), 0))
    out, next_id = [], rows
    for b in range(batches):
        updated = hot + rng.choice(rows - hot, batch - inserts, replace=False)
        ids = np.concatenate([updated, np.arange(next_id, next_id + inserts)])
        next_id += inserts
        out.append(make_rows(ids, rows, b + 1, rng))
    return out


def expected(rows: int, data: list[pa.Table]) -> tuple[int, int]:
    """Rows and sum of ts the table must hold: base rows keep ts 0, a touched key its last batch's."""
    last: dict[str, int] = {}
    for table in data:
        last.update(zip(table["key"].to_pylist(), table["ts"].to_pylist()))
    new = sum(1 for k in last if int(k[1:]) >= rows)
    return rows + new, sum(last.values())


def build(base: pa.Table, work: Path, kind: str, options: dict[str, str]) -> Path:
    """The base table of a table type, built once (with `options`) and copied for each peer."""
    import upsertlake

    seed = work / f"seed-{kind}"
    if not seed.exists():
        t = upsertlake.create_table(
            seed,
            name="bench",
            record_key="key",
            precombine_field="ts",
            partition_fields=["part"],
            table_type="MERGE_ON_READ" if kind == "mor" else "COPY_ON_WRITE",
            options=options,
        )
        t.bulk_insert(base)
    return seed


def run_spark_peer(
    spark: object, peer: str, source: Path, table: Path, checkpoint: Path, extra: dict[str, str]
) -> list[float]:
    """The stream through the sink or foreachBatch; Spark's per-batch triggerExecution seconds."""
    import upsertlake.spark as uls

    options = {**KEYS, "operation": "upsert", **TABLE_OPTIONS[peer], **extra}
    frames = spark.readStream.schema(spark.read.parquet(str(source)).schema).option("maxFilesPerTrigger", 1)
    frames = frames.parquet(str(source))
    if peer.startswith("sink"):
        writer = frames.writeStream.format("upsertlake").options(**options)
        query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(str(table))
    else:
        def write(df: object, n: int) -> None:
            uls.upsert(df, str(table), batch_id=n, **options)

        writer = frames.writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint))
        query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    print(f"{peer:<12} Spark's parts of a batch (median s): {spark_parts(progress)}", flush=True)
    return [p["durationMs"]["triggerExecution"] / 1000 for p in progress]


def spark_parts(progress: list[dict]) -> dict[str, float]:
    """Median seconds of each part of a batch's triggerExecution (Spark's `durationMs`), the first
    batch (which starts the Python workers) left out when there are others."""
    if not progress:
        return {}
    steady = progress[1:] or progress
    parts = [k for k in progress[0]["durationMs"] if k != "triggerExecution"]
    return {k: statistics.median(p["durationMs"].get(k, 0) for p in steady) / 1000 for k in parts}


def run_engine_peer(peer: str, data: list[pa.Table], table: Path, extra: dict[str, str]) -> list[float]:
    import upsertlake

    t = upsertlake.open_table(table, {**TABLE_OPTIONS[peer], **extra})
    seconds = []
    for batch in data:
        began = time.perf_counter()
        t.upsert(batch)
        seconds.append(time.perf_counter() - began)
    return seconds


def run_delta(base: pa.Table, data: list[pa.Table], table: Path) -> list[float]:
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(str(table), base, partition_by=["part"])
    seconds = []
    for batch in data:
        began = time.perf_counter()
        (DeltaTable(str(table)).merge(batch, predicate="t.key = s.key", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
        seconds.append(time.perf_counter() - began)
    return seconds


def table_state(peer: str, table: Path) -> tuple[int, int]:
    if peer == "delta-rs":
        from deltalake import DeltaTable

        data = DeltaTable(str(table)).to_pyarrow_dataset().to_table(columns=["ts"])
    else:
        import upsertlake

        data = upsertlake.open_table(table).read(columns=["ts"])
    return data.num_rows, pc.sum(data["ts"]).as_py() or 0


def summary(peer: str, seconds: list[float], batch: int, spark: bool) -> dict[str, float]:
    steady = seconds[1:] if spark and len(seconds) > 1 else seconds
    median = statistics.median(steady)
    return {"peer": peer, "first": seconds[0], "median": median, "p90": float(np.percentile(steady, 90)),
            "max": max(steady), "rows_per_s": batch / median}


def line(sizes: list[int], rows: int, work: Path) -> None:
    """For each micro-batch size, what the sink's commit does, in a fresh process: peak RSS, time."""
    import upsertlake  # noqa: F401 - the base is built here, once

    base = build(make_base(rows), work, "cow", {})
    print("| micro-batch rows | commit worker peak RSS | merge seconds |\n| --- | --- | --- |")
    for size in sizes:
        staged = work / f"staged-{size}.parquet"
        pq.write_table(micro_batches(rows, size, 1, seed=size)[0], staged)
        table = work / f"line-{size}"
        shutil.copytree(base, table)
        code = (
            "import json, resource, time, pyarrow.parquet as pq, upsertlake\n"
            f"t = upsertlake.open_table({str(table)!r}); data = pq.read_table({str(staged)!r})\n"
            "began = time.perf_counter(); t.upsert(data); took = time.perf_counter() - began\n"
            "print(json.dumps({'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 's': took}))\n"
        )
        run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        out = json.loads(run.stdout)
        print(f"| {size:,} | {out['rss_mb']:,.0f} MB | {out['s']:.2f} |", flush=True)
        shutil.rmtree(table)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--line", type=int, nargs="+", help="measure the sink's one-process line at these sizes instead")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of every upsertlake peer's table and writes (e.g. hoodie.index.type=BUCKET)")
    args = ap.parse_args()
    extra = dict(o.split("=", 1) for o in args.option)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.line:
            line(args.line, args.rows, work)
            return
        base = make_base(args.rows)
        data = micro_batches(args.rows, args.batch, args.batches)
        source = work / "source"
        source.mkdir()
        for n, table in enumerate(data):
            pq.write_table(table, source / f"batch-{n:04d}.parquet")
        want = expected(args.rows, data)
        spark = None
        results = []
        for peer in args.peers:
            table = work / peer / "table"
            if peer != "delta-rs":
                shutil.copytree(build(base, work, "mor" if "mor" in peer else "cow", extra), table)
            if peer in SPARK_PEERS:
                if spark is None:
                    import upsertlake.spark as uls

                    spark = uls.build_session(args.master, "stream-bench", **{"spark.sql.shuffle.partitions": "4"})
                    uls.register(spark)
                seconds = run_spark_peer(spark, peer, source, table, work / peer / "checkpoint", extra)
            elif peer == "delta-rs":
                seconds = run_delta(base, data, table)
            else:
                seconds = run_engine_peer(peer, data, table, extra)
            got = table_state(peer, table)
            if got != want or len(seconds) != len(data):
                sys.exit(f"{peer}: table holds (rows, sum ts) {got}, expected {want}; {len(seconds)} batches timed")
            results.append(summary(peer, seconds, args.batch, peer in SPARK_PEERS))
            r = results[-1]
            print(f"{peer:<12} first {r['first']:.2f} s, median {r['median']:.3f} s, p90 {r['p90']:.3f} s, "
                  f"max {r['max']:.3f} s, {r['rows_per_s']:,.0f} rows/s", flush=True)
            shutil.rmtree(work / peer)
    by = {r["peer"]: r["median"] for r in results}
    print(f"\n{args.batches} micro-batches of {args.batch:,} rows over {args.rows:,} ({args.master}), "
          "median per batch:")
    pairs = (("sink-mor", "sink", "<= 0.5"), ("engine-mor", "engine", "<= 0.5"), ("sink", "foreach", "<= 1.1"),
             ("sink", "engine", ""), ("sink-mor", "foreach-mor", "<= 1.1"), ("sink-mor", "engine-mor", ""),
             ("sink", "delta-rs", ""))
    for a, b, goal in pairs:
        if a in by and b in by:
            print(f"  {a} / {b}: {by[a] / by[b]:.2f}" + (f" (goal {goal})" if goal else ""))
    print(f"  peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()
