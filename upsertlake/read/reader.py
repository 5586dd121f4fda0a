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
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from upsertlake.layout.file_system_view import BaseFile, FileSlice
from upsertlake.layout.slice_reader import Merge, listed, read_slice
from upsertlake.schema import conform
from upsertlake.storage import Storage

PARQUET = ds.ParquetFileFormat()
BATCH_ROWS = 128 * 1024  # rows per streamed batch (pyarrow's scanner default)


@dataclass(frozen=True)
class ReadSpec:
    """What each unit is read into: the table's `schema` (a slice merges in it), the `output`
    columns, the `row_filter` and the slices' `merge`."""

    schema: pa.Schema
    output: pa.Schema
    row_filter: pc.Expression | None = None
    merge: Merge | None = None
    batch_rows: int = BATCH_ROWS


def read_base(storage: Storage, bf: BaseFile, spec: ReadSpec) -> Iterator[pa.RecordBatch]:
    """A base file's rows, filtered, as batches in `spec.output`, one row group decoded at a time."""
    fragment, scanned = _open(storage, bf, spec)
    with listed(storage, bf.path, bf.instant_time):
        batches = fragment.to_batches(
            schema=scanned, columns=spec.output.names, filter=spec.row_filter, batch_size=spec.batch_rows,
            batch_readahead=1, fragment_readahead=1,
        )
        for batch in batches:
            if batch.num_rows:
                yield from conform(pa.Table.from_batches([batch]), spec.output).to_batches()


def read_base_table(storage: Storage, bf: BaseFile, spec: ReadSpec) -> pa.Table:
    """A base file's rows, filtered, as one table in `spec.output` (pyarrow's threads decode it)."""
    fragment, scanned = _open(storage, bf, spec)
    with listed(storage, bf.path, bf.instant_time):
        table = fragment.to_table(schema=scanned, columns=spec.output.names, filter=spec.row_filter)
    return conform(table, spec.output)


def count_base(storage: Storage, bf: BaseFile, spec: ReadSpec) -> int:
    """How many of a base file's rows the filter keeps (pyarrow reads only the filter's columns)."""
    fragment, scanned = _open(storage, bf, spec)
    with listed(storage, bf.path, bf.instant_time):
        return ds.Scanner.from_fragment(fragment, schema=scanned, columns=[], filter=spec.row_filter).count_rows()


def read_merged(storage: Storage, sl: FileSlice, spec: ReadSpec) -> pa.Table:
    """A merge-on-read slice merged, filtered, in `spec.output`."""
    table = read_slice(storage, sl, spec.merge, spec.schema, ordered=False)
    if spec.row_filter is not None:
        table = table.filter(spec.row_filter)
    return table.select(spec.output.names)


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
