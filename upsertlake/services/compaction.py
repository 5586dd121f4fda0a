"""Compaction (merge-on-read): fold each file slice's log files into a new base file, as Hudi's
ScheduleCompactionActionExecutor, HoodieCompactor and CompactHelpers do.

Schedule: `<t>.compaction.requested` holds the Avro HoodieCompactionPlan, one operation per file
slice with log files (Hudi's default LogFileSizeBasedCompactionStrategy: largest logs first,
bounded by hoodie.compaction.target.io). From then on the plan is a contract: readers fold logs
written after it onto the old slice (the file system view), writers start the next slice.
Execute: `<t>.compaction.inflight`, each slice merged (`layout.slice_reader`) and written as
`<fileId>_<token>_<t>.parquet` (records keep their meta columns but `_hoodie_file_name`), then
completed as a `commit` whose metadata says COMPACT; the requested and inflight files stay, as
on Hudi's timeline. A compaction killed midway is rolled back to its plan (a `.rollback` instant,
its files deleted, the inflight file removed) and run again by the next `compact`.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.concurrency.conflict import pending_clustering
from upsertlake.concurrency.heartbeat import Heartbeat, heartbeat_path, is_expired
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import ConfigError, CorruptTableError, SchemaError, ServiceError, UnsupportedTableError
from upsertlake.layout.file_system_view import (
    BaseFile,
    FileSlice,
    FileSystemView,
    LogFile,
    base_file_name,
)
from upsertlake.layout.file_writer import (
    DICTIONARY_SAMPLE,
    dictionary_pages,
    file_writer_config,
    full_schema,
    marker_path,
    write_base_file,
)
from upsertlake.layout.footer import resumed_bloom, resumed_key_range
from upsertlake.layout.markers import delete_written, marker_folder
from upsertlake.layout.slice_reader import Merge, merge_inputs, slice_inputs
from upsertlake.logfile.blocks import CommandBlock, CorruptBlock, DataBlock, DeleteBlock
from upsertlake.logfile.names import LogFileName
from upsertlake.schema import avro_to_arrow
from upsertlake.services.metadata_table import drop_metadata_table
from upsertlake.services.rollback import METADATA_SCHEMA as ROLLBACK_METADATA_SCHEMA
from upsertlake.services.rollback import PLAN_SCHEMA as ROLLBACK_PLAN_SCHEMA
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline, create_requested, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.layouts import table_layout

log = logging.getLogger(__name__)

PLAN_SCHEMA = "HoodieCompactionPlan"
PLAN_VERSION = 2  # CompactionUtils.LATEST_COMPACTION_METADATA_VERSION: names, not paths
OPERATION = "COMPACT"
_STRATEGY_PACKAGE = "org.apache.hudi.table.action.compact.strategy."
LOG_SIZE_STRATEGY = "LogFileSizeBasedCompactionStrategy"
UNBOUNDED_STRATEGY = "UnBoundedCompactionStrategy"
STRATEGIES = (LOG_SIZE_STRATEGY, UNBOUNDED_STRATEGY)
_MB = 1024 * 1024


@dataclass(frozen=True)
class CompactionOperation:
    """One planned file slice (HoodieCompactionOperation): its base file and log files by name."""

    partition_path: str
    file_id: str
    base_instant: str
    data_file: str | None
    delta_files: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict, compare=False, hash=False)

    @property
    def file_group(self) -> tuple[str, str]:
        return (self.partition_path, self.file_id)

    def _path(self, name: str) -> str:
        return f"{self.partition_path}/{name}" if self.partition_path else name

    def file_slice(self, storage: Storage) -> FileSlice:
        """The slice to merge, its files as the plan names them (their sizes from storage)."""
        base = None
        if self.data_file:
            path = self._path(self.data_file)
            token, instant = self.data_file.removesuffix(".parquet").split("_")[1:3]
            base = BaseFile(path, self.partition_path, self.file_id, token, instant, 0)
        logs = []
        for name in self.delta_files:
            parsed = LogFileName.parse(name)
            if parsed is None:
                raise CorruptTableError(f"compaction plan names {name!r}, which is not a log file name")
            logs.append(LogFile(self._path(name), self.partition_path, parsed, 0))
        logs.sort(key=lambda lf: lf.name.sort_key())
        return FileSlice(self.partition_path, self.file_id, base, tuple(logs))

    def to_avro(self) -> dict[str, Any]:
        return {
            "baseInstantTime": self.base_instant,
            "deltaFilePaths": list(self.delta_files),
            "dataFilePath": self.data_file,
            "fileId": self.file_id,
            "partitionPath": self.partition_path,
            "metrics": dict(self.metrics),
            "bootstrapFilePath": None,
        }

    @classmethod
    def from_avro(cls, doc: dict[str, Any]) -> CompactionOperation:
        # Plan version 1 (Hudi before 0.5) named full paths: keep the file names.
        data = doc.get("dataFilePath") or None
        return cls(
            partition_path=doc.get("partitionPath") or "",
            file_id=doc["fileId"],
            base_instant=doc.get("baseInstantTime") or "",
            data_file=data.rpartition("/")[2] if data else None,
            delta_files=tuple(p.rpartition("/")[2] for p in doc.get("deltaFilePaths") or []),
            metrics=dict(doc.get("metrics") or {}),
        )


@dataclass(frozen=True)
class CompactionResult:
    """What a compaction did: the instant (completed as a commit), the slices compacted, the log
    files folded and the base files written; or, with nothing to compact, no instant and why."""

    instant_time: str | None
    operations: int = 0
    log_files_compacted: int = 0
    records_written: int = 0
    files_written: tuple[str, ...] = ()
    recovered: bool = False  # the plan was left inflight by a compaction that died, and run again
    reason: str = ""

    @property
    def compacted(self) -> bool:
        return self.instant_time is not None

    def to_dict(self) -> dict[str, object]:
        return {
            "instant_time": self.instant_time,
            "compacted": self.compacted,
            "operations": self.operations,
            "log_files_compacted": self.log_files_compacted,
            "records_written": self.records_written,
            "files_written": list(self.files_written),
            "recovered": self.recovered,
            "reason": self.reason,
        }


# Runs a function over the operations of a plan: in process by default, as Spark tasks on Spark.
OperationMap = Callable[[Callable[[tuple[int, CompactionOperation]], WriteStat], list[tuple[int, CompactionOperation]]], list[WriteStat]]


def in_process(fn: Callable[[tuple[int, CompactionOperation]], WriteStat], ops: list) -> list[WriteStat]:
    """Each operation on a thread of this process, one per CPU (parquet and Arrow release the GIL)."""
    with ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, len(ops) or 1))) as pool:
        return list(pool.map(fn, ops))


# -- the timeline of compactions ------------------------------------------------------------------
def read_plan(timeline: Timeline, instant: Instant) -> list[CompactionOperation]:
    """The operations of a compaction plan (its `.compaction.requested`)."""
    path = timeline.layout.path(Instant(instant.time, Action.COMPACTION, State.REQUESTED))
    data = timeline.storage.read_bytes(path)
    doc = documents.decode(data, f"the compaction plan {path}")
    return [CompactionOperation.from_avro(op) for op in doc.get("operations") or []]


def compaction_file_groups(timeline: Timeline) -> set[tuple[str, str]]:
    """The file groups of pending compaction plans: a new plan leaves them alone."""
    return {op.file_group for inst in timeline.pending_compactions() for op in read_plan(timeline, inst)}


def delta_commits_since_compaction(timeline: Timeline) -> int:
    """Completed deltacommits after the latest completed compaction (a merge-on-read table's
    only `commit`s), as Hudi's NUM_COMMITS trigger counts them (CompactionUtils)."""
    commits = timeline.filter([Action.COMMIT], [State.COMPLETED])
    since = commits[-1].time if commits else ""
    return sum(1 for i in timeline.filter([Action.DELTA_COMMIT], [State.COMPLETED]) if i.time > since)


def compaction_due(timeline: Timeline, cfg: Config) -> bool:
    """Inline compaction runs after hoodie.compact.inline.max.delta.commits deltacommits."""
    return delta_commits_since_compaction(timeline) >= cfg.get(opt.COMPACT_INLINE_MAX_DELTA_COMMITS)


@dataclass(frozen=True)
class Backlog:
    """What compaction has yet to fold: the visible slices with log files, their logs and bytes
    (per partition too), deltacommits since the last compaction, plans still pending."""

    slices_with_logs: int
    log_files: int
    log_bytes: int
    delta_commits_since_compaction: int
    pending_compactions: tuple[str, ...]
    partitions: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, object]:
        return {
            "slices_with_logs": self.slices_with_logs,
            "log_files": self.log_files,
            "log_bytes": self.log_bytes,
            "delta_commits_since_compaction": self.delta_commits_since_compaction,
            "pending_compactions": list(self.pending_compactions),
        }


def compaction_backlog(timeline: Timeline) -> Backlog:
    """The compaction backlog of the latest snapshot (what `show` and `stats` report)."""
    partitions: dict[str, dict[str, int]] = {}
    for sl in FileSystemView(timeline).latest_file_slices():
        part = partitions.setdefault(sl.partition_path, {"file_groups_with_logs": 0, "log_files": 0, "log_bytes": 0})
        if sl.logs:
            part["file_groups_with_logs"] += 1
            part["log_files"] += len(sl.logs)
            part["log_bytes"] += sum(lf.size for lf in sl.logs)
    total = {k: sum(p[k] for p in partitions.values()) for k in ("file_groups_with_logs", "log_files", "log_bytes")}
    return Backlog(
        total["file_groups_with_logs"], total["log_files"], total["log_bytes"],
        delta_commits_since_compaction(timeline), tuple(i.time for i in timeline.pending_compactions()), partitions,
    )


# -- schedule ----------------------------------------------------------------------------------
def strategy(cfg: Config) -> str:
    """The compaction strategy's short name; ConfigError for strategies not implemented."""
    name = cfg.get(opt.COMPACTION_STRATEGY).strip().removeprefix(_STRATEGY_PACKAGE)
    if name not in STRATEGIES:
        raise ConfigError(
            f"{opt.COMPACTION_STRATEGY.key}={cfg.get(opt.COMPACTION_STRATEGY)!r} is not supported: "
            f"use {_STRATEGY_PACKAGE}{LOG_SIZE_STRATEGY} (Hudi's default) or {_STRATEGY_PACKAGE}{UNBOUNDED_STRATEGY}"
        )
    return name


def plan_operations(timeline: Timeline, cfg: Config, busy: set[tuple[str, str]]) -> list[CompactionOperation]:
    """One operation per visible file slice with log files (groups in `busy` left out), ordered
    and bounded by the strategy (Hudi's captureMetrics and orderAndFilter)."""
    name = strategy(cfg)
    default_write = cfg.get(opt.PARQUET_MAX_FILE_SIZE)
    ops = []
    for sl in FileSystemView(timeline).latest_file_slices():
        if not sl.logs or sl.file_group in busy:
            continue
        log_bytes = sum(lf.size for lf in sl.logs)
        base_bytes = sl.base.size if sl.base else 0
        read_mb = (base_bytes + log_bytes) // _MB
        write_mb = (base_bytes if sl.base else default_write) // _MB
        metrics = {
            "TOTAL_LOG_FILES": float(len(sl.logs)),
            "TOTAL_IO_MB": float(read_mb + write_mb),
            "TOTAL_IO_READ_MB": float(read_mb),
            "TOTAL_LOG_FILES_SIZE": float(log_bytes),
            "TOTAL_IO_WRITE_MB": float(write_mb),
        }
        base_instant = sl.base.instant_time if sl.base else min(lf.name.instant for lf in sl.logs)
        ops.append(CompactionOperation(
            sl.partition_path, sl.file_id, base_instant, sl.base.name if sl.base else None,
            tuple(lf.path.rpartition("/")[2] for lf in sl.logs), metrics,
        ))
    if name == UNBOUNDED_STRATEGY:
        return ops
    threshold = cfg.get(opt.COMPACTION_LOGFILE_SIZE_THRESHOLD)
    ops = [op for op in ops if op.metrics["TOTAL_LOG_FILES_SIZE"] >= threshold]
    ops.sort(key=lambda op: -op.metrics["TOTAL_LOG_FILES_SIZE"])
    budget, chosen = cfg.get(opt.COMPACTION_TARGET_IO), []
    for op in ops:  # BoundedIOCompactionStrategy: stop once the target IO is used up
        chosen.append(op)
        budget -= op.metrics["TOTAL_IO_MB"]
        if budget <= 0:
            break
    return chosen


def schedule(storage: Storage, lock: TableLock, config: TableConfig, cfg: Config) -> Instant | None:
    """Plan a compaction under the table lock (`.compaction.requested`); None when no slice has
    log files to compact. Raises ServiceError where Hudi refuses to schedule (see `_busy_groups`)."""
    check_compactable(config)
    strategy(cfg)
    with lock.hold():
        return _schedule(storage, cfg)


def _schedule(storage: Storage, cfg: Config) -> Instant | None:
    """`schedule`, the lock held."""
    drop_metadata_table(storage, TableConfig.load(storage))  # readers must not list a stale one
    timeline = Timeline.load(storage)
    busy = compaction_file_groups(timeline) | _busy_groups(timeline) | _clustering_groups(timeline)
    ops = plan_operations(timeline, cfg, busy)
    if not ops:
        return None
    plan = {
        "operations": [op.to_avro() for op in ops],
        "extraMetadata": {},
        "version": PLAN_VERSION,
        "strategy": None,
        "preserveHoodieMetadata": True,
        "missingSchedulePartitions": None,
    }
    requested = create_requested(storage, Action.COMPACTION, documents.encode(PLAN_SCHEMA, plan))
    log.info("scheduled compaction %s of %d file slice(s)", requested.time, len(ops))
    return requested


def check_compactable(config: TableConfig) -> None:
    if not config.is_merge_on_read:
        raise ServiceError(f"table {config.name!r} is {config.table_type}: only merge-on-read tables are compacted")
    if not config.populate_meta_fields:
        raise UnsupportedTableError(
            "compacting merge-on-read tables without meta fields (hoodie.populate.meta.fields=false) is not "
            "supported: their log records are merged by _hoodie_record_key"
        )


def _busy_groups(timeline: Timeline) -> set[tuple[str, str]]:
    """The file groups pending writes append to, which a plan must leave out (Hudi's rule).

    Timeline layout 1 names a log by its slice's base instant, so a write that started before
    the plan appends to the old slice's logs: the compaction would drop those records. Hudi
    refuses to schedule while a write earlier than the plan is inflight; we leave out the groups
    such a write declared in its `.inflight` (its write stats or profile), and refuse while one
    has not declared them yet. Layout 2 places a log by its deltacommit's completion time: a
    write completing after the plan starts the new slice, and the plan lists only completed logs."""
    if timeline.layout.has_completion_times:
        return set()
    busy: set[tuple[str, str]] = set()
    for inst in timeline.pending_writes():
        groups = _declared_groups(timeline, inst)
        if groups is None:
            raise ServiceError(
                f"{inst.action.value} {inst.time} is pending and has not said which file groups it writes: a "
                "compaction scheduled now could miss the records it appends (Hudi schedules a compaction only "
                "after earlier writes). Retry once it has committed, or roll back the failed write"
            )
        busy |= groups
    return busy


def _declared_groups(timeline: Timeline, inst: Instant) -> set[tuple[str, str]] | None:
    """The (partition, fileId) pairs a pending write's `.inflight` names; None before it has one."""
    if inst.state is not State.INFLIGHT:
        return None
    try:
        data = timeline.document(inst)
        if not data.strip():
            return None
        meta = CommitMetadata.from_bytes(data, f"the inflight {inst.action.value} {inst.time}")
    except (CorruptTableError, FileNotFoundError):
        return None
    # Hudi's workload profile: per partition, a stat per file group updated (and one, with no
    # fileId, for the inserts, which go to new file groups or to slices without logs).
    return {(p, s.fileId) for p, stats in meta.partition_to_write_stats.items() for s in stats if s.fileId}


def _clustering_groups(timeline: Timeline) -> set[tuple[str, str]]:
    return {(p, f) for p, ids in pending_clustering(timeline).items() for f in ids}


# -- execute -----------------------------------------------------------------------------------
def compact(
    storage: Storage, lock: TableLock, config: TableConfig, cfg: Config, map_ops: OperationMap = in_process
) -> CompactionResult:
    """Run the oldest pending compaction (one a dead compactor left inflight is rolled back to its
    plan first), else schedule one and run it; a result without instant says why not. The plan is
    chosen and claimed (inflight, with its heartbeat) under one hold of the table lock, so two
    compactors never run one plan."""
    check_compactable(config)
    strategy(cfg)
    recovered = False
    with lock.hold():
        timeline = Timeline.load(storage)
        target = None
        for inst in timeline.pending_compactions():
            if inst.state is State.INFLIGHT:
                if not _is_dead(storage, inst, cfg):
                    continue  # another compactor runs it
                _rollback_inflight(storage, inst)
                recovered = True
            target = inst.with_state(State.REQUESTED)
            break
        if target is None:
            target = _schedule(storage, cfg)
        if target is None:
            return CompactionResult(None, reason=nothing_to_compact(Timeline.load(storage)))
        inflight, heartbeat = _claim(storage, target, cfg)
    return _run(storage, lock, cfg, inflight, heartbeat, map_ops, recovered)


def execute(
    storage: Storage, lock: TableLock, cfg: Config, requested: Instant, map_ops: OperationMap = in_process
) -> CompactionResult:
    """Execute a requested plan: inflight, one new base file per operation, the commit."""
    with lock.hold():
        current = Timeline.load(storage).get(requested.time, Action.COMPACTION)
        if current is None or current.state is not State.REQUESTED:
            state = "gone" if current is None else current.state.value
            raise ServiceError(f"compaction {requested.time} is not a requested plan ({state}): another compactor took it")
        inflight, heartbeat = _claim(storage, requested, cfg)
    return _run(storage, lock, cfg, inflight, heartbeat, map_ops)


def _claim(storage: Storage, requested: Instant, cfg: Config) -> tuple[Instant, Heartbeat]:
    """The lock held: the plan goes inflight, its heartbeat beating first (a compactor that sees
    it inflight sees it alive)."""
    heartbeat = Heartbeat(storage, requested.time, cfg.get(opt.HEARTBEAT_INTERVAL_MS), cfg.get(opt.HEARTBEAT_TOLERABLE_MISSES)).start()
    try:
        return transition(storage, requested, State.INFLIGHT), heartbeat
    except BaseException:
        heartbeat.stop()
        raise


def _is_dead(storage: Storage, inst: Instant, cfg: Config) -> bool:
    return is_expired(storage, inst.time, cfg.get(opt.HEARTBEAT_INTERVAL_MS), cfg.get(opt.HEARTBEAT_TOLERABLE_MISSES))


def nothing_to_compact(timeline: Timeline) -> str:
    pending = timeline.pending_compactions()
    running = f"; compaction {pending[0].time} is running in another process" if pending else ""
    return f"no file slice has log files to compact{running}"


def _run(
    storage: Storage,
    lock: TableLock,
    cfg: Config,
    inflight: Instant,
    heartbeat: Heartbeat,
    map_ops: OperationMap,
    recovered: bool = False,
) -> CompactionResult:
    """Write the new base files of a claimed plan and commit them. An error rolls the plan back
    to requested (its files deleted) and is raised: the table reads as before, the plan stays."""
    started = time.monotonic()
    try:
        timeline = Timeline.load(storage)
        ops = read_plan(timeline, inflight)
        schema_json = _schema_before(timeline, inflight.time) or TableConfig.load(storage).create_schema
        if not schema_json:
            raise SchemaError("the table has no schema to compact with")
        config = TableConfig.load(storage)
        merge = Merge(
            config.precombine_field,
            config.merge_mode,
            frozenset(i.time for i in timeline.completed_writes() if i.time < inflight.time),
        )
        write = partial(
            compact_operation, storage, instant_time=inflight.time,
            schema=full_schema(avro_to_arrow(schema_json)), merge=merge, cfg=cfg,
        )
        stats = map_ops(write, list(enumerate(ops)))
        by_partition: dict[str, list[WriteStat]] = defaultdict(list)
        for s in stats:
            by_partition[s.partitionPath].append(s)
        metadata = CommitMetadata(dict(by_partition), OPERATION, {"schema": schema_json}, compacted=True)
        with lock.hold():
            lock.fence()
            transition(storage, Instant(inflight.time, Action.COMMIT, State.INFLIGHT), State.COMPLETED, metadata.to_json_bytes())
    except Exception:
        with lock.hold():
            if not _completed(storage, inflight.time):
                _rollback_inflight(storage, inflight)
        raise
    finally:
        heartbeat.stop()
    storage.delete_dir(marker_folder(inflight.time))
    log.info("compacted %d file slice(s) at %s in %.2f s", len(ops), inflight.time, time.monotonic() - started)
    return CompactionResult(
        inflight.time,
        operations=len(ops),
        log_files_compacted=sum(s.totalLogFilesCompacted for s in stats),
        records_written=sum(s.numWrites for s in stats),
        files_written=tuple(s.path for s in stats),
        recovered=recovered,
    )


def _schema_before(timeline: Timeline, instant_time: str) -> str | None:
    """The schema of the newest completed write before the compaction instant."""
    for inst in reversed(timeline.completed_writes()):
        if inst.time < instant_time:
            schema = timeline.commit_metadata(inst).schema
            if schema:
                return schema
    return None


def compact_operation(
    storage: Storage,
    numbered: tuple[int, CompactionOperation],
    *,
    instant_time: str,
    schema: pa.Schema,
    merge: Merge,
    cfg: Config,
) -> WriteStat:
    """Merge one planned slice and write it as the file group's new base file (a task on Spark)."""
    n, op = numbered
    sl = op.file_slice(storage)
    began = time.monotonic()
    base, blocks = slice_inputs(storage, sl)
    scanned = time.monotonic()
    merged = merge_inputs(base, blocks, merge, schema)
    name = base_file_name(op.file_id, f"{n}-0-0", instant_time)
    path = f"{op.partition_path}/{name}" if op.partition_path else name
    names = pa.DictionaryArray.from_arrays(pa.array(np.zeros(merged.num_rows, np.int32)), pa.array([name]))
    merged = merged.set_column(4, schema.field(4), names.cast(pa.string()))
    counts, added = _merge_counts(base, blocks, merge, merged)
    config = file_writer_config(cfg)
    footer, kept = _previous_version(storage, sl.base, schema) if sl.base is not None else ({}, None)
    bloom = key_range = None
    if base is not None and counts["deletes"] == 0:
        # Every base key is still there, and the logs added `added`: the base file's filter and
        # key range plus those keys, as copy-on-write rewrites resume them.
        bloom = resumed_bloom(footer, base.num_rows, added, config)
        key_range = resumed_key_range(footer, added) if bloom is not None else None
    storage.write_if_absent(marker_path(instant_time, op.partition_path, name, "MERGE" if base is not None else "CREATE"), b"")
    size = write_base_file(storage, path, merged, config, bloom, key_range, kept)
    wrote = time.monotonic()
    log_bytes = sum(info.size for lf in sl.logs if (info := storage.stat(lf.path)) is not None)
    return WriteStat(
        fileId=op.file_id,
        path=path,
        partitionPath=op.partition_path,
        prevCommit=op.base_instant,
        numWrites=merged.num_rows,
        numDeletes=counts["deletes"],
        numUpdateWrites=counts["updates"],
        numInserts=merged.num_rows - counts["updates"],
        totalWriteBytes=size,
        fileSizeInBytes=size,
        totalLogRecords=counts["log_records"],
        totalLogFilesCompacted=len(sl.logs),
        totalLogSizeCompacted=log_bytes,
        totalUpdatedRecordsCompacted=counts["log_keys"],
        totalLogBlocks=counts["blocks"],
        totalCorruptLogBlock=counts["corrupt"],
        totalRollbackBlocks=counts["rollbacks"],
        totalLogReadTimeMs=int((scanned - began) * 1000),
        prevBaseFile=op.data_file,
        runtimeStats={
            "totalScanTime": int((scanned - began) * 1000),
            "totalCreateTime": 0,
            "totalUpsertTime": int((wrote - scanned) * 1000),
        },
    )


def _previous_version(storage: Storage, base: BaseFile, schema: pa.Schema) -> tuple[dict[bytes, bytes], frozenset[str] | None]:
    """The base file's footer when we wrote it (Hudi's writers' filters are not reused: some miss
    their keys), and the columns it dictionary-encodes when that choice can be kept (we wrote it
    with every column, from enough rows), so the new version is not sampled again."""
    metadata = storage.parquet_file(base.path).metadata
    if not metadata.created_by.startswith("parquet-cpp"):
        return {}, None
    complete = set(schema.names) <= {metadata.schema.column(i).path for i in range(metadata.num_columns)}
    kept = frozenset(dictionary_pages(metadata)) if complete and metadata.num_rows >= DICTIONARY_SAMPLE else None
    return metadata.metadata or {}, kept


def _merge_counts(base: pa.Table | None, blocks: list, merge: Merge, merged: pa.Table) -> tuple[dict[str, int], pa.Array]:
    """The counts Hudi's compaction write stat reports (log records and blocks read, keys the logs
    touched, base records updated and deleted), and the keys the new file adds to the base's."""
    rolled_back = {b.target_instant for b in blocks if isinstance(b, CommandBlock)}
    live = [
        b for b in blocks
        if isinstance(b, (DataBlock, DeleteBlock)) and b.instant not in rolled_back and b.instant in merge.instants
    ]
    keys = [
        (b.records.column("_hoodie_record_key") if isinstance(b, DataBlock) else b.keys.column("record_key"))
        for b in live
    ]
    log_keys = pc.unique(pa.chunked_array([k for col in keys for k in _chunks(col)], pa.string())) if keys else pa.array([], pa.string())
    written = pc.is_in(log_keys, value_set=merged.column("_hoodie_record_key").combine_chunks())
    in_base = pc.is_in(log_keys, value_set=base.column("_hoodie_record_key").combine_chunks()) if base is not None else None
    added = log_keys.filter(pc.and_not(written, in_base) if in_base is not None else written)
    updates = int(pc.sum(pc.and_(written, in_base)).as_py() or 0) if in_base is not None else 0
    deletes = base.num_rows - (merged.num_rows - len(added)) if base is not None else 0
    return {
        "log_records": sum(len(k) for k in keys),
        "log_keys": len(log_keys),
        "blocks": len(live),
        "corrupt": sum(1 for b in blocks if isinstance(b, CorruptBlock)),
        "rollbacks": sum(1 for b in blocks if isinstance(b, CommandBlock)),
        "updates": updates,
        "deletes": deletes,
    }, added


def _chunks(col: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    arrays = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    return [a if a.type == pa.string() else a.cast(pa.string()) for a in arrays]


# -- failure -----------------------------------------------------------------------------------
def rollback_inflight(storage: Storage, lock: TableLock, inflight: Instant, cfg: Config | None = None) -> Instant:
    """Hudi's rollbackInflightCompaction: a `.rollback` instant records the files deleted, then
    the compaction goes back to requested (its plan kept) to be executed again. Returns the
    rollback instant. Refused while its compactor's heartbeat beats (`cfg`'s heartbeat settings)."""
    with lock.hold():
        current = Timeline.load(storage).get(inflight.time, Action.COMPACTION)
        if current is None or current.state is not State.INFLIGHT or _completed(storage, inflight.time):
            raise ServiceError(f"compaction {inflight.time} is not inflight: nothing to roll back")
        if not _is_dead(storage, current, cfg or Config.resolve(None)):
            raise ServiceError(
                f"compaction {inflight.time} is running (its heartbeat is alive): stop its compactor, or wait for "
                "it to end or for its heartbeat to expire"
            )
        return _rollback_inflight(storage, current)


def _rollback_inflight(storage: Storage, inflight: Instant) -> Instant:
    """`rollback_inflight`, the lock held."""
    started = time.monotonic()
    target = {"commitTime": inflight.time, "action": Action.COMPACTION.value}
    plan = {"instantToRollback": target, "RollbackRequests": [], "version": 1}
    requested = create_requested(storage, Action.ROLLBACK, documents.encode(ROLLBACK_PLAN_SCHEMA, plan))
    rolling = transition(storage, requested, State.INFLIGHT)
    deleted = delete_written(storage, inflight.time, named_logs=False)
    storage.delete(table_layout(storage).path(inflight.with_state(State.INFLIGHT)))  # back to requested
    storage.delete(heartbeat_path(inflight.time))
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in deleted:
        by_partition[path.rpartition("/")[0]].append(storage.full_path(path))
    meta = {
        "startRollbackTime": requested.time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(deleted),
        "commitsRollback": [inflight.time],
        "partitionMetadata": {
            p: {"partitionPath": p, "successDeleteFiles": files, "failedDeleteFiles": [],
                "rollbackLogFiles": None, "writtenLogFiles": None}
            for p, files in by_partition.items()
        },
        "version": 1,
        "instantsRollback": [target],
    }
    done = transition(storage, rolling, State.COMPLETED, documents.encode(ROLLBACK_METADATA_SCHEMA, meta))
    log.info("rolled back inflight compaction %s (%d file(s)); its plan stays requested", inflight.time, len(deleted))
    return done


def _completed(storage: Storage, instant_time: str) -> bool:
    done = Timeline.load(storage).get(instant_time, Action.COMMIT)
    return done is not None and done.is_completed
