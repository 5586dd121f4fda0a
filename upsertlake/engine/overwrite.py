"""The replace actions: insert_overwrite, insert_overwrite_table and delete_partition.

Hudi commits them as replacecommits (SparkInsertOverwriteCommitActionExecutor,
SparkDeletePartitionCommitActionExecutor): their requested file holds a replace plan, the new
records go to new file groups, and the commit names the file groups it retires. What sets them
apart from an upsert lives here, so the other actions' paths stay free of it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.concurrency.conflict import Replaces
from upsertlake.engine.context import WriteContext
from upsertlake.engine.write_result import WriteResult
from upsertlake.errors import PartitionNotFoundError
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.schema import avro_to_arrow
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.documents import encode
from upsertlake.timeline.operation import Operation

REPLACE_PLAN = "HoodieRequestedReplaceMetadata"


def requested_plan(operation: Operation) -> bytes:
    """The requested file's content of a new instant for `operation`: a replace's plan; nothing
    for a commit."""
    if not operation.overwrites:
        return b""
    plan: dict[str, Any] = {
        "operationType": operation.type_name, "clusteringPlan": None, "extraMetadata": {}, "version": 1,
    }
    return encode(REPLACE_PLAN, plan)


def delete_partitions(ctx: WriteContext, partitions: list[str], instant_time: str) -> WriteResult:
    """Retire every file group of the partitions (Hudi's delete_partition); writes no file."""
    timeline = Timeline.load(ctx.storage)
    view = FileSystemView(timeline)
    unknown = sorted(set(partitions) - set(view.partitions()))
    if unknown:
        raise PartitionNotFoundError(f"no such partition(s) {unknown}; the table has {view.partitions()}")
    replaced = view.file_ids(partitions)  # their files are not read: a missing one is no obstacle
    # The schema rides along: readers (hudi-rs) take it from the newest commit.
    schema_json = timeline.latest_schema() or ctx.table_config.create_schema
    schema = avro_to_arrow(schema_json) if schema_json else None
    return WriteResult(
        instant_time, Operation.DELETE_PARTITION, 0, 0, 0, (), {}, data_schema=schema, replaced=replaced
    )


def replaced(
    operation: Operation, view: FileSystemView, partitions: pa.Array | pa.ChunkedArray
) -> dict[str, list[str]]:
    """The file groups an overwrite retires: those of the batch's `partitions`, or all."""
    if operation.replaces_table:
        return view.file_ids()
    return view.file_ids(pc.unique(partitions).to_pylist())


def replaces(result: WriteResult) -> Replaces | None:
    """The partitions a replace overwrites (those it retires groups of or writes to), or deletes."""
    if result.replaced is None:
        return None
    if result.operation.replaces_table:
        return Replaces(whole_table=True)
    return Replaces(frozenset(result.replaced) | {s.partitionPath for s in result.write_stats})
