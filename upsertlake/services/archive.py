"""Archive: move old completed instants out of the active timeline so it stays between
hoodie.keep.min.commits and hoodie.keep.max.commits commits (Hudi's HoodieTimelineArchiver),
into Hudi's archived timeline for the table version (`upsertlake.timeline.archived`): on version
6 a new archive log file of HoodieArchivedMetaEntry records, one per instant file (Hudi 0.15's
TimelineArchiver), on versions 8 and 9 a layer-0 file of the LSM timeline and a new manifest,
then the LSM compaction and clean Hudi 1.x runs after each archival (TimelineArchiverV2).

Archived: completed commits, deltacommits, replacecommits, cleans and rollbacks. Never archived:
savepoints and restores (Hudi's archivers never move them), anything at or after the earliest
pending instant (a pending compaction included), the earliest savepoint, the last clean's
earliest commit to retain, or the first replacecommit the last clean has not cleaned after (Hudi's
getEarliestInstantToRetainForClustering: without the replacecommit on the active timeline, Hudi's
readers would see the file groups it replaced as live until a clean deletes them). A completed
compaction's `.compaction.requested`/`.inflight` go with its commit. Archived instants stay on
upsertlake's timeline (`Timeline.archived`), so time travel and incremental reads still reach them
while their files exist. Archive files of earlier upsertlake
releases (their own format) are moved into Hudi's with the next archival.

Order, so that a crash at any point loses nothing: the archive is written first (a reader takes
an instant found both active and archived once), then the legacy files go, then each instant's
pending files and last its completed one (as Hudi deletes them: never a pending file left whose
completed one is gone, which would read as a failed write).
"""

from __future__ import annotations

from datetime import datetime, timezone

from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.errors import ConfigError, CorruptTableError
from upsertlake.layout.markers import key_summary_folder
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline import archived_log, archived_lsm, documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.archived import LEGACY_FOLDER, legacy_files, read_legacy_file
from upsertlake.timeline.archived_log import ArchivedFile
from upsertlake.timeline.archived_lsm import LsmInstant
from upsertlake.timeline.commit_metadata import AVRO_MAGIC, json_to_avro
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.instant_time import format_instant_time
from upsertlake.timeline.layouts import TimelineLayout
from upsertlake.timeline.retention import cleaned_before, savepoint_times

ARCHIVED_ACTIONS = frozenset({*WRITE_ACTIONS, Action.CLEAN, Action.ROLLBACK})


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
        doomed = _to_archive(timeline, keep_min, keep_max)
        if not doomed:
            return []
        layout = timeline.layout
        listed = storage.list(layout.folder)  # one listing for every instant's files
        files = {inst: _files_of(inst, listed, layout) for inst in doomed}
        legacy = legacy_files(storage.list(LEGACY_FOLDER))
        moved = {i: data for entry in legacy for i, data in read_legacy_file(storage, entry).items()}
        if layout.version == 1:
            finish_last_merge(storage, layout.archive)
            _write_log(storage, layout, timeline, files, moved, cfg.get(opt.COMMITS_ARCHIVAL_BATCH))
        else:
            _write_lsm(storage, layout, timeline, files, moved, cfg.get(opt.TIMELINE_COMPACTION_BATCH))
        for entry in legacy:
            storage.delete(entry.path)
        for inst in doomed:  # pending files first, the completed one last
            for entry in sorted(files[inst], key=lambda e: (layout.parse(e.name).is_completed, e.name)):  # type: ignore[union-attr]
                storage.delete(entry.path)
            for entry in listed:  # the temporary file of a writer that died creating one (write_if_absent's)
                if entry.name.startswith(f".{inst.time}") and entry.name.endswith(".tmp"):
                    storage.delete(entry.path)
            storage.delete_dir(key_summary_folder(inst.time))
        if layout.version == 1 and cfg.get(opt.ARCHIVE_MERGE_ENABLE):
            merge_small_files(storage, layout.archive, cfg)
    return doomed


def _to_archive(timeline: Timeline, keep_min: int, keep_max: int) -> list[Instant]:
    """The completed instants the limits let go, oldest first."""
    active = timeline.active()
    writes = [i for i in active if i.action in WRITE_ACTIONS and i.is_completed]
    if len(writes) <= keep_max:
        return []
    bounds = [writes[len(writes) - keep_min].time, *savepoint_times(timeline)]
    # Nothing at or after the first pending instant (a compaction still pending included) is archived.
    bounds += [i.time for i in timeline.shown() if not i.is_completed][:1]
    bounds += [b for b in [cleaned_before(timeline), _first_uncleaned_replace(timeline)] if b]
    cutoff = min(bounds)
    return [i for i in active if i.is_completed and i.time < cutoff and i.action in ARCHIVED_ACTIONS]


def _first_uncleaned_replace(timeline: Timeline) -> str | None:
    """The first replacecommit (any state) at or after the last completed clean's earliest commit
    to retain (its time, when it recorded none); the first of all without a completed clean."""
    replaces = [i.time for i in timeline.active() if i.action is Action.REPLACE_COMMIT]
    cleans = [i for i in timeline.active() if i.action is Action.CLEAN and i.is_completed]
    if not replaces or not cleans:
        return replaces[0] if replaces else None
    doc = documents.decode(timeline.document(cleans[-1]), f"clean {cleans[-1].time}")
    bound = doc.get("earliestCommitToRetain") or cleans[-1].time
    return next((t for t in replaces if t >= bound), None)


def _files_of(inst: Instant, listed: list[FileEntry], layout: TimelineLayout) -> list[FileEntry]:
    """The timeline files of a completed instant, every state, with a completed compaction's plan
    files (the requested and inflight `compaction` of its commit), oldest state first."""
    actions = {inst.action} | ({Action.COMPACTION} if inst.action is Action.COMMIT else set())
    mine = []
    for entry in listed:
        parsed = None if entry.is_dir else layout.parse(entry.name)
        if parsed is not None and parsed.time == inst.time and parsed.action in actions:
            mine.append((parsed, entry))
    mine.sort(key=lambda p: (p[0].action is not Action.COMPACTION, p[0].state.rank))
    return [entry for _, entry in mine]


def _modified(entry: FileEntry, layout: TimelineLayout) -> str:
    """A file's modification time as an instant time (Hudi's state transition time)."""
    return format_instant_time(datetime.fromtimestamp(entry.mtime_ns / 1e9, timezone.utc), layout.zone)


def _write_log(
    storage: Storage,
    layout: TimelineLayout,
    timeline: Timeline,
    files: dict[Instant, list[FileEntry]],
    moved: dict[Instant, bytes],
    block: int,
) -> None:
    """Version 6: one new archive log file, the moved legacy instants first (their completed
    files alone), then one entry per file of each archived instant."""
    batch = [archived_log.entry(ArchivedFile(i, data)) for i, data in sorted(moved.items())]
    for inst, entries in files.items():
        for entry in entries:
            state = layout.parse(entry.name)
            assert state is not None
            data = timeline.document(inst) if state.is_completed else storage.read_bytes(entry.path)
            batch.append(archived_log.entry(ArchivedFile(state, data, _modified(entry, layout))))
    storage.makedirs(layout.archive)
    _create_log_file(storage, layout.archive, archived_log.encode_archive(batch, block))


def _create_log_file(storage: Storage, folder: str, data: bytes) -> str:
    """A new archive log file, the version after the newest; its path."""
    while True:  # a file another archiver created meanwhile: the next version, as Hudi rolls over
        path = f"{folder}/{archived_log.next_archive_file_name(storage.list(folder))}"
        if storage.write_if_absent(path, data):
            return path


def merge_small_files(storage: Storage, folder: str, cfg: Config) -> None:
    """Version 6, under the lock: once `hoodie.archive.merge.files.batch.size` of the newest
    archive files are small, their entries go into one new file (Hudi 0.15's
    mergeArchiveFilesIfNecessary): the plan first, then the merged file, the small ones deleted,
    the plan last. Each archival writes a file, and every process new to the table reads them all
    (a GET each on an object store): merged, their number stays bounded."""
    listing = storage.list(folder)
    candidates = archived_log.merge_candidates(listing, cfg.get(opt.ARCHIVE_MERGE_SMALL_FILE_LIMIT))
    if len(candidates) < cfg.get(opt.ARCHIVE_MERGE_FILES_BATCH):
        return
    merged = archived_log.next_archive_file_name(listing)
    plan = f"{folder}/{archived_log.MERGE_PLAN}"
    storage.write_bytes(plan, archived_log.merge_plan([storage.full_path(e.path) for e in candidates], merged))
    entries = [
        e for c in candidates for e in archived_log.read_entries(storage.read_bytes(c.path), storage.full_path(c.path))
    ]
    data = archived_log.encode_archive(entries, cfg.get(opt.COMMITS_ARCHIVAL_BATCH))
    if not storage.write_if_absent(f"{folder}/{merged}", data):
        storage.delete(plan)
        return  # another archiver wrote that version meanwhile: merge another time
    for c in candidates:
        storage.delete(c.path)
    storage.delete(plan)


def finish_last_merge(storage: Storage, folder: str) -> None:
    """Undo or finish a merge that died (Hudi's verifyLastMergeArchiveFilesIfNecessary): with
    every candidate still there its merged file may be partial and goes; with some deleted the
    merged file is whole and the rest go. Then the plan goes."""
    plan = f"{folder}/{archived_log.MERGE_PLAN}"
    try:
        data = storage.read_bytes(plan)
    except FileNotFoundError:
        return
    try:
        candidates, merged = archived_log.read_merge_plan(data, storage.full_path(plan))
    except CorruptTableError:  # a plan torn while written: nothing was merged yet
        storage.delete(plan)
        return
    names = {e.name for e in storage.list(folder)}
    present = [c.rpartition("/")[2] for c in candidates if c.rpartition("/")[2] in names]
    if len(present) == len(candidates):
        storage.delete(f"{folder}/{merged}")
    elif merged in names:
        for name in present:
            storage.delete(f"{folder}/{name}")
    storage.delete(plan)


def _write_lsm(
    storage: Storage,
    layout: TimelineLayout,
    timeline: Timeline,
    files: dict[Instant, list[FileEntry]],
    moved: dict[Instant, bytes],
    batch: int,
) -> None:
    """Versions 8, 9: one layer-0 file of the LSM timeline (a row per instant, sorted by time),
    then Hudi's compaction and clean of its layers."""
    rows = [LsmInstant(_completed(i), _as_avro(i, data) or None) for i, data in moved.items() if i not in files]
    for inst, entries in files.items():
        pending = [(p, e) for e in entries if (p := layout.parse(e.name)) is not None and not p.is_completed]
        rows.append(LsmInstant(inst, timeline.document(inst) or None, _plan(storage, inst, pending)))
    rows.sort(key=lambda r: (r.instant.time, r.instant.action.value))
    storage.makedirs(layout.archive)
    archived_lsm.write(storage, layout.archive, rows)
    archived_lsm.compact_and_clean(storage, layout.archive, batch)


def archive_to_lsm(storage: Storage, source: TimelineLayout, target: TimelineLayout, cfg: Config) -> int:
    """Upgrading from version 6: every instant of the version 6 archive (Hudi's archive log files
    in `source.archive`) written into `target`'s LSM timeline, as Hudi's SevenToEightUpgradeHandler
    does (upgradeToLSMTimeline: LegacyArchivedMetaEntryReader's instants, written by the LSM writer
    in batches of hoodie.commits.archival.batch, then compacted and cleaned). The LSM timeline is
    started afresh (only an upgrade that died wrote there before the switch); the archive log files
    stay, as Hudi leaves them (a version 6 reader of a downgraded table finds them). Returns how
    many instants were written."""
    finish_last_merge(storage, source.archive)
    entries = [
        e
        for f in archived_log.archive_log_files(storage.list(source.archive))
        for e in archived_log.read_entries(storage.read_bytes(f.path), storage.full_path(f.path))
    ]
    rows = [
        LsmInstant(inst, _as_avro(inst, data) or None, plan)
        for inst, data, plan in archived_log.lsm_actions(entries, storage.full_path(source.archive))
    ]
    storage.delete_dir(target.archive)
    storage.makedirs(target.archive)
    batch = cfg.get(opt.COMMITS_ARCHIVAL_BATCH)
    for i in range(0, len(rows), batch):
        archived_lsm.write(storage, target.archive, rows[i : i + batch])
    archived_lsm.compact_and_clean(storage, target.archive, cfg.get(opt.TIMELINE_COMPACTION_BATCH))
    return len(rows)


def lsm_to_archive(storage: Storage, source: TimelineLayout, target: TimelineLayout, cfg: Config) -> int:
    """Downgrading to version 6: the instants of `source`'s LSM timeline written into version 6's
    archive log files in `target.archive`, as Hudi's EightToSevenDowngradeHandler does
    (downgradeFromLSMTimeline: each row an archive entry of its completed instant, its completion
    time as the stateTransitionTime, in blocks of hoodie.commits.archival.batch). Instants the
    archive log files hold already (archived before an upgrade, or by a downgrade that died) are
    not written again. Returns how many were written."""
    finish_last_merge(storage, target.archive)
    held = {
        (i.time, i.action)
        for f in archived_log.archive_log_files(storage.list(target.archive))
        for i in archived_log.completed_instants(
            archived_log.read_entries(storage.read_bytes(f.path), storage.full_path(f.path)), storage.full_path(f.path)
        )
    }
    lsm = archived_lsm.load(storage, source.archive)
    rows = sorted((i, data) for i, data in lsm.items() if (i.time, i.action) not in held)
    if rows:
        entries = [archived_log.entry(ArchivedFile(i, data, i.completion)) for i, data in rows]
        storage.makedirs(target.archive)
        data = archived_log.encode_archive(entries, cfg.get(opt.COMMITS_ARCHIVAL_BATCH))
        _create_log_file(storage, target.archive, data)
    return len(rows)


def _completed(inst: Instant) -> Instant:
    """A legacy instant archived at version 6 has no completion time: its requested time, as
    layout 1 completes instants in the order of their times (Hudi's LSM rows need one)."""
    return inst if inst.completion else inst.with_state(State.COMPLETED, completion=inst.time)


def _as_avro(inst: Instant, data: bytes) -> bytes:
    """A commit document as layout 2 keeps it (Avro): one archived at version 6 is JSON."""
    if inst.action in WRITE_ACTIONS and data and not data.startswith(AVRO_MAGIC):
        return json_to_avro(data, inst.action is Action.REPLACE_COMMIT, f"archived {inst.time}")
    return data


def _plan(storage: Storage, inst: Instant, pending: list[tuple[Instant, FileEntry]]) -> bytes | None:
    """The plan Hudi keeps beside an archived instant (MetadataConversionUtils.createLSMTimelineInstant):
    a clean's cleaner plan, a compaction's plan, a replacecommit's inflight (else requested) document."""
    by_state = {(i.action, i.state): e for i, e in pending}

    def read(action: Action, *states: State) -> bytes | None:
        for state in states:
            entry = by_state.get((action, state))
            data = storage.read_bytes(entry.path) if entry is not None else b""
            if data:
                return data
        return None

    if inst.action is Action.CLEAN:
        return read(Action.CLEAN, State.REQUESTED, State.INFLIGHT)
    if inst.action is Action.COMMIT and any(a is Action.COMPACTION for a, _ in by_state):
        return read(Action.COMPACTION, State.REQUESTED)
    if inst.action is Action.REPLACE_COMMIT:
        return read(Action.REPLACE_COMMIT, State.INFLIGHT, State.REQUESTED)
    return None
