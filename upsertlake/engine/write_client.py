"""The write client: one write, in the order of the write path (docs/DESIGN.md, "The write path").

start_commit → prepare (validate, keys, dedup) → tag → profile → partition → inflight → write
buckets → commit (conflict check, completed instant) → index update. Until the commit file is
written nothing is visible; a failure before it rolls the instant back.

The client holds the write context, the index and the started writes, and runs the steps in
order; each step lives in its own module and takes values, as Hudi's action executors do:
`instants` (start, wait, roll back, move an instant), `planner` (prepare, tag, profile,
bucketing: one `write_plan`), `write_buckets` and `merge_on_read` (write buckets), `overwrite` (the replace
actions), `commit` (check and complete), `remerge` (merge again onto a concurrent commit's
versions). Spark's writer drives the same steps through `plan_profile`, `begin_write` and
`write_result`.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from upsertlake.config import Config
from upsertlake.config.table_config import TableConfig
from upsertlake.engine import commit as commit_action
from upsertlake.engine import instants, merge_on_read, overwrite, write_buckets
from upsertlake.engine.bucket_writer import BucketJob, WriteStatus
from upsertlake.engine.context import WriteContext
from upsertlake.engine.pending import PendingWrites
from upsertlake.engine.planner import plan_batch, prepare_spec
from upsertlake.engine.prepare import PreparedBatch
from upsertlake.engine.tag import table_index
from upsertlake.engine.write_plan import Progress, WritePlan, stage
from upsertlake.engine.write_result import WriteResult, with_statuses
from upsertlake.errors import StorageError
from upsertlake.index import BucketIndex, InMemoryIndex
from upsertlake.index.base import Index
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.layout.markers import start_markers
from upsertlake.schema.columns import PARTITION
from upsertlake.services.key_groups import ByKeyGroup
from upsertlake.services.metadata_table import keeps_record_index
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline, transition
from upsertlake.timeline.instant import State
from upsertlake.timeline.layouts import layout_of
from upsertlake.timeline.operation import RECORD_OPERATIONS, Operation

log = logging.getLogger(__name__)


class WriteClient:
    """Writes to one table with explicit instants, as Hudi's write client does. The only holder
    of its write context, which it replaces when a step returns a newer table config."""

    def __init__(self, storage: Storage, table_config: TableConfig, cfg: Config) -> None:
        self.context = WriteContext.open(storage, table_config, cfg)
        self.index: Index = table_index(cfg, table_config)
        self.writes = PendingWrites()

    @property
    def storage(self) -> Storage:
        return self.context.storage

    @property
    def table_config(self) -> TableConfig:
        """The table's config as this client last read it (under the lock, at a start or a commit)."""
        return self.context.table_config

    # -- 1. start ----------------------------------------------------------------------------
    def start_commit(
        self,
        operation: str | Operation = Operation.UPSERT,
        plan_on_start: bool = False,
        by_key: ByKeyGroup | None = None,
    ) -> str:
        """Roll back failed writes, then request a new instant (a replacecommit for overwrites),
        which beats a heartbeat until it commits or rolls back.

        A write is failed once its heartbeat expired (Hudi's lazy cleaning); one whose heartbeat is
        alive is never rolled back. Under optimistic concurrency the new write runs beside it; a
        single writer waits for it, outside the lock so that it can commit.
        `plan_on_start`: the write that follows at once plans on the timeline this start listed
        (as `Table` writes do) instead of listing it again; else it lists the timeline as it is
        then, as Hudi's write client does (a commit may have landed since the start).
        `by_key`: how the record index's keys are read and written by file group for this write
        (default: in process; a Spark write's: as Spark tasks), see instants.start_commit.
        """
        self.context, instant_time = instants.start_commit(
            self.context, self.writes, Operation.of(operation), plan_on_start, by_key
        )
        return instant_time

    def rollback_failed_writes(self) -> list[str]:
        """Roll back the writes that failed (as `start_commit` does first); returns their times."""
        return instants.rollback_failed_writes(self.context, self.writes)

    # -- 2..8. the write ---------------------------------------------------------------------
    def upsert(
        self, data: object, instant_time: str, options: dict[str, Any] | None = None, progress: Progress | None = None
    ) -> WriteResult:
        return self.write(Operation.UPSERT, data, instant_time, options, progress)

    def insert(
        self, data: object, instant_time: str, options: dict[str, Any] | None = None, progress: Progress | None = None
    ) -> WriteResult:
        return self.write(Operation.INSERT, data, instant_time, options, progress)

    def bulk_insert(
        self, data: object, instant_time: str, options: dict[str, Any] | None = None, progress: Progress | None = None
    ) -> WriteResult:
        return self.write(Operation.BULK_INSERT, data, instant_time, options, progress)

    def delete(
        self, data: object, instant_time: str, options: dict[str, Any] | None = None, progress: Progress | None = None
    ) -> WriteResult:
        return self.write(Operation.DELETE, data, instant_time, options, progress)

    def overwrite(
        self, operation: str | Operation, data: object, instant_time: str, options: dict[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> WriteResult:
        """insert_overwrite (the batch's partitions) or insert_overwrite_table: the records go to new
        file groups and the old ones are retired at commit."""
        op = Operation.of(operation, (Operation.INSERT_OVERWRITE, Operation.INSERT_OVERWRITE_TABLE))
        return self.write(op, data, instant_time, options, progress)

    def write(
        self, operation: str | Operation, data: object, instant_time: str, options: dict[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> WriteResult:
        """Steps 2-8 of `operation` (one of the record operations) under a started instant."""
        operation = Operation.of(operation, RECORD_OPERATIONS)
        plan = self.plan(operation, data, options, progress, self.writes.take_start_timeline(instant_time))
        stages = dict(plan.stages)
        job = self.begin_write(instant_time, plan)
        tagged = plan.tagged
        assert tagged is not None, "an in-process plan holds its records"
        self.writes.keep(instant_time, redo=partial(self._redo, tagged.batch, plan.operation, options))
        with stage(stages, "write", progress, total=write_buckets.buckets_used(tagged.assignment)):
            try:
                statuses = self._write_buckets(plan, job, progress)
            except (OSError, StorageError) as exc:
                conflict = instants.rolled_back_meanwhile(self.context, self.writes, instant_time, exc)
                if conflict is None:
                    raise
                raise conflict from exc
        return self.write_result(instant_time, plan, statuses, stages)

    def delete_partitions(self, partitions: list[str], instant_time: str) -> WriteResult:
        """Retire every file group of the partitions (Hudi's delete_partition); writes no file."""
        self.writes.startable(instant_time)
        return overwrite.delete_partitions(self.context, partitions, instant_time)

    def plan(
        self,
        operation: str | Operation,
        data: object,
        options: dict[str, Any] | None = None,
        progress: Progress | None = None,
        timeline: Timeline | None = None,
    ) -> WritePlan:
        """Prepare, tag, profile and partition a write without writing anything: what `write`
        executes, and what a dry run (`explain`) reports. `timeline`: as the write's start left
        it (else listed now): one look for the schema and the plan."""
        operation = Operation.of(operation, RECORD_OPERATIONS)
        stages: dict[str, float] = {}
        cfg = self.context.resolve(options)
        timeline = timeline or Timeline.load(self.context.storage)
        with stage(stages, "dedup", progress):
            batch = prepare_spec(self.context, operation, cfg, timeline).run(data)
        return plan_batch(self.context, self._index(options, cfg), operation, batch, cfg, timeline, progress, stages)

    def begin_write(self, instant_time: str, plan: WritePlan, keep_keys: bool | None = None) -> BucketJob:
        """Step 6: the instant goes inflight with the workload profile; the partition metafiles
        are written; returns what every bucket's writer needs (picklable, for Spark executors).
        `keep_keys=False`: the statuses carry counts and stats only, no key arrays (Spark)."""
        pending = self.writes.startable(instant_time)
        ctx = self.context
        inflight_doc = plan.profile.to_inflight_json()
        inflight = transition(ctx.storage, pending.instant, State.INFLIGHT, inflight_doc, layout_of(ctx.table_config))
        self.writes.went_inflight(instant_time, inflight, inflight_doc)
        start_markers(ctx.storage, instant_time)
        # an in-memory index and the metadata table's record index learn keys from a write (never on Spark)
        learns = isinstance(self.index, InMemoryIndex) or keeps_record_index(ctx.table_config)
        keep = learns if keep_keys is None else keep_keys
        job = write_buckets.bucket_job(
            ctx.storage, instant_time, plan.operation, plan.cfg, plan.view, plan.buckets, plan.data_schema,
            ctx.table_config.ordering_fields, keep,
        )
        if ctx.table_config.is_merge_on_read:
            job = merge_on_read.append_job(job, ctx.table_config, plan.small_files, plan.view, plan.cfg, plan.rewrites)
        planned_on = frozenset(i.time for i in plan.view.visible_instants)
        self.writes.planned(instant_time, job, planned_on)
        return job

    def write_result(
        self, instant_time: str, plan: WritePlan, statuses: list[WriteStatus], stages: dict[str, float]
    ) -> WriteResult:
        """Step 8: the write statuses of every bucket as one result, ready to commit (Spark
        builds it from its tasks' statuses)."""
        self.writes.wrote(instant_time, statuses)
        replaced = None
        if plan.operation.overwrites and plan.tagged is not None:
            replaced = overwrite.replaced(plan.operation, plan.view, plan.tagged.records.column(PARTITION))
        result = WriteResult(
            instant_time=instant_time,
            operation=plan.operation,
            num_inserts=0,
            num_updates=0,
            num_deletes=0,
            files_written=(),
            stage_seconds=stages,
            data_schema=plan.data_schema,
            global_keys=plan.cfg.global_index,
            replaced=replaced,
        )
        return with_statuses(result, statuses)

    def _index(self, options: dict[str, Any] | None, cfg: Config) -> Index:
        """This client's index, or the one a call's options name."""
        return self.index if options is None else table_index(cfg, self.context.table_config)

    # -- 7. write ----------------------------------------------------------------------------
    def _write_buckets(
        self, plan: WritePlan, job: BucketJob, progress: Progress | None, attempt: int = 1
    ) -> list[WriteStatus]:
        """Step 7 in process; keeps the records for a re-merge (the write's `Rewrite`)."""
        statuses, rewrite = write_buckets.write_buckets(self.context.storage, plan, job, progress, attempt)
        self.writes.keep(job.instant_time, rewrite=rewrite)
        return statuses

    # -- 9. commit ---------------------------------------------------------------------------
    def commit(
        self, instant_time: str, result: WriteResult, extra_metadata: dict[str, str] | None = None
    ) -> WriteResult:
        """Complete the instant unless a write that completed since it started wrote one of its
        record keys or retired one of its file groups (or, for a replace, wrote into a partition it
        replaces); on such a conflict (after the retries of hoodie.write.num.retries.on.conflict.failures,
        each under a new instant), roll this write back and raise WriteConflictError. File groups
        another commit rewrote without touching this write's records are merged again onto that
        version first (outside the lock), then checked again; then the index learns the write.
        `extra_metadata` lands in the commit's extraMetadata (e.g. the files an ingest read)."""
        self.context, result = commit_action.commit(
            self.context, self.writes, instant_time, result, extra_metadata, buckets=isinstance(self.index, BucketIndex)
        )
        if result.replaced:
            self.index = table_index(self.context.options, self.context.table_config)  # whole groups went: relearn
        elif result.index_update is not None and self.index.learns_writes:
            self.index.update(result.index_update, FileSystemView(Timeline.load(self.context.storage)))
        return result

    def _redo(
        self,
        batch: PreparedBatch,
        operation: Operation,
        options: dict[str, Any] | None,
        instant_time: str,
        attempt: int,
    ) -> WriteResult:
        """The in-process `Redo`: tag, partition and write the kept batch again."""
        cfg = self.context.resolve(options)
        plan = plan_batch(self.context, self._index(options, cfg), operation, batch, cfg,
                          Timeline.load(self.context.storage))
        job = self.begin_write(instant_time, plan)
        return self.write_result(instant_time, plan, self._write_buckets(plan, job, None, attempt), {})

    def rollback(self, instant_time: str) -> None:
        """Undo a started, uncommitted write of this client. If another writer rolled it back
        already (its heartbeat expired while it ran), what it wrote since is deleted all the same."""
        instants.undo_own_write(self.context, self.writes, instant_time)
