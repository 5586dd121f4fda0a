"""Reads through Spark's own parquet reader: the scan's files, with column pruning and Spark's
filter pushdown into parquet; the scan's row filter (incremental window) applied on top."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import functions as F

from upsertlake.read.snapshot import Scan
from upsertlake.spark.options import AS_OF, BEGIN, END, QUERY_TYPE, resolve_path
from upsertlake.spark.session import arrow_only, scan_files
from upsertlake.spark.source import plan_scan
from upsertlake.spark.types import spark_schema_of
from upsertlake.storage import Storage


@arrow_only
def read(
    spark: object,
    path: str,
    as_of: str | None = None,
    begin: str | None = None,
    end: str | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, object] | None = None,
) -> object:
    """A DataFrame of the snapshot (as of an instant), or of the records written in (begin, end]."""
    store = {str(k): str(v) for k, v in (storage_options or {}).items()}
    path = resolve_path(path)
    options = {AS_OF: as_of} if as_of else {}
    if begin:
        options = {QUERY_TYPE: "incremental", BEGIN: begin, **({END: end} if end else {})}
    scan: Scan = plan_scan(path, options, store=store)
    storage = Storage(path, store)
    schema = spark_schema_of(scan.schema)
    if not scan.files:
        df = spark.createDataFrame([], schema)
    else:
        df = scan_files(spark, schema, storage, [bf.path for bf in scan.files])
    if scan.window is not None:
        begin, end = scan.window
        commit_time = F.col("_hoodie_commit_time")
        df = df.where((commit_time > F.lit(begin)) & (commit_time <= F.lit(end)))
    if scan.commit_times is not None:
        df = df.where(F.col("_hoodie_commit_time").isin(list(scan.commit_times)))
    return df.select(*columns) if columns else df
