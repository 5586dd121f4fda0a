"""A Spark merge-on-read write's log files in the metadata table's column_stats: the task that
appends a log file computes its statistics and carries them to the driver in its write status;
the driver reads no log file back, and the records equal what each file's records say."""

from __future__ import annotations

from pathlib import Path

import pytest

import upsertlake.spark as uls
from upsertlake import create_table
from upsertlake.simulation.invariants import metadata_violations
from upsertlake.storage import Storage

from metadata_checks import TYPED_COLUMNS, holds, log_reads, logs_described, typed

V8 = {"hoodie.write.table.version": "8", "hoodie.metadata.enable": "true"}
DISTRIBUTED = {"upsertlake.small.batch.bytes": 0, "hoodie.parquet.small.file.limit": 0}  # a task per bucket


def test_a_spark_merge_on_read_upsert_carries_its_log_files_statistics(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t"
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="part",
                 hive_style_partitioning=True, table_type="MERGE_ON_READ", options=V8)
    uls.upsert(spark.createDataFrame(typed(range(30), 1)), str(path), **V8, **DISTRIBUTED)  # base files
    read = log_reads(monkeypatch)  # on the driver (the executors' Python workers are processes of their own)
    uls.upsert(spark.createDataFrame(typed(range(12), 2, nan_part="c")), str(path), **DISTRIBUTED)
    uls.upsert(spark.createDataFrame(typed(range(12, 18), 3)), str(path))  # a small batch: one task, shared blocks
    assert read == []
    monkeypatch.undo()
    described = logs_described(path, TYPED_COLUMNS)
    assert sorted((p, has) for (p, _), has in described.items()) == [
        ("part=a", True), ("part=a", True), ("part=b", True), ("part=b", True), ("part=c", False), ("part=c", True)
    ]
    holds(path)
    assert metadata_violations(Storage(path)) == []
