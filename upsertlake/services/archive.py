"""Archive: move old completed instants out of `.hoodie/` so the active timeline stays between
hoodie.keep.min.commits and hoodie.keep.max.commits commits (Hudi's HoodieTimelineArchiver).

Never archived: savepoints, anything at or after the earliest pending instant (a pending compaction
included), the earliest savepoint, or the last clean's earliest commit to retain. A completed
compaction's `.compaction.requested`/`.inflight` go with its commit. Archived instants stay on upsertlake's
timeline (`Timeline.archived`), so time travel and incremental reads still reach them while their
files exist. The archive format is upsertlake's own (see `upsertlake.timeline.archived`); small archive
files are merged, so their number stays bounded.
"""

from __future__ import annotations

import io

import fastavro

from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.errors import ConfigError
from upsertlake.layout.markers import key_summary_folder
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline, delete_instant_files
from upsertlake.timeline.archived import ARCHIVE_FOLDER, archive_file_name, archive_files, read_archive_file
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant
from upsertlake.timeline.retention import cleaned_before, savepoint_times

SCHEMA = "UpsertlakeArchivedInstant"
MERGE_BATCH = 10  # small archive files merged into one at once (Hudi's hoodie.archive.merge.files.batch.size)
MERGE_SMALL_BYTES = 20 * 1024 * 1024  # archive files smaller than this are merged (Hudi's ...small.file.limit.bytes)


def archive_due(timeline: Timeline, cfg: Config) -> bool:
    """Whether more completed writes are active than hoodie.keep.max.commits (else `archive`
    does nothing, and an automatic one need not take the lock)."""
    return sum(1 for i in timeline.active() if i.action in WRITE_ACTIONS and i.is_completed) > cfg.get(
        opt.KEEP_MAX_COMMITS
    )


def archive(storage: Storage, lock: TableLock, cfg: Config) -> list[Instant]:
    """Archive what the limits allow; returns the instants archived (oldest first)."""
    keep_min, keep_max = cfg.get(opt.KEEP_MIN_COMMITS), cfg.get(opt.KEEP_MAX_COMMITS)
    if not 0 < keep_min < keep_max:
        raise ConfigError(
            f"need 0 < {opt.KEEP_MIN_COMMITS.key} < {opt.KEEP_MAX_COMMITS.key}, got {keep_min}, {keep_max}"
        )
    with lock.hold():
        timeline = Timeline.load(storage)
        active = timeline.active()
        writes = [i for i in active if i.action in WRITE_ACTIONS and i.is_completed]
        if len(writes) <= keep_max:
            return []
        bounds = [writes[len(writes) - keep_min].time, *savepoint_times(timeline)]
        # Nothing at or after the first pending instant (a compaction still pending included) is archived.
        bounds += [i.time for i in timeline.shown() if not i.is_completed][:1]
        bounds += [b for b in [cleaned_before(timeline)] if b]
        cutoff = min(bounds)
        doomed = [i for i in active if i.is_completed and i.time < cutoff and i.action is not Action.SAVEPOINT]
        if not doomed:
            return []
        storage.makedirs(ARCHIVE_FOLDER)
        _write_archive(storage, {i: timeline.document(i) for i in doomed})
        listed = storage.list(timeline.layout.folder)  # one listing for every instant's files
        for inst in doomed:
            plan = timeline.get(inst.time, Action.COMPACTION) if inst.action is Action.COMMIT else None
            if plan is not None:  # the plan goes with its commit, first: never a plan without it
                delete_instant_files(storage, plan, timeline.layout, listed)
            delete_instant_files(storage, inst, timeline.layout, listed)
            storage.delete_dir(key_summary_folder(inst.time))
        merge_small_archives(storage)
    return doomed


def merge_small_archives(storage: Storage) -> None:
    """Under the lock: once `MERGE_BATCH` archive files are below `MERGE_SMALL_BYTES`, write their
    instants as one file, then delete them (as Hudi's archiver merges small archive files). Each
    archival writes a file, and every process new to the table reads them all (a GET each): merged,
    their number stays bounded however long the history. A crash between the write and the deletes
    leaves instants in two files, which readers take once."""
    small = [e for e in archive_files(storage) if e.size < MERGE_SMALL_BYTES]
    if len(small) < MERGE_BATCH:
        return
    instants: dict[Instant, bytes] = {}
    for entry in small:
        instants.update(read_archive_file(storage, entry))
    merged = _write_archive(storage, instants)
    for entry in small:
        if entry.path != merged:
            storage.delete(entry.path)


def _write_archive(storage: Storage, instants: dict[Instant, bytes]) -> str:
    """One archive file of `instants` (completed, with their completed files' bytes); its path."""
    ordered = sorted(instants)
    records = [
        {"instantTime": i.time, "action": i.action.value, "metadata": instants[i], "completionTime": i.completion}
        for i in ordered
    ]
    out = io.BytesIO()
    fastavro.writer(out, documents.schema(SCHEMA), records)
    path = f"{ARCHIVE_FOLDER}/{archive_file_name(ordered[0].time, ordered[-1].time)}"
    storage.write_if_absent(path, out.getvalue())
    return path
