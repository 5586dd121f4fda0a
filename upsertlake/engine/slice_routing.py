"""Where a merge-on-read write's records go, as Hudi's SparkUpsertDeltaCommitPartitioner and
BaseSparkDeltaCommitActionExecutor route them: inserts to new file groups or to small slices
without log files (an index that reads base files only must find every key there; the bucket
index, which finds keys by hash, sends every record to its bucket's slice), updates and deletes
to a new log file of their group's current slice, except in the small slices the partitioner
offered inserts, which are rewritten copy-on-write. Shared by the write (`merge_on_read`) and the
dry run (`plan.WritePlan.summary`), so `explain` says what the write does.
"""

from __future__ import annotations

from collections.abc import Iterable

from upsertlake.layout.file_system_view import FileSlice, FileSystemView
from upsertlake.partitioner import Bucket, BucketType, SmallFile
from upsertlake.services.compaction_plan import read_plan
from upsertlake.timeline.active import Timeline


def pending_compactions(timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, fileId) -> the instant of the pending compaction plan that covers the group."""
    return {op.file_group: inst.time for inst in timeline.pending_compactions() for op in read_plan(timeline, inst)}


def append_slices(buckets: Iterable[Bucket], small_files: Iterable[SmallFile], view: FileSystemView) -> dict[int, FileSlice]:
    """Bucket number -> the current slice its records are appended to as a new log file: every
    UPDATE bucket but those of the small slices the partitioner offered inserts (`small_files`),
    which are rewritten with their updates (Hudi's handleUpdate for its small file ids)."""
    small = {sf.file_id for sf in small_files}
    updates = [b for b in buckets if b.type is BucketType.UPDATE and b.file_id not in small]
    partitions = sorted({b.partition_path for b in updates})
    slices = {s.file_group: s for s in view.latest_file_slices(partitions)} if partitions else {}
    return {b.number: slices[g] for b in updates if (g := (b.partition_path, b.file_id)) in slices}
