"""Rollback: undo the latest completed commit, or any pending instant, recorded as a `.rollback`
instant (HoodieRollbackPlan requested, HoodieRollbackMetadata completed) as Hudi does.

A completed instant loses its completed file first, so readers stop seeing it before any of its
files go; a crash midway leaves a pending instant that the next writer rolls back.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

from upsertlake.concurrency.heartbeat import heartbeat_path, is_expired
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.errors import ServiceError
from upsertlake.config.table_config import TableConfig
from upsertlake.services.metadata_table import drop_metadata_table
from upsertlake.timeline import documents
from upsertlake.timeline.retention import check_readable, savepoint_times
from upsertlake.storage import Storage
from upsertlake.layout.file_system_view import list_partitions_and_files
from upsertlake.timeline.active import (
    Timeline,
    create_requested,
    transition,
)
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.layouts import table_layout
from upsertlake.layout.markers import rollback_pending
from upsertlake.logfile.names import LogFileName
from upsertlake.logfile.writer import append_blocks, rollback_block

log = logging.getLogger(__name__)

PLAN_SCHEMA = "HoodieRollbackPlan"
ROLLBACK_WRITE_TOKEN = "0-0-0"  # the write token of the log files that carry rollback command blocks
METADATA_SCHEMA = "HoodieRollbackMetadata"


def rollback(
    storage: Storage, lock: TableLock, instant_time: str | None = None, config: Config | None = None
) -> Instant:
    """Roll back `instant_time`; returns the `.rollback` instant. By default the newest failed
    write (pending, its heartbeat expired), else the latest completed commit. A write in flight
    (its heartbeat alive, judged by `config`'s heartbeat settings) is never pulled from under its
    writer, and no commit is rolled back while one runs: it may be building on that commit."""
    cfg = config or Config.resolve(None)
    with lock.hold():
        drop_metadata_table(storage, TableConfig.load(storage))  # readers must not list a stale one
        timeline = Timeline.load(storage)
        target = _target(timeline, instant_time, live_writes(storage, timeline, cfg))
        started = time.monotonic()
        requested = create_requested(storage, Action.ROLLBACK, documents.encode(PLAN_SCHEMA, rollback_plan(storage, target)))
        inflight = transition(storage, requested, State.INFLIGHT)
        meta = undo(storage, target, requested.time, started)
        storage.delete(heartbeat_path(target.time))
        state = "completed" if target.is_completed else "pending"
        log.info("rollback %s undid %s %s %s", requested.time, state, target.action.value, target.time)
        return transition(storage, inflight, State.COMPLETED, documents.encode(METADATA_SCHEMA, meta))


def live_writes(storage: Storage, timeline: Timeline, cfg: Config) -> list[Instant]:
    """Pending writes whose heartbeat is alive: their writers are running."""
    interval, misses = cfg.get(opt.HEARTBEAT_INTERVAL_MS), cfg.get(opt.HEARTBEAT_TOLERABLE_MISSES)
    return [i for i in timeline.pending_writes() if not is_expired(storage, i.time, interval, misses)]


def rollback_plan(storage: Storage, target: Instant) -> dict[str, Any]:
    """HoodieRollbackPlan: the base files the instant wrote, per partition."""
    requests = [
        {"partitionPath": p, "fileId": None, "latestBaseInstant": None, "filesToBeDeleted": paths, "logBlocksToBeDeleted": None}
        for p, paths in _files_by_partition(storage, target.time).items()
    ]
    return {"instantToRollback": {"commitTime": target.time, "action": target.action.value}, "RollbackRequests": requests, "version": 1}


def undo(storage: Storage, target: Instant, rollback_time: str, started: float) -> dict[str, Any]:
    """Delete what `target` wrote and its instant files; returns its HoodieRollbackMetadata.

    A completed deltacommit of timeline layout 1 appended blocks to log files named by their
    slice, which hold other instants' blocks too: those files stay, and a rollback command block
    voiding `target` goes into a new log file of each such slice (as Hudi's rollback does), so no
    reader ever takes the blocks for committed, even once the timeline has moved past them."""
    voided: list[str] = []
    if target.is_completed:
        layout = table_layout(storage)
        appended = []
        if target.action is Action.DELTA_COMMIT and not layout.has_completion_times:
            appended = [s.path for s in Timeline.load(storage).commit_metadata(target).write_stats()]
        storage.delete(layout.path(target))
        target = target.with_state(State.INFLIGHT)
        voided = void_log_blocks(storage, target.time, appended, rollback_time)
    deleted = rollback_pending(storage, target)
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in deleted:
        by_partition[path.rpartition("/")[0]].append(storage.full_path(path))
    written: dict[str, dict[str, int]] = defaultdict(dict)
    for path in voided:
        info = storage.stat(path)
        written[path.rpartition("/")[0]][storage.full_path(path)] = info.size if info else 0
    return {
        "startRollbackTime": rollback_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(deleted),
        "commitsRollback": [target.time],
        "partitionMetadata": {
            p: {"partitionPath": p, "successDeleteFiles": by_partition.get(p, []), "failedDeleteFiles": [],
                "rollbackLogFiles": written.get(p), "writtenLogFiles": None}
            for p in sorted(by_partition.keys() | written.keys())
        },
        "version": 1,
        "instantsRollback": [{"commitTime": target.time, "action": target.action.value}],
    }


def void_log_blocks(storage: Storage, target_time: str, written: list[str], rollback_time: str) -> list[str]:
    """For each log file in `written` named by another instant (its slice's base instant), a new
    log file of that slice (the next version) holding one rollback command block for
    `target_time`; returns the files written. Logs named by the target itself are its own and
    are deleted with its other files."""
    listing = list_partitions_and_files(storage)
    versions: dict[tuple[str, str, str], int] = {}
    for lf in listing.log_files:
        key = (lf.partition_path, lf.name.file_id, lf.name.instant)
        versions[key] = max(versions.get(key, 0), lf.name.version)
    out = []
    for path in sorted(set(written)):
        folder, _, name = path.rpartition("/")
        log = LogFileName.parse(name) if name.startswith(".") else None
        if log is None or log.instant == target_time:
            continue
        key = (folder, log.file_id, log.instant)
        versions[key] = versions.get(key, log.version) + 1
        new = LogFileName(log.file_id, log.instant, versions[key], ROLLBACK_WRITE_TOKEN)
        rel = f"{folder}/{new.format()}" if folder else new.format()
        storage.write_if_absent(rel, append_blocks([rollback_block(rollback_time, target_time)]))
        out.append(rel)
    return out


def _target(timeline: Timeline, instant_time: str | None, live: list[Instant]) -> Instant:
    """What to roll back: `instant_time`, or by default the newest failed write, else the latest
    completed commit. Refuses to touch a write in flight (`live`), or a commit while one runs."""
    writes = [i for i in timeline.instants if i.action in WRITE_ACTIONS]
    done = [i for i in writes if i.is_completed]
    failed = [i for i in timeline.pending_writes() if i not in live]
    if instant_time is None:
        if live:
            latest = f"; the latest completed commit is {done[-1].time}" if done else ""
            raise ServiceError(
                f"write {live[-1].time} is in flight (its heartbeat is alive){latest}: say which instant to roll "
                "back, once that write has ended (`upsertlake doctor` shows it)"
            )
        if failed:
            return failed[-1]  # what a user means after a crash: the write that failed
        if not done:
            raise ServiceError("the table has no completed commit to roll back")
        target = done[-1]
    else:
        target = next((i for i in writes if i.time == instant_time), None)
        if target is None:
            raise ServiceError(f"no commit at {instant_time} on the timeline")
    if target in live:
        raise ServiceError(
            f"write {target.time} is in flight (its heartbeat is alive): its writer is still running; stop it, "
            "or wait for it to end or for its heartbeat to expire"
        )
    if target in timeline.archived:
        raise ServiceError(f"commit {target.time} is archived and cannot be rolled back")
    if target.is_completed and live:
        raise ServiceError(
            f"commit {target.time} cannot be rolled back while write {live[-1].time} is in flight: it may be "
            "building on that commit's files; roll back once it has ended"
        )
    if target.is_completed:
        if target != done[-1]:
            raise ServiceError(f"only the latest completed commit ({done[-1].time}) can be rolled back, not {target.time}")
        if any(s >= target.time for s in savepoint_times(timeline)):
            raise ServiceError(f"commit {target.time} is savepointed; restore to a savepoint instead")
        previous = done[-2].time if len(done) > 1 else None
        check_readable(timeline, previous, "rolling back would expose the snapshot of commit")
    return target


def _files_by_partition(storage: Storage, instant_time: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for bf in list_partitions_and_files(storage)[1]:
        if bf.instant_time == instant_time:
            out[bf.partition_path].append(storage.full_path(bf.path))
    return dict(out)
