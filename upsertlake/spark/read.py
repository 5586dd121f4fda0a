"""Reads through Spark's own parquet reader: the scan's files (partitions and files the filters
rule out pruned on the driver, as in process), with column pruning and Spark's filter pushdown
into parquet; merge-on-read slices with log files merged in tasks; the scan's row filters (the
incremental window, the caller's filters) applied on top. Files written before a column changed
its type in a way Spark's reader does not convert (long to string, say) are read in tasks that
convert them, as in process."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from upsertlake.config.table_config import TableConfig
from upsertlake.errors import ConfigError
from upsertlake.read.filters import Predicate, conjunction
from upsertlake.read.reader import incremental_base_read, merged_slice
from upsertlake.read.snapshot import ScanPlan, table_schema
from upsertlake.schema.columns import COMMIT_TIME
from upsertlake.spark.options import AS_OF, BEGIN, END, QUERY_TYPE, resolve_path
from upsertlake.spark.session import arrow_only, scan_files
from upsertlake.spark.source import plan_scan
from upsertlake.spark.types import arrow_schema_of, spark_schema_of
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline


def _merged_slices(spark: SparkSession, schema: StructType, storage: Storage, scan: ScanPlan) -> DataFrame:
    """A DataFrame of the scan's merge-on-read slices, one task per slice merging it in Python
    (the driver ships the slices, which grow with the files, never with the records)."""
    index = spark.createDataFrame([(i,) for i in range(len(scan.slices))], "i int").repartition(len(scan.slices))
    return index.mapInArrow(functools.partial(_read_slices, storage, scan, arrow_schema_of(schema)), schema)


def _read_slices(
    storage: Storage, scan: ScanPlan, target: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> Iterator[Any]:
    """Task: merge the slices whose indexes `batches` hold into `target`."""
    assert scan.merge is not None, "a plan with merged slices says how they merge"
    base_read = incremental_base_read(scan)
    for batch in batches:
        for i in batch.column(0).to_pylist():
            table = merged_slice(storage, scan.slices[i], scan.merge, scan.schema, scan.record_keys, base_read)
            yield from table.select(target.names).cast(target).to_batches()


def _by_reader(storage: Storage, scan: ScanPlan) -> tuple[list[str], list[str]]:
    """The scan's base files that Spark's parquet reader reads into the scan's types, and those
    written under a schema in which some column had another type (not a widening Spark makes):
    the schema of the newest write at or before each file's instant tells."""
    if not scan.files or storage.os_path() is None:  # an object store's files are read in tasks anyway
        return [bf.path for bf in scan.files], []
    timeline, table_config = Timeline.load(storage), TableConfig.load(storage)
    target = {f.name: f.type for f in scan.schema}
    odd = {
        instant
        for instant in {bf.instant_time for bf in scan.files}
        if any(
            f.name in target and not _spark_reads_as(f.type, target[f.name])
            for f in table_schema(timeline, table_config, instant)
        )
    }
    by_spark = [bf.path for bf in scan.files if bf.instant_time not in odd]
    return by_spark, [bf.path for bf in scan.files if bf.instant_time in odd]


def _spark_reads_as(written: pa.DataType, wanted: pa.DataType) -> bool:
    """Spark's parquet reader gives `wanted` from a column written as `written`: the same type, or
    an integer widened."""
    return bool(
        written == wanted
        or (pa.types.is_integer(written) and pa.types.is_integer(wanted) and written.bit_width <= wanted.bit_width)
    )


def _condition(column: Column, op: str, value: Any) -> Column:
    """A tuple filter as a Spark condition with Arrow's meaning (a null passes `not in` only)."""
    if op == "in":
        return column.isin(list(value))
    if op == "not in":
        return ~column.isin(list(value)) | column.isNull()
    return cast(Column, {"=": column == value, "!=": column != value, "<": column < value, "<=": column <= value,
            ">": column > value, ">=": column >= value}[op])


@arrow_only
def read(
    spark: SparkSession,
    path: str,
    as_of: str | None = None,
    begin: str | None = None,
    end: str | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, object] | None = None,
    query_type: str = "snapshot",
    filters: Sequence[Predicate] | None = None,
) -> DataFrame:
    """A DataFrame of the snapshot (as of an instant), or of the records written in (begin, end].
    `query_type="read_optimized"` reads a merge-on-read table's base files alone. `filters`:
    (column, op, value) tuples as `Table.scan` takes them: only the files they may match are read,
    and the rows are filtered as Arrow filters them (`not in` keeps nulls)."""
    store = {str(k): str(v) for k, v in (storage_options or {}).items()}
    path = resolve_path(path)
    options = {QUERY_TYPE: query_type, **({AS_OF: as_of} if as_of else {})}
    if begin:
        options = {QUERY_TYPE: "incremental", BEGIN: begin, **({END: end} if end else {})}
    if isinstance(filters, pc.Expression):
        raise ConfigError("Spark reads take filters as (column, op, value) tuples, not a pyarrow Expression")
    scan: ScanPlan = plan_scan(path, options, conjunction(filters), store)
    storage = Storage(path, store)
    schema = spark_schema_of(scan.schema)
    native, converted = _by_reader(storage, scan)
    frames = [scan_files(spark, schema, storage, paths, in_tasks=tasks)
              for paths, tasks in ((native, False), (converted, True)) if paths]
    if scan.slices:
        frames.append(_merged_slices(spark, schema, storage, scan))
    df = functools.reduce(lambda a, b: a.unionByName(b), frames) if frames else spark.createDataFrame([], schema)
    if scan.window is not None:
        begin, end = scan.window
        commit_time = F.col(COMMIT_TIME)
        df = df.where((commit_time > F.lit(begin)) & (commit_time <= F.lit(end)))
    if scan.commit_times is not None:
        df = df.where(F.col(COMMIT_TIME).isin(list(scan.commit_times)))
    for column, op, value in conjunction(filters):
        df = df.where(_condition(F.col(column), op, value))
    return df.select(*columns) if columns else df
