"""A planned read, handed to whoever consumes it: a pyarrow Table, a stream of record batches in
bounded memory, the Arrow PyCapsule stream (DuckDB, Polars, pyarrow, any Arrow consumer), pandas,
a DuckDB view, a Polars LazyFrame; its row count; the file slices it reads.

A `Scan` is planned once (the snapshot's files are listed, partitions and files the filters rule
out are pruned) and can be read any number of times: each stream reads the planned files again
(docs/DESIGN.md §7).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from upsertlake.errors import SchemaError
from upsertlake.layout.file_system_view import BaseFile, FileSlice
from upsertlake.layout.slice_reader import listed
from upsertlake.read import skipping
from upsertlake.read.filters import conjunction
from upsertlake.read.reader import (
    BATCH_ROWS,
    ReadSpec,
    count_base,
    read_base,
    read_base_table,
    read_merged,
    read_schema,
)
from upsertlake.read.snapshot import ScanPlan
from upsertlake.read.statistics import FileStatistics
from upsertlake.read.stream import prefetched, read_ahead
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline

if TYPE_CHECKING:
    import duckdb
    import pandas
    import polars

Unit = BaseFile | FileSlice


@dataclass(frozen=True)
class PlannedSlice:
    """One unit a scan reads: a base file alone, or a file slice whose base file (None in a
    log-only group) and log files are merged; their bytes, and the base file's rows (None when
    only reading it would tell: a slice with log files)."""

    partition_path: str
    file_id: str
    base_file: str | None
    log_files: tuple[str, ...]
    bytes: int
    rows: int | None

    def __str__(self) -> str:
        logs = f" + {len(self.log_files)} log file(s)" if self.log_files else ""
        rows = f"{self.rows:,} rows" if self.rows is not None else "rows after the merge"
        return f"{self.partition_path or '(root)'}/{self.file_id}: {self.base_file or '(log only)'}{logs}, " \
               f"{self.bytes:,} bytes, {rows}"


class Scan:
    """A read of a table: see the module's docstring. Made by `Table.scan`."""

    def __init__(
        self,
        storage: Storage,
        plan: ScanPlan,
        statistics: FileStatistics | None = None,
        columns: Sequence[str] | None = None,
        read_ahead: int | None = None,
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        schema = plan.schema
        if columns is not None:
            columns = [columns] if isinstance(columns, str) else list(columns)  # a string is one column
            missing = [c for c in columns if c not in schema.names]
            if missing:
                raise SchemaError(f"unknown column(s) {missing}; the table has {schema.names}")
        self.storage = storage
        self.plan = plan
        self._statistics = statistics
        self.schema = read_schema(schema if columns is None else pa.schema([schema.field(c) for c in columns]))
        self.read_ahead = read_ahead or storage.read_threads
        self._spec = ReadSpec(plan, self.schema, batch_rows)

    def __repr__(self) -> str:
        return f"Scan({self.storage.base!r}, {len(self.plan.files)} file(s), {len(self.plan.slices)} slice(s) to merge)"

    @property
    def statistics(self) -> FileStatistics:
        """The planned files' statistics (from the timeline's commits, loaded when first asked)."""
        if self._statistics is None:
            self._statistics = FileStatistics(Timeline.load(self.storage))
        return self._statistics

    @property
    def _units(self) -> list[Unit]:
        return [*self.plan.files, *self.plan.slices]

    # -- Arrow ---------------------------------------------------------------------------------
    def to_arrow(self) -> pa.Table:
        """Every row, as one pyarrow Table (files read on `read_ahead` threads)."""
        units = self._units
        if not units:
            return self.schema.empty_table()
        with ThreadPoolExecutor(max_workers=min(self.read_ahead, len(units))) as pool:
            tables = list(pool.map(self._read_unit, units))
        return pa.concat_tables(tables)

    def to_batches(self) -> pa.RecordBatchReader:
        """A stream of record batches: one base file decoded (or one slice merged) at a time,
        while the next is read ahead (on an object store up to `read_ahead` files' bytes are
        fetched ahead: a file of up to 8 MB whole, a larger one its footer), so memory grows with
        the largest slice, never with the table (decoding a second file ahead would hold two
        files' columns at once)."""
        return pa.RecordBatchReader.from_batches(self.schema, self._batches())

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The Arrow PyCapsule stream of `to_batches()`: `pyarrow.RecordBatchReader.from_stream`,
        `duckdb.sql("select ... from scan")` and `polars.DataFrame(scan)` read it directly."""
        return self.to_batches().__arrow_c_stream__(requested_schema)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        units: Iterable[tuple[Unit, pa.NativeFile | None]] = ((u, None) for u in self._units)
        if self.storage.expensive_requests:  # each file a round trip: fetch ahead of the decoding
            units = prefetched(self._units, self._fetch, self.read_ahead)
        return read_ahead(units, self._unit_batches, ahead=1)

    def _fetch(self, unit: Unit) -> pa.NativeFile | None:
        """An object store's base file opened ahead of its decoding (see `to_batches`)."""
        if not isinstance(unit, BaseFile):
            return None
        with listed(self.storage, unit.path, unit.instant_time):
            return self.storage.open_input(unit.path)

    def _unit_batches(self, fetched: tuple[Unit, pa.NativeFile | None]) -> Iterator[pa.RecordBatch]:
        unit, source = fetched
        if isinstance(unit, BaseFile):
            return read_base(self.storage, unit, self._spec, source)
        return iter(read_merged(self.storage, unit, self._spec).to_batches(self._spec.batch_rows))

    def _read_unit(self, unit: Unit) -> pa.Table:
        if isinstance(unit, BaseFile):
            return read_base_table(self.storage, unit, self._spec)
        return read_merged(self.storage, unit, self._spec)

    # -- other libraries ---------------------------------------------------------------------
    def to_pandas(self, **kwargs: Any) -> pandas.DataFrame:
        """Every row as a pandas DataFrame (`kwargs` go to `pyarrow.Table.to_pandas`); the
        dictionary-encoded meta columns as strings, as pandas users compare them (a categorical
        would refuse `<`)."""
        plain = pa.schema([self.plan.schema.field(name) for name in self.schema.names])
        return self.to_arrow().cast(plain).to_pandas(**kwargs)

    def to_duckdb(self, name: str, connection: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
        """Register the scan in a DuckDB connection (a new in-memory one by default) as the view
        `name`, and return the connection. Each query on it streams the planned files again."""
        import duckdb

        con = connection if connection is not None else duckdb.connect()
        con.register(name, self)  # DuckDB asks for a new stream (`__arrow_c_stream__`) per query
        return con

    def to_polars(self) -> polars.LazyFrame:
        """A Polars LazyFrame of the scan: Polars' projection is read alone (other columns are
        never decoded), its filter applied to each batch, and a `head(n)` stops the stream early."""
        import polars as pl
        from polars.io.plugins import register_io_source

        def source(
            with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
        ) -> Iterator[pl.DataFrame]:
            scan = self if with_columns is None else self._narrowed(with_columns)
            left = n_rows
            for batch in scan._batches():
                frame = cast(pl.DataFrame, pl.from_arrow(batch))
                if predicate is not None:
                    frame = frame.filter(predicate)
                if left is not None:
                    frame = frame.head(left)
                    left -= frame.height
                yield frame
                if left is not None and left <= 0:
                    return

        schema = cast(pl.DataFrame, pl.from_arrow(self.schema.empty_table())).schema
        return register_io_source(source, schema=schema, explain_name="upsertlake")

    def _narrowed(self, columns: Sequence[str]) -> Scan:
        """This scan returning only `columns` (a subset of its own)."""
        return Scan(self.storage, self.plan, self._statistics, [c for c in self.schema.names if c in set(columns)],
                    self.read_ahead, self._spec.batch_rows)

    # -- planning ----------------------------------------------------------------------------
    def count(self) -> int:
        """How many rows the scan returns. A base file's rows come from its commit's write stats
        (else its footer) when no row filter applies, or when its statistics say every row passes
        the filters (a partition's value, a range inside the filter's); the others are counted
        from their filter columns, slices with log files merged."""
        plan = self.plan
        whole = plan.files
        if self._spec.row_filter is not None:
            predicates = conjunction(plan.filters) if plan.commit_filter is None else []
            stats = self.statistics.of_bases(plan.files, plan.schema) if predicates else {}
            whole = [bf for bf in plan.files
                     if predicates and skipping.all_match(stats[bf.path], predicates, plan.schema)]
        counted = self.statistics.rows(whole)
        return sum(counted.values()) + self._count([*(bf for bf in plan.files if bf.path not in counted), *plan.slices])

    def _count(self, units: list[Unit]) -> int:
        if not units:
            return 0

        def one(unit: Unit) -> int:
            if isinstance(unit, BaseFile):
                return count_base(self.storage, unit, self._spec)
            return int(read_merged(self.storage, unit, self._spec).num_rows)

        with ThreadPoolExecutor(max_workers=min(self.read_ahead, len(units))) as pool:
            return sum(pool.map(one, units))

    def plan_files(self) -> list[PlannedSlice]:
        """The file slices the scan reads, after pruning, in the order it reads them."""
        rows = self.statistics.rows(self.plan.files)
        out = [PlannedSlice(bf.partition_path, bf.file_id, self.storage.full_path(bf.path), (), bf.size, rows[bf.path])
               for bf in self.plan.files]
        for sl in self.plan.slices:
            base = sl.base
            out.append(PlannedSlice(
                sl.partition_path, sl.file_id, self.storage.full_path(base.path) if base else None,
                tuple(self.storage.full_path(log.path) for log in sl.logs),
                (base.size if base else 0) + sum(log.size for log in sl.logs), None,
            ))
        return out


def read_scan(storage: Storage, plan: ScanPlan, columns: Sequence[str] | None = None) -> pa.Table:
    """Every row of a plan (what Spark's tasks read of their file or slice)."""
    return Scan(storage, plan, columns=columns).to_arrow()
