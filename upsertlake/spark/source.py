"""The `upsertlake` Python data source: `spark.read.format("upsertlake")` and `df.write.format(...)`.

Reads plan a scan on the driver (snapshot, `as.of.instant`, or incremental between instants, with
partition and key-range pruning from the filters Spark pushes) and read one base file per task.

Writes stage each task's rows on the table's storage and merge them in the commit, in one
process (`spark.staging`): `.save()` here, and the streaming sink `writeStream.format("upsertlake")`
(`spark.stream`), one commit per micro-batch, exactly once. Above `upsertlake.save.max.records`
staged rows (default 1,000,000) both refuse before merging and name the distributed path
(`upsertlake.spark.upsert`, or its `foreachBatch` form for streams; see docs/how-to/spark-cluster.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from upsertlake.errors import ConfigError
from upsertlake.layout.file_system_view import BaseFile, FileSlice
from upsertlake.layout.keygen import KeyGenerator
from upsertlake.layout.slice_reader import Merge
from upsertlake.read.filters import Predicate
from upsertlake.read.scan import read_scan
from upsertlake.read.snapshot import QUERY_TYPES, ScanPlan, incremental_scan, snapshot_scan
from upsertlake.spark.options import (
    AS_OF,
    BEGIN,
    END,
    QUERY_TYPE,
    resolve_path,
    split_store_options,
    write_options,
)
from upsertlake.spark.staging import StagedFile, Staging
from upsertlake.spark.stream import StreamWriter
from upsertlake.spark.types import arrow_schema_of, spark_schema_of
from upsertlake.storage import Storage
from upsertlake.table.open import open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant_time import normalize_instant

_OPERATORS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}


def plan_scan(path: str, options: dict[str, str], filters: Sequence[Predicate] = (),
              store: dict[str, str] | None = None) -> ScanPlan:
    """The scan a read's options ask for: snapshot (optionally as of an instant) or incremental;
    partitions and files the filters rule out are pruned here, before any task is made."""
    table = open_table(path, storage_options=store)
    timeline = Timeline.load(table.storage)
    query = options.get(QUERY_TYPE, "snapshot").lower()
    zone = table.table_config.timeline_timezone
    if query == "incremental":
        if BEGIN not in options:
            raise ConfigError(f"an incremental query needs {BEGIN}")
        end = options.get(END)
        return incremental_scan(
            timeline,
            table.table_config,
            normalize_instant(options[BEGIN], zone),
            normalize_instant(end, zone) if end else None,
            list(filters) or None,
        )
    if query not in QUERY_TYPES:
        raise ConfigError(f"{QUERY_TYPE}={query!r}: use snapshot, read_optimized or incremental")
    as_of = normalize_instant(options[AS_OF], zone) if options.get(AS_OF) else None
    return snapshot_scan(timeline, table.table_config, as_of, list(filters) or None, query)


class UpsertlakeDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "upsertlake"

    def _options(self) -> tuple[str, dict[str, str], dict[str, str]]:
        """The table's path resolved here, on the driver; the read options; the store's settings."""
        options, store = split_store_options(dict(self.options))
        read = {k.lower() if k.lower() in (AS_OF, QUERY_TYPE, BEGIN, END) else k: str(v) for k, v in options.items()}
        return resolve_path(read.pop("path")), read, store

    def schema(self) -> StructType:
        path, options, store = self._options()
        return spark_schema_of(plan_scan(path, options, store=store).schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return ScanReader(*self._options(), schema)

    def writer(self, schema: StructType, overwrite: bool) -> StagingWriter:
        if overwrite:
            raise ConfigError(
                "mode('overwrite') would replace the table; use mode('append') with "
                "hoodie.datasource.write.operation upsert, insert, bulk_insert or delete"
            )
        options = write_options(dict(self.options))
        staging = Staging.of(Storage(options.path, options.storage), arrow_schema_of(schema), uuid.uuid4().hex)
        return StagingWriter(dict(self.options), staging)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        if overwrite:
            raise ConfigError(
                "outputMode('complete') would replace the table with each micro-batch; use outputMode('append') "
                "with hoodie.datasource.write.operation upsert, insert, bulk_insert or delete"
            )
        options = write_options(dict(self.options))
        return StreamWriter(dict(self.options), Storage(options.path, options.storage), arrow_schema_of(schema))


@dataclass
class FilePartition(InputPartition):
    """One base file (or merge-on-read slice) of a scan, with what it is read into and filtered by."""

    file: BaseFile | FileSlice
    schema: pa.Schema
    filters: object
    merge: Merge | None = None
    record_keys: KeyGenerator | None = None


class ScanReader(DataSourceReader):
    def __init__(self, path: str, options: dict[str, str], store: dict[str, str], schema: StructType) -> None:
        self.path, self.options, self.store, self.schema = path, options, store, schema
        self.predicates: list[Predicate] = []

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Simple comparisons on top-level columns prune partitions and files; Spark still
        evaluates every filter on the rows, so each is also handed back."""
        for f in filters:
            column: tuple[str, ...] = getattr(f, "attribute", ())
            if len(column) == 1 and type(f) in _OPERATORS:
                self.predicates.append((column[0], _OPERATORS[type(f)], cast(Any, f).value))
            elif len(column) == 1 and isinstance(f, In):
                self.predicates.append((column[0], "in", list(f.value)))
            yield f

    def partitions(self) -> Sequence[InputPartition]:
        scan = plan_scan(self.path, self.options, self.predicates, self.store)
        return [FilePartition(bf, scan.schema, scan.row_filter) for bf in scan.files] + [
            FilePartition(sl, scan.schema, scan.row_filter, scan.merge, scan.record_keys) for sl in scan.slices
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilePartition), "partitions() gives FilePartitions"
        target = arrow_schema_of(self.schema)
        part = partition.file
        scan = (
            ScanPlan(
                [],
                partition.schema,
                partition.filters,
                slices=[part],
                merge=partition.merge,
                record_keys=partition.record_keys,
            )
            if isinstance(part, FileSlice)
            else ScanPlan([part], partition.schema, partition.filters)
        )
        table = read_scan(Storage(self.path, self.store), scan)
        yield from table.select(target.names).cast(target).to_batches()


class StagingWriter(DataSourceArrowWriter):
    """`.save()`: each task stages its rows (`spark.staging`), the commit merges them in one process."""

    def __init__(self, options: dict[str, str], staging: Staging) -> None:
        self.options, self.staging = options, staging

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        return self.staging.stage(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        options = write_options(self.options)
        try:
            self.staging.remove_stale()
            files, rows = self.staging.rows(messages)
            self.staging.merge(
                options,
                files,
                rows,
                None,
                "df.write.format('upsertlake').save()",
                "Use upsertlake.spark.upsert(df, path, ...) (or insert/delete/bulk_insert), "
                "which merges on the executors",
            )
        finally:
            self.staging.remove()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.staging.remove()
