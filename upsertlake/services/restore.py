"""Restore: return the table to a savepoint by rolling back every later instant, newest first,
inside one `.restore` instant (HoodieRestorePlan requested, HoodieRestoreMetadata completed).
On merge-on-read: deltacommits (their log files, or rollback command blocks in layout 1) and
compactions, completed or pending, plans included."""

from __future__ import annotations

import time
from typing import Any

from upsertlake.concurrency.heartbeat import HeartbeatPolicy
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import ServiceError
from upsertlake.services.metadata_table import drop_metadata_table
from upsertlake.services.rollback import discard_files, undo_files
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import (
    Timeline,
    create_requested,
    delete_instant_files,
    transition,
)
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.retention import savepoint_times

PLAN_SCHEMA = "HoodieRestorePlan"
METADATA_SCHEMA = "HoodieRestoreMetadata"


def restore(storage: Storage, lock: TableLock, savepoint_time: str, options: Config | None = None) -> Instant:
    """Roll back every commit (and savepoint) later than the savepoint; returns the `.restore` instant.
    Refused while a write is in flight (its heartbeat alive, by `options`' settings): it would be
    pulled from under its writer, or commit onto versions the restore undid."""
    with lock.hold():
        drop_metadata_table(storage, TableConfig.load(storage))  # readers must not list a stale one
        timeline = Timeline.load(storage)
        _check_restorable(storage, timeline, HeartbeatPolicy.of(options or Config.resolve(None)), savepoint_time)
        later = _undone(timeline, savepoint_time)
        infos = [{"commitTime": i.time, "action": i.action.value} for i in later]
        started = time.monotonic()
        plan = {"instantsToRollback": infos, "version": 2, "savepointToRestoreTimestamp": savepoint_time}
        requested = create_requested(storage, Action.RESTORE, documents.encode(PLAN_SCHEMA, plan))
        inflight = transition(storage, requested, State.INFLIGHT)
        rolled: dict[str, list[Any]] = {}
        for inst in later:
            if inst.action is Action.SAVEPOINT:
                delete_instant_files(storage, inst)
            elif inst.action is Action.COMPACTION:  # a pending plan: what it wrote, then the plan
                # Logs named by it (layout 1: the slice it starts) hold only blocks of later writes,
                # all rolled back before it: they go too.
                discard_files(storage, inst.time)
                delete_instant_files(storage, inst)
            else:
                rolled[inst.time] = [undo_files(storage, inst, requested.time, started)]
                compaction = timeline.get(inst.time, Action.COMPACTION)
                if compaction is not None:  # a completed compaction: its plan goes after its commit
                    delete_instant_files(storage, compaction)
        meta = {
            "startRestoreTime": requested.time,
            "timeTakenInMillis": int((time.monotonic() - started) * 1000),
            "instantsToRollback": [i.time for i in later],
            "hoodieRestoreMetadata": rolled,
            "version": 1,
            "restoreInstantInfo": infos,
            "extraMetadata": None,
        }
        return transition(storage, inflight, State.COMPLETED, documents.encode(METADATA_SCHEMA, meta))


def _check_restorable(storage: Storage, timeline: Timeline, heartbeats: HeartbeatPolicy, savepoint_time: str) -> None:
    """Refuse, naming why, while a write or a compaction runs (its heartbeat alive) or when
    `savepoint_time` is no completed savepoint."""
    live = heartbeats.live(storage, timeline)
    if live:
        raise ServiceError(
            f"write {live[-1].time} is in flight (its heartbeat is alive): restore once it has ended"
        )
    running = [
        i for i in timeline.pending_compactions()
        if i.state is State.INFLIGHT and not heartbeats.is_expired(storage, i.time)
    ]
    if running:
        raise ServiceError(
            f"compaction {running[-1].time} is running (its heartbeat is alive): restore once it has ended"
        )
    savepoints = savepoint_times(timeline)
    if savepoint_time not in savepoints:
        have = f"the savepoints are {sorted(savepoints)}" if savepoints else "the table has none"
        raise ServiceError(
            f"no completed savepoint at {savepoint_time} ({have}); restore returns to a savepoint: "
            "create one with `upsertlake savepoint PATH [INSTANT]` (or Table.savepoint) before you need it"
        )


def _undone(timeline: Timeline, savepoint_time: str) -> list[Instant]:
    """The instants a restore to `savepoint_time` undoes, newest first: the writes and savepoints
    after it, and the compactions still pending (one completed as a commit is undone with it; a
    pending one is dropped, plan and files)."""
    compacted = {i.time for i in timeline.filter([Action.COMMIT], [State.COMPLETED])}
    return [
        i
        for i in reversed(timeline.instants)
        if i.time > savepoint_time
        and (
            i.action in (*WRITE_ACTIONS, Action.SAVEPOINT)
            or (i.action is Action.COMPACTION and i.time not in compacted)
        )
    ]
