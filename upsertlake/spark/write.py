"""The distributed write: the engine's steps, with the heavy ones as Spark jobs.

driver: start_commit → executors: prepare (validate, key, dedup) each hash partition of the input
by record key → driver: collect the keys, tag, profile and partition them (the in-process code)
→ executors: attach each record's bucket, shuffle with `repartitionById` so one task holds each
bucket, merge and write it (the in-process BucketJob) → driver: one commit of the write statuses.
A failure anywhere rolls the instant back: nothing becomes visible and no file stays behind.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Iterator
from functools import partial
from itertools import pairwise

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

from upsertlake.config import options as opt
from upsertlake.engine.bucket_writer import DELETE_FLAG, KEY, PARTITION, BucketJob
from upsertlake.engine.prepare import POSITION, PreparedBatch, PrepareSpec
from upsertlake.engine.write_client import WriteClient, WriteResult
from upsertlake.spark.options import WriteOptions
from upsertlake.spark.types import arrow_schema_of, spark_schema_of
from upsertlake.storage import Storage

log = logging.getLogger(__name__)

BUCKET = "_upsertlake_bucket"
STATUS = "status"


def write_dataframe(df: object, options: WriteOptions, extra_metadata: dict[str, str] | None = None) -> WriteResult:
    """Write a Spark DataFrame to the table with the options' operation, distributed;
    `extra_metadata` goes into the commit's extraMetadata."""
    schema = arrow_schema_of(df.schema)
    table = options.open_or_create(schema)
    client = table.write_client()
    instant = client.start_commit()
    try:
        if table.options.with_overrides(options.hoodie).get(opt.INDEX_TYPE).upper().startswith("GLOBAL_"):
            # A global index moves whole records between partitions on the driver (route_global).
            log.warning("global index: the batch is collected to the driver and written in process")
            result = getattr(client, options.operation)(df.toArrow(), instant, options.hoodie)
        else:
            result = _write_distributed(df, schema, client, instant, options)
        return client.commit(instant, result, extra_metadata)
    except BaseException:
        client.rollback(instant)
        raise


def _write_distributed(
    df: object, schema: pa.Schema, client: WriteClient, instant: str, options: WriteOptions
) -> WriteResult:
    stages: dict[str, float] = {}
    began = time.perf_counter()
    spec = client.prepare_spec(options.operation, options.hoodie)
    positioned = schema.append(pa.field(POSITION, pa.int64(), nullable=False))
    empty = spec.run(positioned.empty_table())
    spark = df.sparkSession
    # As many tasks as the input has partitions (at least one per core). Not Spark's shuffle
    # default: the result is cached, and adaptive execution does not shrink a cached plan.
    parts = max(df.rdd.getNumPartitions(), spark.sparkContext.defaultParallelism)
    # Each row's place in the input, fixed before the shuffle: "the later record wins" among
    # duplicates means what it means in process (monotonically_increasing_id orders by input
    # partition, then row).
    prepared = (
        df.withColumn(POSITION, F.monotonically_increasing_id())
        .repartition(parts, *client.table_config.record_key_fields)
        .mapInArrow(partial(_prepare, spec, empty.records.schema), spark_schema_of(empty.records.schema))
        .persist()
    )
    try:
        keys = prepared.select(KEY, PARTITION, DELETE_FLAG).toArrow()
        stages["dedup"] = time.perf_counter() - began
        batch = PreparedBatch(keys, empty.data_schema, keys.num_rows)
        plan = client.plan_prepared(options.operation, batch, options.hoodie, stages=stages)
        job = client.begin_write(instant, plan)
        began = time.perf_counter()
        statuses = _write_buckets(prepared, plan.records, plan.assignment, job, client.storage.base, spark)
        stages["write"] = time.perf_counter() - began
        return client.write_result(instant, plan, statuses, stages)
    finally:
        prepared.unpersist()


def _write_buckets(prepared, records: pa.Table, assignment, job: BucketJob, base: str, spark) -> list:
    """Attach each record's bucket by a broadcast join in the JVM (an inner join: deletes of
    unknown keys drop out), give each bucket a task of its own, and bring the statuses back."""
    if not job.buckets:
        return []
    mapping = records.select([KEY, PARTITION]).append_column(BUCKET, pa.array(assignment, pa.int32()))
    buckets = spark.createDataFrame(mapping)
    rows = (
        prepared.join(F.broadcast(buckets), [KEY, PARTITION], "inner")
        .select(*prepared.columns, BUCKET)
        .repartitionById(len(job.buckets), BUCKET)
        .mapInArrow(partial(_write, job, base), f"{STATUS} binary")
        .toArrow()
    )
    return [pickle.loads(b) for b in rows.column(STATUS).to_pylist()]


def _table(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    """A task's rows as one table; None when it has none (Spark may send no batch at all)."""
    listed = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(listed) if listed else None


# -- executor functions (module level, so Spark pickles references to them) --------------------
def _prepare(spec: PrepareSpec, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Every record of a key lands in one hash partition, so deduplicating it here is complete;
    the rows are put back in input order first, so ties go to the later record as in process."""
    data = _table(batches)
    if data is not None:
        data = data.sort_by(POSITION)
        yield from spec.run(data).records.cast(schema).to_batches()


def _write(job: BucketJob, base: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Merge and write the bucket(s) of this task; records keep their input order within a bucket."""
    data = _table(batches)
    if data is None:
        return
    storage = Storage(base)
    data = data.sort_by([(BUCKET, "ascending"), (POSITION, "ascending")])
    buckets = data.column(BUCKET).to_numpy()
    starts = [0, *(np.flatnonzero(np.diff(buckets)) + 1).tolist(), len(buckets)]
    statuses = []
    for lo, hi in pairwise(starts):
        records = data.slice(lo, hi - lo).drop_columns([BUCKET, POSITION])
        statuses.append(pickle.dumps(job.write(storage, int(buckets[lo]), records)))
    yield pa.RecordBatch.from_pydict({STATUS: statuses}, schema=pa.schema([(STATUS, pa.binary())]))
