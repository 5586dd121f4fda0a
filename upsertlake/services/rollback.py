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

from upsertlake.concurrency.heartbeat import HeartbeatPolicy, heartbeat_path
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.errors import CleanedInstantError, ServiceError, UpsertlakeError
from upsertlake.config.table_config import TableConfig
from upsertlake.services import metadata_table
from upsertlake.timeline import documents
from upsertlake.timeline.retention import cleaned_boundary_past, savepoint_times
from upsertlake.storage import Storage
from upsertlake.layout.file_system_view import list_partitions_and_files
from upsertlake.timeline.active import (
    Timeline,
    create_requested,
    delete_instant_files,
    transition,
)
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.layouts import table_layout
from upsertlake.layout.markers import appended_logs, undo_pending
from upsertlake.logfile import LogFileName

log = logging.getLogger(__name__)

PLAN_SCHEMA = "HoodieRollbackPlan"
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
        metadata_table.prepare(storage, TableConfig.load(storage), cfg)
        timeline = Timeline.load(storage)
        target = _target(timeline, instant_time, HeartbeatPolicy.of(cfg).live(storage, timeline))
        return roll_back(storage, target)


def roll_back(storage: Storage, target: Instant) -> Instant:
    """Under the lock: roll `target` back as a `.rollback` instant (plan requested, then the
    metadata completed); what the lazy rollback of a failed deltacommit runs too. A rollback of
    `target` that a process left pending (it died: rollbacks run under the lock) is run again
    under its own instant, as Hudi reuses a pending rollback, rather than left pending forever."""
    started = time.monotonic()
    requested = dead_rollbacks(storage, Timeline.load(storage)).get(target.time) or create_requested(
        storage, Action.ROLLBACK, documents.encode(PLAN_SCHEMA, rollback_plan(storage, target))
    )
    inflight = requested if requested.state is State.INFLIGHT else transition(storage, requested, State.INFLIGHT)
    meta = undo(storage, target, requested.time, started)
    storage.delete(heartbeat_path(target.time))
    state = "completed" if target.is_completed else "pending"
    log.info("rollback %s undid %s %s %s", requested.time, state, target.action.value, target.time)
    return transition(storage, inflight, State.COMPLETED, documents.encode(METADATA_SCHEMA, meta))


def dead_rollbacks(storage: Storage, timeline: Timeline) -> dict[str, Instant]:
    """Under the lock: the pending `.rollback` instants (a process died running them), by the
    time of the instant each rolls back. One whose plan cannot be read (missing, empty as older
    Hudi wrote them, damaged) is left as it is."""
    out = {}
    for pending in timeline.filter([Action.ROLLBACK], [State.REQUESTED, State.INFLIGHT]):
        path = timeline.layout.path(pending.with_state(State.REQUESTED))
        try:
            plan = documents.decode(storage.read_bytes(path), f"the rollback plan {path}")
            target = (plan.get("instantToRollback") or {}).get("commitTime")
        except (OSError, UpsertlakeError, AttributeError):
            continue
        if target:
            out[str(target)] = pending
    return out


def drop_dead_rollbacks(storage: Storage, timeline: Timeline) -> list[str]:
    """Under the lock: remove the pending rollbacks whose target is off the timeline (the process
    died after undoing it, before completing the rollback): nothing is left for them to do, and
    no reader looks at a pending rollback. Returns their times."""
    on_timeline = {i.time for i in timeline.instants}
    dropped = [r for target, r in dead_rollbacks(storage, timeline).items() if target not in on_timeline]
    for r in dropped:
        delete_instant_files(storage, r)
        log.info("removed rollback %s, left pending by a process that died after undoing its target", r.time)
    return [r.time for r in dropped]


def rollback_plan(storage: Storage, target: Instant) -> dict[str, Any]:
    """HoodieRollbackPlan: the base files the instant wrote, per partition; on a version 6
    merge-on-read table also, per file group, the log files whose blocks a rollback block voids."""
    requests = [
        {"partitionPath": p, "fileId": None, "latestBaseInstant": None, "filesToBeDeleted": paths, "logBlocksToBeDeleted": None}
        for p, paths in _files_by_partition(storage, target.time).items()
    ]
    layout = table_layout(storage)
    appended = appended_logs(storage, target.time)
    for path in _committed_logs(storage, target):
        entry = storage.stat(path)
        appended[path] = entry.size if entry is not None else 0
    for path in sorted(appended):
        folder, _, name = path.rpartition("/")
        parsed = LogFileName.parse(name)
        if parsed is None:
            continue
        full = storage.full_path(path)
        request = {"partitionPath": folder, "fileId": parsed.file_id, "latestBaseInstant": parsed.instant}
        if layout.version == 1:
            requests.append({**request, "filesToBeDeleted": [], "logBlocksToBeDeleted": {full: appended[path]}})
        else:
            requests.append({**request, "filesToBeDeleted": [full], "logBlocksToBeDeleted": None})
    return {"instantToRollback": {"commitTime": target.time, "action": target.action.value}, "RollbackRequests": requests, "version": 1}


def undo(storage: Storage, target: Instant, rollback_time: str, started: float) -> dict[str, Any]:
    """Delete what `target` wrote and its instant files (its metadata deltacommit first); returns
    its HoodieRollbackMetadata."""
    metadata_table.undo(storage, TableConfig.load(storage), target.time)
    committed = _committed_logs(storage, target)
    if target.is_completed:
        storage.delete(table_layout(storage).path(target))
        target = target.with_state(State.INFLIGHT)
    deleted, written = undo_pending(storage, target, rollback_time, committed)
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in deleted:
        by_partition[path.rpartition("/")[0]].append(storage.full_path(path))
    rollback_logs: dict[str, dict[str, int]] = defaultdict(dict)
    for path, size in written.items():
        rollback_logs[path.rpartition("/")[0]][storage.full_path(path)] = size
        by_partition.setdefault(path.rpartition("/")[0], [])
    return {
        "startRollbackTime": rollback_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(deleted),
        "commitsRollback": [target.time],
        "partitionMetadata": {
            p: {"partitionPath": p, "successDeleteFiles": files, "failedDeleteFiles": [],
                "rollbackLogFiles": rollback_logs.get(p), "writtenLogFiles": None}
            for p, files in by_partition.items()
        },
        "version": 1,
        "instantsRollback": [{"commitTime": target.time, "action": target.action.value}],
    }


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
        boundary = cleaned_boundary_past(timeline, previous)
        if boundary is not None:
            raise CleanedInstantError(
                f"commit {target.time} cannot be rolled back: that would make the snapshot of commit {previous} "
                f"the latest, and a clean deleted some of its files (the earliest whole snapshot is {boundary}); "
                "restore to a savepoint instead"
            )
    return target


def _committed_logs(storage: Storage, target: Instant) -> list[str]:
    """The log files a completed deltacommit appended, as its commit metadata names them."""
    if not target.is_completed or target.action is not Action.DELTA_COMMIT:
        return []
    meta = Timeline.load(storage).commit_metadata(target)
    return [s.path for s in meta.write_stats() if LogFileName.parse(s.path.rpartition("/")[2]) is not None]


def _files_by_partition(storage: Storage, instant_time: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for bf in list_partitions_and_files(storage)[1]:
        if bf.instant_time == instant_time:
            out[bf.partition_path].append(storage.full_path(bf.path))
    return dict(out)
