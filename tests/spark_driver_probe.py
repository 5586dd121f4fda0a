"""Run by tests/test_spark.py in a process of its own (Spark's driver settings are fixed per
application): a session with a tight spark.driver.maxResultSize and task retries (local[2,3]),
one write whose keys alone are several times that limit while every write task fails once after
writing its file, and the Python process's peak RSS after a small and after that large write.
Prints one JSON line."""

from __future__ import annotations

import json
import resource
import sys
import uuid
from pathlib import Path

from pyspark.sql import functions as F

import upsertlake.spark as uls
import upsertlake.spark.write as spark_write

OPTS = {"table": "t", "record_key": "id", "precombine": "ts", "partition": "p"}


def batch(spark: object, lo: int, hi: int, ts: int) -> object:
    """Rows made by Spark, so this process never holds them."""
    return spark.range(lo, hi, numPartitions=4).select(
        F.format_string("key-%09d", "id").alias("id"),
        F.lit(ts).cast("long").alias("ts"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"),
        (F.col("id") % 4).cast("string").alias("p"),
    )


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(path: str, rows: int, failures: str) -> None:
    spark = uls.build_session(
        "local[2,3]", "driver-size",
        **{"spark.driver.maxResultSize": "1m", "spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"},
    )
    small = rows // 10
    uls.bulk_insert(batch(spark, 0, small, 1), path, **OPTS)
    uls.upsert(batch(spark, small // 2, small, 2), path)
    after_small = peak_mb()

    def fail_first_attempt(attempt: int, folder: str = failures) -> None:
        if attempt == 0:  # as an executor lost right after writing: the retry writes again
            Path(folder, uuid.uuid4().hex).touch()
            raise RuntimeError("injected failure after the write")

    spark_write._WRITE_FAULT = fail_first_attempt
    result = uls.upsert(batch(spark, 0, rows, 3), path)
    spark_write._WRITE_FAULT = None
    on_disk = sorted(str(p.relative_to(path)) for p in Path(path).rglob(f"*_{result.instant_time}.parquet"))
    print(json.dumps({
        "instant": result.instant_time,
        "files_written": sorted(result.files_written),
        "on_disk": on_disk,
        "inserts": result.num_inserts,
        "updates": result.num_updates,
        "peak_mb_small": after_small,
        "peak_mb_large": peak_mb(),
    }))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
