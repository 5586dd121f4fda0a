"""Step 5 of a write, bucketing: the buckets the records go to (Hudi's UpsertPartitioner, the delta commit
partitioner on a merge-on-read table, or bulk insert's layout).

Hudi's SparkUpsertDeltaCommitPartitioner differs from the copy-on-write one only in which slices
take inserts: on a merge-on-read table (with an index that reads base files only) a slice with log
files takes none, nor does one a pending compaction holds; a bucket index sends every key to its
bucket and takes no small files.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from upsertlake.concurrency.conflict import pending_clustering
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.engine.bulk_insert import bulk_insert_buckets
from upsertlake.engine.slice_routing import pending_compactions
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.layout.file_writer import file_writer_config
from upsertlake.partitioner import (
    ESTIMATE_ACTIONS_0_15,
    Bucket,
    PartitionerConfig,
    SmallFile,
    UpsertPartitioner,
    WorkloadProfile,
    average_record_size,
)
from upsertlake.schema.columns import KEY, PARTITION
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Action, State
from upsertlake.timeline.operation import Operation


def sizing(timeline: Timeline, cfg: Config) -> tuple[int, PartitionerConfig]:
    """The average record size and the file sizing options buckets are cut by."""
    avg = average_record_size(
        _commit_sizes(timeline),
        cfg.get(opt.RECORD_SIZE_ESTIMATE),
        cfg.get(opt.RECORD_SIZE_ESTIMATION_THRESHOLD),
        cfg.get(opt.PARQUET_SMALL_FILE_LIMIT),
    )
    pconf = PartitionerConfig(
        max_file_size=cfg.get(opt.PARQUET_MAX_FILE_SIZE),
        small_file_limit=cfg.get(opt.PARQUET_SMALL_FILE_LIMIT),
        insert_split_size=cfg.get(opt.COPY_ON_WRITE_INSERT_SPLIT_SIZE),
        auto_split=cfg.get(opt.COPY_ON_WRITE_AUTO_SPLIT),
    )
    return avg, pconf


def upsert_partitioner(
    profile: WorkloadProfile, view: FileSystemView, operation: Operation, cfg: Config, merge_on_read: bool
) -> UpsertPartitioner:
    """Hudi's UpsertPartitioner for a profile: its buckets, and (picklable, small) what assigns
    each record to one, so Spark tasks assign their own records. The small files offered are the
    latest base files of the partitions taking inserts; the partitioner keeps those below the
    small file limit outside the groups a pending clustering (or compaction) holds."""
    timeline = view.timeline
    avg, pconf = sizing(timeline, cfg)
    wanted = [p for p, w in profile.partitions.items() if w.num_inserts > 0]
    if operation.overwrites or cfg.bucket_index or not wanted:  # new groups replace the old ones; buckets by hash
        return UpsertPartitioner(profile, {}, avg, pconf)
    busy = pending_clustering(timeline)
    if merge_on_read:
        for partition, file_id in pending_compactions(timeline):
            busy.setdefault(partition, set()).add(file_id)
    small: dict[str, list[SmallFile]] = {p: [] for p in wanted}
    for sl in view.latest_file_slices(wanted):
        if sl.base is not None and not (merge_on_read and sl.logs):
            small[sl.partition_path].append(SmallFile(sl.file_id, sl.base.size))
    return UpsertPartitioner(profile, small, avg, pconf, pending_clustering=busy)


def assign_buckets(
    profile: WorkloadProfile, records: pa.Table, file_ids: pa.ChunkedArray, view: FileSystemView,
    operation: Operation, cfg: Config, data_schema: pa.Schema, merge_on_read: bool,
) -> tuple[list[Bucket], np.ndarray, UpsertPartitioner | None]:
    """The buckets of a write, the bucket of each record and the partitioner that assigned them
    (none for a bulk insert, sized by the batch's own encoded size, not the estimate)."""
    if operation.sized_by_batch:
        pconf = sizing(view.timeline, cfg)[1]
        return (*bulk_insert_buckets(records, data_schema, file_writer_config(cfg), pconf), None)
    chosen = upsert_partitioner(profile, view, operation, cfg, merge_on_read)
    assignment = chosen.assign(records.column(PARTITION), records.column(KEY), file_ids)
    return chosen.buckets, np.asarray(assignment), chosen


def _commit_sizes(timeline: Timeline) -> Iterator[tuple[int, int]]:
    """(bytes, records) written by each completed commit and replacecommit (as Hudi 0.15),
    newest first, read lazily: the estimate usually stops at the first one."""
    actions = [Action(a) for a in ESTIMATE_ACTIONS_0_15]
    for inst in reversed(timeline.filter(actions, [State.COMPLETED])):
        meta = timeline.commit_metadata(inst)
        yield (meta.total_bytes_written, meta.total_records_written)
