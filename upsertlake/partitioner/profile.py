"""The workload profile of one write: per partition, how many inserts and how many updates per file.

It is what Hudi's `WorkloadProfile`/`WorkloadStat` hold for a copy-on-write write with an index that
cannot index log files (simple, bloom): the partitioner sizes its buckets from it, and the
`<ts>.inflight` file records it so that a concurrent writer's conflict check sees which file groups
this write touches before it completes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.acero

from upsertlake.timeline.commit_metadata import write_stat_json

NULL_COMMIT = "null"  # Hudi's HoodieWriteStat.NULL_COMMIT: the prevCommit of a file not written before


@dataclass(frozen=True)
class PartitionWorkload:
    """One partition's share of the write (Hudi's WorkloadStat of the input records).

    `prev_commits` maps a fileId to the instant of the file version the updates were tagged
    against (Hudi keeps it with the count and writes it as the inflight's `prevCommit`).
    """

    num_inserts: int
    updates: Mapping[str, int]  # fileId -> number of updated/deleted records routed to it
    prev_commits: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadProfile:
    """Per-partition workloads of one write, in a deterministic order (partition, then fileId)."""

    partitions: Mapping[str, PartitionWorkload]
    operation: str  # "UPSERT", "INSERT", ... as Hudi's WriteOperationType names it

    @classmethod
    def build(
        cls,
        partition_paths: pa.Array | pa.ChunkedArray,
        file_ids: pa.Array | pa.ChunkedArray,
        operation: str,
        instant_times: pa.Array | pa.ChunkedArray | None = None,
    ) -> WorkloadProfile:
        """Count the deduplicated, tagged records: one row per record, `file_ids` null for an insert.

        `instant_times` (optional) is the instant of each tagged record's current file version; it
        only feeds the inflight's `prevCommit`. One hash aggregation; Python loops over groups only.
        """
        columns = {"p": partition_paths, "f": file_ids}
        if instant_times is not None:
            columns["i"] = instant_times
        table = pa.table(columns)
        if table.column("p").null_count:
            raise ValueError("a record has no partition path (use '' for a non-partitioned table)")
        aggregations: list[Any] = [([], "count_all")]
        if instant_times is not None:
            aggregations.append(("i", "max"))
        groups = (
            table.group_by(["p", "f"], use_threads=False)
            .aggregate(aggregations)
            .sort_by([("p", "ascending"), ("f", "ascending")])
            .to_pydict()
        )
        instants = groups.get("i_max", [None] * len(groups["p"]))
        return cls.from_counts(groups["p"], groups["f"], groups["count_all"], instants, operation)

    @classmethod
    def from_counts(
        cls,
        partitions: Sequence[str],
        file_ids: Sequence[str | None],
        counts: Sequence[int],
        instants: Sequence[str | None],
        operation: str,
    ) -> WorkloadProfile:
        """The profile from counts per (partition, fileId or None for inserts), sorted by both:
        what a distributed count (Spark) brings back instead of one row per record."""
        inserts: dict[str, int] = {}
        updates: dict[str, dict[str, int]] = {}
        prev: dict[str, dict[str, str]] = {}
        for partition, file_id, count, instant in zip(partitions, file_ids, counts, instants):
            inserts.setdefault(partition, 0)
            updates.setdefault(partition, {})
            prev.setdefault(partition, {})
            if file_id is None:
                inserts[partition] += count
            else:
                updates[partition][file_id] = count
                if instant is not None:
                    prev[partition][file_id] = instant
        return cls(
            {p: PartitionWorkload(inserts[p], updates[p], prev[p]) for p in inserts},
            operation,
        )

    def to_inflight_json(self) -> bytes:
        """The `<ts>.inflight` content Hudi writes (BaseCommitActionExecutor.saveWorkloadProfileMetadataToInflight).

        Per partition: first a stat with fileId "" carrying the partition's inserts (present even
        when there are none), then one stat per updated fileId carrying its update count.
        """
        doc = {
            "partitionToWriteStats": {
                partition: [_write_stat("", NULL_COMMIT, num_inserts=w.num_inserts)]
                + [
                    _write_stat(fid, w.prev_commits.get(fid, NULL_COMMIT), num_update_writes=n)
                    for fid, n in w.updates.items()
                ]
                for partition, w in self.partitions.items()
            },
            "compacted": False,
            "extraMetadata": {},
            "operationType": self.operation,
        }
        return json.dumps(doc, indent=2, separators=(",", " : ")).encode()


def _write_stat(file_id: str, prev_commit: str, num_inserts: int = 0, num_update_writes: int = 0) -> dict[str, Any]:
    """A HoodieWriteStat as Jackson serializes a freshly built one: every field, in Hudi's order."""
    return write_stat_json(
        fileId=file_id, prevCommit=prev_commit, numInserts=num_inserts, numUpdateWrites=num_update_writes
    )
