"""A merge-on-read write that a compaction overtook: found at its commit, under the table lock.

A compaction plan requested after a write planned its slices may take one of the file groups
the write wrote. Written as it is, the write would then be lost or misplaced:

- table version 6 names a log by its slice's base instant: a log named before the plan falls out
  of the slice the compaction starts (readers drop it once the plan completes);
- version 8 places a log by its deltacommit's completion, after the plan: in the new slice, so
  snapshots as of times between the write's request and the plan's miss it (Hudi 1.x's readers
  and ours choose the slice by requested time, then its logs);
- a new base file of a small slice (either version), named before the plan, is superseded by
  the compacted one, which lacks its records.

And a write that joined the slice a compaction starts (as a write planned after the plan does)
may append a key the compaction drops, because the old slice's logs delete it: the indexes read
base files only, so the key's one copy would sit in a log no index finds, and the next write of
it would insert a second copy.

Hudi's writers fail in such cases on version 6 (a compaction requested after a write began
conflicts with it) and commit on version 8 (SimpleConcurrentFileWritesConflictResolutionStrategy).
Ours are done again under a new instant, later than the plan (`engine.commit`): the retry plans
its slices knowing the plan, and, for a dropped key, once the compaction has completed (run by
the writer if no live compactor runs it), tags the key as the insert it now is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.concurrency.conflict import SHOWN_KEYS, describe_groups
from upsertlake.config import options as opt
from upsertlake.engine.context import WriteContext
from upsertlake.errors import WriteConflictError
from upsertlake.layout.file_system_view import FileGroup
from upsertlake.logfile import LogFileName, block_keys, is_log_path, read_blocks
from upsertlake.schema.columns import RECORD_KEY
from upsertlake.services import compaction
from upsertlake.services.compaction_plan import read_plan
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import WriteStat
from upsertlake.timeline.instant import Action, Instant

log = logging.getLogger(__name__)

MAX_REDOS = 4  # times one write is done again because compactions overtook it, before it fails
WAIT_POLL_SECONDS = 0.5  # a write waiting for a live compactor polls at most this long apart


@dataclass(frozen=True)
class Overtaken:
    """The compaction that overtook a write, and why; `settle`: the write's retry must wait for the
    compaction's output (it drops keys the write appended)."""

    compaction: Instant
    reason: str
    settle: bool = False
    keys: tuple[str, ...] = ()


def overtaken(
    timeline: Timeline, own_stats: Sequence[WriteStat], own_time: str, table_version: int, checked: frozenset[str]
) -> Overtaken | None:
    """The compaction that overtook this write (see the module's docstring), if any. `checked`:
    the writes completed when the write planned its files (a compaction among them it knew)."""
    compactions = [i for i in timeline.filter([Action.COMPACTION]) if i.time not in checked]
    return _slice_taken(timeline, compactions, own_stats, own_time, table_version) or _keys_dropped(
        timeline, compactions, own_stats, own_time
    )


def _slice_taken(
    timeline: Timeline, compactions: list[Instant], own_stats: Sequence[WriteStat], own_time: str, table_version: int
) -> Overtaken | None:
    """A compaction of a group the write wrote, requested after the write's file there was named:
    after the log's slice on version 6 (its name's instant), after the write itself otherwise."""
    named = {}
    for s in own_stats:
        log_name = LogFileName.parse(s.path.rpartition("/")[2]) if is_log_path(s.path) else None
        named[(s.partitionPath, s.fileId)] = log_name.instant if log_name and table_version < 8 else own_time
    if not named:
        return None
    oldest = min(named.values())
    for inst in compactions:
        if inst.time <= oldest:
            continue
        taken = {g for g in _compacted_groups(timeline, inst) if named.get(g, inst.time) < inst.time}
        if taken:
            why = f"it was planned after this write chose its slices of file group(s) {describe_groups(taken)}"
            return Overtaken(inst, why)
    return None


def _compacted_groups(timeline: Timeline, inst: Instant) -> set[FileGroup]:
    """The file groups a compaction takes: its commit's, once completed (read from the timeline's
    cache), else its plan's."""
    done = timeline.get(inst.time, Action.COMMIT)
    if done is not None and done.is_completed:
        return {(s.partitionPath, s.fileId) for s in timeline.commit_metadata(done).write_stats()}
    return {op.file_group for op in read_plan(timeline, inst)}


def _keys_dropped(
    timeline: Timeline, compactions: list[Instant], own_stats: Sequence[WriteStat], own_time: str
) -> Overtaken | None:
    """An append to the slice a compaction of its group starts (newer than the slice the write
    planned against: a plan pending then named its log on version 6, any plan requested before
    it completes on version 8) holding a key that compaction drops. Checked against the output
    when it completed, else against the deletes of the slice it folds; only appends with a
    compaction of their group newer than their planned slice are read."""
    storage = timeline.storage
    for stat in own_stats:
        later = [i.time for i in compactions if i.time > (stat.prevCommit or "")]
        if not later or not is_log_path(stat.path):
            continue
        upserted = block_keys(read_blocks(storage.read_bytes(stat.path), storage.full_path(stat.path)), own_time)[0]
        group = (stat.partitionPath, stat.fileId)
        for compaction_time in later if len(upserted) else []:
            found = _dropped_by_compaction(timeline, compaction_time, group, upserted)
            if found is not None:
                inst, keys = found
                why = (
                    f"its slice of file group {group[1]} deletes the record key(s) {', '.join(keys[:SHOWN_KEYS])}, "
                    "which this write appended to the slice after it; no index would find them there"
                )
                return Overtaken(inst, why, settle=True, keys=tuple(keys))
    return None


def _dropped_by_compaction(
    timeline: Timeline, compaction_time: str, group: FileGroup, keys: pa.Array
) -> tuple[Instant, list[str]] | None:
    """(the compaction, those of `keys` its output leaves out) if any: the keys missing from its
    base file of `group` once it completed; while pending, those the planned slice's logs delete."""
    done = next((i for i in timeline.completed_writes() if i.time == compaction_time), None)
    if done is not None:
        stats = [s for s in timeline.commit_metadata(done).write_stats() if (s.partitionPath, s.fileId) == group]
        if not stats:  # the plan left this group alone
            return None
        kept = timeline.storage.read_parquet(stats[0].path, columns=[RECORD_KEY]).column(0)
        missing = keys.filter(pc.invert(pc.is_in(keys, value_set=pc.cast(kept, pa.string()))))
        return (done, missing.to_pylist()) if len(missing) else None
    plan = next((i for i in timeline.pending_compactions() if i.time == compaction_time), None)
    if plan is None:
        return None
    ops = [op for op in read_plan(timeline, plan) if op.file_group == group]
    storage = timeline.storage
    deleted = [pa.array([], pa.string())] + [
        block_keys(read_blocks(storage.read_bytes(path), storage.full_path(path)))[1]
        for op in ops for path in (f"{group[0]}/{name}" if group[0] else name for name in op.delta_files)
    ]
    gone = keys.filter(pc.is_in(keys, value_set=pa.concat_arrays(deleted)))
    return (plan, gone.to_pylist()) if len(gone) else None


def settle(ctx: WriteContext, over: Overtaken) -> None:
    """Outside the lock: see the compaction through before the write is done again. A requested
    plan (or one a dead compactor left) is run here; a live compactor's is waited for, up to its
    heartbeat's expiry, one more interval and the lock wait time (then WriteConflictError)."""
    interval = ctx.heartbeats.interval_ms
    began = time.monotonic()
    told = False
    target = over.compaction.time
    while not compaction.finish(ctx.storage, ctx.lock, ctx.table_config, ctx.options, target):
        expiry = ctx.heartbeats.expiry_ms(ctx.storage, target)
        if (time.monotonic() - began) * 1000 > expiry + interval + ctx.options.get(opt.LOCK_WAIT_TIME_MS):
            raise WriteConflictError(
                f"compaction {target} drops record key(s) this write appends ({', '.join(over.keys[:SHOWN_KEYS])}) "
                "and is still running in another process: retry once it has completed"
            )
        if not told:
            told = True
            log.warning("compaction %s drops keys this write appends: waiting for its compactor", target)
        time.sleep(min(WAIT_POLL_SECONDS, interval / 4000))
