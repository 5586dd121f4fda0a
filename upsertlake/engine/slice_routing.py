"""Where a merge-on-read write's records go, as Hudi's SparkUpsertDeltaCommitPartitioner and
BaseSparkDeltaCommitActionExecutor route them: inserts to new file groups or to small slices
without log files (an index that reads base files only must find every key there; the bucket
index, which finds keys by hash, sends every record to its bucket's slice), updates and deletes
to a new log file of their group's current slice, except in the small slices the partitioner
offered inserts, which are rewritten copy-on-write. Beyond Hudi, a bucket's slice that takes a
record of a key its logs deleted is rewritten too, read merged (`rewritten_slices`). Shared by the
write (`merge_on_read`) and the dry run (`plan.WritePlan.summary`), so `explain` says what the
write does.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.layout.file_system_view import FileSlice, FileSystemView
from upsertlake.layout.slice_keys import SliceKeys
from upsertlake.layout.slice_reader import Merge
from upsertlake.partitioner import Bucket, BucketType, SmallFile
from upsertlake.schema.columns import DELETE_FLAG, KEY, LOC_FILE_ID, LOC_PARTITION, LOOKUP_KEY
from upsertlake.services.compaction_plan import read_plan
from upsertlake.timeline.active import Timeline


def pending_compactions(timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, fileId) -> the instant of the pending compaction plan that covers the group."""
    return {op.file_group: inst.time for inst in timeline.pending_compactions() for op in read_plan(timeline, inst)}


def rewritten_slices(
    records: pa.Table, locations: pa.Table, view: FileSystemView, merge: Merge
) -> frozenset[tuple[str, str]]:
    """Under the bucket index, the file groups whose slice takes a record (not a delete) of a
    key its logs deleted (`records` tagged with `locations`). A key cannot leave its bucket, and
    appended after the delete its record would merge wrongly (see `upsertlake.layout.slice_keys`):
    such a slice is rewritten as a new base file, read merged, the write's records merged into it
    as copy-on-write merges them (a deltacommit may write base files, as Hudi's small-file
    handling does). A delete of such a key changes nothing where it is appended."""
    copies = written_copies(records, locations)
    return dead_groups(copies, SliceKeys(view, merge).live(copies))


def written_copies(records: pa.Table, locations: pa.Table) -> pa.Table:
    """(key, loc_partition, loc_file_id) of the tagged records that are not deletes: the stored
    copies `rewritten_slices` asks about (Spark selects the same columns in its tasks)."""
    written = pc.and_(pc.is_valid(locations.column(LOC_FILE_ID)), pc.invert(records.column(DELETE_FLAG)))
    at = pa.array(np.flatnonzero(np.asarray(written.to_numpy(zero_copy_only=False), dtype=bool)))
    return pa.table(
        {
            LOOKUP_KEY: records.column(KEY).take(at),
            LOC_PARTITION: locations.column(LOC_PARTITION).take(at),
            LOC_FILE_ID: locations.column(LOC_FILE_ID).take(at),
        }
    )


def dead_groups(copies: pa.Table, alive: np.ndarray) -> frozenset[tuple[str, str]]:
    """The file groups of the `copies` (`written_copies`) whose key is not `alive` in its slice."""
    groups = copies.select([LOC_PARTITION, LOC_FILE_ID]).filter(pa.array(~alive))
    return frozenset(zip(groups.column(0).to_pylist(), groups.column(1).to_pylist()))


def append_slices(
    buckets: Iterable[Bucket], small_files: Iterable[SmallFile], view: FileSystemView,
    rewrites: frozenset[tuple[str, str]] = frozenset(),
) -> dict[int, FileSlice]:
    """Bucket number -> the current slice its records are appended to as a new log file: every
    UPDATE bucket but those of the small slices the partitioner offered inserts (`small_files`),
    which are rewritten with their updates (Hudi's handleUpdate for its small file ids), and those
    of the groups in `rewrites` (`rewritten_slices`)."""
    small = {sf.file_id for sf in small_files}
    updates = [
        b for b in buckets
        if b.type is BucketType.UPDATE and b.file_id not in small and (b.partition_path, b.file_id) not in rewrites
    ]
    partitions = sorted({b.partition_path for b in updates})
    slices = {s.file_group: s for s in view.latest_file_slices(partitions)} if partitions else {}
    return {b.number: slices[g] for b in updates if (g := (b.partition_path, b.file_id)) in slices}
