"""Creating the metadata table and initializing its partitions, as Hudi's metadata writer does
(HoodieBackedTableMetadataWriter.initializeFromFilesystem): docs/DESIGN.md §11.

The table is a merge-on-read Hudi table of the data table's version in `.hoodie/metadata`. Each
partition is initialized by a bulk-insert deltacommit of its own at a reserved instant time
(`00000000000000` followed by a counter: files 000, column_stats 001, record_index 002,
partition_stats 003), writing one HFile base file per file group. The data table lists the
partition in `hoodie.table.metadata.partitions.inflight` while it is built and in
`hoodie.table.metadata.partitions` once its deltacommit completed: a crash midway leaves it
inflight, which no reader trusts, and the next writer builds it again.
"""

from __future__ import annotations

from collections.abc import Sequence

from upsertlake.config.enums import TableType
from upsertlake.config.properties_file import create_properties, properties_checksum
from upsertlake.metadata import keys as mkeys
from upsertlake.metadata.partitions import (
    COLUMN_STATS,
    FILES,
    FOLDER,
    PARTITION_STATS,
    RECORD_INDEX,
    SOLO_COMMIT_TIMESTAMP,
    file_group_id,
)
from upsertlake.metadata.records import Record, writer_schema
from upsertlake.metadata.writer import Changes, write_base_file
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline, delete_instant_files, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.operation import Operation

INIT_TIMES = {FILES: "000", COLUMN_STATS: "001", RECORD_INDEX: "002", PARTITION_STATS: "003"}
PARTITION_METAFILE = ".hoodie_partition_metadata"


def create_table(data_storage: Storage, table_name: str, table_version: int) -> Storage:
    """Write the metadata table's `hoodie.properties` (as Hudi writes it for its metadata table)
    unless it is there; returns the metadata table's storage."""
    storage = data_storage.child(FOLDER)
    props = {
        "hoodie.compaction.payload.class": "org.apache.hudi.metadata.HoodieMetadataPayload",
        "hoodie.table.initial.version": str(table_version),
        "hoodie.table.keygenerator.type": "HOODIE_TABLE_METADATA",
        "hoodie.table.type": TableType.MERGE_ON_READ.value,
        "hoodie.archivelog.folder": "history",
        "hoodie.timeline.layout.version": "2",
        "hoodie.timeline.history.path": "history",
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.record.merge.strategy.id": "00000000-0000-0000-0000-000000000000",
        "hoodie.table.recordkey.fields": "key",
        "hoodie.table.name": f"{table_name}_metadata",
        "hoodie.timeline.path": "timeline",
        "hoodie.populate.meta.fields": "false",
        "hoodie.table.base.file.format": "HFILE",
        "hoodie.record.merge.mode": "CUSTOM",
        "hoodie.table.version": str(table_version),
    }
    props["hoodie.table.checksum"] = str(properties_checksum(props))
    create_properties(storage, props)
    return storage


def init_time(partition: str) -> str:
    return SOLO_COMMIT_TIMESTAMP + INIT_TIMES[partition]


def initialize_partition(
    storage: Storage, partition: str, records: Sequence[Record], file_groups: int, table_version: int
) -> Instant:
    """Bulk-insert `records` into a new metadata partition of `file_groups` file groups, one HFile
    base file each (empty ones too), under the partition's initialization deltacommit; one left
    by a crashed attempt is removed first."""
    inflight = begin_partition(storage, partition)
    schema = writer_schema(table_version)
    by_key = {r["key"]: r for r in records}
    keys = sorted(by_key)
    groups = mkeys.file_group_index(keys, file_groups).tolist() if keys else []
    mine: list[list[Record]] = [[] for _ in range(file_groups)]
    for k, g in zip(keys, groups):
        mine[g].append(by_key[k])
    stats = [write_base(storage, partition, g, Changes(upserts=mine[g]), schema) for g in range(file_groups)]
    return complete_partition(storage, partition, inflight, stats, schema)


def begin_partition(storage: Storage, partition: str) -> Instant:
    """The partition's initialization deltacommit, inflight, its folder emptied of what a crashed
    attempt left (files and instant)."""
    timeline = Timeline.load(storage)
    layout = timeline.layout
    time = init_time(partition)
    for entry in storage.list(partition):  # an earlier attempt's files
        storage.delete(entry.path)
    if (earlier := timeline.get(time, Action.DELTA_COMMIT)) is not None:
        delete_instant_files(storage, earlier, layout)
    storage.write_if_absent(
        f"{partition}/{PARTITION_METAFILE}", f"#partition metadata\ncommitTime={time}\npartitionDepth=1\n".encode()
    )
    requested = Instant(time, Action.DELTA_COMMIT, State.REQUESTED)
    storage.write_if_absent(layout.path(requested), b"")
    return transition(storage, requested, State.INFLIGHT, b"", layout)


def write_base(storage: Storage, partition: str, group: int, changes: Changes, schema: str) -> WriteStat:
    """The HFile base file of file group `group` of a partition being initialized, holding the
    upserts of `changes` (one per key: the last given): a Spark task writes one as the in-process
    loop does."""
    file_id = file_group_id(partition, group)
    path, size, n = write_base_file(storage, partition, file_id, init_time(partition), changes, schema)
    return WriteStat(
        fileId=file_id,
        path=path,
        partitionPath=partition,
        numWrites=n,
        numInserts=n,
        totalWriteBytes=size,
        fileSizeInBytes=size,
    )


def complete_partition(
    storage: Storage, partition: str, inflight: Instant, stats: Sequence[WriteStat], schema: str
) -> Instant:
    """Complete a partition's initialization deltacommit with the stats of its base files."""
    metadata = CommitMetadata({partition: list(stats)}, Operation.BULK_INSERT.type_name, {"schema": schema})
    timeline = Timeline.load(storage)
    return transition(storage, inflight, State.COMPLETED, metadata.to_json_bytes(), timeline.layout, timeline)
