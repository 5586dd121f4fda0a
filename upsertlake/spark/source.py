"""The `upsertlake` Python data source: `spark.read.format("upsertlake")` and `df.write.format(...)`.

Reads plan a scan on the driver (snapshot, `as.of.instant`, or incremental between instants, with
partition and key-range pruning from the filters Spark pushes) and read one base file per task.

Writes: the Python data source API hands each task its rows before any shuffle, so tasks cannot
be the ones merging file groups. Each task stages its rows as a parquet file under
`.hoodie/.temp/`; the driver's commit runs the engine on all of them and deletes them; an
aborted job only deletes them (a job whose driver died leaves them: the next data source write
deletes staging nothing was written to for STALE_STAGING_HOURS). The commit runs in a Python
worker the JVM starts, which cannot start Spark jobs, so it merges in that one process: above
`upsertlake.save.max.records` staged rows (default 1,000,000, counted from the staged files'
footers) it refuses before merging and names `upsertlake.spark.upsert`, the path that merges on
the executors (see the README).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
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
from upsertlake.read.filters import Predicate
from upsertlake.read.scan import read_scan
from upsertlake.read.snapshot import QUERY_TYPES, Merge, ScanPlan, incremental_scan, snapshot_scan
from upsertlake.spark.options import (
    AS_OF,
    BEGIN,
    END,
    QUERY_TYPE,
    SAVE_MAX_RECORDS,
    resolve_path,
    split_store_options,
    write_options,
)
from upsertlake.spark.types import arrow_schema_of, spark_schema_of
from upsertlake.storage import Storage
from upsertlake.layout.file_system_view import BaseFile, FileSlice
from upsertlake.layout.keygen import KeyGenerator
from upsertlake.table.table import open_table
from upsertlake.timeline.active import METAFOLDER, Timeline
from upsertlake.timeline.instant_time import normalize_instant

TEMP = f"{METAFOLDER}/.temp"
STAGING_PREFIX = "spark-staging-"  # a job's folder in TEMP: spark-staging-<job>
# A job whose driver died stages rows that neither its commit nor its abort deletes; the next
# data source write deletes staging untouched for this long (a live job's newest file is younger:
# its tasks stage as they end, and its commit runs right after the last).
STALE_STAGING_HOURS = 24
_OPERATORS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}


def plan_scan(path: str, options: dict[str, str], filters: Sequence[Predicate] = (),
              store: dict[str, str] | None = None) -> ScanPlan:
    """The scan a read's options ask for: snapshot (optionally as of an instant) or incremental;
    partitions and files the filters rule out are pruned here, before any task is made."""
    table = open_table(path, storage_options=store)
    timeline = Timeline.load(table.storage)
    query = options.get(QUERY_TYPE, "snapshot").lower()
    if query == "incremental":
        if BEGIN not in options:
            raise ConfigError(f"an incremental query needs {BEGIN}")
        end = options.get(END)
        return incremental_scan(
            timeline, table.config, normalize_instant(options[BEGIN]), normalize_instant(end) if end else None,
            list(filters) or None,
        )
    if query not in QUERY_TYPES:
        raise ConfigError(f"{QUERY_TYPE}={query!r}: use snapshot, read_optimized or incremental")
    as_of = normalize_instant(options[AS_OF]) if options.get(AS_OF) else None
    return snapshot_scan(timeline, table.config, as_of, list(filters) or None, query)


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
        return StagingWriter(options.path, dict(self.options), arrow_schema_of(schema), uuid.uuid4().hex,
                             Storage(options.path, options.storage))


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
            column = getattr(f, "attribute", ())
            if len(column) == 1 and type(f) in _OPERATORS:
                self.predicates.append((column[0], _OPERATORS[type(f)], f.value))
            elif len(column) == 1 and isinstance(f, In):
                self.predicates.append((column[0], "in", list(f.value)))
            yield f

    def partitions(self) -> Sequence[InputPartition]:
        scan = plan_scan(self.path, self.options, self.predicates, self.store)
        return [FilePartition(bf, scan.schema, scan.row_filter) for bf in scan.files] + [
            FilePartition(sl, scan.schema, scan.row_filter, scan.merge, scan.record_keys) for sl in scan.slices
        ]

    def read(self, partition: FilePartition) -> Iterator[pa.RecordBatch]:
        target = arrow_schema_of(self.schema)
        part = partition.file
        scan = (
            ScanPlan([], partition.schema, partition.filters, slices=[part], merge=partition.merge,
                     record_keys=partition.record_keys)
            if isinstance(part, FileSlice)
            else ScanPlan([part], partition.schema, partition.filters)
        )
        table = read_scan(Storage(self.path, self.store), scan)
        yield from table.select(target.names).cast(target).to_batches()


@dataclass
class StagedFile(WriterCommitMessage):
    path: str
    rows: int


class StagingWriter(DataSourceArrowWriter):
    """Stages each task's rows as a parquet file under the table's `.hoodie/.temp` (on the table's
    own store: executors share no disk with the driver), then merges them in the commit."""

    def __init__(self, path: str, options: dict[str, str], schema: pa.Schema, job: str, storage: Storage) -> None:
        self.path, self.options, self.schema, self.job, self.storage = path, options, schema, job, storage

    @property
    def staging(self) -> str:
        return f"{TEMP}/{STAGING_PREFIX}{self.job}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        target = f"{self.staging}/{uuid.uuid4().hex}.parquet"
        rows = 0
        with self.storage.open_output(target) as sink, pq.ParquetWriter(sink, self.schema) as out:
            for batch in iterator:
                out.write_batch(batch.cast(self.schema) if batch.schema != self.schema else batch)
                rows += batch.num_rows
        return StagedFile(target, rows)

    def commit(self, messages: list[StagedFile | None]) -> None:
        options = write_options(self.options)
        try:
            self._remove_stale_staging()
            files = [m.path for m in messages if m is not None]
            staged = sum(self.storage.parquet_file(f).metadata.num_rows for f in files)  # from the footers
            if staged > options.save_max_records:
                raise ConfigError(
                    f"df.write.format('upsertlake').save() merges in one Python worker and takes at most "
                    f"{options.save_max_records:,} rows ({SAVE_MAX_RECORDS}); this batch has {staged:,}. "
                    "Use upsertlake.spark.upsert(df, path, ...) (or insert/delete/bulk_insert), which "
                    "merges on the executors"
                )
            parts = [self.storage.read_parquet(f).cast(self.schema) for f in files]
            data = pa.concat_tables(parts) if parts else self.schema.empty_table()
            table = options.open_or_create(self.schema)
            getattr(table, options.operation)(data, options.hoodie)
        finally:
            self._remove_staging()

    def abort(self, messages: list[StagedFile | None]) -> None:
        self._remove_staging()

    def _remove_stale_staging(self) -> None:
        """Delete other jobs' staging folders with nothing written for STALE_STAGING_HOURS."""
        newest: dict[str, int] = {}
        for entry in self.storage.list(TEMP, recursive=True):
            folder = f"{TEMP}/{entry.path[len(TEMP) + 1 :].split('/')[0]}"
            if folder.startswith(f"{TEMP}/{STAGING_PREFIX}") and folder != self.staging:
                newest[folder] = max(newest.get(folder, 0), entry.mtime_ns)
        cutoff = time.time_ns() - STALE_STAGING_HOURS * 3600 * 10**9
        for folder, mtime_ns in newest.items():
            if mtime_ns < cutoff:
                self.storage.delete_dir(folder)

    def _remove_staging(self) -> None:
        self.storage.delete_dir(self.staging)
        if not self.storage.is_local:
            return
        # A first write that failed leaves no empty table folders behind either.
        root = Path(self.storage.base)
        if not (root / ".hoodie" / "hoodie.properties").exists():
            for folder in (root / ".hoodie" / ".temp", root / ".hoodie", root):
                try:
                    folder.rmdir()
                except OSError:
                    break
