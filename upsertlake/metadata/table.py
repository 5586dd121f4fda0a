"""Reading the metadata table: a merge-on-read table of HFile base files and HFile log blocks, read
as Hudi's HoodieBackedTableMetadata reads it (docs/DESIGN.md §11).

Which files count: per file group, the newest base file of a completed metadata instant and the
log files of completed metadata deltacommits after it (by completion time, as Hudi 1.x slices).
Which blocks count: those of the data table's completed instants, of metadata deltacommits whose
data instant is not pending (initializations, indexing), and of what rollbacks and restores undid
(HoodieTableMetadataUtil.getValidInstantTimestamps): the metadata table is written before the data
instant completes, so a block of a data instant still pending or failed is ignored.

A key's record is the base file's, combined with each log record in log order
(`records.combine`); a delete block's key deletes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config.properties_file import PROPERTIES_FILE
from upsertlake.errors import CorruptTableError
from upsertlake.hfile import HFileReader, file_info
from upsertlake.logfile.blocks import CommandBlock, DataBlock, DeleteBlock, HFileBlock
from upsertlake.logfile.names import LogFileName, log_instant
from upsertlake.logfile.reader import read_logs
from upsertlake.metadata import keys as mkeys
from upsertlake.metadata.entries import newest_indices
from upsertlake.metadata.partitions import (
    COLUMN_STATS,
    FILES,
    FOLDER,
    PARTITION_STATS,
    PARTITIONS_KEY,
    RECORD_INDEX,
    SOLO_COMMIT_TIMESTAMP,
)
from upsertlake.metadata.records import Record, combine, decode, record_location
from upsertlake.schema.columns import DELETED_KEY
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Action, Instant
from upsertlake.timeline.layouts import METAFOLDER, TimelineLayout
from upsertlake.timeline.retention import rolled_back_instants

BASE_EXTENSION = ".hfile"
TABLES_KEPT = 4  # metadata tables a storage keeps open, by data timeline snapshot
READ_WHOLE = (FILES,)  # partitions small enough to read whole (one file group, a record per data partition)
SLICES_KEPT = 16  # whole slices' records a storage keeps


@dataclass(frozen=True)
class MetadataSlice:
    """One file group of a metadata partition as a reader sees it: its base file (or none) and
    its log files in log order (table-relative paths of the metadata table)."""

    partition: str
    file_id: str
    base: str | None
    logs: tuple[str, ...]


class MetadataTable:
    """The metadata table of a data table, as of the data timeline given: its records by key."""

    def __init__(self, storage: Storage, timeline: Timeline, valid: frozenset[str], partitions: Sequence[str]) -> None:
        self.storage = storage  # the metadata table's own (its base is `.hoodie/metadata`)
        self.timeline = timeline  # the metadata table's
        self.valid = valid  # the instants whose log blocks count
        self.partitions = tuple(partitions)  # the metadata partitions the data table lists as complete
        self._slices: dict[str, list[MetadataSlice]] = {}

    @classmethod
    def open(cls, data_timeline: Timeline) -> MetadataTable | None:
        """The metadata table of the data table whose timeline is given, or None when the data
        table lists none (its `files` partition is not listed as complete in the
        `hoodie.properties` the timeline was read with; table version 6's are not read). Raises
        CorruptTableError when one is listed but cannot be read."""
        partitions = data_timeline.layout.metadata_partitions
        if FILES not in partitions:
            return None
        # One snapshot of the data timeline sees one state of the metadata table: the views of
        # one step of a write share it (its listing, slices and small partitions' records).
        opened = data_timeline.storage.cache("metadata tables", TABLES_KEPT)
        key = (data_timeline.instants, partitions)
        cached = opened.get(key)
        if cached is not None:
            return cast(MetadataTable, cached)
        table = cls._open(data_timeline, partitions)
        opened.put(key, table)
        return table

    @staticmethod
    def forget(data_storage: Storage) -> None:
        """Forget the metadata tables opened for this data table (it was deleted or built again)."""
        data_storage.cache("metadata tables", TABLES_KEPT).clear()

    @classmethod
    def _open(cls, data_timeline: Timeline, partitions: Sequence[str]) -> MetadataTable:
        storage = data_timeline.storage.child(FOLDER)
        try:
            timeline = Timeline.load(storage, metadata_layout(data_timeline.layout))
        except (CorruptTableError, FileNotFoundError) as e:
            raise CorruptTableError(
                f"the metadata table {storage.base} is listed in {PARTITIONS_KEY} but cannot be read: {e}"
            ) from e
        if not timeline.instants:
            raise CorruptTableError(
                f"the metadata table {storage.base} is listed in {PARTITIONS_KEY} but has no instants "
                f"(no {PROPERTIES_FILE}?)"
            )
        return cls(storage, timeline, valid_instants(data_timeline, timeline), partitions)

    def reloaded(self) -> MetadataTable:
        """This metadata table with its timeline listed again (after a write to it)."""
        return MetadataTable(
            self.storage, Timeline.load(self.storage, self.timeline.layout), self.valid, self.partitions
        )

    # -- file slices ---------------------------------------------------------------------------
    def slices(self, partition: str) -> list[MetadataSlice]:
        """The file groups of a metadata partition, sorted by file id (the i-th is file group i)."""
        if partition not in self._slices:
            self._slices[partition] = self._list_slices(partition)
        return self._slices[partition]

    @cached_property
    def _completed(self) -> dict[str, str]:
        """Completed metadata instants: requested time -> completion time."""
        return {i.time: i.completed_at for i in self.timeline.instants if i.is_completed}

    def _list_slices(self, partition: str) -> list[MetadataSlice]:
        bases: dict[str, list[tuple[str, str]]] = {}
        logs: dict[str, list[tuple[LogFileName, str]]] = {}
        for entry in self.storage.list(partition):
            name = entry.name
            if name.endswith(BASE_EXTENSION) and not name.startswith("."):
                file_id, _, rest = name[: -len(BASE_EXTENSION)].partition("_")
                instant = rest.rpartition("_")[2]
                if instant in self._completed:
                    bases.setdefault(file_id, []).append((instant, entry.path))
            elif (log := LogFileName.parse(name)) is not None and log.instant in self._completed:
                logs.setdefault(log.file_id, []).append((log, entry.path))
        out = []
        for file_id in sorted(bases.keys() | logs.keys()):
            newest = max(bases.get(file_id, []), default=None)
            start = newest[0] if newest else None
            kept = [
                (log, path)
                for log, path in logs.get(file_id, [])
                if start is None or self._completed[log.instant] >= start
            ]
            kept.sort(key=lambda lp: lp[0].sort_key())
            out.append(
                MetadataSlice(partition, file_id, newest[1] if newest else None, tuple(path for _, path in kept))
            )
        return out

    # -- records -------------------------------------------------------------------------------
    def lookup(self, partition: str, keys: Iterable[str]) -> dict[str, Record]:
        """The live records of `keys` in a metadata partition (absent and deleted keys left out)."""
        wanted = sorted(set(keys))
        slices = self.slices(partition)
        if not wanted or not slices:
            return {}
        if partition in READ_WHOLE:
            return {k: r for k, r in self._read_whole(partition).items() if r is not None and k in set(wanted)}
        groups = mkeys.file_group_index(wanted, len(slices))
        by_slice: dict[int, list[str]] = {}
        for key, group in zip(wanted, groups.tolist()):
            by_slice.setdefault(group, []).append(key)
        jobs = [(slices[g], ks) for g, ks in by_slice.items()]
        return self._gather(jobs, prefixes=False)

    def scan(self, partition: str, prefixes: Iterable[str] = ("",)) -> dict[str, Record]:
        """The live records whose keys start with any of `prefixes`, from every file group."""
        wanted = sorted(set(prefixes))
        return self._gather([(sl, wanted) for sl in self.slices(partition)], prefixes=True)

    def _gather(self, jobs: list[tuple[MetadataSlice, list[str]]], prefixes: bool) -> dict[str, Record]:
        out: dict[str, Record] = {}
        threads = max(1, min(self.storage.read_threads, len(jobs)))
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for found in pool.map(lambda job: self._read_slice(job[0], job[1], prefixes), jobs):
                out.update((k, r) for k, r in found.items() if r is not None)
        return out

    def _read_whole(self, partition: str) -> dict[str, Record | None]:
        """Every record of a small partition, read once per set of files that count (kept by the
        storage: the next snapshot reads only what a new log file adds, from the cache)."""
        kept = self.storage.cache("metadata slices", SLICES_KEPT)
        out: dict[str, Record | None] = {}
        for sl in self.slices(partition):
            key = (sl.base, self._counted(sl))
            records = kept.get(key)
            if records is None:
                records = self._read_slice(sl, [""], prefixes=True)
                kept.put(key, records)
            out.update(records)
        return out

    def _counted(self, sl: MetadataSlice) -> tuple[str, ...]:
        """The log files of a slice whose deltacommit counts (named by the data instant's time)."""
        return tuple(p for p in sl.logs if log_instant(p) in self.valid)

    def read_all(self, sl: MetadataSlice) -> dict[str, Record]:
        """Every live record of one file slice (what a compaction writes into its new base file)."""
        return {k: r for k, r in self._read_slice(sl, [""], prefixes=True).items() if r is not None}

    def stored_entries(self, sl: MetadataSlice) -> tuple[pa.Table, list[str]]:
        """Every live entry of one file slice as stored, the newest of each key, sorted by key:
        `key`, `value` (its Avro datum) and `schema` (the index of the datum's writer schema in
        the list returned). For a partition whose records replace each other whole (the record
        index: `records.combine`), what a compaction writes, with no record decoded per key."""
        schemas: list[str] = []

        def stored(entries: pa.Table, schema: str | None) -> pa.Table:
            if schema is not None and schema not in schemas:
                schemas.append(schema)
            at = -1 if schema is None else schemas.index(schema)  # -1: deleted
            return pa.table({
                "key": entries.column("key").cast(pa.large_binary()),
                "value": entries.column("value").cast(pa.large_binary()),
                "schema": pa.repeat(pa.scalar(at, pa.int32()), entries.num_rows),
            })

        empty = pa.array([], pa.binary())
        parts = [stored(pa.table({"key": empty, "value": empty}), None)]
        if sl.base is not None:
            with self.storage.open_input(sl.base) as source:
                reader = HFileReader(source, self.storage.full_path(sl.base))
                parts.append(stored(reader.read(), _base_schema(reader)))
        for block in self._live_blocks(sl):
            if isinstance(block, HFileBlock):
                parts.append(stored(block.reader().read(), block.schema_json))
            else:
                keys = block.keys.column(DELETED_KEY).cast(pa.large_binary())
                parts.append(stored(pa.table({"key": keys, "value": pa.nulls(len(keys), pa.large_binary())}), None))
        every = pa.concat_tables(parts)
        del parts
        newest = newest_indices(every.column("key"))
        if newest is not None:  # one copy of the rows at most: they are a file group's whole index
            every = every.take(newest)
        live = pc.greater_equal(every.column("schema"), 0)
        return (every if pc.all(live).as_py() else every.filter(live)), schemas

    def _live_blocks(self, sl: MetadataSlice) -> list[HFileBlock | DeleteBlock]:
        """The data and delete blocks of a slice's log files that count, in log order: a log file
        is named by its deltacommit, the data instant's time, and one whose instant does not count
        is not read at all (it may be a failed write's, rolled back meanwhile); a block a rollback
        command block undid is left out."""
        files = [(self.storage.read_bytes(path), self.storage.full_path(path)) for path in self._counted(sl)]
        blocks = read_logs(files, keep=self.valid.__contains__)
        undone = {b.target_instant for b in blocks if isinstance(b, CommandBlock)}
        live: list[HFileBlock | DeleteBlock] = []
        for block in blocks:
            if isinstance(block, DataBlock):
                raise CorruptTableError(
                    f"{sl.partition}/{sl.file_id}: a {block.block_type.name} block in the metadata table"
                )
            if isinstance(block, (HFileBlock, DeleteBlock)) and block.instant not in undone:
                live.append(block)
        return live

    def _read_slice(self, sl: MetadataSlice, wanted: list[str], prefixes: bool) -> dict[str, Record | None]:
        merged: dict[str, Record | None] = {}
        if sl.base is not None:
            with self.storage.open_input(sl.base) as source:
                reader = HFileReader(source, self.storage.full_path(sl.base))
                merged.update(_hfile_records(reader, _base_schema(reader), wanted, prefixes))
        for block in self._live_blocks(sl):
            if isinstance(block, HFileBlock):
                for key, record in _hfile_records(block.reader(), block.schema_json, wanted, prefixes):
                    merged[key] = combine(merged.get(key), record)
            else:
                for key in block.keys.column(DELETED_KEY).to_pylist():
                    if _matches(key, wanted, prefixes):
                        merged[key] = None
        return merged

    # -- what the partitions say ---------------------------------------------------------------
    def partition_paths(self) -> list[str]:
        """The data table's partitions (`files`: the `__all_partitions__` record)."""
        record = self.lookup(FILES, [mkeys.ALL_PARTITIONS_KEY]).get(mkeys.ALL_PARTITIONS_KEY)
        if record is None:
            return []
        listing = record["filesystemMetadata"] or {}
        return sorted(mkeys.data_partition(p) for p, info in listing.items() if not info["isDeleted"])

    def files(self, partitions: Iterable[str]) -> dict[str, dict[str, int]]:
        """Per data partition, its files (name -> size) as the `files` partition lists them."""
        wanted = {mkeys.partition_identifier(p): p for p in partitions}
        found = self.lookup(FILES, wanted)
        return {
            wanted[key]: {
                name: info["size"]
                for name, info in (record["filesystemMetadata"] or {}).items()
                if not info["isDeleted"]
            }
            for key, record in found.items()
        }

    def column_stats(
        self, files: Iterable[tuple[str, str]], columns: Iterable[str]
    ) -> dict[tuple[str, str], dict[str, Record]]:
        """Per (partition, file name), the `column_stats` records of `columns` (HoodieMetadataColumnStats)."""
        columns = list(columns)
        keyed = {mkeys.column_stats_key(c, p, name): ((p, name), c) for p, name in files for c in columns}
        out: dict[tuple[str, str], dict[str, Record]] = {}
        for key, record in self.lookup(COLUMN_STATS, keyed).items():
            stats = record["ColumnStatsMetadata"]
            if stats is not None and not stats["isDeleted"]:
                file, column = keyed[key]
                out.setdefault(file, {})[column] = stats
        return out

    def partition_stats(self, columns: Iterable[str]) -> dict[str, dict[str, Record]]:
        """Per data partition, the `partition_stats` records of `columns`."""
        out: dict[str, dict[str, Record]] = {}
        for record in self.scan(PARTITION_STATS, [mkeys.column_id(c) for c in columns]).values():
            stats = record["ColumnStatsMetadata"]
            if stats is not None and not stats["isDeleted"]:
                out.setdefault(mkeys.data_partition(stats["fileName"]), {})[stats["columnName"]] = stats
        return out

    def record_locations(self, record_keys: Iterable[str]) -> dict[str, tuple[str, str]]:
        """Per record key the record index knows, its (partition, file id)."""
        return {key: record_location(r)[:2] for key, r in self.lookup(RECORD_INDEX, record_keys).items()}


def metadata_layout(data: TimelineLayout) -> TimelineLayout:
    """The metadata table's timeline layout: version 2 in `.hoodie/timeline` (Hudi writes its
    metadata table so on table versions 8 and 9), instant times in the data table's zone."""
    return TimelineLayout(2, f"{METAFOLDER}/timeline", data.zone, delta_commits=True)


def _base_schema(reader: HFileReader) -> str:
    """The Avro schema of a metadata base file's values (in its file info)."""
    schema = reader.file_info.get(file_info.SCHEMA)
    if schema is None:
        raise CorruptTableError(f"{reader.name}: a metadata HFile without its Avro schema")
    return schema.decode("utf-8")


def _matches(key: str, wanted: list[str], prefixes: bool) -> bool:
    return any(key.startswith(p) for p in wanted) if prefixes else key in wanted


def _hfile_records(
    reader: HFileReader, schema_json: str, wanted: list[str], prefixes: bool
) -> list[tuple[str, Record]]:
    """The records of an HFile (a base file or a log block's) whose keys are (or, with `prefixes`,
    start with) the wanted ones: point lookups and prefix scans decode only the HFile blocks the
    keys fall in."""
    if prefixes:
        data = pa.concat_tables([reader.read(prefix) for prefix in wanted]) if wanted else None
        found = [] if data is None else list(zip(data.column("key").to_pylist(), data.column("value").to_pylist()))
    else:
        found = list(reader.get_many(wanted).items())
    names = [k.decode("utf-8") for k, _ in found]
    return list(zip(names, decode([v for _, v in found], names, schema_json, reader.name)))


def valid_instants(data: Timeline, metadata: Timeline) -> frozenset[str]:
    """The instants whose metadata log blocks a reader applies (getValidInstantTimestamps): the
    data table's completed instants (archived ones too), what its rollbacks and restores undid
    (their blocks meet the metadata table's own rollback of them), the metadata table's rollbacks
    and restores and its initializations. One departure: Hudi also applies a metadata deltacommit
    whose data instant it does not see pending; we apply it only once that instant is seen
    completed, so a writer that started after our timeline was listed stays invisible."""
    valid = {i.time for i in data.instants if i.is_completed}
    valid |= rolled_back_instants(data)
    valid |= {
        i.time
        for i in metadata.instants
        if i.is_completed
        and (
            i.action in (Action.ROLLBACK, Action.RESTORE)
            or (i.action is Action.DELTA_COMMIT and i.time.startswith(SOLO_COMMIT_TIMESTAMP))
        )
    }
    return frozenset(valid)


# Data actions Hudi writes into the metadata table at their own instant time.
SYNCED_ACTIONS = frozenset(
    {Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT, Action.CLEAN, Action.ROLLBACK, Action.RESTORE}
)
INIT_INSTANT = SOLO_COMMIT_TIMESTAMP + "000"  # the deltacommit that initializes `files`


def unsynced_instants(data: Timeline, metadata: Timeline) -> list[str]:
    """Completed data instants the metadata table should hold and does not: a writer that does not
    keep the metadata table (an old upsertlake, Hudi with hoodie.metadata.enable=false) wrote them.
    Instants completed before the `files` partition was initialized are in its listing; data
    instants older than every active metadata instant may be archived there."""
    init = metadata.get(INIT_INSTANT, Action.DELTA_COMMIT)
    if init is None or not init.is_completed:
        return ["the initialization of files"]
    synced = {i.time: i.completed_at for i in metadata.instants if i.is_completed}
    active = [
        i.time
        for i in metadata.instants
        if i.is_completed and i not in metadata.archived and not i.time.startswith(SOLO_COMMIT_TIMESTAMP)
    ]
    oldest = min(active, default=None)
    missing = [
        i
        for i in data.instants
        if i.is_completed
        and i.action in SYNCED_ACTIONS
        and i not in data.archived
        and i.time not in synced
        and i.completed_at > init.completed_at
        and (oldest is None or i.time > oldest)
    ]
    return [i.time for i in missing if not _nothing_to_sync(i, data, synced)]


def _nothing_to_sync(inst: Instant, data: Timeline, synced: Mapping[str, str]) -> bool:
    """A rollback of writes the metadata table never held (a write that failed before its
    metadata deltacommit completed, or one undone with it): Hudi's writers record nothing in the
    metadata table for it, so it is no sign of a writer that does not keep the table. An undone
    instant the metadata table holds through a deltacommit completed after the rollback was run
    again at its time (an inflight compaction goes back to its plan, which runs later): the
    rollback undid nothing the metadata table holds."""
    if inst.action is not Action.ROLLBACK:
        return False
    try:
        doc = documents.decode(data.document(inst), f"rollback {inst.time}")
    except CorruptTableError:
        return False
    held = [t for t in doc.get("commitsRollback") or [] if t in synced]
    return all(inst.completed_at is not None and synced[t] > inst.completed_at for t in held)
