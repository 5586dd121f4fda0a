"""The distributed write, in the shape of Hudi's Spark write path (HoodieWriteHelper →
HoodieIndex.tagLocation → WorkloadProfile → UpsertPartitioner → BaseSparkCommitActionExecutor).

driver: start_commit → executors: number the input rows, shuffle by record key, prepare
(validate, key, dedup with ties to the later row) → executors: tag (`spark.tagging`; an input
Spark estimates small is prepared and tagged in one task, without a shuffle or a join) → a
distributed count per (partition, file group) → driver: the workload profile and Hudi's
UpsertPartitioner from those counts (the in-process code; the bucket index's partitioner from
counts per key bucket) → executors: each task assigns its records' buckets with the
partitioner's small state; a shuffle gives each bucket one task, which
merges and writes it (the in-process BucketJob) → driver: one commit of the write stats. A small
batch skips that shuffle too: its tag task stages the tagged records on the table's storage and
returns only the counts; one more task reads them back, assigns and writes every bucket on a
thread pool, as in process.
With the metadata table's record index kept, each write task stages the keys it inserted and
deleted on the table's storage, and the commit's metadata deltacommit writes the index's log files
by Spark tasks from them (`spark.record_index`); a start that builds the index does so by tasks too.
Nothing that grows with the records reaches the driver: only partitions, file listings, footers,
counts and write stats. A failure anywhere rolls the instant back.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.enums import IndexType
from upsertlake.engine.bucket_writer import (
    BucketJob,
    WriteStatus,
    default_token,
    mark_buckets,
    stage_keys,
    store_summaries,
)
from upsertlake.engine.bucketing import sizing
from upsertlake.engine.bulk_insert import (
    SAMPLE_ROWS,
    SORTED_MODES,
    RecordSize,
    bulk_insert_layout,
    sample_partition,
    written_record_size,
)
from upsertlake.engine.planner import plan_profile, prepare_spec
from upsertlake.engine.prepare import PreparedBatch, PrepareSpec
from upsertlake.engine.tag import slice_merge, table_index
from upsertlake.engine.write_buckets import bucket_rows, write_rows
from upsertlake.engine.write_client import WriteClient
from upsertlake.engine.write_plan import WritePlan
from upsertlake.engine.write_result import WriteResult
from upsertlake.index import BucketIndex, make_index
from upsertlake.index.base import Index
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.layout.file_writer import FileWriterConfig, file_writer_config
from upsertlake.layout.markers import reconcile_markers, staged_keys_folder, staging_folder
from upsertlake.partitioner import Bucket, BucketPartitioner, UpsertPartitioner, WorkloadProfile
from upsertlake.schema.columns import BUCKET, KEY, KEY_BUCKET, LOC_FILE_ID, LOC_INSTANT, LOCATION, PARTITION, POSITION
from upsertlake.services.metadata_table import keeps_record_index
from upsertlake.services.stat_map import StatMap, T
from upsertlake.spark.assign import bucket_column, bucket_index_column
from upsertlake.spark.options import WriteOptions
from upsertlake.spark.record_index import by_key_group_on
from upsertlake.spark.session import (
    WRITE_SETTINGS,
    arrow_only,
    check_workers,
    collect_settled,
    each_in_task,
    session_settings,
)
from upsertlake.spark.tagging import (
    read_staged,
    rewritten_on_spark,
    spark_index_type,
    tag,
    tag_buckets,
    tag_in_task,
)
from upsertlake.spark.task_errors import raised_by_task, reraised_named
from upsertlake.spark.types import arrow_schema_of, spark_schema_of, task_table
from upsertlake.storage import Storage
from upsertlake.table.open import open_table
from upsertlake.table.table import Table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import WriteStat
from upsertlake.timeline.operation import Operation

log = logging.getLogger(__name__)

STATUS = "status"
# Writes buckets of a planned write (the engine's `Rewrite`): (job, bucket numbers or None, attempt).
Writer = Callable[[BucketJob, Collection[int] | None, int], list[WriteStatus]]


@arrow_only
def write_dataframe(
    df: DataFrame, options: WriteOptions, extra_metadata: dict[str, str] | None = None, table: Table | None = None
) -> WriteResult:
    """Write a Spark DataFrame to the table with the options' operation, distributed;
    `extra_metadata` goes into the commit's extraMetadata. `table`: the table at the options'
    path as already opened (default: opened, or created by the first write)."""
    spark = df.sparkSession
    check_workers(spark)
    schema = arrow_schema_of(df.schema)
    table = table or options.open_or_create(schema)
    client = table.write_client()
    # The record index's keys stay on the executors: its initialization and its changes are Spark jobs.
    instant = client.start_commit(options.operation, by_key=by_key_group_on(spark))
    committed = None
    try:
        # As many tasks as the input has partitions (at least one per core); asked of the JVM's
        # RDD: PySpark's `df.rdd` sets up a conversion to Python rows (a second in a fresh process).
        parts = max(df._jdf.rdd().getNumPartitions(), spark.sparkContext.defaultParallelism)
        with session_settings(spark, {**WRITE_SETTINGS, "spark.sql.shuffle.partitions": str(parts)}):
            result = _write_distributed(df, schema, client, instant, options, parts)
            reconcile_markers(client.storage, instant, result.files_written)
            result = committed = client.commit(instant, result, extra_metadata)  # may re-merge or redo (Spark jobs)
    except BaseException as exc:
        client.rollback(instant)
        raised = raised_by_task(exc)
        if raised is exc:
            raise
        raise raised from exc
    finally:  # the key changes the write tasks staged for the record index (the metadata deltacommit read them)
        if keeps_record_index(client.table_config):
            for time_ in {instant, committed.instant_time if committed is not None else instant}:
                client.storage.delete_dir(staged_keys_folder(time_))
    # The same services as in process (clean, archive, inline clustering as Spark tasks).
    open_table(options.path, options.hoodie, options.storage).services_after_commit(
        options.hoodie, groups_on(spark), by_key_group_on(spark)
    )
    return result


def groups_on(spark: SparkSession) -> StatMap:
    """A service's `StatMap` that writes each group of its plan as a Spark task."""

    def on_spark(write: Callable[[T], WriteStat], groups: list[T], /) -> list[WriteStat]:
        return each_in_task(spark, write, groups)

    return on_spark


@dataclass(frozen=True)
class _Route:
    """How one Spark write runs, decided before any job: a small batch is tagged (an insert: only
    staged) and written in one task each, unless a global index looks up every partition, which
    is the distributed join's work; `fused`: prepared and tagged by one Python function in one
    task, unless a retry needs the prepared frame (`keep_prepared`: kept cached until the commit)."""

    operation: Operation
    cfg: Config
    index_type: IndexType
    index: Index
    in_task: bool
    fused: bool
    keep_prepared: bool

    @classmethod
    def of(cls, df: DataFrame, client: WriteClient, options: WriteOptions, prepared: DataFrame | None) -> _Route:
        operation = options.operation
        cfg = client.context.resolve(options.hoodie)
        index_type = spark_index_type(cfg.get(opt.INDEX_TYPE))
        index = table_index(cfg, client.table_config) if cfg.bucket_index else make_index(index_type)
        small = options.small_batch_force or _estimated_bytes(df) <= options.small_batch_bytes
        in_task = small and not operation.sized_by_batch and not (operation.looks_up and cfg.global_index)
        keep_prepared = client.context.options.get(opt.NUM_RETRIES_ON_CONFLICT) > 0
        fused = in_task and prepared is None and not keep_prepared
        return cls(operation, cfg, index_type, index, in_task, fused, keep_prepared)

    @property
    def bucket(self) -> BucketIndex | None:
        """The bucket index, which tags every operation's records by hash (`tagging.tag_buckets`)."""
        return self.index if isinstance(self.index, BucketIndex) else None

    @property
    def cached(self) -> bool:
        """The prepared frame is read twice: by a retry, or by the distributed lookup's jobs (the
        bucket index's too: it lists the batch's partitions, then tags)."""
        return self.keep_prepared or ((self.operation.looks_up or self.bucket is not None) and not self.in_task)


def _write_distributed(
    df: DataFrame,
    schema: pa.Schema,
    client: WriteClient,
    instant: str,
    options: WriteOptions,
    parts: int,
    prepared: DataFrame | None = None,
) -> WriteResult:
    """The write; a retry after a conflict passes the `prepared` frame kept from the first attempt."""
    stages: dict[str, float] = {}
    began = time.perf_counter()
    route = _Route.of(df, client, options, prepared)
    timeline = Timeline.load(client.storage)
    spec = prepare_spec(client.context, route.operation, route.cfg, timeline)
    empty = spec.run(_positioned(schema).empty_table())  # the prepared records' schema, and what is distinct
    key_fields = client.table_config.record_key_fields
    if prepared is None and not route.fused:
        prepared = _prepare(df, spec, empty.records.schema, key_fields, 1 if route.in_task else parts)
        if route.cached:
            prepared = prepared.persist()
        if route.keep_prepared:
            client.writes.keep(instant, redo=partial(_redo, df, schema, client, options, parts, prepared))
            client.writes.hold(instant, "prepared", prepared.unpersist)
    try:
        view = FileSystemView(timeline)
        counts, tagged, staged, rewrites = _tag(
            df, prepared, route, spec, empty, client, instant, view, key_fields, parts
        )
        stages["tag"] = time.perf_counter() - began
        began = time.perf_counter()
        if not route.keep_prepared and prepared is not None:
            prepared.unpersist()
        profile = _profile(counts, route.operation)
        plan, write = _plan(df, route, client, view, profile, empty.data_schema, tagged, staged, counts, rewrites)
        stages["profile"] = time.perf_counter() - began
        job = client.begin_write(instant, plan, keep_keys=keeps_record_index(client.table_config))
        client.writes.keep(instant, rewrite=write)
        began = time.perf_counter()
        statuses = write(job, None, 1)
        stages["write"] = time.perf_counter() - began
        return client.write_result(instant, plan, statuses, stages)
    finally:
        if not route.keep_prepared and prepared is not None:
            prepared.unpersist()


def _tag(
    df: DataFrame,
    prepared: DataFrame | None,
    route: _Route,
    spec: PrepareSpec,
    empty: PreparedBatch,
    client: WriteClient,
    instant: str,
    view: FileSystemView,
    key_fields: tuple[str, ...],
    parts: int,
) -> tuple[list[Any], DataFrame | None, str | None, frozenset[tuple[str, str]]]:
    """Step 3: the counts per (partition, file group) of the tagged records (inserts as a null
    file group; under the bucket index one count per key bucket), where the records wait for
    their write: the cached tagged frame, or the file the one tag task of a small batch staged on
    the table's storage (both held until the commit: a re-merge writes buckets again from them),
    and the merge-on-read slices a bucket index rewrites merged (`slice_routing.rewritten_slices`)."""
    ordering = client.table_config.ordering_fields
    if route.in_task:
        records = empty.records.schema
        frame, prepare = prepared, None
        if route.fused:
            frame, prepare = _gathered(df, key_fields, 1), partial(_prepared_records, spec, records)
        assert frame is not None, "the records are prepared or gathered"
        folder = staging_folder(instant)
        client.writes.hold(instant, "tagged", partial(client.storage.delete_dir, folder))
        staged, counts = tag_in_task(
            frame,
            records,
            route.operation,
            route.cfg,
            view.timeline,
            route.index,
            client.table_config,
            empty.distinct,
            client.storage,
            folder,
            prepare,
        )
        return counts, None, staged, frozenset((r[0], r[1]) for r in counts if r[5])
    assert prepared is not None, "a distributed tag takes the prepared frame"
    merge = slice_merge(client.table_config, view)
    if route.bucket is not None:
        tagged, logged = tag_buckets(prepared, route.bucket, view, merge is not None)
        key_bucket = F.when(F.col(LOC_FILE_ID).isNull(), F.col(KEY_BUCKET))
    else:
        tagged, logged = (
            tag(
                prepared,
                route.operation,
                route.cfg,
                view,
                route.index_type,
                ordering,
                _order_type(spec, ordering),
                parts,
                merge,
            ),
            {},
        )
        key_bucket = F.lit(None).cast("int")
    tagged = tagged.persist()
    client.writes.hold(instant, "tagged", tagged.unpersist)
    groups = (
        tagged.groupBy(PARTITION, LOC_FILE_ID, key_bucket.alias("b"))
        .agg(F.count(F.lit(1)).alias("n"), F.max(LOC_INSTANT).alias("i"))
        .select(PARTITION, LOC_FILE_ID, "n", "i", "b")
        .collect()
    )
    rewrites: frozenset[tuple[str, str]] = frozenset()
    if logged:
        assert merge is not None, "slices with log files come with how they merge"
        rewrites = rewritten_on_spark(tagged, logged, merge, client.storage, parts)
    return groups, tagged, None, rewrites


def _profile(counts: list[Any], operation: Operation) -> WorkloadProfile:
    """Step 4: the workload profile from the counts (what reaches the driver: one row per file group)."""
    counts = sorted(counts, key=lambda r: (r[0], r[1] is None, r[1] or ""))
    return WorkloadProfile.from_counts(
        [r[0] for r in counts],
        [r[1] for r in counts],
        [r[2] for r in counts],
        [r[3] for r in counts],
        operation.type_name,
    )


def _plan(
    df: DataFrame,
    route: _Route,
    client: WriteClient,
    view: FileSystemView,
    profile: WorkloadProfile,
    data_schema: pa.Schema,
    tagged: DataFrame | None,
    staged: str | None,
    counts: list[Any],
    rewrites: frozenset[tuple[str, str]],
) -> tuple[WritePlan, Writer]:
    """Step 5: the plan (Hudi's partitioner from the profile, the bucket index's from the key
    buckets of the counted inserts, or bulk insert's layout) and what writes its buckets: one task
    per bucket over the assigned frame, or the one task that writes a small batch from its staged
    file."""
    cfg, operation = route.cfg, route.operation
    if route.bucket is not None:
        new = {(r[0], r[4]) for r in counts if r[1] is None}
        plan = plan_profile(
            client.context, operation, cfg, view, profile, data_schema, new_buckets=new, rewrites=rewrites
        )
        assert isinstance(plan.partitioner, BucketPartitioner), "the bucket index's plan has its partitioner"
        if route.in_task:
            threads = cfg.get(opt.WRITE_PARALLELISM)
            return plan, partial(_write_in_task, df.sparkSession, staged, plan.partitioner, client.storage, threads)
        by_key = operation.sized_by_batch and cfg.get(opt.BULK_INSERT_SORT_MODE) in SORTED_MODES
        assert tagged is not None, "the records are tagged by Spark"
        bucket = bucket_index_column(plan.partitioner, PARTITION, KEY_BUCKET, LOC_FILE_ID)
        assigned = tagged.withColumn(BUCKET, bucket)
        return plan, partial(_rewrite, assigned.drop(*LOCATION, KEY_BUCKET), client.storage, by_key=by_key)
    if operation.sized_by_batch:
        inserts = {p: w.num_inserts for p, w in profile.partitions.items()}
        sort_mode = cfg.get(opt.BULK_INSERT_SORT_MODE)
        assert tagged is not None, "a bulk insert is tagged by Spark (it is never small enough for one task)"
        size = _record_size(tagged, inserts, data_schema, file_writer_config(cfg), sort_mode)
        buckets, first, per_file = bulk_insert_layout(inserts, size, sizing(view.timeline, cfg)[1])
        plan = WritePlan(
            operation, cfg, view, profile, buckets, data_schema, merge_on_read=client.table_config.is_merge_on_read
        )
        return plan, partial(_rewrite, _bulk_assign(tagged, first, per_file, sort_mode), client.storage)
    plan = plan_profile(client.context, operation, cfg, view, profile, data_schema)
    assert isinstance(plan.partitioner, UpsertPartitioner), "a plan from a profile has Hudi's partitioner"
    if route.in_task:  # one task writes them all, from the staged file
        threads = cfg.get(opt.WRITE_PARALLELISM)
        return plan, partial(_write_in_task, df.sparkSession, staged, plan.partitioner, client.storage, threads)
    assert tagged is not None, "the records are tagged by Spark"
    return plan, partial(_rewrite, _assign(tagged, plan.partitioner), client.storage)


def _positioned(schema: pa.Schema) -> pa.Schema:
    return schema.append(pa.field(POSITION, pa.int64(), nullable=False))


def _prepare(
    df: DataFrame, spec: PrepareSpec, records: pa.Schema, key_fields: tuple[str, ...], parts: int
) -> DataFrame:
    """Hudi's HoodieWriteHelper.deduplicateRecords on the executors (`records`: the prepared
    records' schema)."""
    prepare = partial(_prepare_task, spec, records)
    return _gathered(df, key_fields, parts).mapInArrow(prepare, spark_schema_of(records))


def _gathered(df: DataFrame, key_fields: tuple[str, ...], parts: int) -> DataFrame:
    """The input rows numbered, every record of a key in one of `parts` tasks. Each row's place in
    the input is fixed before the shuffle, so "the later record wins" means what it means in
    process (monotonically_increasing_id orders by input partition, then row). One part: the
    input's partitions are read by one task, in order, without a shuffle."""
    numbered = df.withColumn(POSITION, F.monotonically_increasing_id())
    return numbered.coalesce(1) if parts == 1 else numbered.repartition(parts, *key_fields)


def _estimated_bytes(df: DataFrame) -> float:
    """Spark's estimate of the input's size (its optimizer's statistics, no job); infinite when
    it has none (Spark's own default for an unknown size is larger than any limit)."""
    from py4j.protocol import Py4JError

    try:
        return float(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except (Py4JError, ValueError):
        return float("inf")


def _order_type(spec: PrepareSpec, ordering: tuple[str, ...]) -> pa.DataType | None:
    """The type a global index carries stored ordering values in: the ordering field's, or for
    several a struct of them (compared field by field, `upsertlake.schema.ordering`)."""
    schema = spec.table_schema
    if not ordering or schema is None or not all(f in schema.names for f in ordering):
        return None
    return schema.field(ordering[0]).type if len(ordering) == 1 else pa.struct([schema.field(f) for f in ordering])


def _assign(tagged: DataFrame, partitioner: UpsertPartitioner) -> DataFrame:
    """Each record's bucket (Hudi's getPartition) as a SQL expression over the partitioner's small
    state: update buckets by file group, inserts by MD5 of the key against cumulative weights."""
    bucket = bucket_column(partitioner, PARTITION, KEY, LOC_FILE_ID)
    return tagged.withColumn(BUCKET, bucket).drop(*LOCATION)


def _record_size(
    tagged: DataFrame, counts: dict[str, int], data_schema: pa.Schema, file_config: FileWriterConfig, sort_mode: str
) -> RecordSize:
    """Bulk insert's bytes per record, measured as in process (`written_record_size`) on the
    first SAMPLE_ROWS records of the largest partition in the order its files hold them (a top-K
    per task, then one task that measures them): only the figure comes back to the driver."""
    partition = sample_partition(counts)
    if partition is None:
        return RecordSize(0.0, 1.0)
    sort = sort_mode in SORTED_MODES
    order = [F.col(KEY), F.col(POSITION)] if sort else [F.col(POSITION)]
    sample = tagged.filter(F.col(PARTITION) == partition).drop(*LOCATION).orderBy(*order).limit(SAMPLE_ROWS)
    measure = partial(_record_size_task, data_schema, file_config, sort)
    measured = sample.mapInArrow(
        measure, "fixed double, per_record double, rows_per_group long, records long"
    ).collect()
    if not measured:
        return RecordSize(0.0, 1.0)
    fixed, per_record, group, _ = max(measured, key=lambda r: r[3])  # one task measures them all
    return RecordSize(fixed, per_record, group)


def _bulk_assign(tagged: DataFrame, first: dict[str, int], per_file: int, sort_mode: str) -> DataFrame:
    """Bulk insert: the i-th record of a partition (in sort order) goes to bucket first + i //
    per_file, as in process; the rank also orders the records within their file."""
    order = [F.col(KEY), F.col(POSITION)] if sort_mode in SORTED_MODES else [F.col(POSITION)]
    rank = F.row_number().over(Window.partitionBy(PARTITION).orderBy(*order)) - 1
    firsts = F.create_map(*[F.lit(x) for item in first.items() for x in item]) if first else F.create_map()
    ranked = tagged.drop(*LOCATION).withColumn(POSITION, rank)
    bucket = (firsts[F.col(PARTITION)] + F.floor(F.col(POSITION) / per_file)).cast("int")
    return ranked.withColumn(BUCKET, bucket)


def _redo(
    df: DataFrame,
    schema: pa.Schema,
    client: WriteClient,
    options: WriteOptions,
    parts: int,
    prepared: DataFrame,
    instant: str,
    attempt: int,
) -> WriteResult:
    """The Spark `Redo` (a retry after a conflict on a record): the kept prepared frame tagged,
    partitioned and written again against the table as it is now (each task's own write token)."""
    return _write_distributed(df, schema, client, instant, options, parts, prepared)


def _rewrite(
    assigned: DataFrame,
    storage: Storage,
    job: BucketJob,
    numbers: Collection[int] | None,
    attempt: int,
    by_key: bool = False,
) -> list[WriteStatus]:
    """The Spark `Rewrite` (a re-merge, or a move to a new instant): one job over the bucket-assigned
    frame (the cached tagged frame and the same bucket expression, so every record gets the same
    bucket again), one task per bucket in `numbers` (all when None), each under its own task's
    write token. `by_key`: a bucket's records are written in key order (a sorted bulk insert)."""
    numbers = None if numbers is None else sorted(numbers)
    return _write_buckets(assigned, list(job.buckets), job, storage, numbers, by_key)


def _write_in_task(
    spark: SparkSession,
    staged: str | None,
    partitioner: UpsertPartitioner | BucketPartitioner,
    storage: Storage,
    threads: int,
    job: BucketJob,
    numbers: Collection[int] | None,
    attempt: int,
) -> list[WriteStatus]:
    """A small batch's buckets (only those in `numbers` when given) written by one task from the
    file its tag task `staged`: it assigns each record's bucket with the in-process partitioner
    and writes the buckets on a thread pool, as in process. No shuffle, no bucket expression; the
    driver gets the write statuses (the `Rewrite` of this path)."""
    if staged is None or not job.buckets or numbers == []:
        return []
    chosen = None if numbers is None else sorted(numbers)
    task = partial(_write_all_task, staged, job, partitioner, storage, threads, chosen)
    one = spark.range(1, numPartitions=1)  # a job of one task, which reads the staged file
    return _collect_statuses(one.mapInArrow(task, f"{STATUS} binary"))


def _write_buckets(
    assigned: DataFrame,
    buckets: list[Bucket],
    job: BucketJob,
    storage: Storage,
    numbers: list[int] | None = None,
    by_key: bool = False,
) -> list[WriteStatus]:
    """One task per bucket (`repartitionById`) merges and writes it (only the buckets `numbers`
    when given, one task each), its records in input order (`by_key`: key order); only the write
    statuses (stats and counts, no keys) come back."""
    if not buckets or numbers == []:
        return []
    task, tasks = F.col(BUCKET), len(buckets)
    if numbers is not None:
        assigned = assigned.where(F.col(BUCKET).isin(numbers))
        position = F.array_position(F.array(*[F.lit(n) for n in numbers]), F.col(BUCKET))
        task, tasks = (position - 1).cast("int"), len(numbers)
    frame = assigned.repartitionById(tasks, task).mapInArrow(
        partial(_write_task, job, storage, by_key), f"{STATUS} binary"
    )
    return _collect_statuses(frame)


def _collect_statuses(frame: DataFrame) -> list[WriteStatus]:
    """The write statuses a job of write tasks returns (each task's pickled by `_statuses`)."""
    return [pickle.loads(r[0]) for r in collect_settled(frame.sparkSession, frame)]


# -- executor functions (module level, so Spark pickles references to them) --------------------
@reraised_named
def _prepare_task(spec: PrepareSpec, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Every record of a key lands in one hash partition, so deduplicating it here is complete;
    the rows are put back in input order first, so ties go to the later record as in process."""
    data = task_table(batches)
    if data is not None:
        yield from _prepared_records(spec, schema, data).to_batches()


def _prepared_records(spec: PrepareSpec, schema: pa.Schema, data: pa.Table) -> pa.Table:
    """A task's rows prepared, put back in input order first so that ties go to the later record."""
    return spec.run(data.sort_by(POSITION)).records.cast(schema)


@reraised_named
def _record_size_task(
    data_schema: pa.Schema, file_config: FileWriterConfig, sort: bool, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    data = task_table(batches)
    if data is not None:  # in file order, as `_bulk_assign` ranks them
        data = data.sort_by([(KEY, "ascending"), (POSITION, "ascending")] if sort else [(POSITION, "ascending")])
        size = written_record_size(data, data_schema, file_config)
        yield pa.RecordBatch.from_pydict(
            {
                "fixed": [size.fixed],
                "per_record": [size.per_record],
                "rows_per_group": [size.rows_per_group],
                "records": [data.num_rows],
            }
        )


@reraised_named
def _write_task(
    job: BucketJob, storage: Storage, by_key: bool, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Merge and write the bucket(s) of this task, under this attempt's `_write_token`; records
    keep their input order within a bucket (`by_key`: key order, then input order)."""
    data = task_table(batches)
    if data is None:
        return
    token = _write_token()
    data = data.sort_by([(BUCKET, "ascending"), *([(KEY, "ascending")] if by_key else []), (POSITION, "ascending")])
    buckets = data.column(BUCKET).to_numpy()
    starts = [0, *(np.flatnonzero(np.diff(buckets)) + 1).tolist(), len(buckets)]
    tokens = {int(buckets[lo]): token or default_token(int(buckets[lo]), 1) for lo in starts[:-1]}
    mark_buckets(storage, job, tokens)
    statuses = []
    for lo, hi in pairwise(starts):
        records = data.slice(lo, hi - lo).drop_columns([BUCKET, POSITION])
        number = int(buckets[lo])
        statuses.append(job.write(storage, number, records, write_token=tokens[number]))
    yield from _statuses(_keys_staged(storage, job, store_summaries(storage, job.instant_time, statuses)))


@reraised_named
def _write_all_task(
    staged: str,
    job: BucketJob,
    partitioner: UpsertPartitioner | BucketPartitioner,
    storage: Storage,
    threads: int,
    numbers: list[int] | None,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """`_write_in_task`'s task: every staged record, in input order, assigned to its bucket and
    written as in process (`numbers`: only those buckets)."""
    for _ in batches:  # the one row that gives the task to run
        pass
    data = read_staged(storage, staged).sort_by(POSITION)
    assignment = partitioner.assign(data.column(PARTITION), data.column(KEY), data.column(LOC_FILE_ID))
    records = data.drop_columns([*LOCATION, POSITION])
    rows = bucket_rows(assignment, len(job.buckets))
    if numbers is not None:
        rows = {n: rows[n] for n in numbers if n in rows}
    statuses = write_rows(
        storage,
        job.for_batch(records, rows, threads or os.cpu_count() or 1),
        records,
        rows,
        threads,
        write_token=_write_token(),
    )
    yield from _statuses(_keys_staged(storage, job, statuses))


def _keys_staged(storage: Storage, job: BucketJob, statuses: list[WriteStatus]) -> list[WriteStatus]:
    """A write task's statuses without their key changes: those the record index needs (`keep_keys`)
    are staged on the table's storage for the metadata deltacommit's tasks, not sent to the driver."""
    return stage_keys(storage, staged_keys_folder(job.instant_time), statuses) if job.keep_keys else statuses


def _write_token() -> str | None:
    """This task attempt's write token (Hudi's partition-stage-attempt): a retried or speculative
    attempt never overwrites another's file; the commit deletes the losers' files."""
    ctx = TaskContext.get()
    return f"{ctx.partitionId()}-{ctx.stageId()}-{ctx.taskAttemptId()}" if ctx is not None else None


def _statuses(statuses: list[WriteStatus]) -> Iterator[pa.RecordBatch]:
    """A write task's statuses, pickled, as its one output batch."""
    pickled = [pickle.dumps(s) for s in statuses]
    yield pa.RecordBatch.from_pydict({STATUS: pickled}, schema=pa.schema([(STATUS, pa.binary())]))
