"""Run by tests/test_spark.py in a process of its own (task retries need local[2,3], fixed per
application): a Spark write and an in-process write (started later) of different keys of the same
file groups; the in-process one commits first, so the Spark write moves to a new instant, and every
task of that re-merge job fails once after writing its file: the retried attempts write again under
tokens of their own. Prints one JSON line: the files the commit names and the files on disk."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pyarrow as pa

import upsertlake.spark.write as spark_write
from upsertlake import create_table, open_table
from upsertlake.layout.markers import reconcile_markers
from upsertlake.spark.options import write_options
from upsertlake.spark.session import build_session
from upsertlake.spark.types import arrow_schema_of

OPTS = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control", "hoodie.parquet.small.file.limit": "0"}


def rows(ids: range, ts: int, tag: str) -> pa.Table:
    return pa.table({"id": [f"k{i:05d}" for i in ids], "ts": pa.array([ts] * len(ids), pa.int64()),
                     "v": [f"{tag}-{i}" for i in ids], "p": [f"p{i % 3}" for i in ids]})


def main(path: str, failures: str) -> None:
    spark = build_session("local[2,3]", "remerge-retries", **{"spark.sql.shuffle.partitions": "4",
                                                               "spark.ui.enabled": "false"})
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=OPTS)
    open_table(path, OPTS).upsert(rows(range(30), 1, "one"))
    options = write_options(OPTS, path, "upsert")
    df = spark.createDataFrame(rows(range(10, 16), 2, "spark"))
    client = open_table(path, options.hoodie).write_client()
    instant = client.start_commit()
    parts = spark.sparkContext.defaultParallelism
    result = spark_write._write_distributed(df, arrow_schema_of(df.schema), client, instant, options, parts)
    reconcile_markers(client.storage, instant, result.files_written)
    open_table(path, OPTS).upsert(rows(range(0, 6), 2, "local"))

    def fail_first_attempt(attempt: int, folder: str = failures) -> None:
        if attempt == 0:  # as an executor lost right after writing: the retry writes again
            Path(folder, uuid.uuid4().hex).touch()
            raise RuntimeError("injected failure after the re-merge write")

    spark_write._WRITE_FAULT = fail_first_attempt
    done = client.commit(instant, result)
    spark_write._WRITE_FAULT = None
    on_disk = sorted(str(p.relative_to(path)) for p in Path(path).rglob(f"*_{done.instant_time}.parquet"))
    print(json.dumps({"instant": instant, "moved_to": done.instant_time, "remerges": done.remerges,
                      "files_written": sorted(done.files_written),
                      "on_disk": on_disk, "first_files": sorted(result.files_written)}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
