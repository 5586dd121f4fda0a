"""Conflict detection at commit, run under the table lock on a freshly loaded timeline.

Hudi's rule (SimpleConcurrentFileWritesConflictResolutionStrategy): a write conflicts with an
instant that completed after it started, or with a pending clustering, when both touch one file
group. We add a second rule Hudi lacks: two writers that insert the same new key each create a file
group of their own, so their file groups never overlap and Hudi lets both commit, leaving the key
twice in the table. The later writer's inserted keys are therefore compared with the keys stored
in the files of every concurrent commit that inserted records.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.timeline import documents
from upsertlake.schema import RECORD_KEY_COLUMN as RECORD_KEY
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.layouts import table_layout
from upsertlake.timeline.instant import Action, Instant, State

FileGroup = tuple[str, str]
NO_INSERTS = pa.table({"key": pa.array([], pa.string()), "partition": pa.array([], pa.string())})


@dataclass(frozen=True)
class Conflict:
    """The instant a write lost to, and why."""

    instant: Instant
    reason: str

    def describe(self) -> str:
        state = "pending" if not self.instant.is_completed else "completed"
        return f"{self.instant.action.value} {self.instant.time} ({state}): {self.reason}"


def concurrent_writes(timeline: Timeline, completed_at_start: frozenset[str]) -> list[Instant]:
    """Writes that completed after the write in question started."""
    return [i for i in timeline.completed_writes() if i.time not in completed_at_start]


def find_conflict(
    timeline: Timeline,
    completed_at_start: frozenset[str],
    own_time: str,
    file_groups: set[FileGroup],
    inserted: pa.Table,
    global_keys: bool,
) -> Conflict | None:
    """The first instant this write conflicts with, or None.

    `inserted` has columns `key` and `partition`: the records this write adds as new; with a
    global index a key may exist once in the whole table, otherwise once per partition.
    """
    concurrent = concurrent_writes(timeline, completed_at_start)
    for inst in concurrent:
        shared = timeline.commit_metadata(inst).file_groups() & file_groups
        if shared:
            return Conflict(inst, f"both wrote file group(s) {_names(shared)}")
    for inst in timeline.filter([Action.REPLACE_COMMIT], [State.REQUESTED, State.INFLIGHT]):
        if inst.time != own_time:
            shared = clustering_file_groups(timeline.storage, inst) & file_groups
            if shared:
                return Conflict(inst, f"it is clustering file group(s) {_names(shared)}")
    if inserted.num_rows:
        for inst in concurrent:
            dup = _duplicate_inserts(timeline, inst, inserted, global_keys)
            if dup:
                return Conflict(inst, f"both inserted the new key(s) {', '.join(dup)}")
    return None


def clustering_file_groups(storage: Storage, instant: Instant) -> set[FileGroup]:
    """The file groups a pending clustering plan (Hudi's HoodieRequestedReplaceMetadata) rewrites."""
    path = table_layout(storage).path(instant.with_state(State.REQUESTED))
    if not storage.exists(path):
        return set()
    data = storage.read_bytes(path)
    if not data:
        return set()
    plan = documents.decode(data, f"the replace plan {path}").get("clusteringPlan") or {}
    return {
        (s.get("partitionPath") or "", s["fileId"])
        for group in plan.get("inputGroups") or []
        for s in group.get("slices") or []
    }


def pending_clustering(timeline: Timeline) -> dict[str, set[str]]:
    """partition -> fileIds in the plans of pending clusterings (small-file inserts skip them)."""
    busy: dict[str, set[str]] = {}
    for inst in timeline.filter([Action.REPLACE_COMMIT], [State.REQUESTED, State.INFLIGHT]):
        for partition, file_id in clustering_file_groups(timeline.storage, inst):
            busy.setdefault(partition, set()).add(file_id)
    return busy


def _duplicate_inserts(timeline: Timeline, instant: Instant, inserted: pa.Table, global_keys: bool) -> list[str]:
    """Up to 5 of our inserted keys found in the files `instant` wrote with inserts."""
    found: list[str] = []
    for stat in timeline.commit_metadata(instant).write_stats():
        if stat.numInserts == 0:
            continue
        ours = inserted if global_keys else inserted.filter(pc.equal(inserted["partition"], stat.partitionPath))
        if ours.num_rows == 0:
            continue
        keys = pq.read_table(timeline.storage.full_path(stat.path), columns=[RECORD_KEY]).column(0)
        hits = pc.unique(keys.filter(pc.is_in(keys, value_set=ours["key"].combine_chunks())))
        found.extend(hits.to_pylist()[: 5 - len(found)])
        if len(found) >= 5:
            break
    return found


def _names(groups: set[FileGroup]) -> str:
    shown = sorted(groups)[:3]
    more = f" and {len(groups) - 3} more" if len(groups) > 3 else ""
    return ", ".join(f"{p or '<root>'}/{f}" for p, f in shown) + more
