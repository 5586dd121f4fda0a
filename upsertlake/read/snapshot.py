"""Snapshot, time-travel and incremental reads of a copy-on-write table."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config.table_config import TableConfig
from upsertlake.layout.file_writer import META_SCHEMA, full_schema
from upsertlake.errors import MissingFileError, SchemaError, UnsupportedTableError
from upsertlake.layout.footer import read_footer
from upsertlake.read.filters import (
    Filters,
    conjunction,
    key_range_may_match,
    partition_may_match,
    to_expression,
)
from upsertlake.schema import avro_to_arrow, conform
from upsertlake.services.doctor import properties_disagreements
from upsertlake.timeline.retention import check_readable
from upsertlake.storage import Storage
from upsertlake.layout.file_system_view import BaseFile, FileSystemView
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
    """What a read touches: the base files, the schema each is read into, the row filter. Reads
    in process run it at once; Spark reads one file per task."""

    files: list[BaseFile]
    schema: pa.Schema
    filters: Filters = None
    window: tuple[str, str] | None = None  # incremental, layout 1: commit times in (begin, end]
    commit_times: tuple[str, ...] | None = None  # incremental, layout 2: these commit times


def snapshot_scan(timeline: Timeline, config: TableConfig, as_of: str | None = None, filters: Filters = None) -> Scan:
    check_readable(timeline, as_of, "time travel to")
    view = FileSystemView(timeline, as_of)
    schema = output_schema(table_schema(timeline, config, as_of), config)
    return Scan(prune_files(view, config, schema, view.latest_base_files(), filters), schema, filters)


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
    view = FileSystemView(timeline, only=in_range) if by_completion else FileSystemView(timeline, end)
    touched = set()
    for inst in in_range:
        touched |= {(s.partitionPath, s.fileId) for s in timeline.commit_metadata(inst).write_stats()}
    needed = sorted({partition for partition, _ in touched})  # a missing file elsewhere is not read
    files = [bf for bf in view.latest_base_files(needed) if bf.file_group in touched]
    schema = full_schema(table_schema(timeline, config))
    commit_time = pc.field("_hoodie_commit_time")
    if by_completion:
        times = tuple(sorted(i.time for i in in_range))
        return Scan(files, schema, commit_time.isin(pa.array(times, pa.string())), commit_times=times)
    window = (commit_time > pc.scalar(begin)) & (commit_time <= pc.scalar(end))
    return Scan(files, schema, window, (begin, end))


def read_snapshot(
    timeline: Timeline,
    config: TableConfig,
    columns: Sequence[str] | None = None,
    as_of: str | None = None,
    filters: Filters = None,
) -> pa.Table:
    return read_scan(timeline.storage, snapshot_scan(timeline, config, as_of, filters), columns)


def read_incremental(
    timeline: Timeline, config: TableConfig, begin: str, end: str | None, columns: Sequence[str] | None = None
) -> pa.Table:
    return read_scan(timeline.storage, incremental_scan(timeline, config, begin, end), columns)


def prune_files(
    view: FileSystemView, config: TableConfig, schema: pa.Schema, files: list[BaseFile], filters: Filters
) -> list[BaseFile]:
    predicates = conjunction(filters)
    if not predicates:
        return files
    if config.damage or properties_disagreements(view.storage, config, view.timeline, view.all_partitions()):
        return files  # the properties may name wrong fields: no pruning by them; rows are still filtered
    keygen = KeyGenerator(config)
    partitions = {bf.partition_path for bf in files}
    keep = {p for p in partitions if partition_may_match(keygen.partition_values(p), predicates, schema)}
    files = [bf for bf in files if bf.partition_path in keep]
    # Footer key ranges are over `_hoodie_record_key`, which is the field's value only under the
    # simple key generators (ComplexKeyGenerator keys read `id:<value>`).
    key_field = config.record_key_fields[0] if keygen.simple_key else None
    if key_field and key_field in schema.names and pa.types.is_string(schema.field(key_field).type):
        if any(col == key_field for col, _, _ in predicates):
            files = [
                bf
                for bf in files
                if key_range_may_match(*_key_range(view, bf), column=key_field, predicates=predicates)
            ]
    return files


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
        try:
            parquet = storage.parquet_file(bf.path)
            present = [c for c in needed.names if c in parquet.schema_arrow.names]
            table = conform(parquet.read(columns=present), needed)
        except FileNotFoundError as exc:  # the view listed it as the visible version: never skip it
            raise MissingFileError(
                f"{storage.full_path(bf.path)}, written by instant {bf.instant_time}, was listed by this read "
                "but is gone (a restore or rollback ran meanwhile, or the file was deleted): its rows cannot be "
                f"returned. Read again; if it stays missing, run `upsertlake doctor {storage.base}`"
            ) from exc
        if expression is not None:
            table = table.filter(expression)
        return table.select(out_schema.names)

    with ThreadPoolExecutor(max_workers=2) as pool:
        tables = list(pool.map(one, scan.files))
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


__all__ = ["META_SCHEMA", "Scan", "incremental_scan", "read_incremental", "read_scan", "read_snapshot", "snapshot_scan", "table_schema"]
