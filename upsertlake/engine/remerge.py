"""Merge a write's file groups again onto the versions a concurrent commit wrote meanwhile.

Hudi fails such a write at commit; we keep its work: the groups another commit rewrote (without
touching this write's records) are written again onto the newest version, and a write that would be
named by an earlier instant than that version moves to a new instant. The commit decides when
(`upsertlake.engine.commit`); this module does it, through the write's `Rewrite`.
"""

from __future__ import annotations

import logging
from dataclasses import replace as _replace

from upsertlake.engine import instants
from upsertlake.engine.context import WriteContext
from upsertlake.engine.pending import PendingWrite, PendingWrites
from upsertlake.engine.write_buckets import write_partition_metadata
from upsertlake.engine.write_result import WriteResult, with_statuses
from upsertlake.layout.file_system_view import FileGroup, FileSystemView
from upsertlake.layout.markers import reconcile_markers
from upsertlake.services.rollback import discard_pending
from upsertlake.timeline.instant import Instant

log = logging.getLogger(__name__)


def remerge_or_move(
    ctx: WriteContext,
    writes: PendingWrites,
    pending: PendingWrite,
    result: WriteResult,
    stale: dict[FileGroup, Instant],
    moved_to: Instant | None,
    view: FileSystemView,
    attempt: int,
    locked: bool = False,
) -> WriteResult:
    """Move the write to `moved_to` if it is set, else merge the `stale` groups again; either way
    onto the newest versions in `view`. `locked`: the caller holds the lock."""
    if moved_to is not None:
        result = _move(ctx, writes, pending, result, moved_to, view, attempt, locked)
    else:
        result = _remerge(ctx, writes, pending, result, set(stale), view, attempt)
    # A failed or duplicate attempt of a distributed rewrite leaves a file only its marker names.
    reconcile_markers(ctx.storage, result.instant_time, result.files_written)
    return result


def _move(
    ctx: WriteContext, writes: PendingWrites, pending: PendingWrite, result: WriteResult, new: Instant,
    view: FileSystemView, attempt: int, locked: bool = False,
) -> WriteResult:
    """Write every bucket again under instant `new`, each onto its group's newest version,
    then roll the old instant back (before the new one can complete)."""
    old, job = pending.instant, pending.job
    assert job is not None and pending.rewrite is not None
    latest = view.latest_by_group(sorted({b.partition_path for b in job.buckets}))
    groups = {b.number: (b.partition_path, b.file_id) for b in job.buckets}
    base_files = {n: latest.get(groups[n], bf) for n, bf in job.base_files.items()}
    moved = _replace(job, instant_time=new.time, base_files=base_files)
    write_partition_metadata(ctx.storage, {b.partition_path for b in job.buckets}, new.time, view.all_partitions())
    try:
        statuses = pending.rewrite(moved, None, attempt)
    except BaseException:
        if locked:
            discard_pending(ctx.storage, new)
            writes.end(new.time)
        else:
            instants.undo_own_write(ctx, writes, new.time)
        raise
    if locked:
        discard_pending(ctx.storage, old)
    else:
        with ctx.lock.hold():
            discard_pending(ctx.storage, old)
    instants.adopt(writes, pending, new)
    writes.rewrote(new.time, moved, statuses, every=True)
    log.info("write %s moved to instant %s to merge onto newer versions", old.time, new.time)
    return with_statuses(_replace(result, instant_time=new.time), statuses)


def _remerge(
    ctx: WriteContext, writes: PendingWrites, pending: PendingWrite, result: WriteResult, groups: set[FileGroup],
    view: FileSystemView, attempt: int,
) -> WriteResult:
    """Merge this write's records of `groups` again onto their newest committed versions (new
    write token); the files they replace are deleted at once, long before the commit file."""
    job = pending.job
    assert job is not None and pending.rewrite is not None
    latest = view.latest_by_group(sorted({p for p, _ in groups}))
    numbers = {(b.partition_path, b.file_id): b.number for b in job.buckets}
    onto = _replace(job, base_files={**job.base_files, **{numbers[g]: latest[g] for g in groups}})
    statuses = pending.rewrite(onto, [numbers[g] for g in sorted(groups)], attempt)
    for group in groups:
        ctx.storage.delete(pending.statuses[group].stat.path)
    writes.rewrote(job.instant_time, onto, statuses, every=False)
    log.info("write %s re-merged %d file group(s) onto newer versions", job.instant_time, len(groups))
    return with_statuses(result, list(pending.statuses.values()))
