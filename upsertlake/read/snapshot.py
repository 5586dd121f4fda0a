"""Snapshot, read-optimized, time-travel and incremental reads.

A copy-on-write table is read file by file; a merge-on-read file slice with log files is read
whole: its base file and blocks merged by record key under the table's merge mode."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config.table_config import TableConfig
from upsertlake.layout.file_writer import META_SCHEMA, full_schema
from upsertlake.errors import ConfigError, SchemaError, UnsupportedTableError
from upsertlake.layout.footer import read_footer
from upsertlake.read.filters import (
    Filters,
    conjunction,
    key_range_may_match,
    partition_may_match,
    to_expression,
)
from upsertlake.schema import avro_to_arrow, conform
from upsertlake.services.write_guard import properties_disagreements
from upsertlake.timeline.retention import check_readable
from upsertlake.storage import Storage
from upsertlake.layout.file_system_view import BaseFile, FileSlice, FileSystemView
from upsertlake.layout.slice_reader import Merge, listed, read_slice
from upsertlake.layout.keygen import KeyGenerator
from upsertlake.timeline.active import Timeline


def table_schema(timeline: Timeline, config: TableConfig, as_of: str | None = None) -> pa.Schema:
    """The data schema as of an instant: that of the newest completed write ≤ as_of."""
    for inst in reversed(timeline.completed_writes()):
        if as_of is not None and inst.time > as_of:
            continue
        schema = timeline.commit_metadata(inst).schema
        if schema:
            return avro_to_arrow(schema)
    return avro_to_arrow(config.create_schema) if config.create_schema else pa.schema([])


def output_schema(data_schema: pa.Schema, config: TableConfig) -> pa.Schema:
    """What a read returns: the five meta columns, then the data columns; only the data columns
    when the table does not populate meta fields (they hold nothing but nulls there, and Apache
    Hudi's readers, Spark's and hudi-rs, leave them out)."""
    return full_schema(data_schema) if config.populate_meta_fields else data_schema


@dataclass(frozen=True)
class Scan:
    """What a read touches: the base files, the merge-on-read slices with log files, the schema
    each is read into, the row filter. Reads in process run it at once; Spark reads one file (or
    slice) per task."""

    files: list[BaseFile]
    schema: pa.Schema
    filters: Filters = None
    window: tuple[str, str] | None = None  # incremental, layout 1: commit times in (begin, end]
    commit_times: tuple[str, ...] | None = None  # incremental, layout 2: these commit times
    slices: list[FileSlice] = field(default_factory=list)
    merge: Merge | None = None


SNAPSHOT, READ_OPTIMIZED = "snapshot", "read_optimized"
QUERY_TYPES = (SNAPSHOT, READ_OPTIMIZED)


def snapshot_scan(
    timeline: Timeline, config: TableConfig, as_of: str | None = None, filters: Filters = None, query_type: str = SNAPSHOT
) -> Scan:
    """A snapshot read as of an instant; `read_optimized` reads a merge-on-read table's base
    files alone (Hudi's read-optimized query: fast, without the updates still in log files)."""
    if query_type not in QUERY_TYPES:
        raise ConfigError(f"query type {query_type!r}: one of {', '.join(QUERY_TYPES)} (incremental: read_incremental)")
    check_readable(timeline, as_of, "time travel to")
    view = FileSystemView(timeline, as_of)
    schema = output_schema(table_schema(timeline, config, as_of), config)
    if query_type == READ_OPTIMIZED or not config.is_merge_on_read:
        return Scan(prune_files(view, config, schema, view.latest_base_files(), filters), schema, filters)
    return _slice_scan(view, config, schema, view.latest_file_slices(), filters)


def _slice_scan(
    view: FileSystemView, config: TableConfig, schema: pa.Schema, slices: list[FileSlice], filters: Filters, **kw: object
) -> Scan:
    """A merge-on-read scan: slices without logs read as base files (pruned as copy-on-write
    files are), the others merged; partition pruning applies to both."""
    if not config.populate_meta_fields:
        raise UnsupportedTableError(
            "merge-on-read tables without meta fields (hoodie.populate.meta.fields=false) are not "
            "supported: their log records are merged by _hoodie_record_key"
        )
    plain = prune_files(view, config, schema, [s.base for s in slices if not s.logs and s.base], filters)
    merged = [s for s in slices if s.logs]
    keep = matching_partitions(view, config, schema, {s.partition_path for s in merged}, filters)
    if keep is not None:
        merged = [s for s in merged if s.partition_path in keep]
    merge = Merge(config.precombine_field, config.merge_mode, frozenset(i.time for i in view.visible_instants))
    return Scan(plain, schema, filters, slices=merged, merge=merge, **kw)


def incremental_scan(timeline: Timeline, config: TableConfig, begin: str, end: str | None) -> Scan:
    """The latest state (as of `end`) of the records written by commits in (begin, end].

    Table version 6 (timeline layout 1): the commits whose instant time is in (begin, end], rows
    whose `_hoodie_commit_time` is in that range, file versions as of `end`. Version 8 (layout 2),
    as Hudi 1.x and hudi-rs do it: the commits that *completed* in (begin, end], rows whose
    `_hoodie_commit_time` is one of those commits' (requested) instant times, in the newest file
    version those commits wrote.

    The columns are those of the newest schema, whatever `end` is: Apache Hudi's incremental
    query does so by default (`hoodie.datasource.read.schema.use.end.instanttime=false`), and so
    does hudi-rs. Without meta fields there are no commit times to select rows by, and Hudi
    refuses the query; so do we.
    """
    if not config.populate_meta_fields:
        raise UnsupportedTableError(
            "incremental reads need the _hoodie_commit_time meta field; this table does not "
            "populate meta fields (hoodie.populate.meta.fields=false)"
        )
    in_range = timeline.completed_between(begin, end)
    if in_range:
        check_readable(timeline, min(i.time for i in in_range), "an incremental read from")
    end = end if end is not None else (in_range[-1].completed_at if in_range else begin)
    by_completion = timeline.layout.has_completion_times
    if config.is_merge_on_read:  # a slice merges over its base: every write completed by `end`
        view = FileSystemView(timeline, only=[i for i in timeline.completed_writes() if i.completed_at <= end])
    else:
        view = FileSystemView(timeline, only=in_range) if by_completion else FileSystemView(timeline, end)
    touched = set()
    for inst in in_range:
        touched |= {(s.partitionPath, s.fileId) for s in timeline.commit_metadata(inst).write_stats()}
    needed = sorted({partition for partition, _ in touched})  # a missing file elsewhere is not read
    schema = full_schema(table_schema(timeline, config))
    commit_time = pc.field("_hoodie_commit_time")
    if by_completion:
        times = tuple(sorted(i.time for i in in_range))
        rows, kw = commit_time.isin(pa.array(times, pa.string())), {"commit_times": times}
    else:
        rows, kw = (commit_time > pc.scalar(begin)) & (commit_time <= pc.scalar(end)), {"window": (begin, end)}
    if config.is_merge_on_read:
        slices = [s for s in view.latest_file_slices(needed) if s.file_group in touched]
        return _slice_scan(view, config, schema, slices, rows, **kw)
    files = [bf for bf in view.latest_base_files(needed) if bf.file_group in touched]
    return Scan(files, schema, rows, **kw)


def read_snapshot(
    timeline: Timeline,
    config: TableConfig,
    columns: Sequence[str] | None = None,
    as_of: str | None = None,
    filters: Filters = None,
    query_type: str = SNAPSHOT,
) -> pa.Table:
    return read_scan(timeline.storage, snapshot_scan(timeline, config, as_of, filters, query_type), columns)


def read_incremental(
    timeline: Timeline, config: TableConfig, begin: str, end: str | None, columns: Sequence[str] | None = None
) -> pa.Table:
    return read_scan(timeline.storage, incremental_scan(timeline, config, begin, end), columns)


def prune_files(
    view: FileSystemView, config: TableConfig, schema: pa.Schema, files: list[BaseFile], filters: Filters
) -> list[BaseFile]:
    """The files whose partition (and footer key range) may hold rows the filters select."""
    keep = matching_partitions(view, config, schema, {bf.partition_path for bf in files}, filters)
    if keep is None:
        return files
    files = [bf for bf in files if bf.partition_path in keep]
    # Footer key ranges are over `_hoodie_record_key`, which is the field's value only under the
    # simple key generators (ComplexKeyGenerator keys read `id:<value>`).
    predicates = conjunction(filters)
    key_field = config.record_key_fields[0] if KeyGenerator(config).simple_key else None
    if key_field and key_field in schema.names and pa.types.is_string(schema.field(key_field).type):
        if any(col == key_field for col, _, _ in predicates):
            files = [
                bf
                for bf in files
                if key_range_may_match(*_key_range(view, bf), column=key_field, predicates=predicates)
            ]
    return files


def matching_partitions(
    view: FileSystemView, config: TableConfig, schema: pa.Schema, partitions: set[str], filters: Filters
) -> set[str] | None:
    """The partitions whose values may match the filters; None when nothing prunes."""
    predicates = conjunction(filters)
    if not predicates:
        return None
    if config.damage or properties_disagreements(view.storage, config, view.timeline, view.all_partitions()):
        return None  # the properties may name wrong fields: no pruning by them; rows are still filtered
    keygen = KeyGenerator(config)
    return {p for p in partitions if partition_may_match(keygen.partition_values(p), predicates, schema)}


def _key_range(view: FileSystemView, bf: BaseFile) -> tuple[str | None, str | None]:
    footer = read_footer(view.storage, bf)
    return footer.min_key, footer.max_key


def read_scan(storage: Storage, scan: Scan, columns: Sequence[str] | None = None) -> pa.Table:
    """Read and concatenate a scan's files, each made to match its schema, filtered row by row."""
    schema, filters = scan.schema, scan.filters
    if columns is not None:
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise SchemaError(f"unknown column(s) {missing}; the table has {schema.names}")
        out_schema = pa.schema([schema.field(c) for c in columns])
    else:
        out_schema = schema
    expression = to_expression(filters)
    needed = _needed_columns(schema, out_schema, filters)

    def one(bf: BaseFile) -> pa.Table:
        with listed(storage, bf.path, bf.instant_time):
            parquet = storage.parquet_file(bf.path)
            present = [c for c in needed.names if c in parquet.schema_arrow.names]
            table = conform(parquet.read(columns=present), needed)
        if expression is not None:
            table = table.filter(expression)
        return table.select(out_schema.names)

    def merged(sl: FileSlice) -> pa.Table:
        # Merge first, filter after: a filter on a column an update changed must see the update.
        table = conform(read_slice(storage, sl, scan.merge, schema, ordered=False), needed)
        if expression is not None:
            table = table.filter(expression)
        return table.select(out_schema.names)

    with ThreadPoolExecutor(max_workers=2) as pool:
        tables = list(pool.map(one, scan.files)) + list(pool.map(merged, scan.slices))
    if not tables:
        return out_schema.empty_table()
    return pa.concat_tables(tables)


def _needed_columns(schema: pa.Schema, out_schema: pa.Schema, filters: Filters) -> pa.Schema:
    """The output columns plus those the filter reads (all columns for an Expression filter)."""
    if filters is None:
        return out_schema
    if isinstance(filters, pc.Expression) or not conjunction(filters):
        return schema
    wanted = set(out_schema.names) | {col for col, _, _ in conjunction(filters)}
    unknown = wanted - set(schema.names)
    if unknown:
        raise SchemaError(f"filter on unknown column(s) {sorted(unknown)}; the table has {schema.names}")
    return pa.schema([f for f in schema if f.name in wanted])


__all__ = ["META_SCHEMA", "Merge", "Scan", "incremental_scan", "read_incremental", "read_scan", "read_slice", "read_snapshot", "snapshot_scan", "table_schema"]
