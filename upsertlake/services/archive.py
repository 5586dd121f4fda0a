"""Archive: move old completed instants out of `.hoodie/` so the active timeline stays between
hoodie.keep.min.commits and hoodie.keep.max.commits commits (Hudi's HoodieTimelineArchiver).

Never archived: savepoints, anything at or after the earliest pending instant (a pending compaction
included), the earliest savepoint, or the last clean's earliest commit to retain. A completed
compaction's `.compaction.requested`/`.inflight` go with its commit. Archived instants stay on upsertlake's
timeline (`Timeline.archived`), so time travel and incremental reads still reach them while their
files exist. The archive format is upsertlake's own (see `upsertlake.timeline.archived`).
"""

from __future__ import annotations

import io

import fastavro

from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.errors import ConfigError
from upsertlake.timeline import documents
from upsertlake.timeline.retention import cleaned_before, savepoint_times
from upsertlake.storage import Storage
from upsertlake.layout.markers import key_summary_folder
from upsertlake.timeline.active import Timeline, delete_instant_files
from upsertlake.timeline.archived import ARCHIVE_FOLDER, archive_file_name
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant

SCHEMA = "UpsertlakeArchivedInstant"


def archive_due(timeline: Timeline, cfg: Config) -> bool:
    """Whether more completed writes are active than hoodie.keep.max.commits (else `archive`
    does nothing, and an automatic one need not take the lock)."""
    return sum(1 for i in timeline.active() if i.action in WRITE_ACTIONS and i.is_completed) > cfg.get(opt.KEEP_MAX_COMMITS)


def archive(storage: Storage, lock: TableLock, cfg: Config) -> list[Instant]:
    """Archive what the limits allow; returns the instants archived (oldest first)."""
    keep_min, keep_max = cfg.get(opt.KEEP_MIN_COMMITS), cfg.get(opt.KEEP_MAX_COMMITS)
    if not 0 < keep_min < keep_max:
        raise ConfigError(f"need 0 < {opt.KEEP_MIN_COMMITS.key} < {opt.KEEP_MAX_COMMITS.key}, got {keep_min}, {keep_max}")
    with lock.hold():
        timeline = Timeline.load(storage)
        active = timeline.active()
        writes = [i for i in active if i.action in WRITE_ACTIONS and i.is_completed]
        if len(writes) <= keep_max:
            return []
        bounds = [writes[len(writes) - keep_min].time, *savepoint_times(timeline)]
        # A compaction keeps its requested and inflight files once completed as a commit: those
        # are not pending; a compaction still pending is, and nothing at or after it is archived.
        compacted = {i.time for i in writes if i.action is Action.COMMIT}
        bounds += [i.time for i in active if not i.is_completed and not (i.action is Action.COMPACTION and i.time in compacted)][:1]
        bounds += [b for b in [cleaned_before(timeline)] if b]
        cutoff = min(bounds)
        doomed = [i for i in active if i.is_completed and i.time < cutoff and i.action is not Action.SAVEPOINT]
        if not doomed:
            return []
        records = [
            {"instantTime": i.time, "action": i.action.value, "metadata": timeline.document(i), "completionTime": i.completion}
            for i in doomed
        ]
        out = io.BytesIO()
        fastavro.writer(out, documents.schema(SCHEMA), records)
        storage.makedirs(ARCHIVE_FOLDER)
        storage.write_if_absent(f"{ARCHIVE_FOLDER}/{archive_file_name(doomed[0].time, doomed[-1].time)}", out.getvalue())
        listed = storage.list(timeline.layout.folder)  # one listing for every instant's files
        for inst in doomed:
            plan = timeline.get(inst.time, Action.COMPACTION) if inst.action is Action.COMMIT else None
            if plan is not None:  # the plan goes with its commit, first: never a plan without it
                delete_instant_files(storage, plan, timeline.layout, listed)
            delete_instant_files(storage, inst, timeline.layout, listed)
            storage.delete_dir(key_summary_folder(inst.time))
    return doomed
