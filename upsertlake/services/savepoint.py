"""Savepoints: pin the files of one commit's snapshot so the cleaner keeps them and the table can
be restored to it. As in Hudi, the savepoint instant has the time of the commit it pins
(`<t>.savepoint.inflight`, then `<t>.savepoint` holding HoodieSavepointMetadata)."""

from __future__ import annotations

import getpass
import time
from typing import Any

from upsertlake.concurrency.lock import TableLock
from upsertlake.errors import CleanedInstantError, ServiceError
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline, transition
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.retention import cleaned_before

SCHEMA = "HoodieSavepointMetadata"


def savepoint(storage: Storage, lock: TableLock, instant_time: str | None = None, comment: str = "") -> Instant:
    """Savepoint a completed commit (default: the latest); returns the completed savepoint instant."""
    with lock.hold():
        timeline = Timeline.load(storage)
        target = _completed_write(timeline, instant_time)
        if timeline.get(target.time, Action.SAVEPOINT) is not None:
            raise ServiceError(f"instant {target.time} is already savepointed")
        boundary = cleaned_before(timeline)
        if boundary is not None and target.time < boundary:
            raise CleanedInstantError(f"cannot savepoint {target.time}: the cleaner kept only commits from {boundary}")
        partitions: dict[str, dict[str, Any]] = {}
        # A merge-on-read slice is its base file and its log files: the savepoint pins them all.
        for sl in FileSystemView(timeline, target.time).latest_file_slices():
            meta = partitions.setdefault(
                sl.partition_path, {"partitionPath": sl.partition_path, "savepointDataFile": []}
            )
            names = ([sl.base.name] if sl.base else []) + [lf.path.rpartition("/")[2] for lf in sl.logs]
            meta["savepointDataFile"].extend(names)
        record = {
            "savepointedBy": _user(),
            "savepointedAt": int(time.time()),
            "comments": comment,
            "partitionMetadata": partitions,
            "version": 1,
        }
        inflight = Instant(target.time, Action.SAVEPOINT, State.INFLIGHT)
        if not storage.write_if_absent(timeline.path(inflight), b""):
            raise ServiceError(f"a savepoint of {target.time} is already in progress")
        return transition(storage, inflight, State.COMPLETED, documents.encode(SCHEMA, record))


def _completed_write(timeline: Timeline, instant_time: str | None) -> Instant:
    done = timeline.completed_writes()
    if instant_time is None:
        if not done:
            raise ServiceError("the table has no completed commit to savepoint")
        return done[-1]
    for inst in done:
        if inst.time == instant_time:
            return inst
    raise ServiceError(f"no completed commit at {instant_time}")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "upsertlake"
