"""Rollback, in one place: undo what an instant wrote, recorded on the timeline or not.

The names say whether an instant is written:
- `rollback*` record a `.rollback` instant (HoodieRollbackPlan requested, HoodieRollbackMetadata
  completed) as Hudi does: `rollback` (the user's, under the lock, choosing the target),
  `rollback_under_lock` (a given target), `rollback_compaction` and
  `rollback_compaction_under_lock` (an inflight compaction goes back to its plan);
- `discard*` record nothing: `discard_pending` deletes a pending instant's files and then its
  instant files (a failed copy-on-write write, a write moved to a new instant), `discard_files`
  only the files (its instant files stay);
- `undo_failed_write` chooses: a merge-on-read deltacommit is rolled back as Hudi does (recorded;
  table version 6 voids its appended log blocks by rollback command blocks), any other write is
  discarded.

Data files go first, found both through the instant's markers and by their instant time in the
file names (a writer may die between marker and file, or a Hudi writer may keep its markers
elsewhere); the instant files go last, so a crash midway leaves an instant that is still pending
and is rolled back again by the next writer. A completed instant loses its completed file first,
so readers stop seeing it before any of its files go.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Collection
from typing import Any

from upsertlake.concurrency.heartbeat import HeartbeatPolicy, heartbeat_path
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import CleanedInstantError, ServiceError, UpsertlakeError
from upsertlake.layout.file_system_view import LogFile, list_partitions_and_files
from upsertlake.layout.markers import (
    APPEND,
    ROLLBACK_WRITE_TOKEN,
    appended_logs,
    holds_only_blocks_of,
    key_summary_folder,
    marker_folder,
    read_markers,
    staged_keys_folder,
)
from upsertlake.logfile import LogFileName, append_blocks, rollback_block
from upsertlake.services import metadata_table
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline, create_requested, delete_instant_files, transition
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.layouts import table_layout
from upsertlake.timeline.retention import cleaned_boundary_past, savepoint_times

log = logging.getLogger(__name__)

PLAN_SCHEMA = "HoodieRollbackPlan"
METADATA_SCHEMA = "HoodieRollbackMetadata"


# -- recorded: a `.rollback` instant -------------------------------------------------------------
def rollback(
    storage: Storage, lock: TableLock, instant_time: str | None = None, options: Config | None = None
) -> Instant:
    """Roll back `instant_time`; returns the `.rollback` instant. By default the newest failed
    write (pending, its heartbeat expired), else the latest completed commit. A write in flight
    (its heartbeat alive, judged by `options`' heartbeat settings) is never pulled from under its
    writer, and no commit is rolled back while one runs: it may be building on that commit."""
    cfg = options or Config.resolve(None)
    with lock.hold():
        metadata_table.prepare(storage, TableConfig.load(storage), cfg)
        timeline = Timeline.load(storage)
        target = _target(timeline, instant_time, HeartbeatPolicy.of(cfg).live(storage, timeline))
        return rollback_under_lock(storage, target)


def rollback_under_lock(storage: Storage, target: Instant) -> Instant:
    """Roll `target` back as a `.rollback` instant (plan requested, then the metadata completed);
    the lazy rollback of a failed deltacommit runs it too. A rollback of `target` that a process
    left pending (it died: rollbacks run under the lock) is run again under its own instant, as
    Hudi reuses a pending rollback, rather than left pending forever."""
    started = time.monotonic()
    requested = dead_rollbacks(storage, Timeline.load(storage)).get(target.time) or create_requested(
        storage, Action.ROLLBACK, documents.encode(PLAN_SCHEMA, rollback_plan(storage, target))
    )
    inflight = requested if requested.state is State.INFLIGHT else transition(storage, requested, State.INFLIGHT)
    meta = undo_files(storage, target, requested.time, started)
    storage.delete(heartbeat_path(target.time))
    state = "completed" if target.is_completed else "pending"
    log.info("rollback %s undid %s %s %s", requested.time, state, target.action.value, target.time)
    return transition(storage, inflight, State.COMPLETED, documents.encode(METADATA_SCHEMA, meta))


def rollback_compaction(storage: Storage, lock: TableLock, inflight: Instant, cfg: Config | None = None) -> Instant:
    """Hudi's rollbackInflightCompaction: a `.rollback` instant records the files deleted, then
    the compaction goes back to requested (its plan kept) to be executed again. Returns the
    rollback instant. Refused while its compactor's heartbeat beats (`cfg`'s heartbeat settings)."""
    with lock.hold():
        current = Timeline.load(storage).get(inflight.time, Action.COMPACTION)
        if current is None or current.state is not State.INFLIGHT or compaction_committed(storage, inflight.time):
            raise ServiceError(f"compaction {inflight.time} is not inflight: nothing to roll back")
        if not HeartbeatPolicy.of(cfg or Config.resolve(None)).is_expired(storage, current.time):
            raise ServiceError(
                f"compaction {inflight.time} is running (its heartbeat is alive): stop its compactor, or wait for "
                "it to end or for its heartbeat to expire"
            )
        return rollback_compaction_under_lock(storage, current)


def rollback_compaction_under_lock(storage: Storage, inflight: Instant) -> Instant:
    """`rollback_compaction` of an inflight compaction whose compactor is gone."""
    started = time.monotonic()
    target = {"commitTime": inflight.time, "action": Action.COMPACTION.value}
    plan = {"instantToRollback": target, "RollbackRequests": [], "version": 1}
    requested = create_requested(storage, Action.ROLLBACK, documents.encode(PLAN_SCHEMA, plan))
    rolling = transition(storage, requested, State.INFLIGHT)
    deleted, _ = discard_files(storage, inflight.time, named_logs=False)
    storage.delete(table_layout(storage).path(inflight.with_state(State.INFLIGHT)))  # back to requested
    storage.delete(heartbeat_path(inflight.time))
    meta = _rollback_metadata(storage, requested.time, started, inflight.time, Action.COMPACTION, deleted, {})
    done = transition(storage, rolling, State.COMPLETED, documents.encode(METADATA_SCHEMA, meta))
    log.info("rolled back inflight compaction %s (%d file(s)); its plan stays requested", inflight.time, len(deleted))
    return done


def compaction_committed(storage: Storage, instant_time: str) -> bool:
    """Did the compaction at `instant_time` complete (its `commit` is on the timeline)?"""
    done = Timeline.load(storage).get(instant_time, Action.COMMIT)
    return done is not None and done.is_completed


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
    requests: list[dict[str, Any]] = [
        {
            "partitionPath": p,
            "fileId": None,
            "latestBaseInstant": None,
            "filesToBeDeleted": paths,
            "logBlocksToBeDeleted": None,
        }
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
    return {
        "instantToRollback": {"commitTime": target.time, "action": target.action.value},
        "RollbackRequests": requests,
        "version": 1,
    }


def undo_files(storage: Storage, target: Instant, rollback_time: str, started: float) -> dict[str, Any]:
    """Delete what `target` wrote and its instant files: a completed one's completed file first,
    so readers stop seeing it, then its metadata deltacommit and its files (`discard_files`; a
    rollback block voids a version 6 deltacommit's appended blocks instead); returns the
    HoodieRollbackMetadata of rollback `rollback_time`, which the caller records."""
    committed = _committed_logs(storage, target)
    if target.is_completed:
        storage.delete(table_layout(storage).path(target))
        target = target.with_state(State.INFLIGHT)
    deleted, written = _discard(storage, target, rollback_time, committed)
    return _rollback_metadata(storage, rollback_time, started, target.time, target.action, deleted, written)


def _rollback_metadata(
    storage: Storage, rollback_time: str, started: float, target: str, action: Action, deleted: list[str],
    written: dict[str, int],
) -> dict[str, Any]:
    """HoodieRollbackMetadata: the files deleted and the rollback log files written, by partition
    (paths in full, as the storage names them)."""
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
        "commitsRollback": [target],
        "partitionMetadata": {
            p: {"partitionPath": p, "successDeleteFiles": files, "failedDeleteFiles": [],
                "rollbackLogFiles": rollback_logs.get(p), "writtenLogFiles": None}
            for p, files in by_partition.items()
        },
        "version": 1,
        "instantsRollback": [{"commitTime": target, "action": action.value}],
    }


# -- chosen by the table type ---------------------------------------------------------------------
def undo_failed_write(storage: Storage, inst: Instant, merge_on_read: bool) -> None:
    """Under the lock: undo a failed write. A merge-on-read deltacommit is rolled back as Hudi
    does, recorded as a `.rollback` instant (`rollback_under_lock`); any other write's files and
    instant files just go (`discard_pending`)."""
    if merge_on_read and inst.action is Action.DELTA_COMMIT:
        rollback_under_lock(storage, inst)
    else:
        discard_pending(storage, inst)


# -- not recorded ---------------------------------------------------------------------------------
def discard_pending(storage: Storage, instant: Instant) -> list[str]:
    """Delete a pending (never completed) instant's files, then its instant files; no `.rollback`
    instant records it. Returns the data files deleted. The log files a deltacommit appended go
    too: each is wholly its own (we never append to an existing one)."""
    return _discard(storage, instant)[0]


def _discard(
    storage: Storage, instant: Instant, rollback_time: str | None = None, committed_logs: Collection[str] = ()
) -> tuple[list[str], dict[str, int]]:
    """`discard_pending`, and with a `rollback_time` on a table version 6 (timeline layout 1)
    the way Hudi 0.14 rolls back a deltacommit: the log files it appended stay, and each slice
    it appended to gets a new log file holding a rollback command block (written by
    `rollback_time`, targeting the instant) that voids its blocks. Returns the deleted files and
    the written log files with their sizes. `committed_logs`: the log files a completed instant
    being rolled back appended (its commit names them; its markers went at commit)."""
    if instant.is_completed:
        raise ValueError(f"instant {instant.time} is completed; discard_pending only undoes pending ones")
    named = instant.action is Action.DELTA_COMMIT  # version 8 names a log by its deltacommit
    doomed, written = discard_files(storage, instant.time, named, rollback_time, committed_logs)
    delete_instant_files(storage, instant)
    log.info("removed instant %s and the %d file(s) it wrote", instant.time, len(doomed))
    return doomed, written


def discard_files(
    storage: Storage,
    instant_time: str,
    named_logs: bool = True,
    rollback_time: str | None = None,
    committed_logs: Collection[str] = (),
) -> tuple[list[str], dict[str, int]]:
    """Delete the files a pending instant wrote (named by its time, or by its markers), then its
    markers, the keys a Spark write staged for the record index and its key summaries; its
    instant files stay (they go last: see the module's docstring).

    Log files named by the instant go unless `named_logs` is false: a compaction's instant names
    the logs writers append to the slice it starts, and those are theirs. A log the instant
    appended to (an APPEND marker) on table version 6 may hold other instants' blocks (Hudi's
    writers append to existing files): with a `rollback_time` it stays and gets a rollback block
    (`_discard`); without one it goes only if every block in it is the instant's own.

    Its metadata deltacommit goes first, as Hudi's metadata writer rolls it back
    (`metadata_table.discard_rolled_back`)."""
    metadata_table.discard_rolled_back(storage, TableConfig.load(storage), instant_time)
    listing = list_partitions_and_files(storage)
    doomed = {bf.path for bf in listing.base_files if bf.instant_time == instant_time}
    if named_logs:
        doomed |= {lf.path for lf in listing.log_files if lf.name.instant == instant_time}
    appended: set[str] = set(committed_logs)
    for path, io_type in read_markers(storage, instant_time):
        (appended if io_type == APPEND else doomed).add(path)
    written: dict[str, int] = {}
    if table_layout(storage).version == 1 and appended:
        if rollback_time is not None:
            written = _write_rollback_blocks(storage, listing.log_files, appended, instant_time, rollback_time)
        else:
            doomed |= {path for path in appended if holds_only_blocks_of(storage, path, instant_time)}
    else:
        doomed |= appended
    for path in sorted(doomed):
        storage.delete(path)
    storage.delete_dir(marker_folder(instant_time))
    storage.delete_dir(staged_keys_folder(instant_time))  # a Spark write's, for the record index
    storage.delete_dir(key_summary_folder(instant_time))
    return sorted(doomed), written


def _write_rollback_blocks(
    storage: Storage, logs: list[LogFile], appended: set[str], target: str, rollback_time: str
) -> dict[str, int]:
    """A rollback command block in a new log file (the next version) of each slice in `appended`:
    one a slice, also where the write marked two logs of it (a planned name another writer took,
    then the next)."""
    latest: dict[tuple[str, str, str], int] = {}
    for lf in logs:
        key = (lf.partition_path, lf.name.file_id, lf.name.instant)
        latest[key] = max(latest.get(key, 0), lf.name.version)
    slices: dict[tuple[str, str, str], int] = {}
    for path in appended:
        folder, _, name = path.rpartition("/")
        parsed = LogFileName.parse(name)
        if parsed is not None:
            key = (folder, parsed.file_id, parsed.instant)
            slices[key] = max(slices.get(key, 0), parsed.version)
    written = {}
    for (folder, file_id, instant), version in sorted(slices.items()):
        version = max(latest.get((folder, file_id, instant), 0), version) + 1
        new = LogFileName(file_id, instant, version, ROLLBACK_WRITE_TOKEN).format()
        new_path = f"{folder}/{new}" if folder else new
        data = append_blocks([rollback_block(rollback_time, target)])
        if storage.write_if_absent(new_path, data):
            written[new_path] = len(data)
    return written


# -- helpers ------------------------------------------------------------------------------------
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
        named = next((i for i in writes if i.time == instant_time), None)
        if named is None:
            raise ServiceError(f"no commit at {instant_time} on the timeline")
        target = named
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
            raise ServiceError(
                f"only the latest completed commit ({done[-1].time}) can be rolled back, not {target.time}"
            )
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
