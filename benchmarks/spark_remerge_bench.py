"""Commit latency of a Spark write that must re-merge, against a plain Spark commit.

A table of N keys in 3 partitions (one file group each). Plain: a Spark upsert of 10% of the
keys, started, written and committed with nothing committed beside it. Re-merge: the same, but an
in-process upsert of other keys of the same file groups commits between the Spark write and its
commit, so the commit merges the Spark write's buckets again (one Spark job over the cached frame).
Prints one JSON line per run and the medians: `python benchmarks/spark_remerge_bench.py [N] [runs]`.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from upsertlake import create_table, open_table
from upsertlake.layout.markers import reconcile_markers
from upsertlake.spark.options import write_options
from upsertlake.spark.session import WRITE_SETTINGS, build_session, session_settings
from upsertlake.spark.types import arrow_schema_of
from upsertlake.spark.write import _write_distributed

OPTS = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control", "hoodie.parquet.small.file.limit": "0"}


def batch(ids: range, ts: int, tag: str) -> pa.Table:
    return pa.table({
        "id": [f"k{i:08d}" for i in ids],
        "ts": pa.array([ts] * len(ids), pa.int64()),
        "v": [f"{tag}-{i}" for i in ids],
        "p": [f"p{i % 3}" for i in ids],
    })


def one_run(spark: object, root: Path, n: int, concurrent: bool) -> dict:
    path = root / ("remerge" if concurrent else "plain")
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=OPTS)
    open_table(path, OPTS).upsert(batch(range(n), 1, "base"))
    options = write_options(OPTS, str(path), "upsert")
    df = spark.createDataFrame(batch(range(0, n, 10), 2, "spark")).cache()  # 10% of the keys
    df.count()
    client = open_table(path, options.hoodie).write_client()
    instant = client.start_commit()
    parts = spark.sparkContext.defaultParallelism
    # The write and its commit under the settings write_dataframe uses.
    with session_settings(spark, {**WRITE_SETTINGS, "spark.sql.shuffle.partitions": str(parts)}):
        began = time.perf_counter()
        result = _write_distributed(df, arrow_schema_of(df.schema), client, instant, options, parts)
        reconcile_markers(client.storage, instant, result.files_written)
        write_s = time.perf_counter() - began
        if concurrent:
            open_table(path, OPTS).upsert(batch(range(5, n, 10), 3, "local"))  # other keys, same groups
        began = time.perf_counter()
        done = client.commit(instant, result)
        commit_s = time.perf_counter() - began
    df.unpersist()
    return {"concurrent": concurrent, "rows": n, "write_s": round(write_s, 3), "commit_s": round(commit_s, 3),
            "remerges": done.remerges, "groups": len(done.write_stats)}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    spark = build_session("local[2]", "remerge-bench", **{"spark.sql.shuffle.partitions": "4"})
    one_run(spark, Path(tempfile.mkdtemp()), 1000, True)  # warm up the workers
    results: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(runs):
        for concurrent in (False, True):
            with tempfile.TemporaryDirectory() as root:
                r = one_run(spark, Path(root), n, concurrent)
            print(json.dumps(r), flush=True)
            results[concurrent].append(r["commit_s"])
    plain, merged = statistics.median(results[False]), statistics.median(results[True])
    print(json.dumps({"median_commit_s_plain": plain, "median_commit_s_remerge": merged,
                      "extra_s": round(merged - plain, 3)}))
    spark.stop()


if __name__ == "__main__":
    main()
