"""Step 9 of a write: the commit. Each attempt takes one decision under the lock (`_decide`): the
write is checked against what completed since it started, and either completes (the completed
instant with the commit metadata), or merges file groups again (`_remerge`), retries the batch
under a new instant after a conflict on a record (`_retry`), or is done again after a compaction
overtook it (`_redo`), or is rolled back and raises. The decision is a value, so its outcome may
run after the lock is released; the next attempt decides afresh.

Its own module because every action commits alike (Hudi's BaseCommitActionExecutor.commit and the
write client's commitStats): a copy-on-write commit, a replacecommit, and a deltacommit next.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from enum import Enum
from types import MappingProxyType

from upsertlake.concurrency.conflict import CommitCheck, Conflict, check_commit, describe_groups
from upsertlake.config import options as opt
from upsertlake.config.properties_file import write_properties
from upsertlake.config.table_config import TableConfig
from upsertlake.engine import instants, merge_on_read, overtaken
from upsertlake.engine.context import WriteContext
from upsertlake.engine.overtaken import Overtaken
from upsertlake.engine.overwrite import replaces
from upsertlake.engine.pending import PendingWrite, PendingWrites
from upsertlake.engine.remerge import remerge_or_move
from upsertlake.engine.write_result import WriteResult
from upsertlake.errors import UpsertlakeError, WriteConflictError
from upsertlake.layout.file_system_view import FileGroup, FileSystemView
from upsertlake.layout.markers import marker_folder, reconcile_markers
from upsertlake.schema import arrow_to_avro, avro_schema_json
from upsertlake.services import metadata_table
from upsertlake.services.key_groups import ByKeyGroup
from upsertlake.services.rollback import discard_pending
from upsertlake.timeline import column_stats
from upsertlake.timeline.active import Timeline, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.layouts import layout_of

log = logging.getLogger(__name__)

# Re-merges of groups another commit rewrote run outside the lock this many times; the next one
# holds the lock, so that a write among many busy writers still ends (none can commit meanwhile).
OPTIMISTIC_REMERGES = 2
RETRY_WAIT_SECONDS = (0.1, 5.0)  # backoff between conflict retries: first wait, longest wait


class Outcome(Enum):
    """What one attempt to commit decided."""

    COMPLETE = "complete"  # nothing stands in the way: the completed instant is written
    REMERGE = "re-merge"  # another commit rewrote some of its file groups: merge them again
    RETRY = "retry"  # a conflict on a record: the batch again, under a new instant
    REDO = "redo"  # a compaction overtook it: the batch again, under a new instant


@dataclass(frozen=True)
class Decision:
    """One attempt's decision, taken under the lock; values only, so the outcome may run after
    the lock is released. `under_lock`: the outcome runs before it is (a write among many busy
    writers, or overtaken again, must not be overtaken once more)."""

    outcome: Outcome
    current: Instant  # the write's instant as it stood
    instant_time: str  # where the write goes on: a new instant for a retry or a redo
    timeline: Timeline  # as listed under the lock
    stale: Mapping[FileGroup, Instant] = field(default_factory=lambda: MappingProxyType({}))
    moved_to: Instant | None = None  # a re-merge that moves the write to a new instant
    conflict: Conflict | None = None
    over: Overtaken | None = None
    under_lock: bool = False


@dataclass
class _Tally:
    """The commit's attempts so far, and the seconds each kind of outcome took."""

    retries: int  # allowed, hoodie.write.num.retries.on.conflict.failures
    remerges: int = 0
    retried: int = 0
    overtakes: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {"remerge": 0.0, "retry": 0.0, "redo": 0.0})

    def next_attempt(self, outcome: Outcome) -> int:
        """Count an outcome about to write files; the attempt number of those files (a new write
        token each time)."""
        if outcome is Outcome.REMERGE:
            self.remerges += 1
        elif outcome is Outcome.RETRY:
            self.retried += 1
        else:
            self.overtakes += 1
        return self.remerges + self.retried + self.overtakes + 1


def commit(
    ctx: WriteContext, writes: PendingWrites, instant_time: str, result: WriteResult,
    extra_metadata: dict[str, str] | None = None, buckets: bool = False,
) -> tuple[WriteContext, WriteResult]:
    """`WriteClient.commit`: each attempt decides under the lock (`_decide`) what stands in the
    write's way, then carries that out (`_carry_out`), until it completes or fails. `buckets`:
    the write went by the bucket index. Returns the context with the table's config as the
    commit left it, and the committed result."""
    pending = writes.get(instant_time)
    if pending is None or result.instant_time != instant_time:
        raise UpsertlakeError(f"instant {instant_time} is not pending in this client")
    started = time.perf_counter()
    tally = _Tally(retries=max(0, ctx.options.get(opt.NUM_RETRIES_ON_CONFLICT)))
    after: Timeline | None = None
    while True:
        with ctx.lock.hold():
            ctx, decision = _decide(ctx, writes, result, tally, buckets)
            if decision.outcome is Outcome.COMPLETE:
                by_key = _pending(writes, result.instant_time).by_key
                ctx, done = _complete(ctx, decision.current, result, extra_metadata, decision.timeline, by_key)
                after = decision.timeline.with_instant(done)
                break
            if decision.under_lock:
                result = _carry_out(ctx, writes, decision, result, tally)
                if _clean(ctx, writes, result, buckets):  # nothing committed meanwhile: we held the lock
                    now = _pending(writes, result.instant_time)
                    ctx = _complete(ctx, now.instant, result, extra_metadata, by_key=now.by_key)[0]
                    break
                continue  # a pending plan drops a key it wrote: the next attempt waits for that compaction
        result = _carry_out(ctx, writes, decision, result, tally)
    writes.end(result.instant_time)
    stages = dict(result.stage_seconds, commit=time.perf_counter() - started - sum(tally.seconds.values()))
    stages.update({k: v for k, v in tally.seconds.items() if v})
    log.info("committed %s %s: %s", result.operation, result.instant_time, stages)
    return ctx, _replace(
        result, stage_seconds=stages, committed=True, remerges=tally.remerges, retries=tally.retried,
        overtaken=tally.overtakes, timeline=after,
    )


def _decide(
    ctx: WriteContext, writes: PendingWrites, result: WriteResult, tally: _Tally, buckets: bool
) -> tuple[WriteContext, Decision]:
    """Under the lock: check the write against what completed since it was last checked, and
    decide. A conflict past its retries, or a compaction that overtook it too often, rolls it back
    and raises; a retry or a redo goes under a new instant (requested here), a re-merge onto a
    version named by a later instant too. Returns the context with the table's config as read."""
    instant_time = result.instant_time
    pending = _pending(writes, instant_time)
    ctx = ctx.with_table(_reload_table_config(ctx, instant_time))
    timeline = Timeline.load(ctx.storage, layout_of(ctx.table_config))
    current = _still_pending(ctx, writes, timeline, instant_time, pending, result)
    check, over = _check(ctx, timeline, pending, instant_time, result, buckets)
    if over is not None and (tally.overtakes >= overtaken.MAX_REDOS or pending.redo is None):
        _fail(ctx, writes, current, Conflict(over.compaction, over.reason, over.keys))
    conflict = check.conflict
    if conflict is None and not check.stale and over is None:
        return ctx, Decision(Outcome.COMPLETE, current, instant_time, timeline)
    if conflict is not None and (tally.retried >= tally.retries or pending.redo is None):
        _fail(ctx, writes, current, conflict)
    moved_to = None
    if conflict is None and over is None:
        moved_to = _prepare_remerge(ctx, writes, current, pending, check.stale)
    else:  # a true conflict, to be retried (as Hudi), or a compaction overtook it: a new instant
        instant_time = instants.restart(ctx, writes, current, pending)
    writes.check_from(instant_time, frozenset(i.time for i in timeline.completed_writes()))
    if over is not None:
        # Overtaken again: this time the write holds the lock, so that no plan can be scheduled
        # between its tagging and its commit (nothing commits meanwhile either).
        locked = tally.overtakes > 0 and not over.settle
        return ctx, Decision(Outcome.REDO, current, instant_time, timeline, over=over, under_lock=locked)
    if conflict is None:
        stale = MappingProxyType(dict(check.stale))
        locked = tally.remerges >= OPTIMISTIC_REMERGES
        return ctx, Decision(Outcome.REMERGE, current, instant_time, timeline, stale, moved_to, under_lock=locked)
    return ctx, Decision(Outcome.RETRY, current, instant_time, timeline, conflict=conflict)


def _carry_out(
    ctx: WriteContext, writes: PendingWrites, decision: Decision, result: WriteResult, tally: _Tally
) -> WriteResult:
    """The decided outcome (not COMPLETE): the write's files written again; returns its new result."""
    began = time.perf_counter()
    attempt = tally.next_attempt(decision.outcome)
    if decision.outcome is Outcome.REMERGE:
        done = _remerge(ctx, writes, decision, result, attempt)
    elif decision.outcome is Outcome.RETRY:
        done = _retry(ctx, writes, decision, result, attempt, tally)
    else:
        done = _redo(ctx, writes, decision, result, attempt)
    tally.seconds[{Outcome.REMERGE: "remerge", Outcome.RETRY: "retry"}.get(decision.outcome, "redo")] += (
        time.perf_counter() - began
    )
    return done


def _remerge(
    ctx: WriteContext, writes: PendingWrites, decision: Decision, result: WriteResult, attempt: int
) -> WriteResult:
    """Merge the stale file groups again onto their newest versions (or move the write)."""
    pending = _pending(writes, result.instant_time)
    view = FileSystemView(decision.timeline)
    return remerge_or_move(ctx, writes, pending, result, dict(decision.stale), decision.moved_to, view, attempt,
                           locked=decision.under_lock)


def _retry(
    ctx: WriteContext, writes: PendingWrites, decision: Decision, result: WriteResult, attempt: int, tally: _Tally
) -> WriteResult:
    """After a backoff, the batch again under its new instant, tagged against the table as it is
    now. The retry builds on what its plan saw: no need to check those commits again, but only
    those named before its instant. A later one it built on must still be found (and the write
    moved past it): readers would hide a version named by an earlier time."""
    assert decision.conflict is not None
    log.info("write %s conflicts with %s; retry %d of %d under instant %s", decision.current.time,
             decision.conflict.describe(), tally.retried, tally.retries, decision.instant_time)
    first, longest = RETRY_WAIT_SECONDS
    time.sleep(min(longest, first * 2 ** (tally.retried - 1)) * random.uniform(0.5, 1))
    redone = _redo_batch(writes, decision.instant_time, attempt)
    pending = _pending(writes, decision.instant_time)
    seen = {t for t in pending.planned_on if t < decision.instant_time}
    writes.check_from(decision.instant_time, pending.checked | seen)
    reconcile_markers(ctx.storage, decision.instant_time, redone.files_written)
    return _replace(redone, stage_seconds=result.stage_seconds)


def _redo(
    ctx: WriteContext, writes: PendingWrites, decision: Decision, result: WriteResult, attempt: int
) -> WriteResult:
    """Write the batch again under its new instant, tagged against the table as it is now (after
    the compaction's output, when it must wait for it). Not a conflict with another writer's
    records (those were checked): the commits from here on are checked as usual, none is taken
    as seen."""
    over = decision.over
    assert over is not None
    if over.settle:
        overtaken.settle(ctx, over)
    log.info("write %s was overtaken by compaction %s (%s); done again under instant %s",
             result.instant_time, over.compaction.time, over.reason, decision.instant_time)
    redone = _redo_batch(writes, decision.instant_time, attempt)
    reconcile_markers(ctx.storage, decision.instant_time, redone.files_written)
    return _replace(redone, stage_seconds=result.stage_seconds)


def _clean(ctx: WriteContext, writes: PendingWrites, result: WriteResult, buckets: bool) -> bool:
    """Under the lock, after an outcome that held it: nothing stands in the write's way now."""
    pending = _pending(writes, result.instant_time)
    check, over = _check(ctx, Timeline.load(ctx.storage), pending, result.instant_time, result, buckets)
    return check.conflict is None and not check.stale and over is None


def _redo_batch(writes: PendingWrites, instant_time: str, attempt: int) -> WriteResult:
    """The write's batch written again under `instant_time` (a retry or a redo kept it: `_decide`
    fails a write that kept none)."""
    redo = _pending(writes, instant_time).redo
    assert redo is not None, "a write that kept no batch is not done again"
    return redo(instant_time, attempt)


def _pending(writes: PendingWrites, instant_time: str) -> PendingWrite:
    pending = writes.get(instant_time)
    assert pending is not None, f"write {instant_time} is pending"
    return pending


def _check(
    ctx: WriteContext, timeline: Timeline, pending: PendingWrite, instant_time: str, result: WriteResult,
    buckets: bool,
) -> tuple[CommitCheck, Overtaken | None]:
    """Under the lock: the write against the commits since `pending.checked` and pending
    clusterings (`check_commit`), and, on a merge-on-read table, against compactions that
    overtook it (`overtaken`, looked for only when nothing else stands in its way)."""
    retiring = {(p, f) for p, ids in (result.replaced or {}).items() for f in ids}
    check = check_commit(
        timeline, pending.checked, instant_time, result.write_stats, retiring, result.global_keys,
        replaces(result), buckets=buckets,
    )
    if not ctx.table_config.is_merge_on_read:
        return check, None
    version = ctx.table_config.table_version
    if check.stale:
        check = merge_on_read.settle_stale(timeline, check, result.write_stats, version)
    if check.conflict is not None:
        return check, None
    return check, overtaken.overtaken(timeline, result.write_stats, instant_time, version, pending.checked)


def _reload_table_config(ctx: WriteContext, instant_time: str) -> TableConfig:
    """Under the lock: re-read hoodie.properties, since an upgrade may have changed the version
    since this client opened the table (an upgrade refuses while a write is pending, so this
    guards a lock-less upgrader)."""
    table_config = TableConfig.load(ctx.storage)
    if table_config.table_version != ctx.table_config.table_version:
        raise UpsertlakeError(
            f"the table was changed to version {table_config.table_version} while write "
            f"{instant_time} ran at version {ctx.table_config.table_version}; not committed"
        )
    return table_config


def _still_pending(
    ctx: WriteContext, writes: PendingWrites, timeline: Timeline, instant_time: str, pending: PendingWrite,
    result: WriteResult,
) -> Instant:
    """The instant as it stands now; raises if it completed or another writer rolled it back."""
    current = timeline.get(instant_time, pending.instant.action)
    if current is not None and current.is_completed:
        raise UpsertlakeError(f"instant {instant_time} is already completed")
    # A rollback by another writer that ran while this one wrote may have deleted some files
    # and left the instant (it deletes the state it saw; this write moved on to inflight).
    gone = current is not None and not _untouched(pending, timeline) and bool(
        ctx.storage.missing(result.files_written)
    )
    if current is None or gone:
        discard_pending(ctx.storage, current or pending.instant)  # what it wrote since, too
        writes.end(instant_time)
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


def _fail(ctx: WriteContext, writes: PendingWrites, current: Instant, conflict: Conflict) -> None:
    """Roll the write back (under the lock) and raise the conflict."""
    discard_pending(ctx.storage, current)
    writes.end(current.time)
    raise WriteConflictError(
        f"write {current.time} conflicts with {conflict.describe()}; this write was rolled "
        "back and left nothing behind: retry it"
    )


def _complete(
    ctx: WriteContext, current: Instant, result: WriteResult, extra_metadata: dict[str, str] | None,
    timeline: Timeline | None = None,
    by_key: ByKeyGroup | None = None,
) -> tuple[WriteContext, Instant]:
    """Write the commit file (under the lock, after a clean check); returns the context with the
    table's config as it is now (a first commit records the table's schema) and the completed
    instant. `timeline`: listed under the lock the caller still holds (it names the completion time);
    `by_key`: how the metadata deltacommit writes the record index by file group (`PendingWrite.by_key`)."""
    schema = result.data_schema
    # A delete on a table with no commits yet has no schema (an empty one) to record.
    has_schema = schema is not None and len(schema) > 0
    extra = {**ctx.table_config.recorded_properties(), **(extra_metadata or {})}
    extra.update(column_stats.commit_entries(result.write_stats))
    if has_schema:
        extra["schema"] = avro_schema_json(arrow_to_avro(schema, ctx.table_config.name))
    metadata = CommitMetadata(
        partition_to_write_stats=_by_partition(result.write_stats),
        operation_type=result.operation.type_name,
        extra_metadata=extra,
        partition_to_replace_file_ids=result.replaced,
    )
    if current.state is State.REQUESTED:
        current = transition(ctx.storage, current, State.INFLIGHT, b"", layout_of(ctx.table_config))
    # Markers go before the commit: a crash right after it must not leave them behind, and
    # a rollback before it still finds every file, which all exist by now, by its name.
    ctx.storage.delete_dir(marker_folder(current.time))
    ctx.lock.fence()
    metadata_table.sync(  # before the data instant
        ctx.storage, ctx.table_config, current.time, metadata, result.index_update, options=ctx.options, by_key=by_key,
        log_stats=result.log_stats,
    )
    done = transition(
        ctx.storage, current, State.COMPLETED, metadata.to_json_bytes(), layout_of(ctx.table_config), timeline
    )
    if has_schema and not ctx.table_config.create_schema:
        write_properties(ctx.storage, {"hoodie.table.create.schema": extra["schema"]})
        ctx = ctx.with_table(ctx.table_config.with_schema(extra["schema"]))
    return ctx, done


def _prepare_remerge(
    ctx: WriteContext, writes: PendingWrites, current: Instant, pending: PendingWrite, stale: dict[FileGroup, Instant]
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
        _fail(ctx, writes, current, Conflict(max(stale.values()), why))
    return instants.new_instant(ctx, writes, pending) if move else None


def _by_partition(stats: tuple[WriteStat, ...]) -> dict[str, list[WriteStat]]:
    out: dict[str, list[WriteStat]] = {}
    for s in stats:
        out.setdefault(s.partitionPath, []).append(s)
    return out
