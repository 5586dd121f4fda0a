"""Compaction plans (merge-on-read): which file slices a compaction folds, as Hudi's
ScheduleCompactionActionExecutor and its plan generator choose them, written as the Avro
HoodieCompactionPlan of `<t>.compaction.requested`; and what the timeline says about compactions
(the inline trigger's count, the backlog `show` and `stats` report).

The default strategy is Hudi's LogFileSizeBasedCompactionStrategy: every slice with log files
(at least hoodie.compaction.logfile.size.threshold bytes of them), largest logs first, bounded by
hoodie.compaction.target.io, leaving out the file groups pending writes, compactions and
clusterings hold. From its scheduling on, a plan is a contract: readers fold logs written after it
onto the old slice (the file system view), writers start the next slice, and a new plan leaves its
file groups alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from upsertlake.concurrency.conflict import pending_clustering
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import ConfigError, CorruptTableError, ServiceError, UnsupportedTableError
from upsertlake.layout.file_system_view import BASE_FILE_EXTENSION, BaseFile, FileSlice, FileSystemView, LogFile
from upsertlake.layout.markers import read_markers
from upsertlake.logfile.names import LogFileName
from upsertlake.services import metadata_table
from upsertlake.services.key_groups import ByKeyGroup
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline, create_requested
from upsertlake.timeline.commit_metadata import CommitMetadata
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.instant_time import parse_instant_time

log = logging.getLogger(__name__)

PLAN_SCHEMA = "HoodieCompactionPlan"
PLAN_VERSION = 2  # CompactionUtils.LATEST_COMPACTION_METADATA_VERSION: names, not paths
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
    return len(_deltas_since(timeline, since_request=False)[0])


def _deltas_since(timeline: Timeline, since_request: bool) -> tuple[list[Instant], str | None]:
    """(the completed deltacommits after the latest compaction, the time they count from: that
    compaction's, or the first deltacommit's when there was none; None without deltacommits)."""
    marks = [i.time for i in timeline.filter([Action.COMMIT], [State.COMPLETED])]
    if since_request:
        marks += [i.time for i in timeline.filter([Action.COMPACTION])]
    since = max(marks, default="")
    deltas = [i for i in timeline.filter([Action.DELTA_COMMIT], [State.COMPLETED]) if i.time > since]
    return deltas, since or (deltas[0].time if deltas else None)


def compaction_due(timeline: Timeline, cfg: Config, now: datetime | None = None) -> bool:
    """Whether inline compaction is due, by hoodie.compact.inline.trigger.strategy, as Hudi's
    ScheduleCompactionActionExecutor decides: deltacommits since the last compaction (or plan)
    against max.delta.commits, seconds since it (or since the first deltacommit) against
    max.delta.seconds, or both. Nothing is due without a deltacommit."""
    strategy = cfg.get(opt.COMPACT_INLINE_TRIGGER_STRATEGY)
    deltas, since = _deltas_since(timeline, strategy == "NUM_COMMITS_AFTER_LAST_REQUEST")
    if since is None:
        return False
    enough = len(deltas) >= cfg.get(opt.COMPACT_INLINE_MAX_DELTA_COMMITS)
    elapsed = (now or datetime.now(timezone.utc)) - parse_instant_time(since, timeline.layout.zone)
    late = elapsed.total_seconds() >= cfg.get(opt.COMPACT_INLINE_MAX_DELTA_SECONDS)
    return {"TIME_ELAPSED": late, "NUM_OR_TIME": enough or late, "NUM_AND_TIME": enough and late}.get(strategy, enough)


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


def plan_operations(slices: list[FileSlice], cfg: Config, busy: set[tuple[str, str]]) -> list[CompactionOperation]:
    """One operation per file slice with log files (groups in `busy` left out), ordered and
    bounded by the strategy (Hudi's captureMetrics and orderAndFilter)."""
    name = strategy(cfg)
    default_write = cfg.get(opt.PARQUET_MAX_FILE_SIZE)
    ops = []
    for sl in slices:
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
    budget: float = cfg.get(opt.COMPACTION_TARGET_IO)
    chosen: list[CompactionOperation] = []
    for op in ops:  # BoundedIOCompactionStrategy: stop once the target IO is used up
        chosen.append(op)
        budget -= op.metrics["TOTAL_IO_MB"]
        if budget <= 0:
            break
    return chosen


def schedule(storage: Storage, lock: TableLock, table_config: TableConfig, cfg: Config) -> Instant | None:
    """Plan a compaction under the table lock (`.compaction.requested`); None when no slice has
    log files to compact (but those of file groups pending writes hold: see `_written_by_pending`)."""
    check_compactable(table_config)
    strategy(cfg)
    with lock.hold():
        return schedule_locked(storage, cfg)


def schedule_locked(storage: Storage, cfg: Config, by_key: ByKeyGroup | None = None) -> Instant | None:
    """`schedule`, the table lock held (by `compact`, which claims the plan under the same hold);
    `by_key`: how a record index the options ask for is built (on Spark: as Spark jobs)."""
    metadata_table.prepare(storage, TableConfig.load(storage), cfg, by_key)
    timeline = Timeline.load(storage)  # no write starts while the lock is held: its pending writes stay these
    slices = FileSystemView(timeline).latest_file_slices()  # listed before their markers are read
    busy = compaction_file_groups(timeline) | _written_by_pending(timeline) | _clustering_groups(timeline)
    ops = plan_operations(slices, cfg, busy)
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


def check_compactable(table_config: TableConfig) -> None:
    if not table_config.is_merge_on_read:
        raise ServiceError(
            f"table {table_config.name!r} is {table_config.table_type}: only merge-on-read tables are compacted"
        )
    if not table_config.populate_meta_fields:
        raise UnsupportedTableError(
            "compacting merge-on-read tables without meta fields (hoodie.populate.meta.fields=false) is not "
            "supported: their log records are merged by _hoodie_record_key"
        )


def _written_by_pending(timeline: Timeline) -> set[tuple[str, str]]:
    """The file groups pending writes have said they write: those their `.inflight` declares (the
    workload profile) and those they marked (a write marks each file before it creates it). A
    plan leaves them out, as Hudi leaves out the groups of pending clusterings and compactions.

    Why: timeline layout 1 names a log by its slice's base instant, so a write that planned its
    appends before the plan adds them to the old slice, which the compaction would then drop;
    layout 2 places a log by its deltacommit's completion, so such a write would join the new
    slice, and be missing from snapshots as of times between its request and the plan's. The
    slices were listed before this runs: a log file in them of a pending write was marked before
    it was created, so the plan never names one. A write that has said nothing yet (it is still
    tagging) does not hold the plan back: at its commit, a write whose groups a later plan took
    is done again under a new instant (upsertlake.engine.overtaken), where Hudi's writers fail on
    version 6 (its conflict resolution counts compactions requested after a write began)."""
    busy: set[tuple[str, str]] = set()
    for inst in timeline.pending_writes():
        busy |= _declared_groups(timeline, inst)
        busy |= _marked_groups(timeline.storage, inst.time)
    return busy


def _marked_groups(storage: Storage, instant_time: str) -> set[tuple[str, str]]:
    """The (partition, fileId) pairs of the files a pending write marked."""
    groups = set()
    for path, _ in read_markers(storage, instant_time):
        folder, _, name = path.rpartition("/")
        log_name = LogFileName.parse(name)
        if log_name is not None:
            groups.add((folder, log_name.file_id))
        elif name.endswith(BASE_FILE_EXTENSION):
            groups.add((folder, name.split("_", 1)[0]))
    return groups


def _declared_groups(timeline: Timeline, inst: Instant) -> set[tuple[str, str]]:
    """The (partition, fileId) pairs a pending write's `.inflight` names (none before it has one):
    Hudi's workload profile, per partition a stat per file group updated (and one, with no fileId,
    for the inserts, whose small slices only markers name)."""
    if inst.state is not State.INFLIGHT:
        return set()
    try:
        data = timeline.document(inst)
        meta = CommitMetadata.from_bytes(data, f"the inflight {inst.action.value} {inst.time}")
    except (CorruptTableError, FileNotFoundError):
        return set()
    return {(p, s.fileId) for p, stats in meta.partition_to_write_stats.items() for s in stats if s.fileId}


def _clustering_groups(timeline: Timeline) -> set[tuple[str, str]]:
    return {(p, f) for p, ids in pending_clustering(timeline).items() for f in ids}
