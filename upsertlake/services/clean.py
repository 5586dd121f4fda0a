"""Clean: delete file versions no reader within the retained window needs (Hudi's CleanPlanner);
on merge-on-read a version is a file slice, its base file and log files deleted together.

A version of a file group is visible from its instant until the group's next committed version
(or the replacecommit that replaced the group). The cleaner keeps every version visible at some
retained read point: under KEEP_LATEST_COMMITS / KEEP_LATEST_BY_HOURS every completed commit from
the earliest commit to retain on; under KEEP_LATEST_FILE_VERSIONS the newest N versions of each
live file group. Savepointed files, files of pending instants and files of instants the timeline
does not know are never touched. The clean metadata's `earliestCommitToRetain` is the earliest
instant whose snapshot is still whole; reads before it fail (`cleaned_before`).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.enums import CleanPolicy
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import ConfigError, StorageError
from upsertlake.layout.file_system_view import BaseFile, LogFile, list_partitions_and_files, slice_of
from upsertlake.services import metadata_table
from upsertlake.services.key_groups import ByKeyGroup
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline, create_requested, transition
from upsertlake.timeline.commit_metadata import CommitMetadata
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.instant_time import format_instant_time
from upsertlake.timeline.layouts import layout_of
from upsertlake.timeline.operation import CLEAN_TYPE
from upsertlake.timeline.retention import cleaned_before, pending_clean_plan, savepointed_files

log = logging.getLogger(__name__)

PLAN_SCHEMA = "HoodieCleanerPlan"
METADATA_SCHEMA = "HoodieCleanMetadata"
_RETAINED = {
    CleanPolicy.KEEP_LATEST_COMMITS: opt.CLEANER_COMMITS_RETAINED,
    CleanPolicy.KEEP_LATEST_FILE_VERSIONS: opt.CLEANER_FILE_VERSIONS_RETAINED,
    CleanPolicy.KEEP_LATEST_BY_HOURS: opt.CLEANER_HOURS_RETAINED,
}


@dataclass(frozen=True)
class CleanResult:
    """What a clean did; `instant_time` is None when there was nothing to delete (no instant)."""

    instant_time: str | None
    policy: CleanPolicy
    earliest_commit_to_retain: str | None
    files_deleted: tuple[str, ...] = field(default=())


def clean(
    storage: Storage, lock: TableLock, cfg: Config, retained: int | None = None, by_key: ByKeyGroup | None = None
) -> CleanResult:
    """Plan and run one clean under the table lock by `cfg`'s hoodie.cleaner.policy, keeping
    `retained` (default: the policy's own option): `.clean.requested` (cleaner plan),
    `.clean.inflight`, delete, `.clean` (clean metadata). A clean left pending by a killed cleaner
    is finished first, as Hudi does: some of its files are gone already. `by_key`: where the
    metadata table's record index is compacted, when the clean's deltacommit makes one due."""
    policy = cfg.get(opt.CLEANER_POLICY)
    retained = cfg.get(_RETAINED[policy]) if retained is None else retained
    if retained < 1 and policy is not CleanPolicy.KEEP_LATEST_BY_HOURS:
        raise ConfigError(f"{_RETAINED[policy].key} must be at least 1, got {retained}")
    started = time.monotonic()
    with lock.hold():
        table_config = metadata_table.prepare(storage, TableConfig.load(storage), cfg, by_key)
        timeline = Timeline.load(storage, layout_of(table_config))
        pending = timeline.filter([Action.CLEAN], PENDING)
        finished = [_finish_pending(storage, table_config, timeline, inst, by_key) for inst in pending]
        if finished:
            timeline = Timeline.load(storage)
        doomed, earliest = plan(timeline, policy, retained)
        if not doomed:
            if finished:  # the run finished a killed clean: report that one
                files = tuple(sorted(path for _, paths in finished for path in paths))
                return CleanResult(finished[-1][0], policy, cleaned_before(timeline), files)
            return CleanResult(None, policy, earliest)
        by_partition: dict[str, list[str]] = defaultdict(list)
        for bf in doomed:
            by_partition[bf.partition_path].append(bf.path)
        boundary = max(filter(None, [earliest, cleaned_before(timeline)]), default="")
        plan_doc: dict[str, Any] = {
            "earliestInstantToRetain": (
                {"timestamp": boundary, "action": _action_at(timeline, boundary), "state": "COMPLETED"}
                if boundary
                else None
            ),
            "policy": policy.value,
            "filesToBeDeletedPerPartition": None,
            "version": 2,
            "filePathsToBeDeletedPerPartition": {
                p: [{"filePath": storage.full_path(path), "isBootstrapBaseFile": False} for path in paths]
                for p, paths in by_partition.items()
            },
            "partitionsToBeDeleted": [],
        }
        body = documents.encode(PLAN_SCHEMA, plan_doc)
        # One look at the timeline for the whole clean: nothing else changes it while we hold the lock.
        requested = create_requested(storage, Action.CLEAN, body, timeline=timeline)
        inflight = transition(storage, requested, State.INFLIGHT, body, timeline=timeline.with_instant(requested))
        deleted = _execute(
            storage, table_config, timeline.with_instant(inflight), inflight, policy.value, boundary, by_partition,
            started, by_key,
        )
    return CleanResult(requested.time, policy, boundary or None, tuple(sorted(deleted)))


PENDING = (State.REQUESTED, State.INFLIGHT)


def _finish_pending(
    storage: Storage, table_config: TableConfig, timeline: Timeline, pending: Instant, by_key: ByKeyGroup | None
) -> tuple[str, list[str]]:
    """Run the rest of a pending clean's plan and complete it; returns its instant time and the
    paths it deleted now."""
    plan_doc = pending_clean_plan(timeline, pending) or {}
    by_partition = _planned_paths(storage, plan_doc)
    present = [path for paths in by_partition.values() for path in paths if storage.exists(path)]
    if pending.state is State.INFLIGHT:
        inflight = pending
    else:
        inflight = transition(storage, pending, State.INFLIGHT, documents.encode(PLAN_SCHEMA, plan_doc))
    boundary = (plan_doc.get("earliestInstantToRetain") or {}).get("timestamp") or ""
    # Listed again: an earlier pending clean may have completed since `timeline` (a later completion time).
    now = Timeline.load(storage, timeline.layout)
    policy = plan_doc.get("policy") or ""
    _execute(storage, table_config, now, inflight, policy, boundary, by_partition, time.monotonic(), by_key)
    log.info("finished clean %s, left pending by a cleaner that stopped midway", pending.time)
    return pending.time, present


def _planned_paths(storage: Storage, plan_doc: dict[str, Any]) -> dict[str, list[str]]:
    """A cleaner plan's files per partition, table-relative (plan version 2 names full paths,
    version 1 file names)."""
    if plan_doc.get("filePathsToBeDeletedPerPartition") is not None:
        prefix = f"{storage.base}/"
        return {
            p: [f["filePath"].removeprefix("file://").removeprefix("file:").removeprefix(prefix) for f in files]
            for p, files in plan_doc["filePathsToBeDeletedPerPartition"].items()
        }
    return {
        p: [f"{p}/{name}" if p else name for name in names]
        for p, names in (plan_doc.get("filesToBeDeletedPerPartition") or {}).items()
    }


def _execute(
    storage: Storage,
    table_config: TableConfig,
    timeline: Timeline,
    inflight: Instant,
    policy: str,
    boundary: str,
    by_partition: dict[str, list[str]],
    started: float,
    by_key: ByKeyGroup | None,
) -> list[str]:
    """Delete a plan's files and complete the clean with its metadata (key summaries stay with
    their instant until it is archived: one sidecar holds a write's file groups);
    returns the table-relative paths deleted (a file already gone counts as deleted)."""
    deleted: list[str] = []
    partitions = {}
    for p, paths in by_partition.items():
        ok, failed = [], []
        for path in paths:
            name = path.rpartition("/")[2]
            try:
                storage.delete(path)
                ok.append(name)
                deleted.append(path)
            except (OSError, StorageError):  # recorded as Hudi's failedDeleteFiles, locally or on a store
                failed.append(name)
        partitions[p] = {
            "partitionPath": p,
            "policy": policy,
            "deletePathPatterns": [path.rpartition("/")[2] for path in paths],
            "successDeleteFiles": ok,
            "failedDeleteFiles": failed,
            "isPartitionDeleted": False,
        }
    removed = {p: [path.rpartition("/")[2] for path in paths] for p, paths in by_partition.items()}
    # `table_config`: read under the lock
    clean_metadata = CommitMetadata({}, CLEAN_TYPE)
    metadata_table.sync(storage, table_config, inflight.time, clean_metadata, deleted=removed, by_key=by_key)
    last = timeline.latest_completed_write()  # `timeline`: listed under the lock the caller holds
    metadata = {
        "policy": policy,
        "startCleanTime": inflight.time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(deleted),
        "earliestCommitToRetain": boundary,
        "lastCompletedCommitTimestamp": last.time if last else "",
        "partitionMetadata": partitions,
        "version": 2,
        "bootstrapPartitionMetadata": {},
    }
    transition(storage, inflight, State.COMPLETED, documents.encode(METADATA_SCHEMA, metadata), timeline=timeline)
    return deleted


@dataclass(frozen=True)
class _Version:
    """One version of a file group: a base file, or on merge-on-read a file slice (its base file,
    if any, and the log files written onto it), named by the slice's base instant."""

    instant_time: str
    files: list[BaseFile | LogFile] = field(default_factory=list)


def _versions(timeline: Timeline, committed: set[str]) -> dict[tuple[str, str], list[_Version]]:
    """Per file group, its committed versions with their files, oldest first. A log file joins
    the slice it belongs to (layout 1: the base instant it is named by; layout 2: the newest base
    older than its deltacommit's completion); logs of pending or unknown instants (a write under
    way, a compaction still pending) are left out, so they are never cleaned."""
    listing = list_partitions_and_files(timeline.storage)
    slices: dict[tuple[str, str], dict[str, _Version]] = defaultdict(dict)
    for bf in listing.base_files:
        if bf.instant_time in committed:
            slices[bf.file_group].setdefault(bf.instant_time, _Version(bf.instant_time)).files.append(bf)
    completion = {i.time: i.completed_at for i in timeline.completed_writes()}
    by_completion = timeline.layout.has_completion_times
    for lf in sorted(listing.log_files, key=lambda f: f.name.sort_key()):
        if lf.name.instant not in committed:
            continue
        versions = slices[lf.file_group]
        if by_completion:
            done = completion[lf.name.instant]
            starts = sorted(t for t, v in versions.items() if any(isinstance(f, BaseFile) for f in v.files))
            start = slice_of(starts, done) or min([lf.name.instant, *versions])
        else:
            start = lf.name.instant
        versions.setdefault(start, _Version(start)).files.append(lf)
    return {g: [v[t] for t in sorted(v)] for g, v in slices.items() if v}


def plan(timeline: Timeline, policy: CleanPolicy, retained: int) -> tuple[list[BaseFile | LogFile], str | None]:
    """The files to delete (whole versions: a merge-on-read slice goes with its log files), and
    the earliest instant whose snapshot stays whole."""
    writes = timeline.completed_writes()
    if not writes:
        return [], None
    committed = {i.time for i in writes}
    replaced_at: dict[tuple[str, str], str] = {}
    for inst in writes:
        if inst.action is Action.REPLACE_COMMIT:
            for p, ids in (timeline.commit_metadata(inst).partition_to_replace_file_ids or {}).items():
                for fid in ids:
                    replaced_at.setdefault((p, fid), inst.time)
    doomed: list[tuple[_Version, str]] = []  # (version, when it stopped being visible)
    if policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS:
        earliest = None
        groups = _versions(timeline, committed)  # a listing of the whole table
        for g, versions in groups.items():
            versions = versions[::-1]
            ends = [replaced_at.get(g)] + [v.instant_time for v in versions[:-1]]
            drop = range(len(versions)) if g in replaced_at else range(retained, len(versions))
            doomed.extend((versions[i], ends[i] or "") for i in drop)
        ends_seen = [end for _, end in doomed if end]
        if ends_seen:
            earliest = min((w.time for w in writes if w.time >= max(ends_seen)), default=None)
    else:
        earliest = _earliest_to_retain(timeline, writes, policy, retained)
        if earliest is None:  # too few commits to clean any: the table is not listed (as in Hudi)
            return [], None
        groups = _versions(timeline, committed)  # a listing of the whole table
        points = [w.time for w in writes if w.time >= earliest]
        for g, versions in groups.items():
            for i, v in enumerate(versions):
                bounds: list[str] = [
                    e
                    for e in (replaced_at.get(g), versions[i + 1].instant_time if i + 1 < len(versions) else None)
                    if e is not None and e
                ]
                end = min(bounds) if bounds else None
                k = bisect.bisect_left(points, v.instant_time)
                if not (k < len(points) and (end is None or points[k] < end)):
                    doomed.append((v, end or ""))
    pinned = savepointed_files(timeline)
    return [f for v, _ in doomed for f in v.files if f.path not in pinned], earliest


def _earliest_to_retain(timeline: Timeline, writes: list[Instant], policy: CleanPolicy, retained: int) -> str | None:
    """Hudi's earliest commit to retain, held back by the earliest pending write."""
    if policy is CleanPolicy.KEEP_LATEST_COMMITS:
        if len(writes) <= retained:
            return None
        earliest = writes[-retained].time
    else:
        cutoff = format_instant_time(datetime.now(timezone.utc) - timedelta(hours=retained), timeline.layout.zone)
        after = [w.time for w in writes if w.time >= cutoff]
        earliest = after[0] if after else writes[-1].time
    pending = timeline.pending_writes()
    if pending:
        earliest = min(earliest, pending[0].time)
    return earliest


def clean_due(timeline: Timeline, cfg: Config) -> bool:
    """An automatic clean is attempted once hoodie.clean.max.commits commits completed since the last."""
    if timeline.filter([Action.CLEAN], PENDING):
        return True  # a killed cleaner's clean, to finish
    writes = timeline.completed_writes()
    if cfg.get(opt.CLEANER_POLICY) is CleanPolicy.KEEP_LATEST_COMMITS and len(writes) <= cfg.get(
        opt.CLEANER_COMMITS_RETAINED
    ):
        return False  # nothing can be cleaned yet (as Hudi's planner): no lock, no listing
    cleans = timeline.filter([Action.CLEAN], [State.COMPLETED])
    since = cleans[-1].time if cleans else ""
    return sum(1 for w in writes if w.time > since) >= cfg.get(opt.CLEAN_MAX_COMMITS)


def _action_at(timeline: Timeline, time_: str) -> str:
    inst = next((i for i in timeline.completed_writes() if i.time == time_), None)
    return inst.action.value if inst else Action.COMMIT.value
