"""Keeping Apache Hudi's metadata table (`.hoodie/metadata`) in step with the data table:
docs/DESIGN.md §11.

Every writer and service calls in at three points, under the table lock:
- `prepare` at its start: the metadata table as this writer keeps it. With
  `hoodie.metadata.enable=false`, on table version 6, or when it misses an instant (a writer that
  did not keep it wrote since), it is deleted and its properties cleared, as Hudi does for a writer
  with the metadata table disabled. One is built (`initialize`) when the writer asks for it:
  `hoodie.metadata.enable=true` given explicitly, or the record index asked for; by default an
  existing one is kept and none is created (benchmarks/metadata_bench.py: what keeping it costs).
  Partitions we do not keep (secondary and expression indexes, bloom filters) are removed with
  their property entry and index definition, as Hudi does when such an index is dropped: never
  left listed and stale.
- `sync` before its data instant completes: the metadata deltacommit at the same instant time
  (files, column_stats, partition_stats, record_index), so a reader never sees a committed data
  instant the metadata table lacks, and ignores the deltacommit until the data instant completes.
- `discard_rolled_back` when a data instant is rolled back: its metadata deltacommit is rolled back too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config import options as opt
from upsertlake.config.enums import IndexType
from upsertlake.config.properties_file import write_properties
from upsertlake.config.resolved import Config
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import CorruptTableError
from upsertlake.index.base import IndexUpdate
from upsertlake.layout.file_system_view import BaseFile, FileSlice, FileSystemView, LogFile
from upsertlake.layout.slice_reader import Merge
from upsertlake.logfile import DataBlock
from upsertlake.logfile.avro_records import with_meta_fields
from upsertlake.logfile.names import is_log_path
from upsertlake.logfile.reader import read_logs
from upsertlake.metadata import MetadataTable
from upsertlake.metadata import changes as mc
from upsertlake.metadata.compaction import (
    clean,
    compact,
    compaction_time,
    deltacommits_since_compaction,
    discard_failed_compactions,
    folded,
    trim_timeline,
)
from upsertlake.metadata.initialize import (
    begin_partition,
    complete_partition,
    create_table,
    initialize_partition,
    write_base,
)
from upsertlake.metadata.partitions import (
    COLUMN_STATS,
    FILES,
    FOLDER,
    INFLIGHT_KEY,
    PARTITION_STATS,
    PARTITIONS_KEY,
    RECORD_INDEX,
    listed,
)
from upsertlake.metadata.records import writer_schema
from upsertlake.metadata.stats import bound
from upsertlake.metadata.table import MetadataSlice, unsynced_instants
from upsertlake.metadata.writer import Changes, deltacommit, discard_deltacommit, write_log
from upsertlake.schema import avro_to_arrow
from upsertlake.schema.columns import LOOKUP_KEY, UPDATE_FILE_ID, UPDATE_PARTITION
from upsertlake.services.key_groups import (
    INSERTED,
    KEY_CHANGES,
    ByKeyGroup,
    KeySource,
    LiveKeys,
    RetiredKeys,
    StagedKeys,
    WrittenKeys,
    in_process,
    per_core,
    read_keys,
)
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action
from upsertlake.timeline.instant_time import parse_instant_time
from upsertlake.timeline.layouts import layout_of
from upsertlake.util.arrow import constant

log = logging.getLogger(__name__)

KEPT = (FILES, COLUMN_STATS, PARTITION_STATS, RECORD_INDEX)  # the partitions upsertlake maintains
INDEX_DEFINITIONS_KEY = "hoodie.table.index.defs.path"
INDEX_DEFINITIONS_PATH = ".hoodie/.index_defs/index.json"
FOOTER_THREADS = 8


def keeps_record_index(table_config: TableConfig) -> bool:
    """Whether writes must report the keys they insert and delete (the record index is kept)."""
    return RECORD_INDEX in listed(table_config.extra.get(PARTITIONS_KEY))


def keeps_column_stats(table_config: TableConfig) -> bool:
    """Whether an append must report its log file's column statistics (`mc.RecordsStats`): the
    column_stats or partition_stats partition is kept."""
    return bool({COLUMN_STATS, PARTITION_STATS} & set(listed(table_config.extra.get(PARTITIONS_KEY))))


# -- at the start of a write or service -------------------------------------------------------------
def prepare(
    storage: Storage, table_config: TableConfig, options: Config | None = None, by_key: ByKeyGroup | None = None
) -> TableConfig:
    """Under the lock: keep, trim or delete the metadata table (see the module doc); returns the
    config now on disk. `by_key`: how an initialization of the record index reads and writes its
    keys by file group (default: in process; a Spark write's: as Spark tasks)."""
    cfg = options or Config.resolve(None)
    enabled = cfg.get(opt.METADATA_ENABLE)
    builds = (
        enabled
        and table_config.table_version >= 8
        and (cfg.is_set(opt.METADATA_ENABLE) or _wants_record_index(cfg))
    )
    partitions = listed(table_config.extra.get(PARTITIONS_KEY))
    inflight = listed(table_config.extra.get(INFLIGHT_KEY))
    if not enabled or table_config.table_version < 8 or ((partitions or inflight) and FILES not in partitions):
        return drop_metadata_table(storage, table_config)
    if not partitions or inflight:
        if builds:
            return initialize(storage, table_config, options, by_key)
        return drop_metadata_table(storage, table_config)
    timeline = Timeline.load(storage, layout_of(table_config))
    try:
        table = MetadataTable.open(timeline)
        missing = unsynced_instants(timeline, table.timeline) if table is not None else ["files"]
    except CorruptTableError as e:
        missing = [str(e)]
    if missing:
        log.warning("the metadata table of %s misses %s", storage.base, missing[0])
        table_config = drop_metadata_table(storage, table_config)
        return initialize(storage, table_config, options, by_key) if builds else table_config
    unkept = [p for p in [*partitions, *inflight] if p not in KEPT or p in inflight]
    table_config = drop_partitions(storage, table_config, unkept) if unkept else table_config
    if _wants_record_index(cfg) and RECORD_INDEX not in listed(table_config.extra.get(PARTITIONS_KEY)):
        table_config = initialize(storage, table_config, options, by_key)  # the record index alone, the others kept
    return table_config


def _wants_record_index(cfg: Config) -> bool:
    """Whether this writer asks for the record index."""
    return bool(cfg.get(opt.METADATA_RECORD_INDEX_ENABLE) or cfg.get(opt.INDEX_TYPE) is IndexType.RECORD_INDEX)


def initialize(
    storage: Storage, table_config: TableConfig, options: Config | None, by_key: ByKeyGroup | None = None
) -> TableConfig:
    """Under the lock: build the metadata table from the table as it is (its committed files, the
    footers of its latest base files, the keys of its latest slices), partition by partition, as
    Hudi's writer initializes one; returns the config now on disk. The record index's keys never
    meet in one place: read by slice and written by file group through `by_key`."""
    MetadataTable.forget(storage)
    listed_any = listed(table_config.extra.get(PARTITIONS_KEY)) or listed(table_config.extra.get(INFLIGHT_KEY))
    if not listed_any and storage.folder_exists(FOLDER):
        table_config = drop_metadata_table(storage, table_config)  # a folder no property lists: leftovers
    cfg = options or Config.resolve(None)
    record_index = _wants_record_index(cfg)
    wanted = (
        [FILES, COLUMN_STATS]
        + ([PARTITION_STATS] if table_config.partition_fields else [])
        + ([RECORD_INDEX] if record_index else [])
    )
    wanted = [p for p in wanted if p not in listed(table_config.extra.get(PARTITIONS_KEY))]
    if not wanted:
        return table_config
    timeline = Timeline.load(storage, layout_of(table_config))
    view = FileSystemView(timeline)
    done = {i.time for i in timeline.completed_writes()}
    added: dict[str, dict[str, int]] = {p: {} for p in view.all_partitions()}
    for f in view.all_base_files():
        if f.instant_time in done:
            added.setdefault(f.partition_path, {})[f.name] = f.size
    for lf in view.all_log_files():
        if lf.name.instant in done:
            added.setdefault(lf.partition_path, {})[lf.path.rpartition("/")[2]] = lf.size
    slices = view.latest_file_slices()
    bases = [sl.base for sl in slices if sl.base is not None]
    with ThreadPoolExecutor(max_workers=max(1, min(FOOTER_THREADS, len(bases)))) as pool:
        footers = dict(zip([b.path for b in bases], pool.map(lambda b: storage.parquet_file(b.path).metadata, bases)))
    schema = next(iter(footers.values())).schema.to_arrow_schema() if footers else None
    columns = mc.indexed_columns(schema, None) if schema is not None else []
    stats = {path: mc.footer_stats(f, columns) for path, f in footers.items()}
    logs = [log for sl in slices for log in sl.logs]
    # A log file's statistics come from its records: read where the record index's keys are.
    read_stats = partial(log_stats, storage, columns=columns)
    stats.update(zip([log.path for log in logs], (by_key or in_process).each(read_stats, [log.path for log in logs])))
    _write_index_definition(storage, table_config, columns, record_index)
    table_config = TableConfig.load(storage)
    write_properties(storage, {INFLIGHT_KEY: ",".join(sorted(wanted))})
    mdt = create_table(storage, table_config.name, table_config.table_version)
    for partition in wanted:
        if partition == RECORD_INDEX:
            _initialize_record_index(storage, mdt, table_config, timeline, slices, by_key or in_process)
        else:
            _initialize(mdt, partition, added, bases, logs, slices, stats, table_config.table_version)
        current = TableConfig.load(storage)
        complete = sorted({*listed(current.extra.get(PARTITIONS_KEY)), partition})
        pending = [p for p in listed(current.extra.get(INFLIGHT_KEY)) if p != partition]
        write_properties(storage, {PARTITIONS_KEY: ",".join(complete), INFLIGHT_KEY: ",".join(pending) or None})
    log.info("initialized the metadata table of %s (%s)", storage.base, ", ".join(wanted))
    return TableConfig.load(storage)


def _initialize(
    mdt: Storage,
    partition: str,
    added: Mapping[str, Mapping[str, int]],
    bases: list[BaseFile],
    logs: list[LogFile],
    slices: list[FileSlice],
    stats: Mapping[str, list[mc.ColumnStats] | None],
    table_version: int,
) -> None:
    """One partition but the record index, from the listing and the files' statistics."""
    if partition == FILES:
        records, groups = mc.files_changes(added).upserts, 1
    elif partition == COLUMN_STATS:
        files = [(b.partition_path, b.path) for b in bases] + [(log.partition_path, log.path) for log in logs]
        records = [
            r
            for p, path in files
            if (known := stats[path])
            for r in mc.column_stats_records(p, path.rpartition("/")[2], known, table_version)
        ]
        groups = COLUMN_STATS_FILE_GROUPS
    else:
        records, groups = _initial_partition_stats(slices, stats, table_version), 1
    initialize_partition(mdt, partition, records, groups, table_version)


def _initialize_record_index(
    storage: Storage,
    mdt: Storage,
    table_config: TableConfig,
    timeline: Timeline,
    slices: list[FileSlice],
    by_key: ByKeyGroup,
) -> None:
    """The record index from the live keys of the latest slices: each slice's keys read, gathered
    by file group (as many as their number asks for) and each group's base file written, by
    `by_key` (on Spark: tasks, a shuffle, a task per file group)."""
    merge = Merge(
        table_config.ordering_fields,
        table_config.merge_mode,
        frozenset(i.time for i in timeline.completed_writes()),
    )
    latest = timeline.latest_completed_write()
    millis = int(parse_instant_time(latest.time, timeline.layout.zone).timestamp() * 1000) if latest else 0
    schema = writer_schema(table_config.table_version)
    inflight = begin_partition(mdt, RECORD_INDEX)
    sources: list[KeySource] = [LiveKeys(sl, merge) for sl in slices]
    write = partial(_initial_group, mdt, millis, schema)
    stats = by_key(sources, partial(read_keys, storage), record_index_file_groups, write, True)
    complete_partition(mdt, RECORD_INDEX, inflight, sorted(stats, key=lambda s: s.fileId), schema)


def _initial_group(mdt: Storage, millis: int, schema: str, group: int, rows: pa.Table) -> list[WriteStat]:
    """The base file of one record-index file group at its initialization (a `GroupWrite`)."""
    return [write_base(mdt, RECORD_INDEX, group, mc.record_index_changes(rows, rows.slice(0, 0), millis), schema)]


COLUMN_STATS_FILE_GROUPS = 2  # hoodie.metadata.index.column.stats.file.group.count
RECORD_INDEX_MIN_GROUPS, RECORD_INDEX_MAX_GROUPS = 10, 10000  # hoodie.metadata.record.index.{min,max}.filegroup.count
RECORD_INDEX_GROUP_BYTES = 1 << 30  # hoodie.metadata.record.index.max.filegroup.size
RECORD_INDEX_ENTRY_BYTES, RECORD_INDEX_GROWTH = 48, 2.0  # Hudi's estimate of an entry's size, and headroom


def record_index_file_groups(keys: int) -> int:
    """The record index's file groups for `keys` keys (HoodieTableMetadataUtil.estimateFileGroupCount)."""
    needed = -(-int(keys * RECORD_INDEX_ENTRY_BYTES * RECORD_INDEX_GROWTH) // RECORD_INDEX_GROUP_BYTES)
    return max(RECORD_INDEX_MIN_GROUPS, min(RECORD_INDEX_MAX_GROUPS, needed))


def _initial_partition_stats(
    slices: list[FileSlice], stats: Mapping[str, list[mc.ColumnStats] | None], table_version: int
) -> list[dict[str, Any]]:
    """Tight partition stats over every file of the latest slices; none for a partition with a
    file of unknown statistics."""
    by_partition: dict[str, list[list[mc.ColumnStats]] | None] = {}
    for sl in slices:
        for path in ([sl.base.path] if sl.base else []) + [log.path for log in sl.logs]:
            known = by_partition.setdefault(sl.partition_path, [])
            if known is None:
                break
            own = stats.get(path)
            if own is None:
                by_partition[sl.partition_path] = None
            elif own:
                known.append(own)
    return [
        r
        for p, files in sorted(by_partition.items())
        if files
        for r in mc.partition_stats_records(p, mc.merged(files), table_version)
    ]


def _write_index_definition(
    storage: Storage, table_config: TableConfig, columns: list[str], record_index: bool
) -> None:
    """Hudi 1.x's index definitions (`.hoodie/.index_defs/index.json`): the column_stats index
    (and the record index), where the table has none yet."""
    path, doc = _index_definitions(storage, table_config)
    defs = dict(doc.get("indexDefinitions") or {})
    v9 = table_config.table_version >= 9
    if COLUMN_STATS not in defs:
        defs[COLUMN_STATS] = {
            "indexName": COLUMN_STATS,
            "indexType": COLUMN_STATS,
            "indexFunction": COLUMN_STATS,
            "sourceFields": columns,
            "indexOptions": {},
            **({"version": "V2"} if v9 else {}),
        }
    if record_index and v9 and RECORD_INDEX not in defs:
        defs[RECORD_INDEX] = {
            "indexName": RECORD_INDEX,
            "indexType": RECORD_INDEX,
            "indexFunction": "",
            "sourceFields": [],
            "indexOptions": {"isPartitioned": "false"},
            "version": "V1",
        }
    if defs == (doc.get("indexDefinitions") or {}):
        return
    path = path or INDEX_DEFINITIONS_PATH
    storage.write_bytes(path, json.dumps({"indexDefinitions": defs}, indent=2).encode())
    if table_config.extra.get(INDEX_DEFINITIONS_KEY) != path:
        write_properties(storage, {INDEX_DEFINITIONS_KEY: path})


def drop_metadata_table(storage: Storage, table_config: TableConfig) -> TableConfig:
    """Clear the metadata table's properties, then delete its folder; returns the config now on
    disk. The property goes first: a crash in between leaves a folder no reader consults."""
    MetadataTable.forget(storage)
    keys = (PARTITIONS_KEY, INFLIGHT_KEY)
    if not any(table_config.extra.get(k) for k in keys) and not storage.folder_exists(FOLDER):
        return table_config
    if any(k in table_config.extra for k in keys):
        write_properties(storage, dict.fromkeys(keys))
        table_config = TableConfig.load(storage)
    storage.delete_dir(FOLDER)
    log.warning(
        "deleted the metadata table of %s (%s), as Hudi does for a writer that does not keep it", storage.base, FOLDER
    )
    return table_config


def drop_partitions(storage: Storage, table_config: TableConfig, partitions: Iterable[str]) -> TableConfig:
    """Remove metadata partitions: their property entries first (readers stop trusting them),
    then their folders and their index definitions (Hudi's dropIndex)."""
    MetadataTable.forget(storage)
    doomed = set(partitions)
    kept = [p for p in listed(table_config.extra.get(PARTITIONS_KEY)) if p not in doomed]
    pending = [p for p in listed(table_config.extra.get(INFLIGHT_KEY)) if p not in doomed]
    write_properties(storage, {PARTITIONS_KEY: ",".join(kept) or None, INFLIGHT_KEY: ",".join(pending) or None})
    for p in sorted(doomed):
        storage.delete_dir(f"{FOLDER}/{p}")
    _drop_index_definitions(storage, table_config, doomed)
    log.warning(
        "removed metadata partition(s) %s of %s: upsertlake does not keep them", ", ".join(sorted(doomed)), storage.base
    )
    return TableConfig.load(storage)


def _index_definitions(storage: Storage, table_config: TableConfig) -> tuple[str | None, dict[str, Any]]:
    path = table_config.extra.get(INDEX_DEFINITIONS_KEY)
    if not path or not storage.exists(path):
        return None, {}
    return path, json.loads(storage.read_bytes(path))


def _drop_index_definitions(storage: Storage, table_config: TableConfig, names: set[str]) -> None:
    path, doc = _index_definitions(storage, table_config)
    defs = doc.get("indexDefinitions") or {}
    if path is None or not names & set(defs):
        return
    doc["indexDefinitions"] = {k: v for k, v in defs.items() if k not in names}
    storage.write_bytes(path, json.dumps(doc, indent=2).encode())


# -- before a data instant completes -----------------------------------------------------------------
def sync(
    storage: Storage,
    table_config: TableConfig,
    instant_time: str,
    metadata: CommitMetadata,
    index_update: IndexUpdate | None = None,
    deleted: Mapping[str, Iterable[str]] | None = None,
    options: Config | None = None,
    by_key: ByKeyGroup | None = None,
    log_stats: Mapping[str, mc.RecordsStats] | None = None,
) -> None:
    """Under the lock, before the data instant `instant_time` completes: its metadata deltacommit.
    `metadata`: the instant's commit metadata (files written); `index_update`: the keys it inserted
    and deleted (for the record index); `deleted`: files it deleted (a clean), by partition;
    `log_stats`: the statistics of the log files it wrote, by path, as their writers computed them;
    `by_key`: how the record index's changes are read and written by file group (default: in
    process; a Spark write's: as Spark tasks, from the files its write tasks staged)."""
    partitions = [p for p in listed(table_config.extra.get(PARTITIONS_KEY)) if p in KEPT]
    if not partitions:
        return
    timeline = Timeline.load(storage, layout_of(table_config))
    table = MetadataTable.open(timeline)
    if table is None:
        return
    stats = metadata.write_stats()
    added: dict[str, dict[str, int]] = {}
    for s in stats:
        if s.path:
            name = s.path.rpartition("/")[2]
            sizes = added.setdefault(s.partitionPath, {})
            sizes[name] = max(sizes.get(name, 0), s.fileSizeInBytes)
    work: dict[str, Changes] = {FILES: mc.files_changes(added, deleted or {})}
    if COLUMN_STATS in partitions or PARTITION_STATS in partitions:
        work.update(
            _statistics(storage, table_config, table, timeline, metadata, deleted or {}, partitions, log_stats or {})
        )
    more = None
    if RECORD_INDEX in partitions and (sources := _key_sources(timeline, metadata, index_update)):
        millis = int(parse_instant_time(instant_time, timeline.layout.zone).timestamp() * 1000)
        version = table_config.table_version
        more = partial(_write_record_index, storage, sources, instant_time, millis, version, by_key or in_process)
    deltacommit(table, instant_time, work, table_config.table_version, more)
    due = (options or Config.resolve(None)).get(opt.METADATA_COMPACT_MAX_DELTA_COMMITS)
    if deltacommits_since_compaction(table) + 1 >= due:  # this one included
        _compact_and_clean(table.reloaded(), timeline, table_config, by_key or per_core)


def _compact_and_clean(table: MetadataTable, timeline: Timeline, table_config: TableConfig, by_key: ByKeyGroup) -> None:
    """The metadata table's own services, after its deltacommit: a compaction (the record index's
    file groups where `by_key` writes them), then a clean and the trim of its timeline."""
    time = compaction_time(table, timeline)
    if time is None:
        return
    compact(table, time, table_config.table_version, by_key.each)
    table = table.reloaded()
    gone = clean(table)
    trimmed = trim_timeline(table.reloaded())
    log.info("compacted the metadata table at %s; cleaned %d file(s), %d instant(s)", time, len(gone), len(trimmed))


def _key_sources(timeline: Timeline, metadata: CommitMetadata, index_update: IndexUpdate | None) -> list[KeySource]:
    """Where the record index's changes of an instant come from: a write's report (the keys it
    inserted and deleted, a log file's deletes too; on Spark the files its tasks staged them in),
    a clustering's base files written; the slices of file groups a replacecommit retires (their
    keys deleted unless written again). None for a clean or a compaction: no key moves."""
    replaced = {(p, f) for p, ids in (metadata.partition_to_replace_file_ids or {}).items() for f in ids}
    if index_update is None and not replaced:
        return []
    sources: list[KeySource] = []
    if index_update is not None:
        reported = [(index_update.inserted, True), (index_update.deleted, False), (index_update.deleted_in_logs, False)]
        columns = (LOOKUP_KEY, UPDATE_PARTITION, UPDATE_FILE_ID)
        sources += [
            pa.table([*(t.column(c) for c in columns), constant(flag, t.num_rows, pa.bool_())], schema=KEY_CHANGES)
            for t, flag in reported
            if t is not None and t.num_rows
        ]
        sources += [StagedKeys(path, files) for path, files in sorted(index_update.staged.items())]
    else:
        bases = [s for s in metadata.write_stats() if s.path and not is_log_path(s.path)]
        sources += [WrittenKeys(s.path, s.partitionPath, s.fileId) for s in bases]
    if replaced:
        partitions = sorted({p for p, _ in replaced})
        latest = FileSystemView(timeline, partitions=partitions).latest_file_slices(partitions)
        sources += [RetiredKeys(sl) for sl in latest if sl.file_group in replaced]
    return sources


def _write_record_index(
    data: Storage,
    sources: list[KeySource],
    instant_time: str,
    millis: int,
    table_version: int,
    by_key: ByKeyGroup,
    table: MetadataTable,
) -> list[WriteStat]:
    """The record index's log files of the deltacommit `instant_time` (its `more`), one per file
    group with changes, written by `by_key`."""
    slices = tuple(table.slices(RECORD_INDEX))
    if not slices:
        raise CorruptTableError(f"the metadata table has no file groups in its {RECORD_INDEX} partition")
    write = partial(_record_index_group, table.storage, slices, instant_time, millis, writer_schema(table_version))
    return by_key(sources, partial(read_keys, data), len(slices), write, False)


def _record_index_group(
    mdt: Storage,
    slices: tuple[MetadataSlice, ...],
    instant_time: str,
    millis: int,
    schema: str,
    group: int,
    rows: pa.Table,
) -> list[WriteStat]:
    """One record-index file group's log file (a `GroupWrite`): its inserted keys located, its
    deleted keys removed (a key both deleted and inserted, moved, is located)."""
    inserted = rows.column(INSERTED)
    changes = mc.record_index_changes(rows.filter(inserted), rows.filter(pc.invert(inserted)), millis)
    return [write_log(mdt, slices[group], instant_time, changes, schema)] if changes else []


def _statistics(
    storage: Storage,
    table_config: TableConfig,
    table: MetadataTable,
    timeline: Timeline,
    metadata: CommitMetadata,
    deleted: Mapping[str, Iterable[str]],
    partitions: list[str],
    log_stats: Mapping[str, mc.RecordsStats],
) -> dict[str, Changes]:
    """The column_stats of the base files written (from their footers) and of the log files
    written (from the statistics their writers carried: no log file is read back), and the tight
    partition stats of the partitions written, over every file of their latest slices. A log
    file whose write carried none (it started before the table kept statistics) is unknown: it
    gets no records and its partition loses its own, so readers keep its files."""
    bases = [s for s in metadata.write_stats() if s.path and not is_log_path(s.path)]
    logs = [s for s in metadata.write_stats() if s.path and is_log_path(s.path)]
    with ThreadPoolExecutor(max_workers=max(1, min(FOOTER_THREADS, len(bases)))) as pool:
        footers = list(pool.map(lambda s: storage.parquet_file(s.path).metadata, bases))
    schema = footers[0].schema.to_arrow_schema() if footers else _commit_schema(metadata)
    if schema is None:
        return {}
    _, doc = _index_definitions(storage, table_config)
    source = ((doc.get("indexDefinitions") or {}).get(COLUMN_STATS) or {}).get("sourceFields")
    columns = mc.indexed_columns(schema, source)
    written = {s.path: mc.footer_stats(f, columns) for s, f in zip(bases, footers)}
    written.update({s.path: log_stats[s.path].select(columns) if s.path in log_stats else None for s in logs})
    out: dict[str, Changes] = {}
    if COLUMN_STATS in partitions:
        column_changes = Changes()
        for s in [*bases, *logs]:
            if known := written[s.path]:
                column_changes.upserts += mc.column_stats_records(
                    s.partitionPath, s.path.rpartition("/")[2], known, table_config.table_version
                )
        for partition, names in deleted.items():
            column_changes.deletes += [
                k for n in names if not is_log_path(n) for k in _column_keys(columns, partition, n.rpartition("/")[2])
            ]
        out[COLUMN_STATS] = column_changes
    if PARTITION_STATS in partitions:
        out[PARTITION_STATS] = _partition_stats(
            table, timeline, metadata, written, schema, columns, table_config.table_version
        )
    return out


def log_stats(storage: Storage, path: str, columns: list[str]) -> list[mc.ColumnStats] | None:
    """A log file's statistics read back from its data blocks ([] for a file of deletes only: it
    adds no value), or None when they cannot be given exactly: for an initialization, which
    describes files written before the table kept statistics (a write carries its own)."""
    blocks = read_logs([(storage.read_bytes(path), path)])
    records = [b.records for b in blocks if isinstance(b, DataBlock)]
    if not records:
        return []
    try:
        return mc.RecordsStats.of(pa.concat_tables(records, promote_options="permissive")).select(columns)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def _column_keys(columns: list[str], partition: str, name: str) -> list[str]:
    from upsertlake.metadata.keys import column_stats_key

    return [column_stats_key(c, partition, name) for c in columns]


def _commit_schema(metadata: CommitMetadata) -> pa.Schema | None:
    """The table's columns (meta columns first) as the commit's schema names them."""
    if not metadata.schema:
        return None
    return avro_to_arrow(with_meta_fields(json.loads(metadata.schema)), keep_meta=True)


def _partition_stats(
    table: MetadataTable,
    timeline: Timeline,
    metadata: CommitMetadata,
    written: Mapping[str, list[mc.ColumnStats] | None],
    schema: pa.Schema,
    columns: list[str],
    table_version: int,
) -> Changes:
    """Tight bounds per partition written, over every file of its latest slices as this instant
    leaves them (log files too: deletes only take rows out); a partition with a file of unknown
    statistics loses its records."""
    touched = sorted({s.partitionPath for s in metadata.write_stats()})
    groups: dict[tuple[str, str], list[str]] = {
        sl.file_group: ([sl.base.path] if sl.base else []) + [log.path for log in sl.logs]
        for sl in FileSystemView(timeline, partitions=touched).latest_file_slices(touched)
    }
    for s in metadata.write_stats():
        if not s.path:
            continue
        group = (s.partitionPath, s.fileId)
        groups[group] = [*groups.get(group, []), s.path] if is_log_path(s.path) else [s.path]  # a base starts a slice
    for p, ids in (metadata.partition_to_replace_file_ids or {}).items():
        for f in ids:
            groups.pop((p, f), None)
    older = [(p, path.rpartition("/")[2]) for (p, _), paths in groups.items() for path in paths if path not in written]
    recorded = table.column_stats(older, columns) if older else {}
    per_partition: dict[str, list[list[mc.ColumnStats]] | None] = {p: [] for p in touched}
    for (partition, _), paths in groups.items():
        for path in paths:
            kept = per_partition.get(partition)
            if kept is None:
                break
            stats = (
                written[path]
                if path in written
                else _recorded(recorded.get((partition, path.rpartition("/")[2])), schema, columns)
            )
            if stats is None:
                per_partition[partition] = None
            elif stats:
                kept.append(stats)
    changes = Changes()
    for partition in touched:
        files = per_partition.get(partition)
        if files:
            changes.upserts += mc.partition_stats_records(partition, mc.merged(files), table_version)
        else:
            changes.deletes += mc.partition_stats_keys(partition, columns)
    return changes


def _recorded(
    records: Mapping[str, dict[str, Any]] | None, schema: pa.Schema, columns: list[str]
) -> list[mc.ColumnStats] | None:
    """A file's statistics as the metadata table holds them, when it holds every column."""
    if records is None or any(c not in records for c in columns):
        return None
    out = []
    for c in columns:
        r, t = records[c], schema.field(c).type
        try:
            out.append(
                mc.ColumnStats(
                    c,
                    t,
                    bound(r, "minValue", t),
                    bound(r, "maxValue", t),
                    r["valueCount"],
                    r["nullCount"],
                    r["totalSize"],
                    r["totalUncompressedSize"],
                )
            )
        except (ValueError, TypeError, ArithmeticError, pa.ArrowException):
            return None
    return out


# -- when a data instant is rolled back -------------------------------------------------------------
def discard_rolled_back(storage: Storage, table_config: TableConfig, instant_time: str) -> None:
    """Under the lock, when the data instant `instant_time` is rolled back: discard its metadata
    deltacommit (any state; the metadata table records nothing), as Hudi's metadata writer rolls
    it back; nothing when there is none. A metadata compaction left pending goes too: it ran
    inside a data instant's commit, so its writer died with a write that is rolled back."""
    if not (listed(table_config.extra.get(PARTITIONS_KEY)) or listed(table_config.extra.get(INFLIGHT_KEY))):
        return
    mdt = storage.child(FOLDER)
    timeline = Timeline.load(mdt)
    if discard_failed_compactions(mdt, timeline):
        timeline = Timeline.load(mdt)
    target = timeline.get(instant_time, Action.DELTA_COMMIT)
    if target is not None and target.is_completed and folded(timeline, target):
        # A compaction folded its records into base files: they cannot be taken out (Hudi refuses
        # such a rollback and asks for a restore); the metadata table goes, readers list storage.
        drop_metadata_table(storage, table_config)
    elif discard_deltacommit(mdt, instant_time):
        log.info("rolled back metadata deltacommit %s with its data instant", instant_time)
