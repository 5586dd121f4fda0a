"""Timeline layouts: where a table's instant files live and how they are named.

Layout 1 (table versions up to 6) keeps instants in `.hoodie/`, a completed one named by its
requested time. Layout 2 (table version 8, Apache Hudi 1.x) keeps them in `.hoodie/timeline/`
(`hoodie.timeline.path`), a completed one named `<requested>_<completion>.<action>`, its commit
documents in Avro. The table's `hoodie.properties` says which; a table of a version this engine
cannot read correctly is refused here, so no reader ever sees an empty timeline instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from upsertlake.config.option import option_list
from upsertlake.config.properties_file import PROPERTIES_FILE
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import TableNotFoundError
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline.instant import Instant

METAFOLDER = ".hoodie"
METADATA_PARTITIONS_KEY = "hoodie.table.metadata.partitions"


ARCHIVE_FOLDER_1 = f"{METAFOLDER}/archived"  # layout 1's archived timeline (hoodie.archivelog.folder)
HISTORY_PATH_KEY = "hoodie.timeline.history.path"


@dataclass(frozen=True)
class TimelineLayout:
    """One timeline layout: its version, the folder of its instant files, the zone its instant
    times are written in (`hoodie.table.timeline.timezone`: UTC or LOCAL), and the folder of its
    archived timeline (layout 2: `hoodie.timeline.history.path` under the timeline folder). It also
    carries the metadata-table partitions `hoodie.properties` lists as complete, read with the
    layout, so a reader knows whether to list files from the metadata table without reading the
    file again."""

    version: int
    folder: str
    zone: str = field(default="UTC", compare=False)
    delta_commits: bool = field(default=False, compare=False)  # a merge-on-read table's timeline
    metadata_partitions: tuple[str, ...] = field(default=(), compare=False)
    history: str = field(default="history", compare=False)  # layout 2's archive, under `folder`

    def path(self, instant: Instant) -> str:
        """The table-relative path of an instant's file in its state."""
        return f"{self.folder}/{instant.file_name(self.version)}"

    def parse(self, name: str) -> Instant | None:
        return Instant.from_file_name(name, self.version)

    @property
    def archive(self) -> str:
        """The folder of the archived timeline: Hudi 0.x's archive log files (layout 1), Hudi
        1.x's LSM timeline (layout 2)."""
        return ARCHIVE_FOLDER_1 if self.version == 1 else f"{self.folder}/{self.history}"

    @property
    def has_completion_times(self) -> bool:
        return self.version >= 2


LAYOUT_1 = TimelineLayout(1, METAFOLDER)


def layout_of(table_config: TableConfig) -> TimelineLayout:
    """The layout a table's properties declare (UnsupportedTableError for unknown ones)."""
    table_config.check_timeline_readable()
    mor = table_config.is_merge_on_read
    if table_config.timeline_layout_version == 1:
        return replace(LAYOUT_1, zone=table_config.timeline_timezone, delta_commits=mor)
    metadata = tuple(option_list(table_config.extra.get(METADATA_PARTITIONS_KEY) or ""))
    history = table_config.extra.get(HISTORY_PATH_KEY) or "history"
    path = f"{METAFOLDER}/{table_config.timeline_path}"
    return TimelineLayout(2, path, table_config.timeline_timezone, mor, metadata, history)


def table_layout(storage: Storage) -> TimelineLayout:
    """The layout of the table at `storage`, read from `hoodie.properties` now (so a writer under
    the lock sees an upgrade that finished since it opened the table). No table yet: layout 1."""
    try:
        return layout_of(TableConfig.load(storage))
    except TableNotFoundError:
        return LAYOUT_1


def listed_layout(storage: Storage, metafolder: list[FileEntry]) -> TimelineLayout:
    """`table_layout`, given a listing of `.hoodie/` made now: on an object store the listing
    names the version of `hoodie.properties`, so a version already read costs no request."""
    listed = next((e for e in metafolder if e.path == PROPERTIES_FILE), None)
    if listed is None or listed.version is None:
        return table_layout(storage)
    try:
        return layout_of(TableConfig.load_listed(storage, listed))
    except TableNotFoundError:
        return LAYOUT_1
