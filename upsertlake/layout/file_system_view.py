"""The file system view: which base file of each file group a reader sees as of an instant.

For each (partition, fileId) the visible base file is the one with the greatest completed
instant ≤ the as-of instant; files of pending or unknown instants are invisible, and file groups
replaced by a completed replacecommit ≤ as-of are gone (docs/DESIGN.md §1). On a merge-on-read table
a file group's visible *slice* is that base file (or none: log-only groups) with the log files
written after it (`latest_file_slices`; docs/DESIGN.md §6).

The listing is checked against the completed commits' write stats: when the version a commit
wrote of a live file group is not on storage, the view refuses (MissingFileError, or
CleanedInstantError when a clean deleted it) instead of falling back to an older version or
dropping the group, for reads and for the writes that would build on them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from typing import NamedTuple

from upsertlake.errors import CleanedInstantError, CorruptTableError, MissingFileError
from upsertlake.layout.base_files import PARQUET_EXTENSION, base_extension
from upsertlake.logfile.names import LogFileName, is_log_path
from upsertlake.metadata.listing import listed_files
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Action, Instant
from upsertlake.timeline.layouts import METAFOLDER
from upsertlake.timeline.retention import cleaned_files

FileGroup = tuple[str, str]  # a file group: (partition path, file id)

PARTITION_METAFILE = ".hoodie_partition_metadata"
BASE_FILE_EXTENSION = PARQUET_EXTENSION  # what we write; Lance files are read too (`layout.base_files`)
LISTING_THREADS = 8  # partitions a scoped view lists one by one, all at once (each listing is one request)


@dataclass(frozen=True)
class BaseFile:
    """One version of a file group: `<fileId>_<writeToken>_<instant>.parquet` (or `.lance`)."""

    path: str
    partition_path: str
    file_id: str
    write_token: str
    instant_time: str
    size: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def file_group(self) -> FileGroup:
        return (self.partition_path, self.file_id)

    @classmethod
    def parse(cls, entry: FileEntry) -> BaseFile:
        partition, _, name = entry.path.rpartition("/")
        stem = name[: -len(base_extension(name) or BASE_FILE_EXTENSION)]
        parts = stem.split("_")
        if len(parts) != 3 or not all(parts):
            raise CorruptTableError(
                f"base file name {entry.path!r} does not parse as <fileId>_<writeToken>_<instant>.<format>"
            )
        file_id, token, instant = parts
        return cls(entry.path, partition, file_id, token, instant, entry.size)


def _is_base_file(path: str) -> bool:
    name = path.rpartition("/")[2]
    return base_extension(name) is not None and not name.startswith(".")


def slice_of(keys: list[str], completed_at: str) -> str | None:
    """The base instant of the slice a log completed at `completed_at` belongs to: the newest
    base instant not after it (Hudi 1.x, HoodieFileGroup.getBaseInstantTime); None when it
    completed before every base: the group's first slice, of log files only."""
    at = bisect_right(keys, completed_at)
    return keys[at - 1] if at else None


def base_file_name(file_id: str, write_token: str, instant_time: str) -> str:
    return f"{file_id}_{write_token}_{instant_time}{BASE_FILE_EXTENSION}"


@dataclass(frozen=True)
class LogFile:
    """One log file of a merge-on-read file group: `.<fileId>_<instant>.log.<version>_<writeToken>`.
    `committed`: a completed write the view sees wrote it. Layout 1 lists a slice's logs by name
    (its base instant), the files of pending writes too, whose blocks a read skips by instant;
    such a file may vanish while it is read (its write rolled back meanwhile): nothing is lost."""

    path: str
    partition_path: str
    name: LogFileName
    size: int
    committed: bool = True

    @property
    def file_group(self) -> FileGroup:
        return (self.partition_path, self.name.file_id)


@dataclass(frozen=True)
class FileSlice:
    """What a reader merges for one file group: its base file (None in a log-only group) and the
    log files written after it, in log order."""

    partition_path: str
    file_id: str
    base: BaseFile | None
    logs: tuple[LogFile, ...] = ()

    @property
    def file_group(self) -> FileGroup:
        return (self.partition_path, self.file_id)


class Listing(NamedTuple):
    partitions: list[str]
    base_files: list[BaseFile]
    log_files: list[LogFile]


def list_partitions_and_files(storage: Storage, scope: Collection[str] | None = None) -> Listing:
    """Every partition (folder holding a partition metafile) and every base and log file in them;
    with `scope`, only those partitions: one listing of each (at once), not of the whole table,
    unless there are more of them than listings run at once (then the whole table's listing, one
    request per 1,000 objects, is the cheaper)."""
    if scope is None or len(scope) > LISTING_THREADS:
        entries = storage.list_outside(METAFOLDER)
    else:
        with ThreadPoolExecutor(max_workers=max(1, len(scope))) as pool:
            entries = [e for listed in pool.map(storage.list, sorted(scope)) for e in listed]
    return sort_listing(entries, scope)


def sort_listing(
    entries: Iterable[FileEntry], scope: Collection[str] | None = None, partitions: Iterable[str] = ()
) -> Listing:
    """The partitions, base files and log files among listed `entries` (of `scope` only, if
    given): one listing of the table serves every check that needs one. `partitions`: known
    besides the folders whose partition metafile is listed (the metadata table names them)."""
    partitions = set(partitions)
    files: list[FileEntry] = []
    logs: list[tuple[FileEntry, LogFileName]] = []
    for entry in entries:
        path = entry.path
        if path.startswith(METAFOLDER + "/") or path == METAFOLDER or entry.is_dir:
            continue
        name = entry.name
        if name == PARTITION_METAFILE:
            partitions.add(path.rpartition("/")[0])
        elif _is_base_file(name):
            files.append(entry)
        elif name.startswith(".") and (log := LogFileName.parse(name)) is not None and not log.is_cdc:
            logs.append((entry, log))
    if scope is not None:
        partitions &= set(scope)
    base_files = [BaseFile.parse(f) for f in files if f.path.rpartition("/")[0] in partitions]
    log_files = [
        LogFile(e.path, folder, log, e.size)
        for e, log in logs
        if (folder := e.path.rpartition("/")[0]) in partitions
    ]
    return Listing(sorted(partitions), base_files, log_files)


class FileSystemView:
    """The latest visible base file of every file group, as of an instant (default: newest).

    `as_of` is a requested instant time (time travel). `only` makes just the files those completed
    writes wrote visible: an incremental read sees the files of the commits in its range, as Hudi
    builds its file groups from those commits' metadata alone (a slice of such a view holds the
    range's base file and log files only, never an older base file the range did not write).
    `partitions` scopes the view to those partitions: it lists only them (a write lists the
    partitions its batch touches, not the table), and refuses questions about any other.
    """

    def __init__(
        self,
        timeline: Timeline,
        as_of: str | None = None,
        only: list[Instant] | None = None,
        partitions: Iterable[str] | None = None,
    ) -> None:
        self.timeline = timeline
        self.storage = timeline.storage
        self.as_of = as_of
        self.range_only = only is not None
        self.scope = None if partitions is None else frozenset(partitions)
        self.visible_instants = (
            list(only) if only is not None
            else [i for i in timeline.completed_writes() if as_of is None or i.time <= as_of]
        )
        self._visible_times = {i.time for i in self.visible_instants}

    @cached_property
    def _listing(self) -> Listing:
        """Storage's listing: every file, those of pending and failed writes too."""
        return list_partitions_and_files(self.storage, self.scope)

    @cached_property
    def _visible(self) -> Listing:
        """The listing visible files are picked from: the metadata table's when it can be trusted
        (no listing of the partitions, docs/DESIGN.md §11), else storage's."""
        listed = listed_files(self.timeline, self.scope)
        if listed is None:
            return self._listing
        partitions, entries = listed
        return sort_listing(entries, self.scope, partitions)

    def _scoped(self, partitions: Iterable[str]) -> None:
        """Refuse a question about partitions this view did not list (a bug, never an empty answer)."""
        if self.scope is not None:
            outside = sorted(set(partitions) - self.scope)
            if outside:
                raise ValueError(f"this file system view lists partitions {sorted(self.scope)} only, not {outside}")

    @cached_property
    def replaced_file_groups(self) -> set[FileGroup]:
        replaced: set[tuple[str, str]] = set()
        for inst in self.visible_instants:
            if inst.action is Action.REPLACE_COMMIT:
                meta = self.timeline.commit_metadata(inst)
                for partition, ids in (meta.partition_to_replace_file_ids or {}).items():
                    replaced.update((partition, fid) for fid in ids)
        return replaced

    @cached_property
    def _committed(self) -> dict[tuple[str, str], tuple[str, Instant]]:
        """Per live file group, the file its newest visible commit wrote and that commit, from the
        write stats (no file is opened or stat-ed: the listing is what they are checked against).
        A commit whose metadata cannot be parsed is left out: the doctor and every write report it."""
        newest: dict[tuple[str, str], tuple[str, Instant]] = {}
        self.timeline.prefetch_documents(self.visible_instants)
        for inst in sorted(self.visible_instants, key=lambda i: i.time, reverse=True):
            try:
                written = self.timeline.commit_metadata(inst).written_files
            except CorruptTableError:
                continue
            for group, path in written:
                if group not in newest and _is_base_file(path) and (self.scope is None or group[0] in self.scope):
                    newest[group] = (path, inst)
        for group in self.replaced_file_groups:
            newest.pop(group, None)
        return newest

    @cached_property
    def _latest_by_group(self) -> dict[tuple[str, str], BaseFile]:
        latest: dict[tuple[str, str], BaseFile] = {}
        for bf in self._visible.base_files:
            if bf.instant_time not in self._visible_times or bf.file_group in self.replaced_file_groups:
                continue
            seen = latest.get(bf.file_group)
            if seen is None or bf.instant_time > seen.instant_time:
                latest[bf.file_group] = bf
        return latest

    @cached_property
    def _log_only(self) -> dict[str, list[FileSlice]]:
        """Per partition, the slices of file groups that have log files and no visible base file."""
        out: dict[str, list[FileSlice]] = defaultdict(list)
        for (partition, file_id), logs in sorted(self._visible_logs.items()):
            if (partition, file_id) not in self._latest_by_group:
                out[partition].append(FileSlice(partition, file_id, None, logs))
        return dict(out)

    @cached_property
    def _latest(self) -> dict[str, list[BaseFile]]:
        by_partition: dict[str, list[BaseFile]] = defaultdict(list)
        for bf in sorted(self._latest_by_group.values(), key=lambda b: (b.partition_path, b.file_id)):
            by_partition[bf.partition_path].append(bf)
        return dict(by_partition)

    @cached_property
    def _committed_logs(self) -> frozenset[str]:
        """The log files the visible completed writes wrote (their write stats name them)."""
        named: set[str] = set()
        for inst in self.visible_instants:
            try:
                named.update(path for _, path in self.timeline.commit_metadata(inst).written_files if is_log_path(path))
            except CorruptTableError:
                continue
        return frozenset(named)

    @cached_property
    def _visible_logs(self) -> dict[tuple[str, str], tuple[LogFile, ...]]:
        """Per file group, the log files of its visible slice, in log order (merge-on-read).

        Layout 1 names a log by its slice's base instant: the slice of the visible base file, and
        later ones (a compaction pending or past the as-of instant) folded onto it; their blocks
        are filtered by instant when read. Layout 2 names a log by its deltacommit: a visible one
        belongs to the slice of the newest base file older than its completion, as Hudi 1.x
        places it (HoodieFileGroup.getBaseInstantTime)."""
        by_group: dict[tuple[str, str], list[LogFile]] = defaultdict(list)
        for log in self._visible.log_files:
            if log.file_group not in self.replaced_file_groups:
                by_group[log.file_group].append(log)
        if not by_group:
            return {}
        bases: dict[tuple[str, str], list[str]] = defaultdict(list)
        starts: dict[tuple[str, str], list[str]] = defaultdict(list)  # every committed base, visible or not
        committed = {i.time for i in self.timeline.completed_writes()}
        for bf in self._visible.base_files:
            if bf.instant_time in self._visible_times:
                bases[bf.file_group].append(bf.instant_time)
            if bf.instant_time in (self._visible_times if self.range_only else committed):
                starts[bf.file_group].append(bf.instant_time)
        layout_2 = self.timeline.layout.has_completion_times
        completion = {i.time: i.completed_at for i in self.visible_instants}
        out: dict[tuple[str, str], tuple[LogFile, ...]] = {}
        for group, logs in by_group.items():
            keys = sorted(bases.get(group, ()))
            if layout_2:
                # A log completed after a later base (a compaction past the as-of instant) is in
                # that base's slice, which this view does not see: as Hudi's readers, leave it out.
                latest = keys[-1] if keys else None
                slicing = sorted(starts.get(group, ()))
                logs = [
                    log for log in logs
                    if log.name.instant in completion and slice_of(slicing, completion[log.name.instant]) == latest
                ]
            elif self.range_only:  # the range's logs of the newest slice they or its bases name
                logs = [log for log in logs if log.path in self._committed_logs]
                newest = max([*keys, *(log.name.instant for log in logs)], default=None)
                logs = [log for log in logs if log.name.instant == newest]
            elif keys:
                logs = [log for log in logs if log.name.instant >= keys[-1]]
            else:  # a log-only group: its slice starts at the deltacommit that created it
                first = min(log.name.instant for log in logs)
                logs = logs if first in self._visible_times else []
            if not layout_2:
                logs = [replace(log, committed=log.path in self._committed_logs) for log in logs]
            if logs:
                out[group] = tuple(sorted(logs, key=lambda log: log.name.sort_key()))
        return out

    @cached_property
    def _missing(self) -> dict[str, list[tuple[str, Instant]]]:
        """Per partition, the committed files this view needs that the listing lacks: the listed
        version of their file group is older than the one a commit wrote, or there is none."""
        missing: dict[str, list[tuple[str, Instant]]] = defaultdict(list)
        for group, (path, inst) in sorted(self._committed.items()):
            listed = self._latest_by_group.get(group)
            if listed is None or listed.instant_time < inst.time:
                missing[group[0]].append((path, inst))
        if self._visible.log_files or any(i.action is Action.DELTA_COMMIT for i in self.visible_instants):
            for path, inst in self._missing_logs():
                missing[path.rpartition("/")[0]].append((path, inst))
        return dict(missing)

    def _missing_logs(self) -> list[tuple[str, Instant]]:
        """Log files visible deltacommits wrote into the slices this view reads, not on storage."""
        listed = {log.path for log in self._visible.log_files}
        bases = {group: bf.instant_time for group, bf in self._latest_by_group.items()}
        completion = {i.time: i.completed_at for i in self.visible_instants}
        gone = []
        for inst in self.visible_instants:
            if inst.action is not Action.DELTA_COMMIT:
                continue
            try:
                written = self.timeline.commit_metadata(inst).written_files
            except CorruptTableError:
                continue
            for group, path in written:
                name = LogFileName.parse(path.rpartition("/")[2])
                if name is None or path in listed or group in self.replaced_file_groups:
                    continue
                if self.scope is not None and group[0] not in self.scope:
                    continue
                base = bases.get(group)
                start = completion[name.instant] if self.timeline.layout.has_completion_times else name.instant
                if base is None or start >= base:
                    gone.append((path, inst))
        return gone

    def check_complete(self, partitions: Iterable[str] | None = None) -> None:
        """Raise when a file this view needs (in `partitions`, default all) is not on storage."""
        if partitions is not None:
            partitions = list(partitions)
            self._scoped(partitions)
        wanted = self._missing.keys() if partitions is None else [p for p in partitions if p in self._missing]
        gone = [entry for p in sorted(wanted) for entry in self._missing[p]]
        if gone:
            raise self.missing_error(gone)

    def missing_error(self, gone: list[tuple[str, Instant]]) -> CleanedInstantError | MissingFileError:
        path, inst = gone[0]
        others = f" (and {len(gone) - 1} more committed file(s))" if len(gone) > 1 else ""
        if path in cleaned_files(self.timeline):
            snapshot = f"the snapshot as of {self.as_of}" if self.as_of else "this read"
            return CleanedInstantError(
                f"{snapshot} needs {path}, written by {inst.action.value} {inst.time}, "
                f"which a clean deleted{others}: that instant is outside the retained window. Read from a "
                "later instant, or savepoint instants you need to keep"
            )
        where = self.storage.full_path(path)
        now = Timeline.load(self.storage, self.timeline.layout).get(inst.time, inst.action)
        if now is None or not now.is_completed:  # a rollback or restore ran since the timeline was read
            return MissingFileError(
                f"{where}: its {inst.action.value} {inst.time} was rolled back while this view listed the table; "
                "read (or write) again"
            )
        folder = path.rpartition("/")[0]
        why = (
            f"is in a folder without {PARTITION_METAFILE}, so readers cannot see it"
            if self.storage.exists(path) and folder not in self._listing.partitions
            else "is missing"
        )
        recorded = "the archived timeline" if inst in self.timeline.archived else self.timeline.path(inst)
        return MissingFileError(
            f"{where}, written by {inst.action.value} {inst.time} ({recorded}), {why}{others}. "
            "Reading or writing its file group would silently use an older version of it (or lose its rows), "
            f"so this is refused. Run `upsertlake doctor {self.storage.base}`; put the file back, or return "
            f"to a savepoint with `upsertlake restore {self.storage.base} INSTANT`"
        )

    def missing_in(self, partitions: Iterable[str]) -> list[tuple[str, Instant]]:
        """The files the visible writes wrote in `partitions` that are gone from storage, with the
        write of each: every version, not only the newest, as Hudi 1.x's incremental query checks
        before it falls back to a full table scan."""
        wanted = set(partitions)
        listed = {f.path for f in self._listing.base_files} | {f.path for f in self._listing.log_files}
        gone = []
        for inst in self.visible_instants:
            try:
                written = self.timeline.commit_metadata(inst).written_files
            except CorruptTableError:
                continue
            gone += [(path, inst) for group, path in written if group[0] in wanted and path not in listed]
        return gone

    def partitions(self) -> list[str]:
        """Partitions that hold at least one visible file group (whose file may be missing)."""
        return sorted(self._latest.keys() | self._missing.keys() | self._log_only.keys())

    def file_ids(self, partitions: list[str] | None = None) -> dict[str, list[str]]:
        """The visible file groups per partition, also those whose file is missing: what an
        overwrite or a partition delete retires without reading them."""
        if partitions is not None:
            self._scoped(partitions)
        groups = {bf.file_group for bf in self._latest_by_group.values()} | self._committed.keys()
        groups |= self._visible_logs.keys()
        out: dict[str, list[str]] = defaultdict(list)
        for partition, file_id in sorted(groups):
            if partitions is None or partition in partitions:
                out[partition].append(file_id)
        return dict(out)

    def all_partitions(self) -> list[str]:
        """Every partition (in the view's scope): the folders on storage, or the metadata table's list."""
        return self._visible.partitions

    def latest_base_files(self, partitions: list[str] | None = None) -> list[BaseFile]:
        """The visible file of every file group (of `partitions`); MissingFileError when one of
        them is gone from storage."""
        self.check_complete(partitions)
        wanted = self._latest.keys() if partitions is None else partitions
        return [bf for p in wanted for bf in self._latest.get(p, [])]

    def latest_by_group(self, partitions: list[str] | None = None) -> dict[tuple[str, str], BaseFile]:
        """`latest_base_files` by file group (partition, fileId)."""
        return {bf.file_group: bf for bf in self.latest_base_files(partitions)}

    def latest_file_slices(self, partitions: list[str] | None = None) -> list[FileSlice]:
        """The visible slice of every file group (of `partitions`): its base file and the log files
        to merge over it (none on a copy-on-write table). MissingFileError when a file is gone."""
        self.check_complete(partitions)
        wanted = self.partitions() if partitions is None else partitions
        logs = self._visible_logs
        out = []
        for p in wanted:
            out += [FileSlice(p, bf.file_id, bf, logs.get(bf.file_group, ())) for bf in self._latest.get(p, [])]
            out += self._log_only.get(p, [])
        return out

    def all_log_files(self) -> list[LogFile]:
        """Every log file on storage in a partition folder, of any instant."""
        return list(self._listing.log_files)

    def all_base_files(self) -> list[BaseFile]:
        """Every base file on storage in a partition folder (in the view's scope), of any instant."""
        return list(self._listing.base_files)
