"""The file system view: which base file of each file group a reader sees as of an instant.

For each (partition, fileId) the visible base file is the one with the greatest completed
instant ≤ the as-of instant; files of pending or unknown instants are invisible, and file groups
replaced by a completed replacecommit ≤ as-of are gone (DESIGN.md §1).

The listing is checked against the completed commits' write stats: when the version a commit
wrote of a live file group is not on storage, the view refuses (MissingFileError, or
CleanedInstantError when a clean deleted it) instead of falling back to an older version or
dropping the group, for reads and for the writes that would build on them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

from upsertlake.errors import CleanedInstantError, CorruptTableError, MissingFileError
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline.active import METAFOLDER, Timeline
from upsertlake.timeline.instant import Action, Instant
from upsertlake.timeline.retention import cleaned_files

PARTITION_METAFILE = ".hoodie_partition_metadata"
BASE_FILE_EXTENSION = ".parquet"
LISTING_THREADS = 8  # partitions a scoped view lists one by one, all at once (each listing is one request)


@dataclass(frozen=True)
class BaseFile:
    """One version of a file group: `<fileId>_<writeToken>_<instant>.parquet`."""

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
    def file_group(self) -> tuple[str, str]:
        return (self.partition_path, self.file_id)

    @classmethod
    def parse(cls, entry: FileEntry) -> BaseFile:
        partition, _, name = entry.path.rpartition("/")
        stem = name[: -len(BASE_FILE_EXTENSION)]
        parts = stem.split("_")
        if len(parts) != 3 or not all(parts):
            raise CorruptTableError(
                f"base file name {entry.path!r} does not parse as <fileId>_<writeToken>_<instant>.parquet"
            )
        file_id, token, instant = parts
        return cls(entry.path, partition, file_id, token, instant, entry.size)


def base_file_name(file_id: str, write_token: str, instant_time: str) -> str:
    return f"{file_id}_{write_token}_{instant_time}{BASE_FILE_EXTENSION}"


def list_partitions_and_files(
    storage: Storage, scope: Collection[str] | None = None
) -> tuple[list[str], list[BaseFile]]:
    """Every partition (folder holding a partition metafile) and every base file in them; with
    `scope`, only those partitions: one listing of each (at once), not of the whole table, unless
    there are more of them than listings run at once (then the whole table's listing, one request
    per 1,000 objects, is the cheaper)."""
    if scope is None or len(scope) > LISTING_THREADS:
        entries = storage.list("", recursive=True)
    else:
        with ThreadPoolExecutor(max_workers=max(1, len(scope))) as pool:
            entries = [e for listed in pool.map(storage.list, sorted(scope)) for e in listed]
    partitions: set[str] = set()
    files: list[FileEntry] = []
    for entry in entries:
        path = entry.path
        if path.startswith(METAFOLDER + "/") or path == METAFOLDER or entry.is_dir:
            continue
        name = entry.name
        if name == PARTITION_METAFILE:
            partitions.add(path.rpartition("/")[0])
        elif name.endswith(BASE_FILE_EXTENSION) and not name.startswith("."):
            files.append(entry)
    if scope is not None:
        partitions &= set(scope)
    base_files = [BaseFile.parse(f) for f in files if f.path.rpartition("/")[0] in partitions]
    return sorted(partitions), base_files


class FileSystemView:
    """The latest visible base file of every file group, as of an instant (default: newest).

    `as_of` is a requested instant time (time travel). `only` makes just those completed writes
    visible: an incremental read of timeline layout 2 sees the files of the commits in its range,
    as Hudi 1.x and hudi-rs build file groups from those commits' metadata alone.
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
        self.scope = None if partitions is None else frozenset(partitions)
        self.visible_instants = (
            list(only) if only is not None
            else [i for i in timeline.completed_writes() if as_of is None or i.time <= as_of]
        )
        self._visible_times = {i.time for i in self.visible_instants}

    @cached_property
    def _listing(self) -> tuple[list[str], list[BaseFile]]:
        return list_partitions_and_files(self.storage, self.scope)

    def _scoped(self, partitions: Iterable[str]) -> None:
        """Refuse a question about partitions this view did not list (a bug, never an empty answer)."""
        if self.scope is not None:
            outside = sorted(set(partitions) - self.scope)
            if outside:
                raise ValueError(f"this file system view lists partitions {sorted(self.scope)} only, not {outside}")

    @cached_property
    def replaced_file_groups(self) -> set[tuple[str, str]]:
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
        self.timeline.prefetch_commit_metadata(self.visible_instants)
        for inst in sorted(self.visible_instants, key=lambda i: i.time, reverse=True):
            try:
                written = self.timeline.commit_metadata(inst).written_files
            except CorruptTableError:
                continue
            for group, path in written:
                if group not in newest and (self.scope is None or group[0] in self.scope):
                    newest[group] = (path, inst)
        for group in self.replaced_file_groups:
            newest.pop(group, None)
        return newest

    @cached_property
    def _latest_by_group(self) -> dict[tuple[str, str], BaseFile]:
        latest: dict[tuple[str, str], BaseFile] = {}
        for bf in self._listing[1]:
            if bf.instant_time not in self._visible_times or bf.file_group in self.replaced_file_groups:
                continue
            seen = latest.get(bf.file_group)
            if seen is None or bf.instant_time > seen.instant_time:
                latest[bf.file_group] = bf
        return latest

    @cached_property
    def _latest(self) -> dict[str, list[BaseFile]]:
        by_partition: dict[str, list[BaseFile]] = defaultdict(list)
        for bf in sorted(self._latest_by_group.values(), key=lambda b: (b.partition_path, b.file_id)):
            by_partition[bf.partition_path].append(bf)
        return dict(by_partition)

    @cached_property
    def _missing(self) -> dict[str, list[tuple[str, Instant]]]:
        """Per partition, the committed files this view needs that the listing lacks: the listed
        version of their file group is older than the one a commit wrote, or there is none."""
        missing: dict[str, list[tuple[str, Instant]]] = defaultdict(list)
        for group, (path, inst) in sorted(self._committed.items()):
            listed = self._latest_by_group.get(group)
            if listed is None or listed.instant_time < inst.time:
                missing[group[0]].append((path, inst))
        return dict(missing)

    def check_complete(self, partitions: Iterable[str] | None = None) -> None:
        """Raise when a file this view needs (in `partitions`, default all) is not on storage."""
        if partitions is not None:
            partitions = list(partitions)
            self._scoped(partitions)
        wanted = self._missing.keys() if partitions is None else [p for p in partitions if p in self._missing]
        gone = [entry for p in sorted(wanted) for entry in self._missing[p]]
        if gone:
            raise self._missing_error(gone)

    def _missing_error(self, gone: list[tuple[str, Instant]]) -> CleanedInstantError | MissingFileError:
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
            if self.storage.exists(path) and folder not in self._listing[0]
            else "is missing"
        )
        recorded = "the archived timeline" if inst in self.timeline.archived else self.timeline.path(inst)
        return MissingFileError(
            f"{where}, written by {inst.action.value} {inst.time} ({recorded}), {why}{others}. "
            "Reading or writing its file group would silently use an older version of it (or lose its rows), "
            f"so this is refused. Run `upsertlake doctor {self.storage.base}`; put the file back, or return "
            f"to a savepoint with `upsertlake restore {self.storage.base} INSTANT`"
        )

    def partitions(self) -> list[str]:
        """Partitions that hold at least one visible file group (whose file may be missing)."""
        return sorted(self._latest.keys() | self._missing.keys())

    def file_ids(self, partitions: list[str] | None = None) -> dict[str, list[str]]:
        """The visible file groups per partition, also those whose file is missing: what an
        overwrite or a partition delete retires without reading them."""
        if partitions is not None:
            self._scoped(partitions)
        groups = {bf.file_group for bf in self._latest_by_group.values()} | self._committed.keys()
        out: dict[str, list[str]] = defaultdict(list)
        for partition, file_id in sorted(groups):
            if partitions is None or partition in partitions:
                out[partition].append(file_id)
        return dict(out)

    def all_partitions(self) -> list[str]:
        """Every partition folder on storage (in the view's scope), visible or not."""
        return self._listing[0]

    def latest_base_files(self, partitions: list[str] | None = None) -> list[BaseFile]:
        """The visible file of every file group (of `partitions`); MissingFileError when one of
        them is gone from storage."""
        self.check_complete(partitions)
        wanted = self._latest.keys() if partitions is None else partitions
        return [bf for p in wanted for bf in self._latest.get(p, [])]

    def all_base_files(self) -> list[BaseFile]:
        """Every base file on storage in a partition folder (in the view's scope), of any instant."""
        return list(self._listing[1])
