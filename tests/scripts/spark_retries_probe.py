"""Run by tests/spark/test_writes_and_reads.py in a process of its own: Spark's driver settings and task retries
(local[2,3]) are fixed per application, so one session with a tight spark.driver.maxResultSize
and task retries runs both scenarios, one after the other, and prints one JSON line.

    python tests/scripts/spark_retries_probe.py WORK_FOLDER ROWS

driver: one distributed write whose keys alone are several times that limit while every write task
fails once after writing its file, and the Python process's peak RSS after a small and after that
large write; then a small write (one task tags and writes it) whose task fails once after writing.
remerge: a Spark write and an in-process write (started later) of different keys of the same file
groups; the in-process one commits first, so the Spark write moves to a new instant, and every task
of that re-merge job fails once after writing its files: the retried attempts write again under
tokens of their own. On the small-batch path (`remerge`) one task re-merges every group; on the
distributed one (`remerge_distributed`) one task each. Each scenario reports the files its commit
names and the files on disk.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import pyarrow as pa
from pyspark.sql import functions as F

import upsertlake.spark as uls
import upsertlake.spark.write as spark_write
from upsertlake import create_table, open_table
from upsertlake.layout.markers import reconcile_markers
from upsertlake.spark.options import write_options
from upsertlake.spark.types import arrow_schema_of

from helpers import storage_failing_write_tasks, table_on

DRIVER_OPTS = {"table": "t", "record_key": "id", "precombine": "ts", "partition": "p"}
DISTRIBUTED = {"upsertlake.small.batch.bytes": "0"}
REMERGE_OPTS = {
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.parquet.small.file.limit": "0",
}


def on_disk(path: Path, instant: str) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob(f"*_{instant}.parquet"))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def driver(spark: object, path: Path, rows: int, failures: Path) -> dict:
    def batch(lo: int, hi: int, ts: int) -> object:
        """Rows made by Spark, so this process never holds them."""
        return spark.range(lo, hi, numPartitions=4).select(
            F.format_string("key-%09d", "id").alias("id"),
            F.lit(ts).cast("long").alias("ts"),
            F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"),
            (F.col("id") % 4).cast("string").alias("p"),
        )

    small = rows // 10
    uls.bulk_insert(batch(0, small, 1), str(path), **DRIVER_OPTS)
    uls.upsert(batch(small // 2, small, 2), str(path))
    after_small = peak_mb()
    result = upserted_failing_once(batch(0, rows, 3), path, failures, DISTRIBUTED)
    peak_large = peak_mb()
    small_result = upserted_failing_once(batch(rows - 100, rows + 100, 4), path, failures.parent / "one_task_failures")
    return {
        "instant": result.instant_time,
        "files_written": sorted(result.files_written),
        "on_disk": on_disk(path, result.instant_time),
        "inserts": result.num_inserts,
        "updates": result.num_updates,
        "peak_mb_small": after_small,
        "peak_mb_large": peak_large,
        "one_task": {"files_written": sorted(small_result.files_written),
                     "on_disk": on_disk(path, small_result.instant_time),
                     "inserts": small_result.num_inserts, "updates": small_result.num_updates},
    }


def upserted_failing_once(df: object, path: Path, failures: Path, options: dict[str, str] | None = None) -> object:
    """`uls.upsert` of `df` whose every write task fails once after writing its files."""
    opts = write_options(options or {}, str(path), "upsert")
    faulty = storage_failing_write_tasks(path, failures)
    return spark_write.write_dataframe(df, opts, table=table_on(faulty, opts.hoodie))


def remerge_rows(ids: range, ts: int, tag: str) -> pa.Table:
    return pa.table({"id": [f"k{i:05d}" for i in ids], "ts": pa.array([ts] * len(ids), pa.int64()),
                     "v": [f"{tag}-{i}" for i in ids], "p": [f"p{i % 3}" for i in ids]})


def remerge(spark: object, path: Path, failures: Path, path_options: dict[str, str]) -> dict:
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=REMERGE_OPTS)
    open_table(path, REMERGE_OPTS).upsert(remerge_rows(range(30), 1, "one"))
    options = write_options({**REMERGE_OPTS, **path_options}, str(path), "upsert")
    df = spark.createDataFrame(remerge_rows(range(10, 16), 2, "spark"))
    armed = failures.parent / "armed"
    faulty = storage_failing_write_tasks(path, failures, armed, "injected failure after the re-merge write")
    client = table_on(faulty, options.hoodie).write_client()
    instant = client.start_commit()
    parts = spark.sparkContext.defaultParallelism
    result = spark_write._write_distributed(df, arrow_schema_of(df.schema), client, instant, options, parts)
    reconcile_markers(client.storage, instant, result.files_written)
    open_table(path, REMERGE_OPTS).upsert(remerge_rows(range(0, 6), 2, "local"))
    armed.touch()  # each task of the re-merge job fails once after writing its files
    done = client.commit(instant, result)
    return {"instant": instant, "moved_to": done.instant_time, "remerges": done.remerges,
            "files_written": sorted(done.files_written),
            "on_disk": on_disk(path, done.instant_time), "first_files": sorted(result.files_written)}


def main(work: Path, rows: int) -> None:
    spark = uls.build_session(
        "local[2,3]", "retries",
        **{"spark.driver.maxResultSize": "1m", "spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"},
    )
    out = {}
    for name in ("driver", "remerge", "remerge_distributed"):
        (work / name / "failures").mkdir(parents=True)
    (work / "driver" / "one_task_failures").mkdir()
    out["driver"] = driver(spark, work / "driver" / "t", rows, work / "driver" / "failures")
    for name, path_options in (("remerge", {}), ("remerge_distributed", DISTRIBUTED)):
        out[name] = remerge(spark, work / name / "t", work / name / "failures", path_options)
    print(json.dumps(out))
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
