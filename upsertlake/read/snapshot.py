"""Planning snapshot, read-optimized, time-travel and incremental reads: which base files and
merge-on-read slices a read touches, the schema each is read into, the rows it keeps.

A plan is what every reader runs: `upsertlake.read.scan.Scan` in process (one file, or one slice
merged, at a time), Spark one file or slice per task. Partitions the filters rule out are pruned
here, before any file is opened."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config.table_config import TableConfig
from upsertlake.errors import ConfigError, UnsupportedTableError
from upsertlake.layout.file_system_view import BaseFile, FileSlice, FileSystemView
from upsertlake.layout.keygen import KeyGenerator
from upsertlake.layout.properties_check import properties_disagreements
from upsertlake.layout.slice_reader import Merge
from upsertlake.read import skipping
from upsertlake.read.filters import Filters, checked_filters, conjunction, partition_may_match, to_expression
from upsertlake.read.statistics import FileStatistics
from upsertlake.schema import avro_to_arrow, full_schema
from upsertlake.schema.columns import COMMIT_TIME
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.retention import check_readable, cleaned_files

SNAPSHOT, READ_OPTIMIZED, INCREMENTAL = "snapshot", "read_optimized", "incremental"
QUERY_TYPES = (SNAPSHOT, READ_OPTIMIZED)


def table_schema(timeline: Timeline, table_config: TableConfig, as_of: str | None = None) -> pa.Schema:
    """The data schema as of an instant: that of the newest completed write ≤ as_of."""
    for inst in reversed(timeline.completed_writes()):
        if as_of is not None and inst.time > as_of:
            continue
        schema = timeline.commit_metadata(inst).schema
        if schema:
            return avro_to_arrow(schema)
    return avro_to_arrow(table_config.create_schema) if table_config.create_schema else pa.schema([])


def output_schema(data_schema: pa.Schema, table_config: TableConfig) -> pa.Schema:
    """What a read returns: the five meta columns, then the data columns; only the data columns
    when the table does not populate meta fields (they hold nothing but nulls there, and Apache
    Hudi's readers, Spark's and hudi-rs, leave them out)."""
    return full_schema(data_schema) if table_config.populate_meta_fields else data_schema


@dataclass(frozen=True)
class ScanPlan:
    """What a read touches: the base files, the merge-on-read slices with log files, the schema
    each is read into, the user's filters and (incremental reads) the commits whose rows count."""

    files: list[BaseFile]
    schema: pa.Schema
    filters: Filters = None
    window: tuple[str, str] | None = None  # incremental, layout 1: commit times in (begin, end]
    commit_times: tuple[str, ...] | None = None  # incremental, layout 2: these commit times
    slices: list[FileSlice] = field(default_factory=list)
    merge: Merge | None = None
    # A merge-on-read table without meta fields: the slices merge by the key this makes.
    record_keys: KeyGenerator | None = None

    @property
    def row_filter(self) -> pc.Expression | None:
        """The rows a read keeps: the filters', and an incremental read's commit times."""
        parts = [e for e in (to_expression(self.filters), self.commit_filter) if e is not None]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else parts[0] & parts[1]

    @property
    def filter_columns(self) -> frozenset[str] | None:
        """The columns `row_filter` reads (None: any, for an Expression filter)."""
        if isinstance(self.filters, pc.Expression):
            return None
        columns = {column for column, _, _ in conjunction(self.filters)}
        return frozenset(columns | ({COMMIT_TIME} if self.commit_filter is not None else set()))

    @property
    def commit_filter(self) -> pc.Expression | None:
        commit_time = pc.field(COMMIT_TIME)
        if self.commit_times is not None:
            return commit_time.isin(pa.array(self.commit_times, pa.string()))
        if self.window is not None:
            begin, end = self.window
            return (commit_time > pc.scalar(begin)) & (commit_time <= pc.scalar(end))
        return None


def snapshot_scan(
    timeline: Timeline,
    table_config: TableConfig,
    as_of: str | None = None,
    filters: Filters = None,
    query_type: str = SNAPSHOT,
    statistics: FileStatistics | None = None,
) -> ScanPlan:
    """A snapshot read as of an instant; `read_optimized` reads a merge-on-read table's base
    files alone (Hudi's read-optimized query: fast, without the updates still in log files).
    `statistics`: of `timeline`'s files, when the caller keeps them (a scan counts with them)."""
    if query_type not in QUERY_TYPES:
        raise ConfigError(f"query type {query_type!r}: one of {', '.join(QUERY_TYPES)} (incremental: read_incremental)")
    check_readable(timeline, as_of, "time travel to")
    view = FileSystemView(timeline, as_of)
    schema = output_schema(table_schema(timeline, table_config, as_of), table_config)
    filters = checked_filters(filters, schema)
    statistics = statistics or FileStatistics(timeline)
    if query_type == READ_OPTIMIZED or not table_config.is_merge_on_read:
        files = prune_files(view, table_config, schema, view.latest_base_files(), filters)
        return ScanPlan(skip_files(files, schema, filters, statistics), schema, filters)
    return _slice_scan(view, table_config, schema, view.latest_file_slices(), filters, statistics)


def _slice_scan(
    view: FileSystemView,
    table_config: TableConfig,
    schema: pa.Schema,
    slices: list[FileSlice],
    filters: Filters,
    statistics: FileStatistics,
    **kw: Any,
) -> ScanPlan:
    """A merge-on-read scan: slices without logs read as base files (pruned as copy-on-write
    files are), the others merged; partition pruning and data skipping apply to both. A table
    without meta fields merges by the key its key generator makes, as Hudi's readers do."""
    plain = prune_files(view, table_config, schema, [s.base for s in slices if not s.logs and s.base], filters)
    merged = [s for s in slices if s.logs]
    keep = matching_partitions(view, table_config, schema, {s.partition_path for s in merged}, filters)
    if keep is not None:
        merged = [s for s in merged if s.partition_path in keep]
    merge = Merge(
        table_config.ordering_fields, table_config.merge_mode, frozenset(i.time for i in view.visible_instants)
    )
    plain = skip_files(plain, schema, filters, statistics)
    merged = skip_slices(merged, schema, filters, statistics)
    keys = None if table_config.populate_meta_fields else KeyGenerator(table_config)
    return ScanPlan(plain, schema, filters, slices=merged, merge=merge, record_keys=keys, **kw)


def incremental_scan(
    timeline: Timeline,
    table_config: TableConfig,
    begin: str,
    end: str | None,
    filters: Filters = None,
    statistics: FileStatistics | None = None,
) -> ScanPlan:
    """The records written by the commits in (begin, end], as Apache Hudi's incremental query
    returns them.

    The commits: table version 6, those whose instant time is in (begin, end]; version 8 and later,
    those that *completed* in (begin, end] (Hudi 1.x). The files: those the commits wrote (their
    write stats), grouped into file groups as Hudi does it, so a merge-on-read slice holds the
    range's base file and log files only and the records it returns are merged among themselves,
    not with an older base file (a late record that lost to the stored one is returned as written,
    as Hudi does). The rows: those whose `_hoodie_commit_time` is one of the commits'.

    When a file the commits wrote is gone (cleaned since) or a commit is archived, version 8 and
    later read the whole table's latest files with the same row filter, as Hudi 1.x falls back to
    a full table scan by default; version 6 refuses by name, as Hudi 0.x does.

    The columns are those of the newest schema, whatever `end` is (Hudi's default,
    `hoodie.datasource.read.schema.use.end.instanttime=false`, and hudi-rs). Without meta fields
    there are no commit times to select rows by, and Hudi refuses the query; so do we.
    """
    if not table_config.populate_meta_fields:
        raise UnsupportedTableError(
            "incremental reads need the _hoodie_commit_time meta field; this table does not "
            "populate meta fields (hoodie.populate.meta.fields=false)"
        )
    in_range = timeline.completed_between(begin, end)
    end = end if end is not None else (in_range[-1].completed_at if in_range else begin)
    by_completion = timeline.layout.has_completion_times
    kw: dict[str, Any]
    if by_completion:
        kw = {"commit_times": tuple(sorted(i.time for i in in_range))}
    else:
        kw = {"window": (begin, end)}
    touched: set[tuple[str, str]] = set()
    for inst in in_range:
        touched |= {(s.partitionPath, s.fileId) for s in timeline.commit_metadata(inst).write_stats()}
    partitions = sorted({partition for partition, _ in touched})  # a missing file elsewhere is not read
    needed: list[str] | None = partitions
    view = FileSystemView(timeline, only=in_range)
    if by_completion:
        gone = view.missing_in(partitions)
        damaged = [g for g in gone if g[0] not in cleaned_files(timeline)]
        if damaged:  # not cleaned, lost: a full table scan would silently miss its rows
            raise view.missing_error(damaged)
        if gone or any(i in timeline.archived for i in in_range):
            view, needed = FileSystemView(timeline), None  # Hudi 1.x's full table scan
    statistics = statistics or FileStatistics(timeline)
    schema = full_schema(table_schema(timeline, table_config))
    filters = checked_filters(filters, schema)
    if table_config.is_merge_on_read:
        slices = [s for s in view.latest_file_slices(needed) if needed is None or s.file_group in touched]
        return _slice_scan(view, table_config, schema, slices, filters, statistics, **kw)
    files = [bf for bf in view.latest_base_files(needed) if needed is None or bf.file_group in touched]
    files = skip_files(prune_files(view, table_config, schema, files, filters), schema, filters, statistics)
    return ScanPlan(files, schema, filters, **kw)


def prune_files(
    view: FileSystemView, table_config: TableConfig, schema: pa.Schema, files: list[BaseFile], filters: Filters
) -> list[BaseFile]:
    """The files whose partition may hold rows the filters select."""
    keep = matching_partitions(view, table_config, schema, {bf.partition_path for bf in files}, filters)
    return files if keep is None else [bf for bf in files if bf.partition_path in keep]


def matching_partitions(
    view: FileSystemView, table_config: TableConfig, schema: pa.Schema, partitions: set[str], filters: Filters
) -> set[str] | None:
    """The partitions whose values may match the filters; None when nothing prunes."""
    predicates = conjunction(filters)
    if not predicates:
        return None
    if table_config.damage or properties_disagreements(
        view.storage, table_config, view.timeline, view.all_partitions()
    ):
        return None  # the properties may name wrong fields: no pruning by them; rows are still filtered
    keygen = KeyGenerator(table_config)
    return {p for p in partitions if partition_may_match(keygen.partition_values(p), predicates, schema)}


def skip_files(
    files: list[BaseFile], schema: pa.Schema, filters: Filters, statistics: FileStatistics
) -> list[BaseFile]:
    """The files whose column statistics do not rule the filters out (`upsertlake.read.skipping`)."""
    if not files or not skipping.needs_statistics(filters):
        return files
    files = skip_partitions(files, schema, filters, statistics)
    stats = statistics.of_bases(files, schema)
    keep = skipping.keeps([stats[bf.path] for bf in files], schema, filters)
    return [bf for bf, kept in zip(files, keep) if kept]


def skip_partitions(
    files: list[BaseFile], schema: pa.Schema, filters: Filters, statistics: FileStatistics
) -> list[BaseFile]:
    """The files of partitions whose statistics (the metadata table's `partition_stats`, which
    bound every row of the partition's latest slices) do not rule the filters out."""
    partitions = sorted({bf.partition_path for bf in files})
    stats = statistics.of_partitions(partitions, schema)
    if not stats:
        return files
    kept = skipping.keeps([stats.get(p) for p in partitions], schema, filters)
    keep = {p for p, k in zip(partitions, kept) if k}
    return [bf for bf in files if bf.partition_path in keep]


def skip_slices(
    slices: list[FileSlice], schema: pa.Schema, filters: Filters, statistics: FileStatistics
) -> list[FileSlice]:
    """The slices some file of which (base or log) the filters do not rule out; a slice with a
    log file of unrecorded statistics is kept without looking at its base file."""
    if not slices or not skipping.needs_statistics(filters):
        return slices
    partitions = sorted({sl.partition_path for sl in slices})
    by_partition = statistics.of_partitions(partitions, schema)
    if by_partition:
        ruled = skipping.keeps([by_partition.get(p) for p in partitions], schema, filters)
        left = {p for p, k in zip(partitions, ruled) if k}
        slices = [sl for sl in slices if sl.partition_path in left]
    logs = {log.path: s for sl in slices for log in sl.logs if (s := statistics.of_log(log, schema)) is not None}
    judged = [i for i, sl in enumerate(slices) if all(log.path in logs for log in sl.logs)]
    bases = statistics.of_bases([base for i in judged if (base := slices[i].base) is not None], schema)
    own = {i: ([bases[sl.base.path]] if sl.base is not None else []) + [logs[log.path] for log in sl.logs]
           for i in judged for sl in [slices[i]]}
    kept = iter(skipping.keeps([s for i in judged for s in own[i]], schema, filters))
    verdicts = {i: any([next(kept) for _ in own[i]]) for i in judged}  # every verdict taken, in order
    return [sl for i, sl in enumerate(slices) if verdicts.get(i, True)]
