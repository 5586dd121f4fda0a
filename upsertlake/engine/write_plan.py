"""The plan of one write: what prepare → tag → profile → partition decided, before any file is
written. One value for both engines: the in-process write executes it with the records it holds
(`tagged`); a Spark write builds it from counts (its records stay in Spark) and ships its parts to
the tasks. `explain` reports it without writing anything."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config import Config
from upsertlake.config.enums import TableType
from upsertlake.engine.prepare import PreparedBatch
from upsertlake.engine.slice_routing import append_slices
from upsertlake.index.base import Index
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.partitioner import Bucket, BucketPartitioner, BucketType, UpsertPartitioner, WorkloadProfile
from upsertlake.schema.columns import DELETE_FLAG, LOC_FILE_ID
from upsertlake.timeline.operation import Operation


def view_scope(operation: Operation, index: Index, partitions: pa.Array | pa.ChunkedArray) -> list[str] | None:
    """The partitions a write's file system view lists: the batch's (so a write's listing grows
    with the partitions it touches, not with the table), or all (None) when the index reads every
    partition or the write replaces the whole table."""
    if operation.replaces_table or (index.requires_tagging(operation) and index.reads_all_partitions):
        return None
    return cast("list[str]", pc.unique(partitions).to_pylist())


log = logging.getLogger("upsertlake.progress")


class Progress:
    """Hears a write's stages as they run: pass one as `progress=` to `Table.upsert` (and insert,
    bulk_insert, delete) to show them (the command line draws them as bars); this base ignores
    them. Every stage is also logged, when it starts and when it ends, to the `upsertlake.progress`
    logger at INFO."""

    def started(self, stage: str, total: int = 0) -> None:
        """`total`: units of work in the stage (file groups for `write`), 0 when not counted."""

    def advanced(self, stage: str, done: int) -> None:
        """`done` of the stage's `total` units are finished."""

    def ended(self, stage: str, seconds: float) -> None:
        """The stage took `seconds`."""


@contextmanager
def stage(stages: dict[str, float], name: str, progress: Progress | None = None, total: int = 0) -> Iterator[None]:
    """Time a stage of a write into `stages` (added up when it runs again), log it and tell `progress`."""
    start = time.perf_counter()
    log.info("%s started%s", name, f" ({total} file groups)" if total else "")
    if progress is not None:
        progress.started(name, total)
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - start
        log.info("%s done in %.3f s", name, stages[name])
        if progress is not None:
            progress.ended(name, stages[name])


@dataclass(frozen=True)
class Tagged:
    """An in-process plan's records: the prepared batch, the records written with their stored
    locations (`loc_partition`, `loc_file_id`, `loc_instant`; null for inserts), and each
    record's bucket."""

    batch: PreparedBatch
    records: pa.Table
    locations: pa.Table
    assignment: np.ndarray


@dataclass(frozen=True)
class WritePlan:
    """The buckets a write goes to and what its bucket writers need: the operation and options,
    the file system view it was planned against, the workload profile, the data schema, the
    partitioner that assigns records to buckets (none for a bulk insert sized by its batch) and,
    in process, the records themselves."""

    operation: Operation
    cfg: Config
    view: FileSystemView
    profile: WorkloadProfile
    buckets: list[Bucket]
    data_schema: pa.Schema
    partitioner: UpsertPartitioner | BucketPartitioner | None = None
    tagged: Tagged | None = None
    stages: dict[str, float] = field(default_factory=dict)
    store_requests: dict[str, int] = field(default_factory=dict)  # what planning asked of an object store
    merge_on_read: bool = False  # updates and deletes are appended to log files (`slice_routing`)
    rewrites: frozenset[tuple[str, str]] = frozenset()  # bucket slices rewritten merged (`rewritten_slices`)

    @property
    def small_files(self) -> list[Any]:
        """The small files offered inserts (a merge-on-read write rewrites them, appends to none)."""
        return list(self.partitioner.small_files) if self.partitioner is not None else []

    def summary(self) -> dict[str, Any]:
        """Counts per stage and per file group: the groups whose base file is rewritten (with its
        bytes), the new ones, and on a merge-on-read table the groups that get a new log file,
        with the log files and bytes their slice already holds (the compaction backlog)."""
        tagged = self.tagged
        assert tagged is not None, "a summary counts the records an in-process plan holds"
        is_insert = pc.is_null(tagged.locations.column(LOC_FILE_ID)).to_numpy(zero_copy_only=False)
        is_delete = tagged.records.column(DELETE_FLAG).to_numpy(zero_copy_only=False).astype(bool)
        n = len(self.buckets)
        assignment = tagged.assignment
        per_bucket = np.bincount(assignment, minlength=n) if n else np.zeros(0, int)
        inserts = np.bincount(assignment[is_insert], minlength=n) if n else np.zeros(0, int)
        deleted = np.bincount(assignment[is_delete], minlength=n) if n else np.zeros(0, int)
        appends = append_slices(self.buckets, self.small_files, self.view, self.rewrites) if self.merge_on_read else {}
        sizes = {bf.file_group: bf.size for bf in self.view.latest_base_files()}
        updated: list[dict[str, Any]] = []
        small: list[dict[str, Any]] = []
        new: list[dict[str, Any]] = []
        appended: list[dict[str, Any]] = []
        for b in self.buckets:
            total, ins = int(per_bucket[b.number]), int(inserts[b.number])
            if total == 0:
                continue
            if b.type is BucketType.INSERT:
                new.append({"partition": b.partition_path, "file_id": b.file_id, "inserts": ins})
                continue
            sl = appends.get(b.number)
            if sl is not None:
                dels = int(deleted[b.number])
                appended.append({
                    "partition": b.partition_path, "file_id": b.file_id, "updates": total - dels, "deletes": dels,
                    "pending_log_files": len(sl.logs), "pending_log_bytes": sum(lf.size for lf in sl.logs),
                })
                continue
            size = sizes.get((b.partition_path, b.file_id), 0)
            if total > ins:
                updated.append(
                    {"partition": b.partition_path, "file_id": b.file_id, "updates": total - ins, "bytes": size}
                )
            if ins:
                small.append({"partition": b.partition_path, "file_id": b.file_id, "inserts": ins, "bytes": size})
        rewritten = {(f["partition"], f["file_id"]): f["bytes"] for f in updated + small}
        deletes = int(is_delete.sum())
        log_appends = {
            "appended_file_groups": appended,
            "compaction_backlog": {
                "log_files": sum(f["pending_log_files"] for f in appended),
                "log_bytes": sum(f["pending_log_bytes"] for f in appended),
            },
        }
        return {
            "operation": self.operation.value,
            "table_type": (TableType.MERGE_ON_READ if self.merge_on_read else TableType.COPY_ON_WRITE).value,
            "input_records": tagged.batch.num_input,
            "after_dedup": tagged.batch.records.num_rows,
            "duplicates_combined": tagged.batch.num_input - tagged.batch.records.num_rows,
            "dropped_unknown_deletes": tagged.batch.records.num_rows - tagged.records.num_rows,
            "updates": int((~is_insert).sum()) - deletes,
            "deletes": deletes,
            "inserts": int(is_insert.sum()),
            **(log_appends if self.merge_on_read else {}),
            "updated_file_groups": updated,
            "small_file_inserts": small,
            **({"store_requests": self.store_requests} if self.store_requests else {}),
            "new_file_groups": new,
            "bytes_rewritten": sum(rewritten.values()),
            "stage_seconds": dict(self.stages),
        }
