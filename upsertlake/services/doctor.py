"""The table doctor: what is wrong with a table, each finding naming its file, and the few safe fixes.

Checks: `hoodie.properties` (Hudi's validation, then against the table itself, since the checksum
cannot see lost lines), every instant file parses, files nobody committed (orphans), committed files
that are gone or hidden behind a version of a later instant, pending writes and their heartbeats,
partition folders without metadata. The properties-against-table check is the write guard's
(`upsertlake.services.write_guard`), which every write runs: the guard has a room of its own so
that a write does not import the diagnosis.

Fixes, only what cannot lose data: restore `hoodie.properties` from a valid backup that agrees with
the table, or else rebuild it from the table (`upsertlake.services.rebuild`) when every value is
told and the result agrees with the table; roll back failed writes, delete orphaned files of writes
that never committed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from upsertlake.concurrency.heartbeat import HEARTBEAT_FOLDER, HeartbeatPolicy, heartbeat_path, last_heartbeat_ms
from upsertlake.concurrency.lock import make_lock
from upsertlake.config import Config
from upsertlake.config.properties_file import (
    BACKUP_FILE,
    PROPERTIES_FILE,
    PropertiesFile,
    recover_properties,
    replace_properties,
    validate_properties,
)
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import CorruptTableError, TableNotFoundError, UnsupportedTableError, UpsertlakeError
from upsertlake.layout.file_system_view import BASE_FILE_EXTENSION, PARTITION_METAFILE, BaseFile, sort_listing
from upsertlake.layout.markers import read_markers
from upsertlake.layout.properties_check import partition_folders, properties_disagreements
from upsertlake.logfile.names import LogFileName
from upsertlake.services.rebuild import Rebuild, holds_a_timeline, layout_on_disk, rebuild_properties, remnants
from upsertlake.services.rollback import discard_pending
from upsertlake.services.write_guard import what_it_breaks
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import CommitMetadata
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.layouts import METAFOLDER, TimelineLayout, table_layout
from upsertlake.timeline.retention import cleaned_files

DELETE_ORPHAN = "delete the file"
REBUILD_PROPERTIES = "rebuild hoodie.properties from the table"

# Instants whose files are Hudi's Avro documents (a replacecommit's plan is one too).
_AVRO_ACTIONS = {Action.CLEAN, Action.ROLLBACK, Action.SAVEPOINT, Action.RESTORE}


@dataclass(frozen=True)
class Finding:
    """One thing the doctor found: which check, the table-relative file it is about, what is wrong,
    whether it is a problem (False: worth knowing, e.g. a write in progress), and what `--fix`
    would do about it (None: it needs a person)."""

    check: str
    path: str
    message: str
    problem: bool = True
    fix: str | None = None


@dataclass
class Report:
    path: str
    findings: list[Finding] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "ok": self.ok,
            "problems": len(self.problems),
            "findings": [asdict(f) for f in self.findings],
            "fixed": self.fixed,
        }


# -- the doctor ----------------------------------------------------------------------------------
def doctor_config(storage: Storage, options: dict[str, str] | None = None) -> Config:
    """The settings the doctor judges by (heartbeat windows): the table's, from hoodie.properties
    (or its backup) as far as it reads, with `options` on top."""
    props = PropertiesFile.read(storage, PROPERTIES_FILE).props or PropertiesFile.read(storage, BACKUP_FILE).props
    return Config.resolve(options, table_properties=props or {})


def diagnose(storage: Storage, options: Config | None = None, properties: Mapping[str, str] | None = None) -> Report:
    """Run every check; nothing is changed. `properties`: values for a rebuilt hoodie.properties
    that the table cannot tell (see `upsertlake.services.rebuild`)."""
    if not storage.exists(PROPERTIES_FILE) and not storage.exists(BACKUP_FILE) and not holds_a_timeline(storage):
        raise TableNotFoundError(f"no Hudi table at {storage.base} (missing {PROPERTIES_FILE})")
    cfg = options or doctor_config(storage)
    report = Report(storage.base)
    entries = storage.list_outside(METAFOLDER)
    layout = _layout(storage)
    try:
        timeline = Timeline.load(storage, layout)
    except CorruptTableError as exc:  # an unreadable archive: the checks that need the timeline cannot run
        archive = (layout or table_layout(storage)).archive
        report.findings.append(Finding("instant", archive, f"{exc}; the checks that need the timeline did not run"))
        report.findings += check_partition_metadata(storage, entries)
        return report
    except UnsupportedTableError as exc:  # e.g. merge-on-read: its files cannot be judged (nor fixed) here
        report.findings.append(Finding("properties", PROPERTIES_FILE, f"{exc}; no other check ran"))
        return report
    failed = {i.time for i in _failed_writes(storage, timeline, cfg, entries)}
    report.findings += check_properties(storage, timeline, entries, properties)
    report.findings += check_instants(storage, timeline)
    report.findings += check_pending_writes(storage, timeline, cfg, failed)
    report.findings += check_files(storage, timeline, entries, failed)
    report.findings += check_hidden_versions(timeline)
    report.findings += check_partition_metadata(storage, entries)
    return report


def treat(storage: Storage, options: Config | None = None, properties: Mapping[str, str] | None = None) -> Report:
    """Apply the safe fixes, then diagnose again; the report lists what was done. Restores the
    properties only from a valid backup that agrees with the table, else rebuilds them only when
    every value is told and the result agrees with the table; rolls back only writes with no
    sign of life; deletes only files of instants on no timeline and newer than its start."""
    cfg = options or doctor_config(storage)
    before = diagnose(storage, cfg, properties)
    done: list[str] = []
    orphans = [f.path for f in before.findings if f.check == "orphan" and f.fix == DELETE_ORPHAN]
    if any(f.fix for f in before.findings):
        with make_lock(storage, cfg).hold():
            if any(f.fix == REBUILD_PROPERTIES for f in before.findings):
                done.append(_rebuild(storage, properties or {}))
            elif any(f.check == "properties" and f.fix for f in before.findings):
                what = recover_properties(storage)
                if what:
                    done.append(what)
            timeline = Timeline.load(storage)  # as it is now, under the lock
            for inst in _failed_writes(storage, timeline, cfg):
                deleted = discard_pending(storage, inst)
                storage.delete(heartbeat_path(inst.time))
                done.append(
                    f"rolled back failed write {METAFOLDER}/{inst.file_name()} ({len(deleted)} data file(s) deleted)"
                )
            known = {i.time for i in timeline.instants}
            for path in orphans:
                if _file_instant(path) not in known:
                    storage.delete(path)
                    done.append(f"deleted orphaned file {path}")
    after = diagnose(storage, cfg, properties)
    after.fixed = done
    return after


# -- properties ----------------------------------------------------------------------------------
def check_properties(
    storage: Storage, timeline: Timeline, entries: list[FileEntry], given: Mapping[str, str] | None = None
) -> list[Finding]:
    """`hoodie.properties` valid (else whether its backup can stand in, or the table can tell every
    value again) and agreeing with the data (`entries`: the whole table's listing)."""
    main = PropertiesFile.read(storage, PROPERTIES_FILE)
    backup = PropertiesFile.read(storage, BACKUP_FILE)
    try:
        table_config: TableConfig | None = TableConfig.load(storage)  # main if valid, else a valid backup
    except (CorruptTableError, TableNotFoundError):
        table_config = None
    usable = table_config is not None and table_config.damage is None
    disagreements = (
        properties_disagreements(storage, table_config, timeline, partition_folders(entries))
        if usable and table_config else []
    )
    findings: list[Finding] = []
    if main.valid and not backup.missing:
        findings.append(Finding(
            "properties", BACKUP_FILE, "left by an interrupted rewrite; hoodie.properties is valid", problem=False,
            fix=None if disagreements else "delete the leftover backup",
        ))
    rebuild_note, rebuild_fix = "", None
    if disagreements or not (main.valid or backup.valid):
        rebuilt, problems = rebuilt_properties(storage, timeline, entries, given or {})
        if rebuilt.unknown:
            rebuild_note = f"; --fix cannot rebuild it from the table: {rebuilt.missing_hint(storage.base)}"
        elif problems:
            rebuild_note = f"; rebuilt from the table it would still disagree: {'; '.join(problems)}"
        else:
            rebuild_fix = REBUILD_PROPERTIES
    if not main.valid:
        state = (
            f"not usable ({backup.reason})" if not backup.valid
            else "valid but disagrees with the table" if disagreements
            else "valid and agrees with the table"
        )
        restore = (
            "restore hoodie.properties from hoodie.properties.backup" if backup.valid and not disagreements else None
        )
        findings.append(Finding(
            "properties", PROPERTIES_FILE, f"{main.reason}; the backup is {state}{rebuild_note}",
            fix=restore or rebuild_fix,
        ))
    source = table_config.source if table_config is not None else PROPERTIES_FILE
    findings += [
        Finding(
            "properties",
            source,
            f"disagrees with the table: {problem}{rebuild_note if main.valid else ''}",
            fix=rebuild_fix if main.valid else None,
        )
        for problem in disagreements
    ]
    return findings


def rebuilt_properties(
    storage: Storage, timeline: Timeline, entries: list[FileEntry], given: Mapping[str, str]
) -> tuple[Rebuild, list[str]]:
    """hoodie.properties rebuilt from the table (values given with --option first), and why it
    would still not do (empty: it is valid and agrees with the table)."""
    rebuilt = rebuild_properties(storage, timeline, given, sort_listing(entries))
    if rebuilt.unknown:
        return rebuilt, []
    problems = validate_properties(rebuilt.props)
    if problems:
        return rebuilt, problems
    try:
        table_config = TableConfig.from_properties(rebuilt.props)
        table_config.check_readable()
    except UpsertlakeError as exc:
        return rebuilt, [str(exc)]
    return rebuilt, properties_disagreements(storage, table_config, timeline, partition_folders(entries))


def _rebuild(storage: Storage, given: Mapping[str, str]) -> str:
    """Under the lock: rebuild and write hoodie.properties; says what it did and from what."""
    timeline = Timeline.load(storage, _layout(storage))
    rebuilt, problems = rebuilt_properties(storage, timeline, storage.list_outside(METAFOLDER), given)
    if rebuilt.unknown or problems:
        return f"did not rebuild {PROPERTIES_FILE}: the table changed meanwhile; run the doctor again"
    replace_properties(storage, rebuilt.props)
    return f"rebuilt {PROPERTIES_FILE} from the table ({rebuilt.summary()})"


def _layout(storage: Storage) -> TimelineLayout | None:
    """The layout the properties declare while they (or the backup) are valid; else the one the
    instant files use (None: the declared one)."""
    if PropertiesFile.read(storage, PROPERTIES_FILE).valid or PropertiesFile.read(storage, BACKUP_FILE).valid:
        return None
    return layout_on_disk(storage, remnants(storage)[0])


# -- instants ------------------------------------------------------------------------------------
def check_instants(storage: Storage, timeline: Timeline) -> list[Finding]:
    """Every instant file of the active timeline parses; names that look like instants but are not."""
    findings: list[Finding] = []
    for inst in timeline.active():
        rel = f"{METAFOLDER}/{inst.file_name()}"
        try:
            _parse_instant(timeline, inst, rel)
        except CorruptTableError as exc:
            findings.append(Finding("instant", rel, f"{exc}. {what_it_breaks(inst)}"))
    for entry in storage.list(METAFOLDER):
        if not entry.is_dir and entry.name[:1].isdigit() and Instant.from_file_name(entry.name) is None:
            findings.append(Finding("instant", entry.path, "not a timeline file name Hudi writes; readers ignore it",
                                    problem=False))
    return findings


def _parse_instant(timeline: Timeline, inst: Instant, rel: str) -> None:
    if inst.action in WRITE_ACTIONS and inst.is_completed:
        timeline.commit_metadata(inst)
        return
    if inst.action is Action.COMPACTION:  # the plan is in the requested file, whatever the state
        plan = timeline.path(inst.with_state(State.REQUESTED))
        documents.decode(timeline.storage.read_bytes(plan), plan)
        return
    data = timeline.document(inst)
    if not data.strip():
        return
    if inst.action in _AVRO_ACTIONS or (inst.action is Action.REPLACE_COMMIT and inst.state is State.REQUESTED):
        documents.decode(data, rel)
    else:
        CommitMetadata.from_bytes(data, rel)


# -- pending writes and heartbeats ----------------------------------------------------------------
def check_pending_writes(storage: Storage, timeline: Timeline, cfg: Config, failed: set[str]) -> list[Finding]:
    """Pending writes (`failed`: the instants of those nobody works on), compactions, heartbeats."""
    findings: list[Finding] = []
    for inst in timeline.pending_writes():
        rel = f"{METAFOLDER}/{inst.file_name()}"
        beat = last_heartbeat_ms(storage, inst.time)
        seen = f"last heartbeat {_ago(beat)}" if beat else "no heartbeat"
        if inst.time in failed:
            findings.append(Finding("pending", rel, f"a failed write ({inst.state.value}, {seen})",
                                    fix=f"roll back {inst.time}"))
        else:
            findings.append(Finding("pending", rel, f"a write in progress ({inst.state.value}, {seen})", problem=False))
    findings += _check_pending_compactions(storage, timeline, cfg)
    pending = {i.time for i in timeline.pending_writes()} | {i.time for i in timeline.pending_compactions()}
    for entry in storage.list(HEARTBEAT_FOLDER):
        if not entry.is_dir and entry.name not in pending:
            findings.append(
                Finding(
                    "heartbeat",
                    entry.path,
                    f"heartbeat of an instant that is not pending ({_ago(entry.mtime_ns // 1_000_000)})",
                    problem=False,
                )
            )
    return findings


def _check_pending_compactions(storage: Storage, timeline: Timeline, cfg: Config) -> list[Finding]:
    """Compaction plans not completed: waiting to run, running, or left inflight by a compactor
    that died (its files are invisible to readers; the next `compact` rolls it back and runs the
    plan again, as Hudi does)."""
    findings = []
    heartbeats = HeartbeatPolicy.of(cfg)
    for inst in timeline.pending_compactions():
        rel = timeline.path(inst)
        if inst.state is State.REQUESTED:
            findings.append(Finding("pending", rel, "a compaction plan waiting to run (`upsertlake compact` runs it)",
                                    problem=False))
        elif not heartbeats.is_expired(storage, inst.time):
            findings.append(Finding("pending", rel, "a compaction in progress (its heartbeat is alive)", problem=False))
        else:
            findings.append(Finding(
                "pending", rel,
                f"a compaction whose compactor stopped midway: its files are invisible to readers; "
                f"`upsertlake compact {storage.base}` rolls it back and runs its plan again",
            ))
    return findings


def _failed_writes(
    storage: Storage, timeline: Timeline, cfg: Config, entries: Iterable[FileEntry] | None = None
) -> list[Instant]:
    """Pending writes nobody works on: no heartbeat, instant file, marker or data file of theirs
    touched for the heartbeat window (the one its heartbeat declares, else interval x tolerable
    misses of `cfg`). `entries`: the whole table's listing (.hoodie/ aside), listed here if not
    given. A file being written keeps its modification time fresh, so a slow writer
    without heartbeats (Hudi's single writer) is not taken for dead."""
    if not timeline.pending_writes():
        return []
    touched: dict[str, int] = defaultdict(int)
    for entry in storage.list(METAFOLDER, recursive=True):
        if entry.path.startswith(f"{METAFOLDER}/.temp/"):
            stamp = entry.path.split("/")[2]  # markers: .hoodie/.temp/<instant>/...
        else:
            stamp = entry.name.split(".", 1)[0]  # <instant>.<action>..., .heartbeat/<instant>
        touched[stamp] = max(touched[stamp], entry.mtime_ns // 1_000_000)
    for entry in storage.list_outside(METAFOLDER) if entries is None else entries:
        if _is_base_file(entry):
            stamp = BaseFile.parse(entry).instant_time
            touched[stamp] = max(touched[stamp], entry.mtime_ns // 1_000_000)
    return HeartbeatPolicy.of(cfg).failed(storage, timeline, touched)


def _ago(epoch_ms: int) -> str:
    return f"{max(0, int(time.time() - epoch_ms / 1000))} s ago"


# -- data files ----------------------------------------------------------------------------------
def check_files(storage: Storage, timeline: Timeline, entries: list[FileEntry], failed: set[str]) -> list[Finding]:
    """Orphans (files of no completed write, newer than the active timeline) and committed files
    that are gone though no completed clean removed them."""
    findings: list[Finding] = []
    partitions = set(partition_folders(entries))
    files = [BaseFile.parse(e) for e in entries if _is_base_file(e) and _parent(e.path) in partitions]
    completed = {i.time for i in timeline.completed_writes()}
    pending = {i.time for i in timeline.pending_writes()}
    compacting = {i.time for i in timeline.pending_compactions()}  # reported by check_pending_writes
    active = timeline.active()
    start = active[0].time if active else None
    appended = _appended_by(storage, pending)
    for path, t in [(bf.path, bf.instant_time) for bf in files] + _log_files(entries, partitions):
        if path in appended and appended[path] in failed:  # a log a failed write appended blocks to
            findings.append(Finding("orphan", path, f"appended to by failed write {appended[path]}",
                                    fix=f"roll back {appended[path]}"))
            continue
        if t in completed or t in compacting or start is None or t < start:
            continue  # committed, or older than the active timeline (maybe archived by Hudi): never touched
        if t in pending:
            if t in failed:
                findings.append(Finding("orphan", path, f"written by failed write {t}", fix=f"roll back {t}"))
            continue
        findings.append(Finding("orphan", path, f"written by instant {t}, which is on no timeline (nothing commits it)",
                                fix=DELETE_ORPHAN))
    existing = {e.path for e in entries}
    cleaned = cleaned_files(timeline)
    for inst, stats in _active_write_stats(timeline):
        for stat in stats:
            if stat.path and stat.path not in existing and stat.path not in cleaned:
                findings.append(
                    Finding(
                        "missing",
                        stat.path,
                        f"committed by {METAFOLDER}/{inst.file_name()} but gone, and no completed clean removed it",
                    )
                )
    return findings


def _log_files(entries: list[FileEntry], partitions: set[str]) -> list[tuple[str, str]]:
    """(path, instant in its name) of the log files in partition folders: the deltacommit that
    wrote it (table version 8) or the base instant of its slice (version 6)."""
    out = []
    for e in entries:
        name = LogFileName.parse(e.name) if e.name.startswith(".") else None
        if name is not None and _parent(e.path) in partitions:
            out.append((e.path, name.instant))
    return out


def _appended_by(storage: Storage, pending: set[str]) -> dict[str, str]:
    """Files the markers of pending writes name, by the write: a log file a version-6 write appends
    to is named by its slice, not by the write, so its markers say which write touched it."""
    return {path: t for t in sorted(pending) for path, _ in read_markers(storage, t)}


def _file_instant(path: str) -> str:
    """The instant in a data file's name (base file or log file)."""
    name = path.rpartition("/")[2]
    log = LogFileName.parse(name) if name.startswith(".") else None
    return log.instant if log is not None else BaseFile.parse(FileEntry(path, 0, False, 0)).instant_time


def _active_write_stats(timeline: Timeline) -> Iterator[tuple[Instant, list[Any]]]:
    """Each completed write of the active timeline with its write stats (an unreadable commit is
    skipped here: check_instants reports it)."""
    for inst in timeline.completed_writes():
        if inst in timeline.archived:
            continue
        try:
            yield inst, timeline.commit_metadata(inst).write_stats()
        except CorruptTableError:
            continue


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _is_base_file(entry: FileEntry) -> bool:
    """Named as a base file, <fileId>_<writeToken>_<instant>.parquet (what BaseFile.parse reads)."""
    if not entry.name.endswith(BASE_FILE_EXTENSION) or entry.name.startswith("."):
        return False
    parts = entry.name[: -len(BASE_FILE_EXTENSION)].split("_")
    return len(parts) == 3 and all(parts)


# -- partition metadata --------------------------------------------------------------------------
def check_partition_metadata(storage: Storage, entries: Iterable[FileEntry]) -> list[Finding]:
    """Folders with base files but no `.hoodie_partition_metadata` (readers skip them), and metadata
    whose partitionDepth is not the folder's depth."""
    findings: list[Finding] = []
    by_folder: dict[str, list[FileEntry]] = defaultdict(list)
    for e in entries:
        by_folder[_parent(e.path)].append(e)
    for folder, files in sorted(by_folder.items()):
        names = {e.name for e in files}
        data = [e for e in files if _is_base_file(e)]
        meta = f"{folder}/{PARTITION_METAFILE}" if folder else PARTITION_METAFILE
        if PARTITION_METAFILE not in names:
            if data:
                findings.append(
                    Finding(
                        "partition",
                        meta,
                        f"missing: readers skip the {len(data)} data file(s) of {folder or 'the root'}",
                    )
                )
            continue
        depth = _partition_depth(storage, meta)
        expected = len(folder.split("/")) if folder else 0
        if depth is None or depth != expected:
            findings.append(Finding("partition", meta, f"partitionDepth={depth} but the folder's depth is {expected}"))
    return findings


def _partition_depth(storage: Storage, rel: str) -> int | None:
    for line in storage.read_bytes(rel).decode("latin-1").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "partitionDepth" and value.strip().isdigit():
            return int(value.strip())
    return None


def check_hidden_versions(timeline: Timeline) -> list[Finding]:
    """Files committed onto a version named by a later instant: readers order a group's versions by
    instant time, so the commit's rows in that group are hidden from every read (what a retry
    under optimistic concurrency left in earlier versions of upsertlake: it kept its instant and
    merged onto a later commit's version). Nothing can fix it safely: the rows are in the file, not in the table."""
    findings: list[Finding] = []
    for inst, stats in _active_write_stats(timeline):
        for stat in stats:
            if stat.prevCommit not in ("", "null", None) and stat.prevCommit > inst.time:
                findings.append(Finding(
                    "hidden", stat.path,
                    f"committed by {METAFOLDER}/{inst.file_name()} onto the version of file group "
                    f"{stat.partitionPath or '<root>'}/{stat.fileId} written by the later instant "
                    f"{stat.prevCommit}: readers see that version, so the {stat.numWrites} row(s) of "
                    f"this file are hidden; write them again (the file still holds them)",
                ))
    return findings
