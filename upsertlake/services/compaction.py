"""Compaction (merge-on-read): run a plan (`compaction_plan`) and commit it, as Hudi's
RunCompactionActionExecutor, HoodieCompactor and CompactHelpers do.

`<t>.compaction.inflight`, then each planned slice merged into a new base file
`<fileId>_<token>_<t>.parquet` (`compaction_slice`: threads in process, tasks on Spark), then a
`commit` whose metadata says COMPACT, with Hudi's write stats; the requested and inflight files
stay, as on Hudi's timeline. A plan is claimed under the table lock with a heartbeat, so one
compactor runs it. A compaction that fails, or whose compactor died (its heartbeat expired), is
rolled back to its plan (a `.rollback` instant, its files deleted, the inflight file removed), as
Hudi's rollbackInflightCompaction does (`services.rollback.rollback_compaction`), and the next
`compact` runs it again.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from functools import partial

from upsertlake.concurrency.heartbeat import Heartbeat, HeartbeatPolicy
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import SchemaError, ServiceError
from upsertlake.layout.markers import marker_folder, start_markers
from upsertlake.layout.slice_reader import Merge
from upsertlake.schema import avro_to_arrow, full_schema
from upsertlake.services import metadata_table
from upsertlake.services.compaction_plan import (
    check_compactable,
    read_plan,
    schedule_locked,
    strategy,
)
from upsertlake.services.compaction_slice import compact_operation
from upsertlake.services.key_groups import ByKeyGroup, per_core
from upsertlake.services.rollback import compaction_committed, rollback_compaction_under_lock
from upsertlake.services.stat_map import StatMap
from upsertlake.storage import Storage
from upsertlake.timeline import column_stats
from upsertlake.timeline.active import Timeline, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.operation import COMPACT_TYPE

log = logging.getLogger(__name__)


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


# -- execute -----------------------------------------------------------------------------------
def compact(
    storage: Storage,
    lock: TableLock,
    table_config: TableConfig,
    cfg: Config,
    map_ops: StatMap = per_core.each,
    by_key: ByKeyGroup | None = None,
) -> CompactionResult:
    """Run the oldest pending compaction (one a dead compactor left inflight is rolled back to its
    plan first), else schedule one and run it; a result without instant says why not. The plan is
    chosen and claimed (inflight, with its heartbeat) under one hold of the table lock, so two
    compactors never run one plan. `by_key`: where the metadata table's record index is
    compacted, when its deltacommit makes one due (default: in process)."""
    check_compactable(table_config)
    strategy(cfg)
    recovered = False
    with lock.hold():
        timeline = Timeline.load(storage)
        target = None
        for inst in timeline.pending_compactions():
            target = _claimable(storage, inst, cfg)
            if target is not None:
                recovered = inst.state is State.INFLIGHT
                break
        if target is None:
            target = schedule_locked(storage, cfg, by_key)
        if target is None:
            return CompactionResult(None, reason=nothing_to_compact(Timeline.load(storage)))
        inflight, heartbeat = _claim(storage, target, cfg)
    return _run(storage, lock, cfg, inflight, heartbeat, map_ops, recovered, by_key)


def finish(
    storage: Storage, lock: TableLock, table_config: TableConfig, cfg: Config, instant_time: str,
    map_ops: StatMap = per_core.each,
) -> bool:
    """Bring the pending compaction `instant_time` to its end for a writer that needs its output
    (the writer's retry tags against the compacted slices), as `compact` would run it: a requested
    plan is claimed and run, one a dead compactor left inflight is rolled back to its plan first.
    True once it is no longer pending; False while another compactor, alive, runs it."""
    check_compactable(table_config)
    with lock.hold():
        inst = next((i for i in Timeline.load(storage).pending_compactions() if i.time == instant_time), None)
        if inst is None:
            return True
        target = _claimable(storage, inst, cfg)
        if target is None:
            return False
        inflight, heartbeat = _claim(storage, target, cfg)
    _run(storage, lock, cfg, inflight, heartbeat, map_ops, recovered=inst.state is State.INFLIGHT)
    return True


def _claimable(storage: Storage, inst: Instant, cfg: Config) -> Instant | None:
    """The lock held: the requested plan of a pending compaction, to claim; one a dead compactor
    left inflight goes back to its plan first. None while its compactor is alive."""
    if inst.state is State.INFLIGHT:
        if not HeartbeatPolicy.of(cfg).is_expired(storage, inst.time):
            return None  # another compactor runs it
        rollback_compaction_under_lock(storage, inst)
    return inst.with_state(State.REQUESTED)


def execute(
    storage: Storage, lock: TableLock, cfg: Config, requested: Instant, map_ops: StatMap = per_core.each
) -> CompactionResult:
    """Execute a requested plan: inflight, one new base file per operation, the commit."""
    with lock.hold():
        current = Timeline.load(storage).get(requested.time, Action.COMPACTION)
        if current is None or current.state is not State.REQUESTED:
            state = "gone" if current is None else current.state.value
            raise ServiceError(
                f"compaction {requested.time} is not a requested plan ({state}): another compactor took it"
            )
        inflight, heartbeat = _claim(storage, requested, cfg)
    return _run(storage, lock, cfg, inflight, heartbeat, map_ops)


def _claim(storage: Storage, requested: Instant, cfg: Config) -> tuple[Instant, Heartbeat]:
    """The lock held: the plan goes inflight, its heartbeat beating first (a compactor that sees
    it inflight sees it alive)."""
    heartbeat = HeartbeatPolicy.of(cfg).start(storage, requested.time)
    try:
        inflight = transition(storage, requested, State.INFLIGHT)
        start_markers(storage, inflight.time)
        return inflight, heartbeat
    except BaseException:
        heartbeat.stop()
        raise


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
    map_ops: StatMap,
    recovered: bool = False,
    by_key: ByKeyGroup | None = None,
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
        table_config = TableConfig.load(storage)
        merge = Merge(
            table_config.ordering_fields,
            table_config.merge_mode,
            frozenset(i.time for i in timeline.completed_writes() if i.time < inflight.time),
        )
        with storage.uploading() as uploading:  # in process, a file uploads while the next is merged
            write = partial(
                compact_operation, uploading, instant_time=inflight.time,
                schema=full_schema(avro_to_arrow(schema_json)), merge=merge, cfg=cfg,
            )
            stats = map_ops(write, list(enumerate(ops)))
        by_partition: dict[str, list[WriteStat]] = defaultdict(list)
        for s in stats:
            by_partition[s.partitionPath].append(s)
        extra = {"schema": schema_json, **column_stats.commit_entries(stats)}
        metadata = CommitMetadata(dict(by_partition), COMPACT_TYPE, extra, compacted=True)
        with lock.hold():
            lock.fence()
            # the metadata table's deltacommit before the data instant
            metadata_table.sync(storage, TableConfig.load(storage), inflight.time, metadata, options=cfg, by_key=by_key)
            transition(
                storage,
                Instant(inflight.time, Action.COMMIT, State.INFLIGHT),
                State.COMPLETED,
                metadata.to_json_bytes(),
            )
    except Exception:
        with lock.hold():
            if not compaction_committed(storage, inflight.time):
                rollback_compaction_under_lock(storage, inflight)
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
