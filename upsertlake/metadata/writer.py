"""Writing the metadata table: a deltacommit per data instant, its rollback, and the creation of
a partition (docs/DESIGN.md §11).

A deltacommit at the data instant's time writes, per file group that gets records, one new log
file `.<fileId>_<instant>.log.1_<token>` holding an HFile data block (the upserted records, sorted
by key, each value an Avro datum under the writer schema with its key field emptied, GZ, as
Hudi's HoodieHFileDataBlock) and a delete block (the deleted keys). Its instant goes requested,
inflight, completed, like any Hudi deltacommit; the data instant completes after it, so a crash in
between leaves blocks readers ignore (`table.valid_instants`) until the data instant's rollback
discards the deltacommit (`discard_deltacommit`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import CorruptTableError
from upsertlake.hfile import Compression, write_hfile
from upsertlake.hfile import file_info as hfile_info
from upsertlake.logfile.blocks import Block
from upsertlake.logfile.names import LogFileName
from upsertlake.logfile.writer import append_blocks, delete_block, hfile_block
from upsertlake.metadata import keys as mkeys
from upsertlake.metadata.entries import one_per_key
from upsertlake.metadata.records import Record, encode, writer_schema
from upsertlake.metadata.table import BASE_EXTENSION, MetadataSlice, MetadataTable
from upsertlake.schema.columns import DELETED_KEY, DELETED_PARTITION, FILE_NAME
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline, delete_instant_files, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, DeltaWriteStat, WriteStat
from upsertlake.timeline.instant import Action, Instant, State

WRITE_TOKEN = "0-0-0"  # the metadata table is written by one task per file group, first attempt
BASE_BLOCK_SIZE = 64 * 1024


@dataclass(frozen=True)
class Located:
    """Record-index upserts as columns: a key's record is its file group's location and nothing
    else, one of a few `payloads`, so a write of millions of keys holds a key and an index for
    each, never a record of its own (a dict per key cost about 1 KB)."""

    keys: pa.Array  # string
    at: np.ndarray  # int64, each key's payload
    payloads: tuple[Record, ...]

    def __len__(self) -> int:
        return len(self.keys)

    def entries(self, schema: str, file_name: str | None = None) -> pa.Table:
        """The HFile entries (key, value: binary), each payload encoded once; unsorted."""
        named = [p if file_name is None else {**p, FILE_NAME: file_name} for p in self.payloads]
        datums = pa.array(encode(named, schema), pa.binary())
        return pa.table({"key": pc.cast(self.keys, pa.binary()), "value": datums.take(pa.array(self.at))})


@dataclass
class Changes:
    """What one instant changes in one metadata partition: records written over (combined with)
    the stored ones, and keys deleted; the record index's upserts as columns (`located`)."""

    upserts: list[Record] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    located: Located | None = None

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes or self.located)

    def entries(self, schema: str, file_name: str | None = None) -> pa.Table:
        """The HFile entries of the upserts (key, value: binary), sorted by key, one per key: the
        last given (the located ones after the records). `file_name`: the base file each names."""
        by_key = {r["key"]: r for r in self.upserts}
        named = [by_key[k] if file_name is None else {**by_key[k], FILE_NAME: file_name} for k in by_key]
        parts = [pa.table({
            "key": pa.array([k.encode("utf-8") for k in by_key], pa.binary()),
            "value": pa.array(encode(named, schema), pa.binary()),
        })]
        if self.located is not None:
            parts.append(self.located.entries(schema, file_name))
        return one_per_key(pa.concat_tables(parts))


def deltacommit(
    table: MetadataTable,
    instant_time: str,
    changes: Mapping[str, Changes],
    table_version: int,
    more: Callable[[MetadataTable], list[WriteStat]] | None = None,
) -> Instant:
    """Write `changes` (metadata partition -> Changes) as the metadata deltacommit `instant_time`;
    a deltacommit of that time left by an earlier attempt is discarded first. `more`: writes
    further log files of this deltacommit once it is inflight (the record index's, by file group,
    maybe as Spark tasks) and gives their stats: a failure leaves them under a pending
    deltacommit, which the rollback of the data instant discards with its other files
    (`discard_deltacommit`). Returns the completed instant. Call under the data table's lock."""
    storage, layout = table.storage, table.timeline.layout
    if table.timeline.get(instant_time, Action.DELTA_COMMIT) is not None:
        discard_deltacommit(storage, instant_time)
        table = table.reloaded()
    requested = Instant(instant_time, Action.DELTA_COMMIT, State.REQUESTED)
    if not storage.write_if_absent(layout.path(requested), b""):
        raise CorruptTableError(f"metadata deltacommit {instant_time} exists already")
    inflight = transition(storage, requested, State.INFLIGHT, b"", layout)
    schema = writer_schema(table_version)
    stats: list[WriteStat] = []
    for partition in sorted(changes):
        if changes[partition]:
            stats += _write_partition(table, partition, instant_time, changes[partition], schema)
    if more is not None:
        stats += more(table)
    metadata = CommitMetadata(
        partition_to_write_stats=_by_partition(stats),
        operation_type="UPSERT_PREPPED",
        extra_metadata={"schema": schema},
    )
    return transition(
        storage, inflight, State.COMPLETED, metadata.to_json_bytes(), layout, Timeline.load(storage, layout)
    )


def _write_partition(
    table: MetadataTable, partition: str, instant_time: str, changes: Changes, schema: str
) -> list[WriteStat]:
    slices = table.slices(partition)
    if not slices:
        raise CorruptTableError(f"the metadata table has no file groups in its {partition} partition")
    by_group: dict[int, Changes] = {}
    upserts, deletes = changes.upserts, changes.deletes
    up_groups = mkeys.file_group_index([r["key"] for r in upserts], len(slices)).tolist()
    for record, group in zip(upserts, up_groups):
        by_group.setdefault(group, Changes()).upserts.append(record)
    for key, group in zip(deletes, mkeys.file_group_index(deletes, len(slices)).tolist()):
        by_group.setdefault(group, Changes()).deletes.append(key)
    if changes.located is not None:
        located = changes.located
        of_key = mkeys.file_group_index(located.keys, len(slices))
        for group in np.unique(of_key).tolist():
            mine = of_key == group
            part = Located(located.keys.filter(pa.array(mine)), located.at[mine], located.payloads)
            by_group.setdefault(group, Changes()).located = part
    return [write_log(table.storage, slices[g], instant_time, by_group[g], schema) for g in sorted(by_group)]


def write_log(storage: Storage, sl: MetadataSlice, instant_time: str, changes: Changes, schema: str) -> WriteStat:
    """The log file of one metadata file group for the deltacommit `instant_time`: an HFile data
    block of the upserted records (one per key, the last given, sorted by key) and a delete block
    of the other deleted keys. Named by the fixed WRITE_TOKEN: a retried Spark task writes the
    same file again, never a second one."""
    entries = changes.entries(schema)
    upserted = pc.cast(entries.column("key"), pa.string())
    deleted = pa.array(changes.deletes, pa.string())
    gone = sorted(set(deleted.filter(pc.invert(pc.is_in(deleted, upserted))).to_pylist()))
    blocks: list[Block] = []
    if entries.num_rows:
        blocks.append(hfile_block(instant_time, entries, schema))
    if gone:
        keyed = pa.table(
            {DELETED_KEY: pa.array(gone, pa.string()), DELETED_PARTITION: pa.array([sl.partition] * len(gone))}
        )
        blocks.append(delete_block(instant_time, keyed))
    name = LogFileName(sl.file_id, instant_time, 1, WRITE_TOKEN).format()
    path = f"{sl.partition}/{name}"
    data = append_blocks(blocks)
    storage.write_bytes(path, data)
    return DeltaWriteStat(
        fileId=sl.file_id,
        path=path,
        partitionPath=sl.partition,
        prevCommit=instant_time,
        numWrites=entries.num_rows,
        numUpdateWrites=entries.num_rows,
        numDeletes=len(gone),
        totalWriteBytes=len(data),
        fileSizeInBytes=len(data),
        baseFile=sl.base.rpartition("/")[2] if sl.base else "",
        logFiles=(name,),
    )


def base_file_name(file_id: str, time: str) -> str:
    """The name of a file group's HFile base file written at `time`."""
    return f"{file_id}_{WRITE_TOKEN}_{time}{BASE_EXTENSION}"


def write_base_file(
    storage: Storage, partition: str, file_id: str, time: str, changes: Changes, schema: str
) -> tuple[str, int, int]:
    """A file group's HFile base file `<fileId>_0-0-0_<time>.hfile` holding the upserts of
    `changes` (one per key, sorted here; each names the file, as Hudi's do), as an initialization
    and a compaction write one. Returns its path, size and number of entries."""
    name = base_file_name(file_id, time)
    return write_base_entries(storage, partition, name, changes.entries(schema, name), schema)


def write_base_entries(
    storage: Storage, partition: str, name: str, entries: pa.Table, schema: str
) -> tuple[str, int, int]:
    """The HFile base file `name` of `entries` (key, value: binary; sorted by key, one per key,
    each value naming the file), its schema and key range in its file info. Returns its path,
    size and number of entries."""
    keys = entries.column("key")
    info = {hfile_info.SCHEMA: schema.encode()}
    if len(keys):
        info.update({hfile_info.MIN_RECORD_KEY: keys[0].as_py(), hfile_info.MAX_RECORD_KEY: keys[-1].as_py()})
    data = write_hfile(
        entries,
        block_size=BASE_BLOCK_SIZE,
        compression=Compression.NONE,
        file_info=info,
    )
    path = f"{partition}/{name}"
    storage.write_bytes(path, data)
    return path, len(data), len(keys)


def discard_deltacommit(storage: Storage, instant_time: str, action: Action = Action.DELTA_COMMIT) -> bool:
    """Remove the metadata deltacommit `instant_time` (any state; or another `action`: a failed
    compaction) and the files it wrote, from the metadata table at `storage`: what a rollback of
    its data instant does (Hudi's metadata writer rolls the deltacommit back), and what a retry of
    the same instant does first. Its files go before its instant, so a crash midway leaves at most
    a pending instant without files. Returns whether there was one."""
    timeline = Timeline.load(storage)
    inst = timeline.get(instant_time, action)
    if inst is None:
        return False
    for partition in sorted(e.name for e in storage.list("") if e.is_dir and not e.name.startswith(".")):
        for entry in storage.list(partition):
            log = LogFileName.parse(entry.name)
            if (log is not None and log.instant == instant_time) or (
                entry.name.endswith(BASE_EXTENSION) and entry.name[: -len(BASE_EXTENSION)].endswith("_" + instant_time)
            ):
                storage.delete(entry.path)
    delete_instant_files(storage, inst, timeline.layout)
    return True


def _by_partition(stats: Sequence[WriteStat]) -> dict[str, list[WriteStat]]:
    out: dict[str, list[WriteStat]] = {}
    for s in stats:
        out.setdefault(s.partitionPath, []).append(s)
    return out
