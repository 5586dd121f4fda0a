"""Reading one unit of a plan: a base file, or a merge-on-read slice merged, into the scan's
columns, its rows filtered.

A base file is read through pyarrow's dataset fragment of it, given the filter: pyarrow skips the
row groups whose parquet statistics rule the filter out, and filters the rest while it decodes
them. The file's own column types are read (older files may have narrower types or lack newer
columns, which read as nulls) and conformed to the table's afterwards. A slice is merged whole
(`upsertlake.layout.slice_reader`), then filtered: a filter on a column an update changed must
see the update.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from upsertlake.layout.file_system_view import BaseFile, FileSlice
from upsertlake.layout.keygen import KeyGenerator
from upsertlake.layout.slice_reader import Merge, listed, merge_inputs, read_slice, slice_inputs
from upsertlake.logfile import DataBlock
from upsertlake.schema import RECORD_KEY_COLUMN, conform
from upsertlake.storage import Storage
from upsertlake.timeline.column_stats import FileColumnStats

PARQUET = ds.ParquetFileFormat()
BATCH_ROWS = 128 * 1024  # rows per streamed batch (pyarrow's scanner default)


@dataclass(frozen=True)
class ReadSpec:
    """What each unit is read into: the table's `schema` (a slice merges in it), the `output`
    columns, the `row_filter` and the columns it reads (None: any), the slices' `merge`."""

    schema: pa.Schema
    output: pa.Schema
    row_filter: pc.Expression | None = None
    filter_columns: frozenset[str] | None = None
    merge: Merge | None = None
    batch_rows: int = BATCH_ROWS
    record_keys: KeyGenerator | None = None  # see `merged_slice`

    def pushable(self, stats: FileColumnStats | None) -> bool:
        """Whether a file with these statistics may be read with the filter pushed into pyarrow's
        parquet scan. Its row-group skipping trusts parquet's statistics, which leave NaN out:
        `f != 1.0` would skip a row group of 1.0 and NaN (and lose the NaN rows, which Arrow's
        `!=` keeps). So a filter on a floating column is pushed only where the file's recorded
        statistics say the column holds no NaN; elsewhere rows are filtered after reading."""
        if self.row_filter is None:
            return True
        floats = {f.name for f in self.schema if pa.types.is_floating(f.type)}
        touched = floats if self.filter_columns is None else floats & self.filter_columns
        if not touched:
            return True
        return stats is not None and all(c in stats.columns and not stats.columns[c][4] for c in touched)

    @property
    def read_columns(self) -> list[str]:
        """What a file read without the pushed filter reads: the output and the filter's columns."""
        if self.row_filter is None:
            return self.output.names
        if self.filter_columns is None:
            return self.schema.names
        return [f.name for f in self.schema if f.name in self.filter_columns or f.name in self.output.names]


def read_base(storage: Storage, bf: BaseFile, spec: ReadSpec, push: bool = True) -> Iterator[pa.RecordBatch]:
    """A base file's rows, filtered, as batches in `spec.output`, one row group decoded at a time;
    `push`: the filter pushed into the parquet scan (`ReadSpec.pushable`)."""
    fragment, scanned = _open(storage, bf, spec)
    columns = spec.output.names if push else spec.read_columns
    with listed(storage, bf.path, bf.instant_time):
        batches = fragment.to_batches(
            schema=scanned, columns=columns, filter=spec.row_filter if push else None, batch_size=spec.batch_rows,
            batch_readahead=1, fragment_readahead=1,
        )
        for batch in batches:
            if batch.num_rows:
                table = _filtered(pa.Table.from_batches([batch]), spec, push)
                if table.num_rows:
                    yield from table.to_batches()


def read_base_table(storage: Storage, bf: BaseFile, spec: ReadSpec, push: bool = True) -> pa.Table:
    """A base file's rows, filtered, as one table in `spec.output` (pyarrow's threads decode it)."""
    fragment, scanned = _open(storage, bf, spec)
    columns = spec.output.names if push else spec.read_columns
    with listed(storage, bf.path, bf.instant_time):
        table = fragment.to_table(schema=scanned, columns=columns, filter=spec.row_filter if push else None)
    return _filtered(table, spec, push)


def count_base(storage: Storage, bf: BaseFile, spec: ReadSpec, push: bool = True) -> int:
    """How many of a base file's rows the filter keeps (pyarrow reads only the filter's columns)."""
    if not push:
        return read_base_table(storage, bf, spec, push).num_rows
    fragment, scanned = _open(storage, bf, spec)
    with listed(storage, bf.path, bf.instant_time):
        return ds.Scanner.from_fragment(fragment, schema=scanned, columns=[], filter=spec.row_filter).count_rows()


def _filtered(table: pa.Table, spec: ReadSpec, pushed: bool) -> pa.Table:
    """Rows read, in `spec.output`: filtered here unless the scan did."""
    if pushed or spec.row_filter is None:
        return conform(table, spec.output)
    table = conform(table, pa.schema([spec.schema.field(c) for c in spec.read_columns])).filter(spec.row_filter)
    return table.select(spec.output.names)


def read_merged(storage: Storage, sl: FileSlice, spec: ReadSpec) -> pa.Table:
    """A merge-on-read slice merged, filtered, in `spec.output`."""
    table = merged_slice(storage, sl, spec.merge, spec.schema, spec.record_keys)
    if spec.row_filter is not None:
        table = table.filter(spec.row_filter)
    return table.select(spec.output.names)


def merged_slice(
    storage: Storage, sl: FileSlice, merge: Merge, schema: pa.Schema, record_keys: KeyGenerator | None = None
) -> pa.Table:
    """A slice's records merged by record key (`upsertlake.layout.slice_reader`), in `schema`. A
    table that does not populate meta fields has no `_hoodie_record_key` in its files or log
    records: as Hudi's readers do, the key is made of the key fields by the table's key generator
    (`record_keys`), on the base file's rows and on each data block's, before the merge."""
    if record_keys is None:
        return read_slice(storage, sl, merge, schema, ordered=False)
    base, blocks = slice_inputs(storage, sl)
    base = _keyed(base, record_keys) if base is not None else None
    blocks = [replace(b, records=_keyed(b.records, record_keys)) if isinstance(b, DataBlock) else b for b in blocks]
    keyed = pa.schema([pa.field(RECORD_KEY_COLUMN, pa.string()), *(f for f in schema if f.name != RECORD_KEY_COLUMN)])
    merged = merge_inputs(base, blocks, merge, keyed, ordered=False).table
    return conform(merged, schema)


def _keyed(records: pa.Table, record_keys: KeyGenerator) -> pa.Table:
    keys = record_keys.record_keys(records)
    if RECORD_KEY_COLUMN in records.column_names:
        return records.set_column(records.schema.get_field_index(RECORD_KEY_COLUMN), RECORD_KEY_COLUMN, keys)
    return records.append_column(RECORD_KEY_COLUMN, keys)


def _open(storage: Storage, bf: BaseFile, spec: ReadSpec) -> tuple[ds.ParquetFileFragment, pa.Schema]:
    with listed(storage, bf.path, bf.instant_time):
        if storage.is_local:
            fragment = PARQUET.make_fragment(storage.full_path(bf.path), storage.fs)
        else:
            fragment = PARQUET.make_fragment(storage.open_input(bf.path))
        physical = fragment.physical_schema
    present = set(physical.names)
    scanned = pa.schema([physical.field(f.name) if f.name in present else f for f in spec.schema])
    return fragment, scanned
