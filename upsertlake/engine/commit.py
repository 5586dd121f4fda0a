"""Step 9 of a write: the commit. Under the lock, check the write against what completed since it
started, then write the completed instant with the commit metadata; or merge groups again, retry
the batch under a new instant, or roll the write back and raise.

Its own module because every action commits alike (Hudi's BaseCommitActionExecutor.commit and the
write client's commitStats): a copy-on-write commit, a replacecommit, and a deltacommit next.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import replace as _replace
from typing import TYPE_CHECKING

from upsertlake.concurrency.conflict import CommitCheck, Conflict, FileGroup, check_commit, describe_groups
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig, write_properties
from upsertlake.engine import instants, merge_on_read
from upsertlake.engine.overwrite import replaces
from upsertlake.engine.pending import PendingWrite
from upsertlake.engine.remerge import remerge_or_move
from upsertlake.engine.write_result import WriteResult
from upsertlake.errors import UpsertlakeError, WriteConflictError
from upsertlake.engine.tag import table_index
from upsertlake.index import BucketIndex
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.layout.markers import marker_folder, reconcile_markers, rollback_pending
from upsertlake.schema import arrow_to_avro, avro_schema_json
from upsertlake.timeline import column_stats
from upsertlake.timeline.active import Timeline, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.layouts import layout_of

if TYPE_CHECKING:
    from upsertlake.engine.write_client import WriteClient

log = logging.getLogger(__name__)

# Re-merges of groups another commit rewrote run outside the lock this many times; the next one
# holds the lock, so that a write among many busy writers still ends (none can commit meanwhile).
OPTIMISTIC_REMERGES = 2
RETRY_WAIT_SECONDS = (0.1, 5.0)  # backoff between conflict retries: first wait, longest wait


def commit(
    client: WriteClient, instant_time: str, result: WriteResult, extra_metadata: dict[str, str] | None = None
) -> WriteResult:
    """`WriteClient.commit`: the check, re-merge and retry loop, then the index update."""
    pending = client._pending.get(instant_time)
    if pending is None or result.instant_time != instant_time:
        raise UpsertlakeError(f"instant {instant_time} is not pending in this client")
    started = time.perf_counter()
    retries = max(0, client.config.get(opt.NUM_RETRIES_ON_CONFLICT))
    remerges = retried = 0
    extra_seconds = {"remerge": 0.0, "retry": 0.0}
    while True:
        with client.lock.hold():
            _reload_table_config(client, instant_time)
            timeline = Timeline.load(client.storage)
            current = _still_pending(client, timeline, instant_time, pending, result)
            retiring = {(p, f) for p, ids in (result.replaced or {}).items() for f in ids}
            check = check_commit(
                timeline, pending.checked, instant_time, result.write_stats, retiring, result.global_keys,
                replaces(result), buckets=isinstance(client.index, BucketIndex),
            )
            if check.stale and client.table_config.is_merge_on_read:
                check = merge_on_read.settle_stale(timeline, check, result.write_stats, client.table_config.table_version)
            if check.conflict is None and client.table_config.is_merge_on_read:
                orphaned = merge_on_read.orphaned_appends(timeline, result.write_stats, instant_time)
                check = check if orphaned is None else CommitCheck(orphaned, check.stale)
            conflict = check.conflict
            if conflict is None and not check.stale:
                _complete(client, current, result, extra_metadata)
                break
            if conflict is not None and (retried >= retries or pending.redo is None):
                _fail(client, current, conflict)
            moved_to = None
            if conflict is None:
                moved_to = _prepare_remerge(client, current, pending, check.stale)
            else:  # a true conflict, to be retried (as Hudi) under a new instant
                instant_time = instants.restart(client, current, pending)
            view = FileSystemView(timeline)
            pending.checked = frozenset(i.time for i in timeline.completed_writes())
            if conflict is None and remerges >= OPTIMISTIC_REMERGES:
                began = time.perf_counter()
                remerges += 1
                result = remerge_or_move(client, pending, result, check.stale, moved_to, view, remerges + retried + 1,
                                         locked=True)
                instant_time = result.instant_time
                extra_seconds["remerge"] += time.perf_counter() - began
                _complete(client, pending.instant, result, extra_metadata)  # nothing committed meanwhile
                break
        began = time.perf_counter()
        if conflict is None:
            remerges += 1
            result = remerge_or_move(client, pending, result, check.stale, moved_to, view, remerges + retried + 1)
            instant_time = result.instant_time
            extra_seconds["remerge"] += time.perf_counter() - began
        else:
            retried += 1
            log.info("write %s conflicts with %s; retry %d of %d under instant %s",
                     current.time, conflict.describe(), retried, retries, instant_time)
            first, longest = RETRY_WAIT_SECONDS
            time.sleep(min(longest, first * 2 ** (retried - 1)) * random.uniform(0.5, 1))
            pending.redoing = True
            try:
                redone = pending.redo(instant_time, remerges + retried + 1)
            finally:
                pending.redoing = False
            result = _replace(redone, stage_seconds=result.stage_seconds)
            reconcile_markers(client.storage, instant_time, result.files_written)
            extra_seconds["retry"] += time.perf_counter() - began
    instants.forget(client, instant_time)
    if result.replaced:
        client.index = table_index(client.config, client.table_config)  # whole groups went: relearn
    elif result.index_update is not None and client.index.learns_writes:
        client.index.update(result.index_update, FileSystemView(Timeline.load(client.storage)))
    stages = dict(result.stage_seconds, commit=time.perf_counter() - started - sum(extra_seconds.values()))
    stages.update({k: v for k, v in extra_seconds.items() if v})
    log.info("committed %s %s: %s", result.operation, instant_time, stages)
    return _replace(result, stage_seconds=stages, committed=True, remerges=remerges, retries=retried)


def _reload_table_config(client: WriteClient, instant_time: str) -> None:
    """Under the lock: re-read hoodie.properties, since an upgrade may have changed the version
    since this client opened the table (an upgrade refuses while a write is pending, so this
    guards a lock-less upgrader)."""
    table_config = TableConfig.load(client.storage)
    if table_config.table_version != client.table_config.table_version:
        raise UpsertlakeError(
            f"the table was changed to version {table_config.table_version} while write "
            f"{instant_time} ran at version {client.table_config.table_version}; not committed"
        )
    client.table_config = table_config


def _still_pending(
    client: WriteClient, timeline: Timeline, instant_time: str, pending: PendingWrite, result: WriteResult
) -> Instant:
    """The instant as it stands now; raises if it completed or another writer rolled it back."""
    current = timeline.get(instant_time, pending.instant.action)
    if current is not None and current.is_completed:
        raise UpsertlakeError(f"instant {instant_time} is already completed")
    # A rollback by another writer that ran while this one wrote may have deleted some files
    # and left the instant (it deletes the state it saw; this write moved on to inflight).
    gone = current is not None and not _untouched(pending, timeline) and bool(
        client.storage.missing(result.files_written)
    )
    if current is None or gone:
        rollback_pending(client.storage, current or pending.instant)  # what it wrote since, too
        instants.forget(client, instant_time)
        raise WriteConflictError(
            f"write {instant_time} is no longer pending: another writer rolled it back "
            "(its heartbeat expired); nothing of it is visible"
        )
    return current


def _untouched(pending: PendingWrite, timeline: Timeline) -> bool:
    """Whether nobody can have rolled the write back while it ran, so that its files need no
    check (a request each on an object store): its heartbeat never lapsed (our writers and
    services roll back only writes whose heartbeat expired), and no rollback instant appeared
    (Hudi's writers, who judge heartbeats by their own settings, plan one before deleting)."""
    beat = pending.heartbeat
    return beat is not None and beat.unbroken() and instants.rollbacks(timeline) <= pending.rollbacks


def _fail(client: WriteClient, current: Instant, conflict: Conflict) -> None:
    """Roll the write back (under the lock) and raise the conflict."""
    rollback_pending(client.storage, current)
    instants.forget(client, current.time)
    raise WriteConflictError(
        f"write {current.time} conflicts with {conflict.describe()}; this write was rolled "
        "back and left nothing behind: retry it"
    )


def _complete(
    client: WriteClient, current: Instant, result: WriteResult, extra_metadata: dict[str, str] | None
) -> None:
    """Write the commit file (under the lock, after a clean check)."""
    schema = result.data_schema
    # A delete on a table with no commits yet has no schema (an empty one) to record.
    has_schema = schema is not None and len(schema) > 0
    extra = {**client.table_config.recorded_properties(), **(extra_metadata or {})}
    extra.update(column_stats.commit_entries(result.write_stats))
    if has_schema:
        extra["schema"] = avro_schema_json(arrow_to_avro(schema, client.table_config.name))
    metadata = CommitMetadata(
        partition_to_write_stats=_by_partition(result.write_stats),
        operation_type=result.operation.upper(),
        extra_metadata=extra,
        partition_to_replace_file_ids=result.replaced,
    )
    if current.state is State.REQUESTED:
        current = transition(client.storage, current, State.INFLIGHT, b"", layout_of(client.table_config))
    # Markers go before the commit: a crash right after it must not leave them behind, and
    # a rollback before it still finds every file, which all exist by now, by its name.
    client.storage.delete_dir(marker_folder(current.time))
    client.lock.fence()
    transition(client.storage, current, State.COMPLETED, metadata.to_json_bytes(), layout_of(client.table_config))
    if has_schema and not client.table_config.create_schema:
        write_properties(client.storage, {"hoodie.table.create.schema": extra["schema"]})
        client.table_config = client.table_config.with_schema(extra["schema"])


def _prepare_remerge(
    client: WriteClient, current: Instant, pending: PendingWrite, stale: dict[FileGroup, Instant]
) -> Instant | None:
    """Under the lock: fail the write if it cannot merge `stale` again; else the new instant it
    must move to, or None. A version named by an earlier instant than the newest of its group
    would be hidden from readers (they order versions by instant time): then the whole write
    moves to a new instant."""
    move = any(i.time > current.time for i in stale.values())
    unkept = pending.rewrite is None or pending.job is None
    if unkept or (move and current.action is not Action.COMMIT):
        why = "it kept no records to merge them again" if unkept else "an overwrite cannot move"
        why = f"both wrote file group(s) {describe_groups(set(stale))} and {why}"
        _fail(client, current, Conflict(max(stale.values()), why))
    return instants.new_instant(client, pending) if move else None


def _by_partition(stats: tuple[WriteStat, ...]) -> dict[str, list[WriteStat]]:
    out: dict[str, list[WriteStat]] = {}
    for s in stats:
        out.setdefault(s.partitionPath, []).append(s)
    return out
