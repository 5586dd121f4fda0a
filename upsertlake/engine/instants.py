"""The instants of a client's writes: request one (with its heartbeat), wait for or roll back the
writes of others, move a write to a new instant, roll one back.

Its own module because every action starts and ends its instant alike (Hudi's write client's
startCommit, rollbackFailedWrites and its heartbeat client). The functions take the write context
and the client's `PendingWrites`, and return what changed (a newly loaded table config).
"""

from __future__ import annotations

import logging
import time

from upsertlake.concurrency.conflict import clustering_file_groups
from upsertlake.concurrency.heartbeat import Heartbeat, heartbeat_path
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig
from upsertlake.engine.context import WriteContext
from upsertlake.engine.overwrite import requested_plan
from upsertlake.engine.pending import PendingWrite, PendingWrites
from upsertlake.errors import WriteConflictError, WriteInProgressError
from upsertlake.layout.markers import staging_folder
from upsertlake.services import metadata_table
from upsertlake.services.key_groups import ByKeyGroup
from upsertlake.services.rollback import (
    discard_pending,
    drop_dead_rollbacks,
    rollback_under_lock,
    undo_failed_write,
)
from upsertlake.timeline.active import Timeline, create_requested, transition
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.layouts import layout_of
from upsertlake.timeline.operation import Operation

log = logging.getLogger(__name__)

WAIT_POLL_SECONDS = 0.5  # a single writer waiting for a live write polls at most this long apart


# -- start ---------------------------------------------------------------------------------
def start_commit(
    ctx: WriteContext, writes: PendingWrites, operation: Operation, plan_on_start: bool = False,
    by_key: ByKeyGroup | None = None,
) -> tuple[WriteContext, str]:
    """`WriteClient.start_commit`: roll back failed writes (or, a single writer, wait for a live
    one), then request a new instant with its heartbeat. Returns the context with the table's
    config as read under the lock, and the instant time. `by_key`: how the metadata table's record
    index is built and kept by file group for this write (a Spark write's: by Spark tasks)."""
    ctx.table_config.check_writable()
    began: float | None = None
    told: set[str] = set()
    while True:
        with ctx.lock.hold():
            # The version as of now, under the lock: an upgrade may have run since we opened.
            table_config = TableConfig.load(ctx.storage)
            table_config.check_writable()
            table_config = metadata_table.prepare(ctx.storage, table_config, ctx.options, by_key)
            ctx = ctx.with_table(table_config)
            timeline = Timeline.load(ctx.storage, layout_of(ctx.table_config))
            live = [] if ctx.optimistic else _live_writes(ctx, writes, timeline)
            if not live:
                rolled_back = any(_rollback_failed_writes(ctx, writes, timeline))
                action, doc = operation.action, requested_plan(operation)
                if action is Action.COMMIT and ctx.table_config.is_merge_on_read:
                    action = Action.DELTA_COMMIT  # every write but an overwrite, as Hudi's
                instant, heartbeat = request(ctx, action, doc, timeline)
                done = frozenset(i.time for i in timeline.completed_writes())  # none completed: we hold the lock
                break
        began = time.monotonic() if began is None else began
        _wait_for(ctx, live[0], told, began)
    # Nothing but this start changed the timeline since it was listed (we held the lock): a write
    # that follows at once plans on it, with its instant, unless failed writes or rollbacks were
    # undone meanwhile.
    started = timeline.with_instant(instant) if plan_on_start and not rolled_back else None
    writes.add(
        PendingWrite(
            instant, done, heartbeat, requested_doc=doc, rollbacks=rollbacks(timeline), timeline=started, by_key=by_key
        )
    )
    log.info("started commit %s", instant.time)
    return ctx, instant.time


def rollbacks(timeline: Timeline) -> frozenset[str]:
    """The times of the rollback instants on `timeline`, in any state."""
    return frozenset(i.time for i in timeline.filter([Action.ROLLBACK]))


def request(
    ctx: WriteContext, action: Action, content: bytes, timeline: Timeline | None = None
) -> tuple[Instant, Heartbeat]:
    """Under the lock: a new requested instant and its heartbeat, which beats before the instant
    is visible, so no other writer ever sees it without one (and takes it for a dead write)."""
    beats: list[Heartbeat] = []

    def beat_first(instant_time: str) -> None:
        if beats:  # a writer without the lock took the time before us: its heartbeat now
            beats[-1].stop(delete=False)
        beats.append(ctx.heartbeats.start(ctx.storage, instant_time))

    return create_requested(ctx.storage, action, content, before=beat_first, timeline=timeline), beats[-1]


def _wait_for(ctx: WriteContext, inst: Instant, told: set[str], began: float) -> None:
    """Single writer: `inst`, another write, is in flight and alive. Say so once, then sleep a
    poll. Past the bound (its heartbeat's expiry, one more interval and the lock wait time,
    counted from the first wait: a dead writer's heartbeat always expires before) give up."""
    interval = ctx.heartbeats.interval_ms
    expiry = ctx.heartbeats.expiry_ms(ctx.storage, inst.time)
    bound_ms = expiry + interval + ctx.options.get(opt.LOCK_WAIT_TIME_MS)
    if (time.monotonic() - began) * 1000 > bound_ms:
        raise WriteInProgressError(
            f"write {inst.time} of another writer is still in flight after {bound_ms / 1000:g} s (its heartbeat "
            "is alive) and this single writer cannot run beside it: retry later, or let writers run side by side "
            "with optimistic concurrency (hoodie.write.concurrency.mode=optimistic_concurrency_control)"
        )
    if inst.time not in told:
        told.add(inst.time)
        log.warning(
            "write %s of another writer is in flight (its heartbeat is alive): this single writer waits for it "
            "to complete, or for its heartbeat to expire (%g s without a beat); optimistic concurrency "
            "(hoodie.write.concurrency.mode=optimistic_concurrency_control) lets writers run side by side",
            inst.time, expiry / 1000,
        )
    time.sleep(min(WAIT_POLL_SECONDS, interval / 4000))


# -- failed and live writes ----------------------------------------------------------------
def rollback_failed_writes(ctx: WriteContext, writes: PendingWrites) -> list[str]:
    """`WriteClient.rollback_failed_writes`: under the lock."""
    with ctx.lock.hold():
        return _rollback_failed_writes(ctx, writes, Timeline.load(ctx.storage))[0]


def _rollback_failed_writes(
    ctx: WriteContext, writes: PendingWrites, timeline: Timeline
) -> tuple[list[str], list[str]]:
    """Under the lock: the times of the failed writes rolled back, and of the dead rollbacks removed."""
    failed = _failed_writes(ctx, writes, timeline)
    for inst in failed:
        rollback_under_lock(ctx.storage, inst)  # recorded as a `.rollback` instant, as Hudi's writers do
        ctx.storage.delete_dir(staging_folder(inst.time))  # left by a Spark driver that died
        ctx.storage.delete(heartbeat_path(inst.time))
        writes.end(inst.time)
    dropped = drop_dead_rollbacks(ctx.storage, Timeline.load(ctx.storage) if failed else timeline)
    return [i.time for i in failed], dropped


def _failed_writes(ctx: WriteContext, writes: PendingWrites, timeline: Timeline) -> list[Instant]:
    """The failed writes (`HeartbeatPolicy.failed`: rolled back, as Hudi's eager single writer
    does), and a single writer's own abandoned writes of this thread (a thread runs one write at
    a time; starting another abandons them)."""
    mine = set() if ctx.optimistic else writes.of_this_thread()
    failed = {i.time for i in ctx.heartbeats.failed(ctx.storage, timeline)}
    return [i for i in timeline.pending_writes() if i.time in mine or i.time in failed]


def _live_writes(ctx: WriteContext, writes: PendingWrites, timeline: Timeline) -> list[Instant]:
    """The pending writes a single writer must wait for: alive, not a clustering (which runs
    beside writers in either mode), not this thread's own abandoned ones."""
    failed = {i.time for i in _failed_writes(ctx, writes, timeline)}
    return [
        i
        for i in timeline.pending_writes()
        if i.time not in failed
        and not (i.action is Action.REPLACE_COMMIT and clustering_file_groups(ctx.storage, i))
    ]


# -- moving a write to a new instant -------------------------------------------------------
def new_instant(ctx: WriteContext, writes: PendingWrites, pending: PendingWrite, inflight: bool = True) -> Instant:
    """Under the lock: an instant of the write's action (with its heartbeat) for the write to
    move to; inflight with the write's profile unless a retry writes it anew."""
    instant, heartbeat = request(ctx, pending.instant.action, pending.requested_doc)
    if inflight:
        instant = transition(ctx.storage, instant, State.INFLIGHT, pending.inflight_doc, layout_of(ctx.table_config))
    # Registered so that a crash is undone.
    writes.add(PendingWrite(instant, pending.checked, heartbeat, rollbacks=pending.rollbacks))
    return instant


def adopt(writes: PendingWrites, pending: PendingWrite, new: Instant) -> None:
    """The write goes on under `new` (from `new_instant`, with its heartbeat); the old instant's
    heartbeat stops, and `rollback` of the old time finds the new one."""
    helper = writes.get(new.time)
    assert helper is not None
    writes.move(pending, helper)


def restart(ctx: WriteContext, writes: PendingWrites, current: Instant, pending: PendingWrite) -> str:
    """Under the lock: a retry after a conflict goes under a new instant, as in Hudi, and the
    conflicted attempt is rolled back. The retry merges onto versions committed since the old
    instant, maybe named by later times: readers, who order a group's versions by instant
    time, would hide a file named by the old one. The new instant is created before the
    rollback, so it is later than the old one."""
    new = new_instant(ctx, writes, pending, inflight=False)
    discard_pending(ctx.storage, current)
    adopt(writes, pending, new)
    log.info("write %s goes on under instant %s for its retry", current.time, new.time)
    return new.time


# -- ending a write ------------------------------------------------------------------------
def undo_own_write(ctx: WriteContext, writes: PendingWrites, instant_time: str) -> None:
    """`WriteClient.rollback`: undo a started, uncommitted write of this client."""
    instant_time = writes.resolve(instant_time)  # a re-merge or a retry moved it (maybe more than once)
    with ctx.lock.hold():
        timeline = Timeline.load(ctx.storage)
        inst = next((i for i in timeline.pending_writes() if i.time == instant_time), None)
        pending = writes.get(instant_time)
        if inst is None and pending is not None and timeline.get(instant_time) is None:
            inst = pending.instant  # on no timeline: only what this write left since
        if inst is not None and not inst.is_completed:
            undo_failed_write(ctx.storage, inst, ctx.table_config.is_merge_on_read)
    writes.end(instant_time)


def rolled_back_meanwhile(
    ctx: WriteContext, writes: PendingWrites, instant_time: str, exc: Exception
) -> WriteConflictError | None:
    """For an I/O error met while writing files (OSError locally, StorageError on a store): a
    WriteConflictError when another writer rolled the instant back meanwhile (its files and
    folders went from under it), else None."""
    pending = writes.get(instant_time)
    action = pending.instant.action if pending is not None else Action.COMMIT
    if Timeline.load(ctx.storage).get(instant_time, action) is not None:
        return None
    return WriteConflictError(
        f"write {instant_time} was rolled back by another writer while it wrote its files (its heartbeat "
        f"expired: {exc}); nothing of it is visible"
    )
