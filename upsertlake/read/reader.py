"""Reading one unit of a plan: a base file, or a merge-on-read slice merged, into the scan's
columns, its rows filtered.

A base file is read with pyarrow's parquet reader, the row groups the filters rule out by their
statistics skipped (judged as files are, `upsertlake.read.skipping`: correct where parquet's
statistics leave NaN out, which pyarrow's own dataset filter is not); the rest are decoded one at
a time, only the columns the output and the filters need, in the file's own types (older files
may have narrower types or lack newer columns, which read as nulls), then conformed to the
table's and filtered. pyarrow's dataset scanner would hold twice the memory per file. A slice is
merged whole (`upsertlake.layout.slice_reader`), then filtered: a filter on a column an update
changed must see the update.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.layout.base_files import BaseFileReader, LanceFile, open_base_file
from upsertlake.layout.file_system_view import BaseFile, FileSlice
from upsertlake.layout.keygen import KeyGenerator
from upsertlake.layout.slice_reader import (
    BaseRead,
    Merge,
    dictionary_columns,
    listed,
    merge_inputs,
    read_slice,
    slice_inputs,
)
from upsertlake.logfile import DataBlock
from upsertlake.read import skipping
from upsertlake.read.filters import Filters, Predicate
from upsertlake.read.snapshot import ScanPlan
from upsertlake.schema import conform
from upsertlake.schema.columns import COMMIT_TIME, FILE_NAME, PARTITION_PATH, RECORD_KEY
from upsertlake.storage import Storage
from upsertlake.timeline.column_stats import of_row_groups

BATCH_ROWS = 128 * 1024  # rows per streamed batch (pyarrow's scanner default)
# The meta columns of one or a few values per file (commit time, partition path, file name): a read
# returns them dictionary-encoded, decoded from the files' dictionary pages as they are stored.
DICTIONARY_META = (COMMIT_TIME, PARTITION_PATH, FILE_NAME)
DICTIONARY_STRING = pa.dictionary(pa.int32(), pa.string())


def read_schema(schema: pa.Schema) -> pa.Schema:
    """What a scan returns of `schema`: the same, with the one-value-per-file meta columns as
    dictionaries (`DICTIONARY_META`)."""
    return pa.schema(
        [
            f.with_type(DICTIONARY_STRING) if f.name in DICTIONARY_META and pa.types.is_string(f.type) else f
            for f in schema
        ]
    )


@dataclass(frozen=True)
class ReadSpec:
    """What each unit of a `plan` is read into: the `output` columns, in batches of `batch_rows`."""

    plan: ScanPlan
    output: pa.Schema
    batch_rows: int = BATCH_ROWS

    @property
    def row_filter(self) -> pc.Expression | None:
        return self.plan.row_filter

    @property
    def read_columns(self) -> list[str]:
        """The columns a file is read with: the output's and those the filters read (all of
        them for an Expression filter, whose columns cannot be told)."""
        if self.row_filter is None:
            return list(self.output.names)
        wanted = self.plan.filter_columns
        if wanted is None:
            return list(self.plan.schema.names)
        return [f.name for f in self.plan.schema if f.name in wanted or f.name in self.output.names]

    @property
    def read_schema(self) -> pa.Schema:
        """The types `read_columns` are read into."""
        return read_schema(pa.schema([self.plan.schema.field(c) for c in self.read_columns]))


def read_base(
    storage: Storage, bf: BaseFile, spec: ReadSpec, source: pa.NativeFile | None = None
) -> Iterator[pa.RecordBatch]:
    """A base file's rows, filtered, as batches in `spec.output`, one row group decoded at a time;
    `source`: the file opened already (read ahead)."""
    with listed(storage, bf.path, bf.instant_time):
        parquet = _parquet(storage, bf, spec, source)
        groups = _row_groups(parquet, spec)
        columns = [c for c in spec.read_columns if c in parquet.schema_arrow.names]
        if groups:
            for batch in parquet.iter_batches(spec.batch_rows, row_groups=groups, columns=columns):
                table = _filtered(pa.Table.from_batches([batch]), spec)
                if table.num_rows:
                    yield from table.to_batches()


def read_base_table(storage: Storage, bf: BaseFile, spec: ReadSpec) -> pa.Table:
    """A base file's rows, filtered, as one table in `spec.output` (pyarrow's threads decode it)."""
    with listed(storage, bf.path, bf.instant_time):
        parquet = _parquet(storage, bf, spec)
        groups = _row_groups(parquet, spec)
        columns = [c for c in spec.read_columns if c in parquet.schema_arrow.names]
        table = parquet.read_row_groups(groups, columns=columns) if groups else parquet.schema_arrow.empty_table()
    return _filtered(table.select(columns), spec)


def count_base(storage: Storage, bf: BaseFile, spec: ReadSpec) -> int:
    """How many of a base file's rows the filters keep (only the filters' columns are read)."""
    return int(read_base_table(storage, bf, replace(spec, output=pa.schema([]))).num_rows)


def _parquet(storage: Storage, bf: BaseFile, spec: ReadSpec, source: pa.NativeFile | None = None) -> BaseFileReader:
    """A base file opened for reading (`source`: opened already), the `DICTIONARY_META` columns
    the spec reads decoded as dictionaries where its pages allow."""
    return open_base_file(storage, bf.path, source, dictionary_columns(spec.read_schema))


def _row_groups(parquet: BaseFileReader, spec: ReadSpec) -> list[int]:
    """The row groups whose statistics do not rule the plan's filters out."""
    return row_groups_kept(parquet, spec.plan.schema, spec.plan.filters, spec.plan.filter_columns)


def row_groups_kept(
    parquet: BaseFileReader, schema: pa.Schema, filters: Filters, columns: Collection[str] | None
) -> list[int]:
    """The row groups whose statistics do not rule `filters` out (a Lance file is one, kept);
    `columns`: those the filters read (None: an Expression's, which cannot be told)."""
    metadata = parquet.metadata
    every = list(range(metadata.num_row_groups))
    if isinstance(parquet, LanceFile) or not skipping.needs_statistics(filters):
        return every
    stats = of_row_groups(metadata, schema.names if columns is None else columns)
    return [g for g, kept in zip(every, skipping.keeps(stats, schema, filters)) if kept]


def _filtered(data: pa.Table, spec: ReadSpec) -> pa.Table:
    """Rows read, in `spec.output`: conformed to the table's types, then filtered."""
    if spec.row_filter is None:
        return conform(data, spec.output)
    return conform(data, spec.read_schema).filter(spec.row_filter).select(spec.output.names)


def read_merged(storage: Storage, sl: FileSlice, spec: ReadSpec) -> pa.Table:
    """A merge-on-read slice merged, filtered, in `spec.output`."""
    plan = spec.plan
    assert plan.merge is not None, "a plan with merged slices says how they merge"
    table = merged_slice(
        storage, sl, plan.merge, read_schema(plan.schema), plan.record_keys, incremental_base_read(plan)
    )
    if spec.row_filter is not None:
        table = table.filter(spec.row_filter)
    return table.select(spec.output.names)


def incremental_base_read(plan: ScanPlan) -> BaseRead | None:
    """How an incremental read takes a merge-on-read slice's base file: Apache Hudi pushes the
    range into its base file reader, so the log records of the range merge with part of the base
    file only, and a late record whose stored row is not read is returned as written. Table
    version 6 (Hudi 0.15) skips the row groups whose commit-time statistics miss the window;
    version 8 and later (Hudi 1.x) keep the rows of the range's commits alone."""
    if plan.commit_times is not None:
        commits = pa.array(plan.commit_times, pa.string())

        def rows_of_range(parquet: BaseFileReader, columns: list[str] | None) -> pa.Table:
            base = parquet.read(columns=columns)
            return base.filter(pc.is_in(base.column(COMMIT_TIME), commits))

        return rows_of_range
    if plan.window is not None:
        begin, end = plan.window
        window: list[Predicate] = [(COMMIT_TIME, ">", begin), (COMMIT_TIME, "<=", end)]

        def row_groups_of_window(parquet: BaseFileReader, columns: list[str] | None) -> pa.Table:
            kept = row_groups_kept(parquet, plan.schema, window, [COMMIT_TIME])
            return parquet.read_row_groups(kept, columns=columns)

        return row_groups_of_window
    return None


def merged_slice(
    storage: Storage,
    sl: FileSlice,
    merge: Merge,
    schema: pa.Schema,
    record_keys: KeyGenerator | None = None,
    base_read: BaseRead | None = None,
) -> pa.Table:
    """A slice's records merged by record key (`upsertlake.layout.slice_reader`), in `schema`. A
    table that does not populate meta fields has no `_hoodie_record_key` in its files or log
    records: as Hudi's readers do, the key is made of the key fields by the table's key generator
    (`record_keys`), on the base file's rows and on each data block's, before the merge."""
    if record_keys is None:
        return read_slice(storage, sl, merge, schema, ordered=False, base_read=base_read)
    base, blocks = slice_inputs(storage, sl, dictionary=dictionary_columns(schema), base_read=base_read)
    base = _keyed(base, record_keys) if base is not None else None
    blocks = [replace(b, records=_keyed(b.records, record_keys)) if isinstance(b, DataBlock) else b for b in blocks]
    keyed = pa.schema([pa.field(RECORD_KEY, pa.string()), *(f for f in schema if f.name != RECORD_KEY)])
    merged = merge_inputs(base, blocks, merge, keyed, ordered=False).records
    return conform(merged, schema)


def _keyed(records: pa.Table, record_keys: KeyGenerator) -> pa.Table:
    keys = record_keys.record_keys(records)
    if RECORD_KEY in records.column_names:
        return records.set_column(records.schema.get_field_index(RECORD_KEY), RECORD_KEY, keys)
    return records.append_column(RECORD_KEY, keys)
