"""Where a merge-on-read write's records go, as Hudi's SparkUpsertDeltaCommitPartitioner and
BaseSparkDeltaCommitActionExecutor route them: inserts to new file groups or to small slices
without log files (an index that reads base files only must find every key there; the bucket
index, which finds keys by hash, sends every record to its bucket's slice), updates and deletes
to a new log file of their group's current slice, except in those small slices, which are
rewritten copy-on-write. Shared by the write (`merge_on_read`) and the dry run
(`plan.WritePlan.summary`), so `explain` says what the write does.
"""

from __future__ import annotations

from upsertlake.concurrency.conflict import pending_clustering
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.engine.overwrite import OVERWRITES
from upsertlake.layout.file_system_view import FileSlice, FileSystemView
from upsertlake.partitioner import Bucket, BucketType, SmallFile, WorkloadProfile
from upsertlake.services.compaction_plan import read_plan
from upsertlake.timeline.active import Timeline


def small_slices(
    profile: WorkloadProfile, view: FileSystemView, timeline: Timeline, operation: str, cfg: Config
) -> dict[str, list[SmallFile]]:
    """Per partition taking inserts, the slices that may take them: without log files, their base
    file below hoodie.parquet.small.file.limit, in no pending clustering or compaction (Hudi's
    SparkUpsertDeltaCommitPartitioner.getSmallFileCandidates for an index that cannot index logs)."""
    if operation in OVERWRITES or cfg.bucket_index:
        return {}  # a bucket index sends each key to its bucket, and finds keys in logs too
    limit = cfg.get(opt.PARQUET_SMALL_FILE_LIMIT)
    busy = pending_clustering(timeline)
    compacting = pending_compactions(timeline)
    wanted = [p for p, w in profile.partitions.items() if w.num_inserts > 0]
    return {
        p: [
            SmallFile(s.file_id, s.base.size)
            for s in view.latest_file_slices([p])
            if s.base is not None and not s.logs and s.base.size < limit
            and s.file_id not in busy.get(p, ()) and (p, s.file_id) not in compacting
        ]
        for p in wanted
    }


def pending_compactions(timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, fileId) -> the instant of the pending compaction plan that covers the group."""
    return {op.file_group: inst.time for inst in timeline.pending_compactions() for op in read_plan(timeline, inst)}


def append_slices(
    buckets: list[Bucket], profile: WorkloadProfile, view: FileSystemView, operation: str, cfg: Config
) -> dict[int, FileSlice]:
    """Bucket number -> the current slice its records are appended to as a new log file: every
    UPDATE bucket but those of small slices the partitioner may fill with inserts, which are
    rewritten with their updates (Hudi's handleUpdate for its small file ids)."""
    small = {
        (p, sf.file_id)
        for p, files in small_slices(profile, view, view.timeline, operation, cfg).items()
        for sf in files
    }
    updated = sorted({b.partition_path for b in buckets if b.type is BucketType.UPDATE})
    slices = {s.file_group: s for s in view.latest_file_slices(updated)} if updated else {}
    return {
        b.number: slices[group]
        for b in buckets
        if b.type is BucketType.UPDATE
        and (group := (b.partition_path, b.file_id)) not in small and group in slices
    }
