"""The file system view: which base file of each file group a reader sees as of an instant.

For each (partition, fileId) the visible base file is the one with the greatest completed
instant ≤ the as-of instant; files of pending or unknown instants are invisible, and file groups
replaced by a completed replacecommit ≤ as-of are gone (DESIGN.md §1).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property

from upsertlake.errors import CorruptTableError
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline.active import METAFOLDER, Timeline
from upsertlake.timeline.instant import Action, Instant

PARTITION_METAFILE = ".hoodie_partition_metadata"
BASE_FILE_EXTENSION = ".parquet"


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


def list_partitions_and_files(storage: Storage) -> tuple[list[str], list[BaseFile]]:
    """Every partition (folder holding a partition metafile) and every base file in them."""
    partitions: set[str] = set()
    files: list[FileEntry] = []
    for entry in storage.list("", recursive=True):
        path = entry.path
        if path.startswith(METAFOLDER + "/") or path == METAFOLDER or entry.is_dir:
            continue
        name = entry.name
        if name == PARTITION_METAFILE:
            partitions.add(path.rpartition("/")[0])
        elif name.endswith(BASE_FILE_EXTENSION) and not name.startswith("."):
            files.append(entry)
    base_files = [BaseFile.parse(f) for f in files if f.path.rpartition("/")[0] in partitions]
    return sorted(partitions), base_files


class FileSystemView:
    """The latest visible base file of every file group, as of an instant (default: newest).

    `as_of` is a requested instant time (time travel). `only` makes just those completed writes
    visible: an incremental read of timeline layout 2 sees the files of the commits in its range,
    as Hudi 1.x and hudi-rs build file groups from those commits' metadata alone.
    """

    def __init__(self, timeline: Timeline, as_of: str | None = None, only: list[Instant] | None = None) -> None:
        self.timeline = timeline
        self.storage = timeline.storage
        self.as_of = as_of
        self.visible_instants = (
            list(only) if only is not None
            else [i for i in timeline.completed_writes() if as_of is None or i.time <= as_of]
        )
        self._visible_times = {i.time for i in self.visible_instants}

    @cached_property
    def _listing(self) -> tuple[list[str], list[BaseFile]]:
        return list_partitions_and_files(self.storage)

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
    def _latest(self) -> dict[str, list[BaseFile]]:
        latest: dict[tuple[str, str], BaseFile] = {}
        for bf in self._listing[1]:
            if bf.instant_time not in self._visible_times or bf.file_group in self.replaced_file_groups:
                continue
            seen = latest.get(bf.file_group)
            if seen is None or bf.instant_time > seen.instant_time:
                latest[bf.file_group] = bf
        by_partition: dict[str, list[BaseFile]] = defaultdict(list)
        for bf in sorted(latest.values(), key=lambda b: (b.partition_path, b.file_id)):
            by_partition[bf.partition_path].append(bf)
        return dict(by_partition)

    def partitions(self) -> list[str]:
        """Partitions that hold at least one visible file group."""
        return sorted(self._latest)

    def all_partitions(self) -> list[str]:
        """Every partition folder on storage, visible or not."""
        return self._listing[0]

    def latest_base_files(self, partitions: list[str] | None = None) -> list[BaseFile]:
        wanted = self._latest.keys() if partitions is None else partitions
        return [bf for p in wanted for bf in self._latest.get(p, [])]

    def all_base_files(self) -> list[BaseFile]:
        """Every base file on storage in a partition folder, of any instant (for rollback)."""
        return list(self._listing[1])
