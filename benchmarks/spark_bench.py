"""Spark benchmark: a 100,000-row upsert into a 1,000,000-row table on Spark local[2].

Peers, measured in the same run on the same data (session start-up excluded, each run on a
fresh copy of the table):
- upsertlake.spark.upsert: dedup + tag as Spark jobs, one task per touched file group;
- the plain PySpark upsert users write without a table format: read the whole table, union
  the batch, keep the row with the largest `ts` per key (row_number over a window), write it all.

Workloads: uniform (updates spread over all 10 day partitions) and skewed (late-arriving data:
90% of the updates in the newest day, the rest in the day before). Half of each batch updates,
half inserts new keys into the newest day.

    python benchmarks/spark_bench.py [--rows 1000000] [--batch 100000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import upsertlake
import upsertlake.spark as uls

DAYS = 10


def make_rows(ids: np.ndarray, rows: int, ts: int, rng: np.random.Generator) -> pa.Table:
    n = len(ids)
    day = np.minimum(ids * DAYS // rows, DAYS - 1)
    return pa.table({
        "uuid": pa.array([f"{i:012d}" for i in ids]),
        "ts": pa.array(np.full(n, ts, dtype=np.int64)),
        "day": pa.array([f"2026-11-{d + 1:02d}" for d in day]),
        "rider": pa.array([f"rider-{i % 5000}" for i in ids]),
        "fare": pa.array(rng.random(n) * 100),
        "tip": pa.array(rng.random(n) * 10),
        "distance_km": pa.array(rng.random(n).astype(np.float32) * 30),
        "passengers": pa.array(rng.integers(1, 6, n, dtype=np.int32)),
    })


def make_batch(rows: int, batch: int, skewed: bool, rng: np.random.Generator) -> pa.Table:
    n_updates = batch // 2
    if skewed:
        day = rows // DAYS
        hot = rng.choice(np.arange(rows - day, rows), int(n_updates * 0.9), replace=False)
        late = rng.choice(np.arange(rows - 2 * day, rows - day), n_updates - len(hot), replace=False)
        updates = np.concatenate([hot, late])
    else:
        updates = rng.choice(rows, n_updates, replace=False)
    inserts = np.arange(rows, rows + batch - n_updates)
    return pa.concat_tables([make_rows(updates, rows, 2, rng), make_rows(inserts, rows + batch, 2, rng)])


def plain_rewrite(spark, table_dir: str, batch_file: str, out_dir: str) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    current = spark.read.parquet(table_dir)
    incoming = spark.read.parquet(batch_file)
    rank = F.row_number().over(Window.partitionBy("uuid").orderBy(F.col("ts").desc()))
    merged = current.unionByName(incoming).withColumn("_rank", rank).where("_rank = 1").drop("_rank")
    merged.write.mode("overwrite").partitionBy("day").parquet(out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "8")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    base = make_rows(np.arange(args.rows), args.rows, 1, rng)
    seed = work / "seed"
    opts = {"hoodie.parquet.small.file.limit": 0}
    upsertlake.create_table(seed, "trips", record_key="uuid", precombine_field="ts", partition_fields="day",
                            options=opts).bulk_insert(base)
    plain_seed = work / "plain-seed"
    pq.write_to_dataset(base, plain_seed, partition_cols=["day"])
    print(f"table: {args.rows:,} rows in {DAYS} day partitions, {len(list(seed.rglob('*.parquet')))} files; "
          f"batch {args.batch:,} rows (half updates); Spark local[2]")
    for skewed in (False, True):
        batch_file = work / f"batch-{skewed}.parquet"
        pq.write_table(make_batch(args.rows, args.batch, skewed, rng), batch_file)
        ours, plain, stages = [], [], []
        for run in range(args.repeat + 1):  # the first run warms the Python workers up; not counted
            table = work / f"t-{skewed}-{run}"
            shutil.copytree(seed, table)
            started = time.perf_counter()
            result = uls.upsert(spark.read.parquet(str(batch_file)), str(table), **opts)
            took = time.perf_counter() - started
            out = work / f"plain-{skewed}-{run}"
            started = time.perf_counter()
            plain_rewrite(spark, str(plain_seed), str(batch_file), str(out))
            plain_took = time.perf_counter() - started
            if run:
                ours.append(took)
                plain.append(plain_took)
                stages.append(result.stage_seconds)
            shutil.rmtree(table)
            shutil.rmtree(out)
        files = len(result.files_written)
        o, p = statistics.median(ours), statistics.median(plain)
        name = "skewed " if skewed else "uniform"
        stage = {k: round(statistics.median(s[k] for s in stages), 2) for k in stages[0]}
        print(f"{name}: upsertlake.spark.upsert {o:6.2f} s ({files} files written; {stage})  "
              f"plain PySpark rewrite {p:6.2f} s  ->  {p / o:.1f}x faster")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
