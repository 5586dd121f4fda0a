"""The write client: one write, in the order of the write path (DESIGN.md §2).

start_commit → prepare (validate, keys, dedup) → tag → profile → partition → inflight → write
buckets → commit (conflict check, completed instant) → index update. Until the commit file is
written nothing is visible; a failure before it rolls the instant back.

The client keeps the entry points and runs the steps in order; each step lives in its own module,
as Hudi's action executors do: `instants` (start, wait, roll back, move an instant), `tag`,
`copy_on_write` (partition and write buckets), `overwrite` (the replace actions), `commit` (check
and complete), `remerge` (merge again onto a concurrent commit's versions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import pyarrow as pa

from upsertlake.concurrency.lock import make_lock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig
from upsertlake.config.table_options import check_against_table
from upsertlake.engine import commit as commit_action
from upsertlake.engine import copy_on_write, instants, merge_on_read, overwrite
from upsertlake.engine.bucket_writer import KEY, PARTITION, BucketJob, WriteStatus
from upsertlake.engine.bulk_insert import bulk_insert_sort
from upsertlake.engine.overwrite import OVERWRITES
from upsertlake.engine.pending import PendingWrite, Redo, Rewrite
from upsertlake.engine.plan import Progress, WritePlan, view_scope
from upsertlake.engine.prepare import PreparedBatch, PrepareSpec
from upsertlake.engine.slice_routing import rewritten_slices
from upsertlake.engine.tag import log_default_partition, slice_merge, table_index, tag
from upsertlake.engine.write_result import WriteResult, with_statuses
from upsertlake.errors import StorageError, UpsertlakeError
from upsertlake.index import BucketIndex, InMemoryIndex
from upsertlake.index.base import Index
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.layout.markers import start_markers
from upsertlake.partitioner import Bucket, PartitionerConfig, UpsertPartitioner, WorkloadProfile, bucket_partition
from upsertlake.schema import avro_to_arrow
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline, transition
from upsertlake.timeline.instant import State
from upsertlake.timeline.layouts import layout_of

log = logging.getLogger(__name__)

OPERATIONS = ("upsert", "insert", "bulk_insert", "delete", "insert_overwrite", "insert_overwrite_table")


class WriteClient:
    """Writes to one table with explicit instants, as Hudi's write client does."""

    def __init__(self, storage: Storage, table_config: TableConfig, config: Config) -> None:
        self.storage = storage
        self.table_config = table_config
        self.config = config
        self.index: Index = table_index(config, table_config)
        self.lock = make_lock(storage, config)
        self.optimistic = config.get(opt.WRITE_CONCURRENCY_MODE) == "OPTIMISTIC_CONCURRENCY_CONTROL"
        self._pending: dict[str, PendingWrite] = {}
        self._moved: dict[str, str] = {}  # instant -> the instant a re-merge moved its write to

    def _resolve(self, options: dict | None) -> Config:
        """This client's options with a call's on top; a call cannot change the table version."""
        cfg = self.config.with_overrides(options)
        if options and cfg.is_set(opt.WRITE_TABLE_VERSION):
            self.table_config.check_write_version(cfg.get(opt.WRITE_TABLE_VERSION))
        return cfg

    # -- 1. start ----------------------------------------------------------------------------
    def start_commit(self, operation: str = "upsert", plan_on_start: bool = False) -> str:
        """Roll back failed writes, then request a new instant (a replacecommit for overwrites),
        which beats a heartbeat until it commits or rolls back.

        A write is failed once its heartbeat expired (Hudi's lazy cleaning); one whose heartbeat is
        alive is never rolled back. Under optimistic concurrency the new write runs beside it; a
        single writer waits for it, outside the lock so that it can commit.
        `plan_on_start`: the write that follows at once plans on the timeline this start listed
        (as `Table` writes do) instead of listing it again; else it lists the timeline as it is
        then, as Hudi's write client does (a commit may have landed since the start).
        """
        return instants.start_commit(self, operation, plan_on_start)

    def rollback_failed_writes(self) -> list[str]:
        """Roll back the writes that failed (as `start_commit` does first); returns their times."""
        return instants.rollback_failed_writes(self)

    def keep_for_commit(self, instant_time: str, *, rewrite: Rewrite | None = None, redo: Redo | None = None) -> None:
        """What a distributed write gives its commit: `rewrite` writes buckets again for a
        re-merge, `redo` the whole batch again for a retry after a conflict on a record."""
        pending = self._pending[instant_time]
        pending.rewrite = rewrite or pending.rewrite
        pending.redo = redo or pending.redo

    def hold_until_commit(self, instant_time: str, name: str, release: Callable[[], None]) -> None:
        """Call `release` (say, unpersist a cached DataFrame that a rewrite or redo reads) once the
        write commits or rolls back, or when `name` is held anew (a retry caches a new frame)."""
        self._pending[instant_time].hold(name, release)

    # -- 2..8. the write ---------------------------------------------------------------------
    def upsert(
        self, data: object, instant_time: str, options: dict | None = None, progress: Progress | None = None
    ) -> WriteResult:
        return self._write("upsert", data, instant_time, options, progress)

    def insert(
        self, data: object, instant_time: str, options: dict | None = None, progress: Progress | None = None
    ) -> WriteResult:
        return self._write("insert", data, instant_time, options, progress)

    def bulk_insert(
        self, data: object, instant_time: str, options: dict | None = None, progress: Progress | None = None
    ) -> WriteResult:
        return self._write("bulk_insert", data, instant_time, options, progress)

    def delete(
        self, data: object, instant_time: str, options: dict | None = None, progress: Progress | None = None
    ) -> WriteResult:
        return self._write("delete", data, instant_time, options, progress)

    def overwrite(
        self, operation: str, data: object, instant_time: str, options: dict | None = None, progress: Progress | None = None
    ) -> WriteResult:
        """insert_overwrite (the batch's partitions) or insert_overwrite_table: the records go to new
        file groups and the old ones are retired at commit."""
        if operation not in ("insert_overwrite", "insert_overwrite_table"):
            raise UpsertlakeError(f"{operation!r} is not an overwrite; use insert_overwrite or insert_overwrite_table")
        return self._write(operation, data, instant_time, options, progress)

    def _write(
        self, operation: str, data: object, instant_time: str, options: dict | None, progress: Progress | None = None
    ) -> WriteResult:
        instants.check_startable(self, instant_time)
        pending = self._pending[instant_time]
        plan = self.plan(operation, data, options, progress, pending.timeline)
        pending.timeline = None  # a retry plans on the timeline as it is then
        stages = dict(plan.stages)
        job = self.begin_write(instant_time, plan)
        self._pending[instant_time].redo = partial(self._redo, operation, plan.batch, options)
        with _stage(stages, "write", progress, total=copy_on_write.buckets_used(plan.assignment)):
            try:
                statuses = self._write_buckets(plan, job, progress)
            except (OSError, StorageError) as exc:
                conflict = instants.rolled_back_meanwhile(self, instant_time, exc)
                if conflict is None:
                    raise
                raise conflict from exc
        return self.write_result(instant_time, plan, statuses, stages)

    def delete_partitions(self, partitions: list[str], instant_time: str) -> WriteResult:
        """Retire every file group of the partitions (Hudi's delete_partition); writes no file."""
        instants.check_startable(self, instant_time)
        return overwrite.delete_partitions(self, partitions, instant_time)

    def begin_write(self, instant_time: str, plan: WritePlan) -> BucketJob:
        """Step 6: the instant goes inflight with the workload profile; the partition metafiles
        are written; returns what every bucket's writer needs (picklable, for Spark executors)."""
        return self.begin_buckets(
            instant_time, plan.operation, plan.cfg, plan.view, plan.profile, plan.buckets, plan.batch.data_schema,
            rewrites=plan.rewrites,
        )

    def begin_buckets(
        self,
        instant_time: str,
        operation: str,
        cfg: Config,
        view: FileSystemView,
        profile: WorkloadProfile,
        buckets: list[Bucket],
        data_schema: pa.Schema,
        keep_keys: bool | None = None,
        rewrites: frozenset[tuple[str, str]] = frozenset(),
    ) -> BucketJob:
        """`begin_write` from the plan's parts (Spark has no per-record plan on the driver);
        `keep_keys=False`: the statuses carry counts and stats only, no key arrays; `rewrites`:
        the merge-on-read slices rewritten merged (`slice_routing.rewritten_slices`). A retry
        (`redoing`) writes again under its new instant, tagged against `view`."""
        instants.check_startable(self, instant_time)
        pending = self._pending[instant_time]
        if pending.redoing:
            # The retry builds on what `view` holds: no need to check those commits again, but
            # only those named before its instant. A later one it built on must still be found
            # (and the write moved past it): readers would hide a version named by an earlier time.
            seen = {i.time for i in view.visible_instants if i.time < instant_time}
            pending.checked = pending.checked | seen
        pending.inflight_doc = profile.to_inflight_json()
        pending.instant = transition(
            self.storage, pending.instant, State.INFLIGHT, pending.inflight_doc, layout_of(self.table_config)
        )
        start_markers(self.storage, instant_time)
        # only an in-memory index learns keys from a write (never on Spark)
        keep = isinstance(self.index, InMemoryIndex) if keep_keys is None else keep_keys
        job = copy_on_write.bucket_job(
            self.storage, instant_time, operation, cfg, view, buckets, data_schema,
            self.table_config.precombine_field, keep,
        )
        if self.table_config.is_merge_on_read:
            job = merge_on_read.append_job(job, self.table_config, profile, view, operation, cfg, rewrites)
        pending.job = job
        return pending.job

    def write_result(
        self, instant_time: str, plan: WritePlan, statuses: list[WriteStatus], stages: dict[str, float]
    ) -> WriteResult:
        """Step 8: the write statuses of every bucket as one result, ready to commit."""
        replaced = overwrite.replaced(plan) if plan.operation in OVERWRITES else None
        return self.result_of(instant_time, plan.operation, plan.cfg, plan.batch.data_schema, statuses, stages, replaced)

    def result_of(
        self,
        instant_time: str,
        operation: str,
        cfg: Config,
        data_schema: pa.Schema,
        statuses: list[WriteStatus],
        stages: dict[str, float],
        replaced: dict[str, list[str]] | None = None,
    ) -> WriteResult:
        """The result of bucket statuses, ready to commit (Spark builds it from its tasks' statuses)."""
        pending = self._pending.get(instant_time)
        if pending is not None:
            pending.statuses = {(s.stat.partitionPath, s.stat.fileId): s for s in statuses}
        result = WriteResult(
            instant_time=instant_time,
            operation=operation,
            num_inserts=0,
            num_updates=0,
            num_deletes=0,
            files_written=(),
            stage_seconds=stages,
            data_schema=data_schema,
            global_keys=cfg.get(opt.INDEX_TYPE).upper().startswith("GLOBAL_"),
            replaced=replaced,
        )
        return with_statuses(result, statuses)

    # -- 2-5. plan ---------------------------------------------------------------------------
    def plan(
        self,
        operation: str,
        data: object,
        options: dict | None = None,
        progress: Progress | None = None,
        timeline: Timeline | None = None,
    ) -> WritePlan:
        """Prepare, tag, profile and partition a write without writing anything: what `_write`
        executes, and what a dry run (`explain`) reports. `timeline`: as the write's start left
        it (else listed now): one look for the schema and the plan."""
        stages: dict[str, float] = {}
        timeline = timeline or Timeline.load(self.storage)
        with _stage(stages, "dedup", progress):
            batch = self.prepare_spec(operation, options, timeline).run(data)
        return self.plan_prepared(operation, batch, options, progress, stages, timeline)

    def prepare_spec(
        self, operation: str, options: dict | None = None, timeline: Timeline | None = None
    ) -> PrepareSpec:
        """How step 2 (validate, key and deduplicate a batch) runs for this table and these
        options (Spark runs it on its executors); `timeline`: as just loaded, else listed now
        (for the schema)."""
        if operation not in OPERATIONS:
            raise UpsertlakeError(f"unknown operation {operation!r}; use one of {', '.join(OPERATIONS)}")
        cfg = self._resolve(options)
        check_against_table(cfg, self.table_config)
        schema_json = (timeline or Timeline.load(self.storage)).latest_schema() or self.table_config.create_schema
        combine = {
            "upsert": cfg.get(opt.COMBINE_BEFORE_UPSERT),
            "insert": cfg.get(opt.COMBINE_BEFORE_INSERT),
            "bulk_insert": cfg.get(opt.COMBINE_BEFORE_INSERT),
            "delete": cfg.get(opt.COMBINE_BEFORE_DELETE),
            "insert_overwrite": cfg.get(opt.COMBINE_BEFORE_INSERT),
            "insert_overwrite_table": cfg.get(opt.COMBINE_BEFORE_INSERT),
        }[operation]
        return PrepareSpec(
            config=self.table_config,
            table_schema=avro_to_arrow(schema_json) if schema_json else None,
            operation=operation,
            combine=combine,
            dedup_by_key_only=cfg.get(opt.INDEX_TYPE).upper().startswith("GLOBAL_"),
            allow_missing_columns=cfg.get(opt.WRITE_SET_NULL_FOR_MISSING_COLUMNS),
        )

    def plan_prepared(
        self,
        operation: str,
        batch: PreparedBatch,
        options: dict | None = None,
        progress: Progress | None = None,
        stages: dict[str, float] | None = None,
        timeline: Timeline | None = None,
    ) -> WritePlan:
        """Steps 3-5 on a prepared batch: tag, profile, partition, against `timeline` (else the
        timeline as listed now). The batch's records need only the key, partition and
        delete-flag columns (Spark hands the driver just those), except under a global index,
        which routes whole records."""
        cfg = self._resolve(options)
        index = self.index if options is None else table_index(cfg, self.table_config)
        stages = {} if stages is None else stages
        log_default_partition(self.table_config, batch)
        timeline = timeline or Timeline.load(self.storage)
        view = FileSystemView(timeline, partitions=view_scope(operation, index, batch.partitions))
        with _stage(stages, "tag", progress):
            merge = slice_merge(self.table_config, view)
            records, locations = tag(batch, index, view, operation, cfg, self.table_config.precombine_field, merge)
            rewrites: frozenset[tuple[str, str]] = frozenset()
            if merge is not None and isinstance(index, BucketIndex):
                rewrites = rewritten_slices(records, locations, view, merge)
        with _stage(stages, "profile", progress):
            if operation == "bulk_insert":
                records, locations = bulk_insert_sort(records, locations, cfg.get(opt.BULK_INSERT_SORT_MODE))
            file_ids = locations.column("loc_file_id")
            profile = WorkloadProfile.build(
                records.column(PARTITION), file_ids, operation.upper(), instant_times=locations.column("loc_instant")
            )
            if isinstance(index, BucketIndex):
                buckets, assignment = bucket_partition(
                    profile, records.column(PARTITION), records.column(KEY), file_ids, index.hash_fields, index.num_buckets
                )
            else:
                buckets, assignment = copy_on_write.partition(
                    profile, records, file_ids, view, timeline, operation, cfg, batch.data_schema, self._partitioner_kind()
                )
        return WritePlan(
            operation, cfg, batch, view, records, locations, profile, buckets, assignment, stages,
            merge_on_read=self.table_config.is_merge_on_read, rewrites=rewrites,
        )

    def sizing(self, timeline: Timeline, cfg: Config) -> tuple[int, PartitionerConfig]:
        """The average record size and the file sizing options buckets are cut by."""
        return copy_on_write.sizing(timeline, cfg)

    def partitioner(
        self, profile: WorkloadProfile, view: FileSystemView, timeline: Timeline, operation: str, cfg: Config
    ) -> UpsertPartitioner:
        """Hudi's UpsertPartitioner for a profile (`copy_on_write.partitioner`, or the delta commit
        partitioner `merge_on_read.partitioner` on a merge-on-read table)."""
        return self._partitioner_kind()(profile, view, timeline, operation, cfg)

    def _partitioner_kind(self) -> Callable[..., UpsertPartitioner]:
        return merge_on_read.partitioner if self.table_config.is_merge_on_read else copy_on_write.partitioner

    # -- 7. write ----------------------------------------------------------------------------
    def _write_buckets(
        self, plan: WritePlan, job: BucketJob, progress: Progress | None, attempt: int = 1
    ) -> list[WriteStatus]:
        """Step 7 in process; keeps the records for a re-merge (the write's `Rewrite`)."""
        threads = self.config.get(opt.WRITE_PARALLELISM)
        statuses, rewrite = copy_on_write.write_buckets(self.storage, plan, job, progress, attempt, threads)
        self._pending[job.instant_time].rewrite = rewrite
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
        version first (outside the lock), then checked again.
        `extra_metadata` lands in the commit's extraMetadata (e.g. the files an ingest read)."""
        return commit_action.commit(self, instant_time, result, extra_metadata)

    def _redo(self, operation: str, batch: PreparedBatch, options: dict | None, instant_time: str,
              attempt: int) -> WriteResult:
        """The in-process `Redo`: tag, partition and write the kept batch again."""
        plan = self.plan_prepared(operation, batch, options)
        job = self.begin_write(instant_time, plan)
        return self.write_result(instant_time, plan, self._write_buckets(plan, job, None, attempt), {})

    def rollback(self, instant_time: str) -> None:
        """Undo a started, uncommitted write of this client. If another writer rolled it back
        already (its heartbeat expired while it ran), what it wrote since is deleted all the same."""
        instants.rollback(self, instant_time)


@contextmanager
def _stage(stages: dict[str, float], name: str, progress: Progress | None = None, total: int = 0) -> Iterator[None]:
    start = time.perf_counter()
    if progress is not None:
        progress.started(name, total)
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - start
        if progress is not None:
            progress.ended(name, stages[name])
