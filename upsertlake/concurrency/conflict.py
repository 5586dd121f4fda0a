"""Conflict detection at commit, run under the table lock on a freshly loaded timeline.

Hudi's rule (SimpleConcurrentFileWritesConflictResolutionStrategy) fails a write that shares a
file group with a commit that completed after it started. We compare records instead (docs/DESIGN.md §2):
a write conflicts with such a commit only when both wrote (updated, deleted or inserted) one same
record key — per partition, or across the table when a global index keeps keys unique there — or
when the commit retired one of its file groups (a replacecommit: overwrite, clustering,
delete_partition). Keys are compared as the 32-bit hashes of the key summaries each write
stores (upsertlake.concurrency.key_summary), and every hash match is confirmed against the keys in
the files, so no conflict is needless. Inserts are compared too, which Hudi misses: two writers
inserting one new key each create a file group of their own and would leave the key twice.

A shared file group without a shared record is `stale`: the writer merges its records of that
group again onto the version the other commit wrote (upsertlake.engine.remerge). A commit
that keeps no summary (written by Apache Hudi, or by upsertlake before summaries) falls back to
the file-group rule, plus the insert comparison against the keys of its files. A merge-on-read
append keeps no summary: its log file holds exactly the keys it updated or deleted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.concurrency.key_summary import key_hashes, read_summaries
from upsertlake.layout.bucket_id import bucket_of
from upsertlake.layout.file_system_view import BASE_FILE_EXTENSION, BaseFile, FileGroup
from upsertlake.logfile import block_keys, is_log_path, read_blocks
from upsertlake.schema.columns import COMMIT_TIME, RECORD_KEY
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.layouts import table_layout
from upsertlake.util.arrays import sorted_unique

SHOWN_KEYS = 5


@dataclass(frozen=True)
class Conflict:
    """The instant a write lost to, why, and some of the record keys both wrote."""

    instant: Instant
    reason: str
    keys: tuple[str, ...] = ()

    def describe(self) -> str:
        state = "pending" if not self.instant.is_completed else "completed"
        return f"{self.instant.action.value} {self.instant.time} ({state}): {self.reason}"


@dataclass(frozen=True)
class CommitCheck:
    """What the check found: a conflict, or the file groups to merge again (each with the newest
    concurrent commit that wrote it), or neither (the write may commit)."""

    conflict: Conflict | None = None
    stale: dict[FileGroup, Instant] = field(default_factory=dict)


@dataclass(frozen=True)
class Replaces:
    """The partitions a replace (insert_overwrite, delete_partition) overwrites, or every one
    (insert_overwrite_table): a write that committed into one after the replace started conflicts
    with it, as Hudi's conflict resolution treats replacecommits. A file group such a write
    created is not among those the replace retires, so the replace would otherwise leave it."""

    partitions: frozenset[str] = frozenset()
    whole_table: bool = False

    def covered(self, partitions: set[str]) -> set[str]:
        return set(partitions) if self.whole_table else set(partitions) & self.partitions


def concurrent_writes(timeline: Timeline, checked: frozenset[str]) -> list[Instant]:
    """Completed writes not in `checked` (those completed when the write started, or re-merged on)."""
    return [i for i in timeline.completed_writes() if i.time not in checked]


def check_commit(
    timeline: Timeline,
    checked: frozenset[str],
    own_time: str,
    own_stats: Sequence[WriteStat],
    retiring: set[FileGroup],
    global_keys: bool,
    replaces: Replaces | None = None,
    buckets: bool = False,
) -> CommitCheck:
    """Check a write's files (`own_stats`) and the groups an overwrite retires (and, for a
    replace, the partitions it `replaces`) against every commit that completed since `checked`
    and against pending clusterings. `buckets`: the table's file groups are a bucket index's,
    and a commit that wrote another file group of one of this write's buckets conflicts (two
    writers that each created a bucket's group would leave the bucket two)."""
    storage = timeline.storage
    own_groups = {(s.partitionPath, s.fileId) for s in own_stats}
    own_buckets = {(p, bucket_of(f)): f for p, f in own_groups} if buckets else {}
    own: _Written | None = None  # its summaries are read only when some commit ran beside it
    stale: dict[FileGroup, Instant] = {}
    for inst in concurrent_writes(timeline, checked):
        meta = timeline.commit_metadata(inst)
        if meta.compacted:
            # A compaction rewrites no record, and its plan told writers which slice to append
            # to (upsertlake.services.compaction_plan): no write conflicts with it.
            continue
        retired = {(p, f) for p, ids in (meta.partition_to_replace_file_ids or {}).items() for f in ids}
        if retired & (own_groups | retiring):
            why = f"it retired file group(s) {describe_groups(retired & (own_groups | retiring))}"
            return CommitCheck(Conflict(inst, why))
        written = {s.partitionPath for s in meta.write_stats()} | set(meta.partition_to_replace_file_ids or {})
        into = replaces.covered(written) if replaces else set()
        if into:
            why = f"it wrote into partition(s) {', '.join(sorted(into))}, which this write replaces"
            return CommitCheck(Conflict(inst, why))
        theirs = _Written.load(storage, inst.time, meta.write_stats())
        twins = {(p, f) for p, f in theirs.stats if own_buckets.get((p, bucket_of(f)), f) != f}
        if twins:
            why = f"it wrote file group(s) {describe_groups(twins)} of the bucket(s) this write wrote other groups of"
            return CommitCheck(Conflict(inst, why))
        own = own or _Written.load(storage, own_time, own_stats)
        shared = set(theirs.stats) & own_groups
        if set(theirs.stats) & retiring:
            why = f"it wrote file group(s) {describe_groups(set(theirs.stats) & retiring)} this overwrite retires"
            return CommitCheck(Conflict(inst, why))
        if shared and (theirs.summaries is None or own.summaries is None):
            why = f"both wrote file group(s) {describe_groups(shared)} (it keeps no key summary)"
            return CommitCheck(Conflict(inst, why))
        common = _common_keys(own, theirs, global_keys)
        if common:
            return CommitCheck(Conflict(inst, f"both wrote the record key(s) {', '.join(common)}", tuple(common)))
        stale.update((g, inst) for g in shared)
    for inst in timeline.filter([Action.REPLACE_COMMIT], [State.REQUESTED, State.INFLIGHT]):
        if inst.time != own_time:
            busy = clustering_file_groups(storage, inst) & (own_groups | retiring)
            if busy:
                return CommitCheck(Conflict(inst, f"it is clustering file group(s) {describe_groups(busy)}"))
    return CommitCheck(None, stale)


@dataclass(frozen=True)
class _Written:
    """The file groups one write wrote, with their key summaries (None: the write kept none)."""

    storage: Storage
    instant_time: str
    stats: dict[FileGroup, WriteStat]
    summaries: dict[FileGroup, np.ndarray] | None

    @classmethod
    def load(cls, storage: Storage, instant_time: str, stats: Sequence[WriteStat]) -> _Written:
        by_group = {(s.partitionPath, s.fileId): s for s in stats}
        return cls(storage, instant_time, by_group, _summaries(storage, instant_time, by_group))

    @cached_property
    def hashes(self) -> dict[FileGroup, np.ndarray]:
        """Per file group, the hashes of the keys written; without summaries, those of the keys
        its files with inserts hold with this commit's time (Hudi's writers record no deletes)."""
        if self.summaries is not None:
            return self.summaries
        return {
            g: sorted_unique(key_hashes(_keys_of(self.storage, s, self.instant_time)))
            for g, s in self.stats.items()
            if s.numInserts > 0
        }

    def keys(self, group: FileGroup, wanted: np.ndarray) -> pa.Array | None:
        """The keys this write wrote in `group` whose hash is in `wanted`: those its file holds with
        this commit's time, and those it deleted (in the previous version, gone from its own);
        None when the version it deleted from was cleaned, so its deletions are unknown."""
        stat = self.stats[group]
        if is_log_path(stat.path):  # an append: its blocks' keys
            keys = _log_keys(self.storage, stat.path, self.instant_time)
            return pc.unique(keys.filter(pa.array(np.isin(key_hashes(keys), wanted))))
        new_all = self.storage.read_parquet(stat.path, columns=[RECORD_KEY, COMMIT_TIME])
        keys = new_all.column(0).filter(pc.equal(new_all.column(1), self.instant_time))
        if stat.numDeletes and stat.prevCommit not in ("", "null", None):
            previous = _previous_file(self.storage, stat)
            if previous is not None:
                old = self.storage.read_parquet(previous, columns=[RECORD_KEY]).column(0)
                gone = old.filter(pc.invert(pc.is_in(old, value_set=new_all.column(0).combine_chunks())))
                keys = pa.chunked_array([*keys.chunks, *gone.chunks], keys.type)
            else:
                return None
        keys = keys.combine_chunks()
        return pc.unique(keys.filter(pa.array(np.isin(key_hashes(keys), wanted))))


def _common_keys(own: _Written, theirs: _Written, global_keys: bool) -> list[str]:
    """Up to SHOWN_KEYS record keys both writes wrote (per partition, or across the table)."""
    own_hashes, their_hashes = _by_scope(own.hashes, global_keys), _by_scope(theirs.hashes, global_keys)
    found: list[str] = []
    for scope, ours in own_hashes.items():
        # Both sides are sorted and distinct (`_by_scope`): skip intersect1d's own np.unique.
        candidates = np.intersect1d(ours, their_hashes.get(scope, np.zeros(0, np.uint32)), assume_unique=True)
        if len(candidates) == 0:
            continue
        mine = _keys_in_scope(own, scope, candidates, global_keys)
        other = _keys_in_scope(theirs, scope, candidates, global_keys)
        if mine is None or other is None:  # cannot confirm: the hash match stands
            hits = [f"<a key of hash {h}>" for h in candidates.tolist()]
        else:
            hits = pc.unique(mine.filter(pc.is_in(mine, value_set=other))).to_pylist()
        found += hits[: SHOWN_KEYS - len(found)]
        if len(found) >= SHOWN_KEYS:
            break
    return found


def _by_scope(hashes: dict[FileGroup, np.ndarray], global_keys: bool) -> dict[str, np.ndarray]:
    """Hashes per partition ("" for the whole table under a global index)."""
    scoped: dict[str, list[np.ndarray]] = defaultdict(list)
    for (partition, _), values in hashes.items():
        scoped["" if global_keys else partition].append(values)
    return {s: sorted_unique(np.concatenate(v)) for s, v in scoped.items()}


def _keys_in_scope(written: _Written, scope: str, wanted: np.ndarray, global_keys: bool) -> pa.Array | None:
    hashes = written.hashes
    arrays = [
        written.keys(g, wanted)
        for g in written.stats
        if (global_keys or g[0] == scope) and g in hashes and np.isin(hashes[g], wanted).any()
    ]
    if any(a is None for a in arrays):
        return None
    return pa.concat_arrays([pa.array([], pa.string()), *[pc.cast(a, pa.string()) for a in arrays]])


def _log_keys(storage: Storage, path: str, instant_time: str) -> pa.Array:
    """The keys a write's log file updates or deletes (its blocks of that instant)."""
    return pa.concat_arrays(block_keys(read_blocks(storage.read_bytes(path), storage.full_path(path)), instant_time))


def _keys_of(storage: Storage, stat: WriteStat, instant_time: str) -> pa.Array:
    table = storage.read_parquet(stat.path, columns=[RECORD_KEY, COMMIT_TIME])
    return table.column(0).filter(pc.equal(table.column(1), instant_time))


def _previous_file(storage: Storage, stat: WriteStat) -> str | None:
    """The base file of the version a write stat merged onto, if it still exists."""
    for entry in storage.list(stat.partitionPath):
        if entry.name.startswith(f"{stat.fileId}_") and entry.name.endswith(BASE_FILE_EXTENSION):
            bf = BaseFile.parse(entry)
            if bf.file_id == stat.fileId and bf.instant_time == stat.prevCommit:
                return bf.path
    return None


def _summaries(
    storage: Storage, instant_time: str, by_group: dict[FileGroup, WriteStat]
) -> dict[FileGroup, np.ndarray] | None:
    """The key hashes the write stored per file group; None when one group's are not to be had."""
    summaries: dict[FileGroup, np.ndarray] = {}
    stored = None  # read when a group needs it: an append's keys are in its log
    for g, stat in by_group.items():
        if is_log_path(stat.path):  # an append keeps no summary: its log file holds just its keys
            try:
                summaries[g] = sorted_unique(key_hashes(_log_keys(storage, stat.path, instant_time)))
                continue
            except FileNotFoundError:
                return None
        stored = read_summaries(storage, instant_time) if stored is None else stored
        summary = stored.get(g)
        if summary is None:
            return None
        summaries[g] = summary.hashes()
    return summaries


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


def describe_groups(groups: set[FileGroup]) -> str:
    shown = sorted(groups)[:3]
    more = f" and {len(groups) - 3} more" if len(groups) > 3 else ""
    return ", ".join(f"{p or '<root>'}/{f}" for p, f in shown) + more
