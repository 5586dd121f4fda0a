"""The replace actions: insert_overwrite, insert_overwrite_table and delete_partition.

Hudi commits them as replacecommits (SparkInsertOverwriteCommitActionExecutor,
SparkDeletePartitionCommitActionExecutor): their requested file holds a replace plan, the new
records go to new file groups, and the commit names the file groups it retires. What sets them
apart from an upsert lives here, so the other actions' paths stay free of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.compute as pc

from upsertlake.concurrency.conflict import Replaces
from upsertlake.engine.bucket_writer import PARTITION
from upsertlake.engine.write_result import WriteResult
from upsertlake.errors import PartitionNotFoundError
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.schema import avro_to_arrow
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.documents import encode
from upsertlake.timeline.instant import Action

if TYPE_CHECKING:  # the plan imports the routing, which imports OVERWRITES from here
    from upsertlake.engine.plan import WritePlan
    from upsertlake.engine.write_client import WriteClient

REPLACE_PLAN = "HoodieRequestedReplaceMetadata"
# Replace file groups instead of merging into them: committed as replacecommits.
OVERWRITES = ("insert_overwrite", "insert_overwrite_table", "delete_partition")


def requested(operation: str) -> tuple[Action, bytes]:
    """The action of a new instant for `operation` and its requested file's content (a replace's
    plan; nothing for a commit)."""
    if operation not in OVERWRITES:
        return Action.COMMIT, b""
    plan = {"operationType": operation.upper(), "clusteringPlan": None, "extraMetadata": {}, "version": 1}
    return Action.REPLACE_COMMIT, encode(REPLACE_PLAN, plan)


def delete_partitions(client: WriteClient, partitions: list[str], instant_time: str) -> WriteResult:
    """Retire every file group of the partitions (Hudi's delete_partition); writes no file."""
    timeline = Timeline.load(client.storage)
    view = FileSystemView(timeline)
    unknown = sorted(set(partitions) - set(view.partitions()))
    if unknown:
        raise PartitionNotFoundError(f"no such partition(s) {unknown}; the table has {view.partitions()}")
    replaced = view.file_ids(partitions)  # their files are not read: a missing one is no obstacle
    # The schema rides along: readers (hudi-rs) take it from the newest commit.
    schema_json = timeline.latest_schema() or client.table_config.create_schema
    schema = avro_to_arrow(schema_json) if schema_json else None
    return WriteResult(instant_time, "delete_partition", 0, 0, 0, (), {}, data_schema=schema, replaced=replaced)


def replaced(plan: WritePlan) -> dict[str, list[str]]:
    """The file groups an overwrite retires: those of the partitions in the batch, or all."""
    if plan.operation == "insert_overwrite":
        return plan.view.file_ids(pc.unique(plan.records.column(PARTITION)).to_pylist())
    return plan.view.file_ids()


def replaces(result: WriteResult) -> Replaces | None:
    """The partitions a replace overwrites (those it retires groups of or writes to), or deletes."""
    if result.replaced is None:
        return None
    if result.operation == "insert_overwrite_table":
        return Replaces(whole_table=True)
    return Replaces(frozenset(result.replaced) | {s.partitionPath for s in result.write_stats})
