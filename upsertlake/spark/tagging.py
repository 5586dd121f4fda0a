"""Tagging on the executors, in the shape of Hudi's HoodieSimpleIndex and HoodieBloomIndex.

Each index gives the same thing: the stored (key, file number) rows of the batch's keys, found by
Spark tasks (the driver numbers the files; their locations are looked up after the join). SIMPLE
reads the key column of the latest base files of the touched partitions (all partitions when
global) with Spark's own parquet reader. BLOOM reads one footer per file on the driver for its key
range, pairs each key with the files whose range holds it (in tasks), then checks each file's
bloom filter and its exact keys in tasks grouped by file.
The stored rows are left-joined to the batch; a key stored several times takes the copy in the
record's own partition, then the smallest (partition, fileId), as in process.
On a merge-on-read table a slice's stored keys are those its merged records hold: the base files
of slices with log files are read by a task each, which leaves out the keys their logs deleted
and takes the merged ordering values (`upsertlake.layout.slice_keys`).
A global index then routes records that change partition, in tasks (`route_moves`).
The bucket index reads no file (`tag_buckets`): tasks hash their keys to buckets and take the
bucket's file group from the driver's listing; on a merge-on-read table, tasks grouped by file
group read the logs of the slices whose deleted keys come back (`rewritten_on_spark`).
The driver holds the file listing and footers only.
A small batch, whose records sit in one task already, is tagged there by the in-process index
instead (`tag_in_task`): a join's jobs and shuffles cost seconds that its lookup does not.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.enums import IndexType
from upsertlake.config.table_config import TableConfig
from upsertlake.engine.global_routing import route_moves, stored_orders_after
from upsertlake.engine.prepare import Distinct, PreparedBatch
from upsertlake.engine.slice_routing import dead_groups, rewritten_slices
from upsertlake.engine.tag import slice_merge
from upsertlake.engine.tag import tag as tag_records
from upsertlake.index import BucketIndex
from upsertlake.index.base import Index
from upsertlake.index.bucket import bucket_groups, locate, stored_buckets
from upsertlake.layout.file_system_view import BaseFile, FileSlice, FileSystemView
from upsertlake.layout.footer import read_footer
from upsertlake.layout.slice_keys import live_copies, live_in_slice
from upsertlake.layout.slice_reader import Merge
from upsertlake.schema.columns import (
    DELETE_FLAG,
    FILE_NUMBER,
    KEY,
    KEY_BUCKET,
    LOC_FILE_ID,
    LOC_INSTANT,
    LOC_PARTITION,
    LOCATION,
    LOOKUP_KEY,
    PARTITION,
    PARTITION_NUMBER,
    STORED_KEY,
    STORED_ORDER,
)
from upsertlake.schema.ordering import ordering_values
from upsertlake.spark.literals import identifier, sql_array, sql_literal, sql_map
from upsertlake.spark.record_index import record_index_located
from upsertlake.spark.session import FILE_NAME, scan_files
from upsertlake.spark.task_errors import reraised_named
from upsertlake.spark.types import spark_schema_of, task_table
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.operation import Operation

log = logging.getLogger(__name__)

_FILES_PER_TASK = 8  # bloom checks: files (filters and key columns) one task opens
Group = tuple[str, str, str | None]  # a file group a stored key is in: (partition, fileId, base instant)
# A small batch's staged file and, per (partition, file group, and for a bucket index's inserts
# their key's bucket), the records, the latest instant and whether the slice is rewritten merged
# (`slice_routing.rewritten_slices`): what `tag_in_task` returns.
STAGED_COUNTS_ARROW = pa.schema([("staged", pa.string()), (PARTITION, pa.string()), (LOC_FILE_ID, pa.string()),
                                 ("n", pa.int64()), ("i", pa.string()), ("b", pa.int32()), ("rewrite", pa.bool_())])
STAGED_COUNTS = spark_schema_of(STAGED_COUNTS_ARROW)


def tag(
    prepared: DataFrame,
    operation: Operation,
    cfg: Config,
    view: FileSystemView,
    index_type: IndexType,
    ordering_fields: tuple[str, ...],
    global_order: pa.DataType | None,
    parts: int,
    merge: Merge | None = None,
) -> DataFrame:
    """The prepared records with LOCATION columns (nulls for new keys); deletes of keys not
    stored are dropped; under a global index records that change partition are routed.
    `index_type`: the index Spark tags with (`spark_index_type`); `global_order`: the type of the
    stored ordering values when global routing compares them (`_stored_order`); `parts`: the tasks of the join (the
    write's parallelism); `merge`: how a merge-on-read table's slices merge (the stored keys of a
    slice with log files are those its merged records hold, `upsertlake.layout.slice_keys`)."""
    spark = prepared.sparkSession
    if not operation.looks_up:  # insert-only operations skip the lookup, as in Hudi
        return prepared.select("*", *[F.lit(None).cast("string").alias(c) for c in LOCATION])
    by_record_index = index_type is IndexType.RECORD_INDEX
    is_global = cfg.global_index or by_record_index  # the record index finds a key in any partition
    if is_global:
        partitions = view.partitions()
    else:
        touched = {r[0] for r in prepared.select(PARTITION).distinct().collect()}  # one row a partition
        partitions = [p for p in view.partitions() if p in touched]
    files = sorted(view.latest_base_files(partitions), key=lambda bf: (bf.partition_path, bf.file_id))
    slices = view.latest_file_slices(partitions) if merge is not None or by_record_index else []
    # The file groups a stored key can be in, numbered in (partition, fileId) order (the smallest
    # number is the smallest location): those with a base file, and for the record index, which
    # finds keys in log-only groups too (Hudi's bucket index and Flink write inserts into log
    # files), those without one, as in process.
    located_in = sorted(
        [(bf.file_group, bf.instant_time, bf) for bf in files]
        + ([(sl.file_group, None, None) for sl in slices if sl.base is None] if by_record_index else []),
        key=lambda g: g[0],
    )
    groups: list[Group] = [(p, f, i) for (p, f), i, _ in located_in]
    numbered = [bf for _, _, bf in located_in]  # the base file of each (None: a log-only group)
    order = ordering_fields if is_global and global_order is not None else ()
    if by_record_index and not cfg.get(opt.RECORD_INDEX_UPDATE_PARTITION_PATH):
        order = ()  # no record moves, so no stored ordering value is compared: no data file is read
    number = {(p, f): n for n, (p, f, _) in enumerate(groups)}
    with_logs = [sl for sl in slices if sl.logs and sl.base is not None] if merge is not None else []
    logged = {number[sl.file_group]: sl for sl in with_logs}
    if not groups:
        stored = None
    elif by_record_index:
        stored = record_index_located(prepared, view.timeline, [(p, f) for p, f, _ in groups])
        if order:  # the stored ordering values of the keys found, read from their files as the bloom check does
            tasks = max(1, -(-len(groups) // _FILES_PER_TASK))
            out = pa.schema([(STORED_KEY, pa.string()), (FILE_NUMBER, pa.int32()), (STORED_ORDER, global_order)])
            stored = stored.repartition(tasks, FILE_NUMBER).mapInArrow(
                partial(_check_files, numbered, view.storage, order, logged, merge, out), spark_schema_of(out)
            )
    elif index_type.local is IndexType.BLOOM:
        stored = _bloom_located(prepared, files, view.storage, is_global, order, global_order, logged, merge)
    else:
        stored = _simple_located(spark, files, view.storage, order, global_order, logged, merge)
    tagged = _join(prepared, stored, groups, is_global, order, global_order, parts)
    if is_global:
        routed = prepared.select("*", *[F.lit(None).cast("string").alias(c) for c in LOCATION]).schema
        tagged = tagged.mapInArrow(partial(_route, operation, cfg, ordering_fields), routed)
    return tagged.where(~(F.col(DELETE_FLAG) & F.col(LOC_FILE_ID).isNull()))


def _order_fields(order: tuple[str, ...], order_type: pa.DataType | None) -> list[pa.Field]:
    """The stored ordering fields a scan of base files reads (their types from `order_type`)."""
    if not order:
        return []
    if len(order) == 1:
        return [pa.field(order[0], order_type)]
    assert order_type is not None, "several ordering fields are read as one struct"
    return list(order_type)


def _present(order: tuple[str, ...], names: list[str]) -> list[str]:
    """The ordering fields a file has: all of them, or none (written before they were)."""
    return list(order) if order and all(f in names for f in order) else []


def _stored_order(stored: pa.Table, order: tuple[str, ...]) -> pa.Array | pa.ChunkedArray:
    """The STORED_ORDER column of stored rows: the field, or a struct of the fields; nulls when a
    file has not got them."""
    if not all(f in stored.column_names for f in order):
        return pa.nulls(stored.num_rows)
    if len(order) == 1:
        return stored.column(order[0])
    return pa.StructArray.from_arrays([stored.column(f).combine_chunks() for f in order], names=list(order))


def spark_index_type(index_type: IndexType) -> IndexType:
    """The index a Spark write tags with: the in-memory index lives in one process; on Spark it
    would have to sit on the driver, so SIMPLE stands in for it."""
    if index_type.local is not IndexType.INMEMORY:
        return index_type
    simple = index_type.with_lookup(IndexType.SIMPLE)
    log.warning("hoodie.index.type %s is single-process: this Spark write tags with %s", index_type, simple)
    return simple


def tag_buckets(
    prepared: DataFrame, index: BucketIndex, view: FileSystemView, merge_on_read: bool
) -> tuple[DataFrame, dict[tuple[str, str], FileSlice]]:
    """Hudi's simple bucket index on Spark, as in process (`BucketIndex.tag`): the driver lists the
    latest slices of the batch's partitions and names each bucket's file group (what grows with
    the file groups); tasks hash their records' keys (column KEY_BUCKET) and take their bucket's
    group; a delete of a key whose bucket has no group is dropped. No file is read. Returns the
    tagged records and, on a merge-on-read table, the slices with log files by file group (which
    `rewritten_on_spark` reads)."""
    touched = {r[0] for r in prepared.select(PARTITION).distinct().collect()}  # one row a partition
    slices = view.latest_file_slices([p for p in view.partitions() if p in touched])
    stored = stored_buckets(bucket_groups(slices, index.num_buckets))
    out = [*[pa.field(c, pa.string()) for c in LOCATION], pa.field(KEY_BUCKET, pa.int32())]
    schema = StructType([*prepared.schema.fields, *spark_schema_of(pa.schema(out)).fields])
    tagged = prepared.mapInArrow(partial(_bucket_task, index, stored), schema)
    return tagged, {sl.file_group: sl for sl in slices if sl.logs} if merge_on_read else {}


def rewritten_on_spark(
    tagged: DataFrame, logged: dict[tuple[str, str], FileSlice], merge: Merge, storage: Storage, parts: int
) -> frozenset[tuple[str, str]]:
    """`slice_routing.rewritten_slices` on Spark: the slices with log files (`logged`) that take a
    record of a key their logs deleted, found by tasks that each read the logs of some of them
    (a task per group at most); only the file groups come back."""
    if not logged:
        return frozenset()
    file_ids = sql_array(sorted(f for _, f in logged))
    copies = tagged.where(~F.col(DELETE_FLAG) & F.expr(f"array_contains({file_ids}, loc_file_id)"))
    copies = copies.select(F.col(KEY).alias(LOOKUP_KEY), LOC_PARTITION, LOC_FILE_ID)
    dead = copies.repartition(min(len(logged), parts), LOC_FILE_ID).mapInArrow(
        partial(_dead_groups, logged, merge, storage), f"{LOC_PARTITION} string, {LOC_FILE_ID} string")
    return frozenset((r[0], r[1]) for r in dead.distinct().collect())


def tag_in_task(
    frame: DataFrame,
    records: pa.Schema,
    operation: Operation,
    cfg: Config,
    timeline: Timeline,
    index: Index,
    table_config: TableConfig,
    distinct: Distinct,
    storage: Storage,
    folder: str,
    prepare: Callable[[pa.Table], pa.Table] | None = None,
) -> tuple[str | None, list[tuple[Any, ...]]]:
    """`tag` for a small batch (a lookup under a non-global index, or an insert, which looks
    nothing up), in the one task that holds its records
    (see `write._gathered`): it lists the partitions of its records as of `timeline` and looks
    their keys up with the in-process index (reading only those files' key columns, through the
    table's storage). `frame` holds the prepared records (schema `records`), or the input rows
    that `prepare` turns into them in the same task; `distinct`: what preparing made distinct
    (`PreparedBatch.distinct`).

    The task stages the tagged records (LOCATION columns added) as an Arrow file in `folder` on
    the table's storage, one file per task attempt, and returns only the file's path and, per
    (partition, file group), the records and the latest instant (inserts: a null file group): no
    records pass through the JVM, no cache and no aggregation shuffle. Returns (the staged file,
    or None when no record is left; the counts)."""
    out = pa.schema([*records, *[pa.field(c, pa.string()) for c in LOCATION]])
    task = partial(_tag_task, timeline, index, operation, cfg, table_config, distinct, prepare, out, storage, folder)
    rows = frame.coalesce(1).mapInArrow(task, STAGED_COUNTS).collect()
    return (rows[0][0] if rows else None), [tuple(r[1:]) for r in rows]


def read_staged(storage: Storage, path: str) -> pa.Table:
    """The tagged records `tag_in_task` staged."""
    with storage.open_input(path) as f:
        return pa.ipc.open_file(f).read_all()


def _simple_located(
    spark: SparkSession,
    files: list[BaseFile],
    storage: Storage,
    order: tuple[str, ...],
    order_type: pa.DataType | None,
    logged: dict[int, FileSlice],
    merge: Merge | None,
) -> DataFrame:
    """Stored (key, file number[, ordering value]) of every latest base file, through Spark's
    reader. A file is named by its number in `files` (a literal map of file names, which grows
    with the files): the rows shuffled to the join carry an int, not three location strings.
    The files of `logged` slices (merge-on-read, with log files) are read by a task each, which
    leaves out the keys their logs deleted and takes the merged ordering values."""
    fields = [pa.field(KEY, pa.string()), *_order_fields(order, order_type)]
    plain = [bf for n, bf in enumerate(files) if n not in logged]
    out = [pa.field(STORED_KEY, pa.string()), pa.field(FILE_NUMBER, pa.int32())]
    out += [pa.field(STORED_ORDER, order_type)] if order else []
    located = None
    if plain:
        paths = [bf.path for bf in plain]
        scan = scan_files(spark, spark_schema_of(pa.schema(fields)), storage, paths, file_names=True)
        numbers = sql_map({bf.name: sql_literal(n) for n, bf in enumerate(files)})
        columns = [
            F.col(KEY).alias(STORED_KEY),
            F.expr(f"element_at({numbers}, {FILE_NAME})").cast("int").alias(FILE_NUMBER),
        ]
        if order:
            stored = F.col(order[0]) if len(order) == 1 else F.struct(*[F.col(f) for f in order])
            columns.append(stored.alias(STORED_ORDER))
        located = scan.select(*columns)
    if logged:
        slices = spark.createDataFrame([(n,) for n in sorted(logged)], "n int").repartition(len(logged))
        merged = slices.mapInArrow(
            partial(_read_slices, logged, files, storage, merge, order, pa.schema(out)), spark_schema_of(pa.schema(out))
        )
        located = merged if located is None else located.unionByName(merged)
    assert located is not None, "the callers read no file when there is none"
    return located


def _bloom_located(
    prepared: DataFrame,
    files: list[BaseFile],
    storage: Storage,
    is_global: bool,
    order: tuple[str, ...],
    order_type: pa.DataType | None,
    logged: dict[int, FileSlice],
    merge: Merge | None,
) -> DataFrame:
    """Hudi's bloom index on Spark: key ranges from the footers (driver), (key, candidate file)
    pairs in tasks, then per file its bloom filter and exact keys in tasks grouped by file (those
    of a `logged` slice as its merged records hold them)."""
    ranges = [(bf, read_footer(storage, bf)) for bf in files]
    table = [(n, bf.partition_path, f.min_key, f.max_key) for n, (bf, f) in enumerate(ranges)]
    pairs_schema = StructType([StructField(STORED_KEY, StringType()), StructField(FILE_NUMBER, IntegerType())])
    pairs = prepared.select(KEY, PARTITION).mapInArrow(partial(_pair_with_files, table, is_global), pairs_schema)
    out = [pa.field(STORED_KEY, pa.string()), pa.field(FILE_NUMBER, pa.int32())]
    if order:
        out.append(pa.field(STORED_ORDER, order_type))
    tasks = max(1, -(-len(files) // _FILES_PER_TASK))
    check = partial(_check_files, [bf for bf, _ in ranges], storage, order, logged, merge, pa.schema(out))
    return pairs.repartition(tasks, FILE_NUMBER).mapInArrow(check, spark_schema_of(pa.schema(out)))


def _join(
    prepared: DataFrame,
    stored: DataFrame | None,
    groups: list[Group],
    is_global: bool,
    order: tuple[str, ...],
    order_type: pa.DataType | None,
    parts: int,
) -> DataFrame:
    """Left-join the batch to the stored (key, file number) rows of its keys and pick one file per
    record: the copy in the record's own partition (the smallest fileId if it is stored twice
    there); under a global index, when there is none, the smallest (partition, fileId); as in
    process. A sort-merge join: both sides grow with the records, so neither may be broadcast
    (that passes through the driver) nor held as one task's hash table (10M stored keys in two
    tasks ran out of memory); sorting spills instead. Partitions and files are numbered by the
    driver (literals that grow with the files); the locations (`groups`, by file number) are
    looked up after the join."""
    if stored is None:
        nulls = [F.lit(None).cast("string").alias(c) for c in LOCATION]
        if order:
            order_spark = spark_schema_of(pa.schema([pa.field(STORED_ORDER, order_type)]))[0].dataType
            nulls.append(F.lit(None).cast(order_spark).alias(STORED_ORDER))
        return prepared.select("*", *nulls)
    numbered = {p: n for n, p in enumerate(sorted({p for p, _, _ in groups}))}
    part_of_file = sql_array([numbered[p] for p, _, _ in groups])
    stored = stored.withColumn(PARTITION_NUMBER, F.expr(f"element_at({part_of_file}, {FILE_NUMBER} + 1)"))
    partition_numbers = sql_map({p: sql_literal(n) for p, n in numbered.items()})
    own_part = F.expr(f"element_at({partition_numbers}, {identifier(PARTITION)})")
    batch = prepared.withColumn(PARTITION_NUMBER, own_part)  # null: a partition without files, so no match
    if is_global:
        fields = [PARTITION_NUMBER, FILE_NUMBER, *([STORED_ORDER] if order else [])]  # ordered by (partition, file)
        grouped = (
            stored.repartition(parts, STORED_KEY)
            .groupBy(STORED_KEY)
            .agg(F.collect_list(F.struct(*fields)).alias("_locs"))
        )
        batch = batch.repartition(parts, KEY)
        joined = batch.join(grouped.hint("merge"), batch[KEY] == grouped[STORED_KEY], "left")
        own = F.array_min(F.filter("_locs", lambda loc: loc[PARTITION_NUMBER] == batch[PARTITION_NUMBER]))
        loc = F.coalesce(own, F.array_min("_locs"))
        number, stored_order = loc[FILE_NUMBER], [loc[STORED_ORDER].alias(STORED_ORDER)] if order else []
    else:
        located = (
            stored.repartition(parts, STORED_KEY, PARTITION_NUMBER)
            .groupBy(STORED_KEY, PARTITION_NUMBER)
            .agg(F.min(FILE_NUMBER).alias(FILE_NUMBER))
        )
        batch = batch.repartition(parts, KEY, PARTITION_NUMBER)
        on = (batch[KEY] == located[STORED_KEY]) & (batch[PARTITION_NUMBER] == located[PARTITION_NUMBER])
        joined = batch.join(located.hint("merge"), on, "left")
        number, stored_order = located[FILE_NUMBER], []
    values = tuple(zip(*groups))
    # Guarded: Spark 4.1 gave element_at(literal array, <null from the outer join> + 1) a value.
    location = [
        F.when(number.isNotNull(), F.element_at(F.expr(sql_array(v)), number + 1)).cast("string").alias(c)
        for v, c in zip(values, LOCATION)
    ]
    return joined.select(*[batch[c] for c in prepared.columns], *location, *stored_order)


# -- executor functions (module level, so Spark pickles references to them) --------------------
def _pair_with_files(
    files: list[tuple[int, str, str | None, str | None]], is_global: bool, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """(key, file number) for each key and each file of its partition (any, when global) whose
    footer key range holds it (Hudi's range pruning; a file without a range takes every key)."""
    for batch in batches:
        keys, partitions = batch.column(0), batch.column(1)
        out_keys, out_files = [], []
        for number, partition, lo, hi in files:
            mask = None if is_global else pc.equal(partitions, partition)
            if lo is not None and hi is not None:
                in_range = pc.and_(pc.greater_equal(keys, lo), pc.less_equal(keys, hi))
                mask = in_range if mask is None else pc.and_(mask, in_range)
            hit = keys if mask is None else keys.filter(mask)
            if len(hit):
                out_keys.append(hit)
                out_files.append(pa.array(np.full(len(hit), number, dtype=np.int32)))
        if out_keys:
            yield pa.RecordBatch.from_arrays(
                [pa.concat_arrays(out_keys), pa.concat_arrays(out_files)], names=[STORED_KEY, FILE_NUMBER]
            )


def _check_files(
    files: list[BaseFile | None],
    storage: Storage,
    order: tuple[str, ...],
    logged: dict[int, FileSlice],
    merge: Merge | None,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """For each file of this task: its candidate keys through its bloom filter, then the exact
    keys it holds (with the stored ordering value when global routing needs it), those of a
    slice with log files as its merged records hold them. A log-only group (None, the record
    index's) has no file to check: its keys are taken as found, without an ordering value (the
    incoming record wins, as in process). Rows of `schema`."""
    pairs = task_table(batches)
    if pairs is None:
        return
    numbers = pairs.column(FILE_NUMBER).to_numpy()
    for number in np.unique(numbers):
        bf = files[int(number)]
        candidates = pc.unique(pairs.column(STORED_KEY).filter(pa.array(numbers == number)).combine_chunks())
        found = pa.table({KEY: candidates}) if bf is None else _found_in(storage, bf, candidates, order)
        if bf is not None and int(number) in logged and found.num_rows:
            assert merge is not None, "slices with log files come with how they merge"
            found = live_in_slice(storage, logged[int(number)], merge, found, KEY, _present(order, found.column_names))
        n = found.num_rows
        if not n:
            continue
        out = {
            STORED_KEY: pc.cast(found.column(KEY), pa.string()),
            FILE_NUMBER: pa.array(np.full(n, number, dtype=np.int32)),
        }
        if order:
            out[STORED_ORDER] = _stored_order(found, order)
        yield from pa.table(out).cast(schema).to_batches()  # (a file without the ordering fields: nulls)


def _found_in(storage: Storage, bf: BaseFile, candidates: pa.Array, order: tuple[str, ...]) -> pa.Table:
    """The rows (key[, ordering fields]) of `candidates` base file `bf` holds: its bloom filter
    first, then its key column."""
    footer = read_footer(storage, bf)
    if footer.bloom is not None:
        candidates = candidates.filter(pa.array(np.asarray(footer.bloom.might_contain(candidates), dtype=bool)))
    if not len(candidates):
        return pa.table({KEY: pa.array([], pa.string())})
    parquet = storage.parquet_file(bf.path)
    stored = parquet.read(columns=[KEY, *_present(order, parquet.schema_arrow.names)])
    return stored.filter(pc.is_in(stored.column(KEY), value_set=candidates))


@reraised_named
def _read_slices(
    logged: dict[int, FileSlice],
    files: list[BaseFile],
    storage: Storage,
    merge: Merge,
    order: tuple[str, ...],
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The stored (key, file number[, ordering value]) rows of this task's slices with log files
    (`_simple_located`): each base file's keys, as the merged slice holds them."""
    numbers = task_table(batches)
    for number in [] if numbers is None else numbers.column(0).to_pylist():
        bf = files[number]
        parquet = storage.parquet_file(bf.path)
        columns = [KEY, *_present(order, parquet.schema_arrow.names)]
        stored = live_in_slice(
            storage, logged[number], merge, parquet.read(columns=columns), KEY, _present(order, columns)
        )
        n = stored.num_rows
        out = {
            STORED_KEY: pc.cast(stored.column(KEY), pa.string()),
            FILE_NUMBER: pa.array(np.full(n, number, np.int32)),
        }
        if order:
            out[STORED_ORDER] = _stored_order(stored, order)
        yield from pa.table(out).cast(schema).to_batches()


@reraised_named
def _bucket_task(
    index: BucketIndex, stored: dict[str, dict[int, tuple[str, str]]], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The bucket index's tag of this task's records (`tag_buckets`), their key's bucket beside."""
    for batch in batches:
        ids = index.buckets(batch.column(KEY))
        located = locate(stored, batch.column(PARTITION), ids, index.num_buckets)
        out = pa.Table.from_batches([batch])
        for name in LOCATION:
            out = out.append_column(name, located.column(name))
        out = out.append_column(KEY_BUCKET, pa.array(ids, pa.int32()))
        keep = pc.invert(pc.and_(out.column(DELETE_FLAG), pc.is_null(out.column(LOC_FILE_ID))))
        yield from out.filter(keep).to_batches()


@reraised_named
def _dead_groups(
    logged: dict[tuple[str, str], FileSlice], merge: Merge, storage: Storage, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The file groups of this task's copies (key, loc_partition, loc_file_id) whose key the
    group's logs deleted (`rewritten_on_spark`)."""
    copies = task_table(batches)
    if copies is None:
        return
    groups = sorted(dead_groups(copies, live_copies(storage, merge, copies, logged)))
    yield pa.RecordBatch.from_pydict(
        {LOC_PARTITION: [p for p, _ in groups], LOC_FILE_ID: [f for _, f in groups]},
        schema=pa.schema([(LOC_PARTITION, pa.string()), (LOC_FILE_ID, pa.string())]),
    )


@reraised_named
def _tag_task(
    timeline: Timeline,
    index: Index,
    operation: Operation,
    cfg: Config,
    table_config: TableConfig,
    distinct: Distinct,
    prepare: Callable[[pa.Table], pa.Table] | None,
    schema: pa.Schema,
    storage: Storage,
    folder: str,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The in-process tag of this task's records (a delete of a key not stored is dropped),
    staged; the staged file's path and the counts per file group come back (`tag_in_task`)."""
    records = task_table(batches)
    if records is None:
        return
    if prepare is not None:
        records = prepare(records)
    batch = PreparedBatch(records, pa.schema([]), records.num_rows, distinct)
    view = FileSystemView(timeline, partitions=pc.unique(batch.partitions).to_pylist())
    merge = slice_merge(table_config, view)
    records, locations = tag_records(batch, index, view, operation, cfg, table_config.ordering_fields, merge)
    if not records.num_rows:
        return
    rewrites: frozenset[tuple[str, str]] = frozenset()
    key_buckets = pa.nulls(records.num_rows, pa.int32())
    if isinstance(index, BucketIndex):
        if merge is not None:
            rewrites = rewritten_slices(records, locations, view, merge)
        ids = pa.array(index.buckets(records.column(KEY)), pa.int32())
        key_buckets = pc.if_else(pc.is_null(locations.column(LOC_FILE_ID)), ids, key_buckets)
    for name in LOCATION:
        records = records.append_column(name, locations.column(name))
    path = f"{folder}/{uuid.uuid4().hex}.arrow"  # one per attempt: a retry or a speculative copy writes its own
    with storage.open_output(path) as sink, pa.ipc.new_file(sink, schema) as staged:
        staged.write_table(records.cast(schema))
    grouped = records.select([PARTITION, LOC_FILE_ID, LOC_INSTANT]).append_column("b", key_buckets)
    counts = grouped.group_by([PARTITION, LOC_FILE_ID, "b"], use_threads=False).aggregate(
        [([], "count_all"), (LOC_INSTANT, "max")]
    )
    rewritten = [
        (p, f) in rewrites for p, f in zip(counts.column(PARTITION).to_pylist(), counts.column(LOC_FILE_ID).to_pylist())
    ]
    counts = pa.table(
        [
            pa.array([path] * counts.num_rows, pa.string()),
            counts.column(PARTITION),
            counts.column(LOC_FILE_ID),
            counts.column("count_all"),
            counts.column(f"{LOC_INSTANT}_max"),
            counts.column("b"),
            pa.array(rewritten, pa.bool_()),
        ],
        names=STAGED_COUNTS_ARROW.names,
    )
    yield from counts.cast(STAGED_COUNTS_ARROW).to_batches()


def _stored_orders_win(data: pa.Table, ordering_fields: tuple[str, ...], moved: pa.ChunkedArray) -> pa.Array:
    """Per record of `data`: is it a moved key whose stored ordering value (joined as
    STORED_ORDER) is larger, so that the stored record stays?"""
    if STORED_ORDER not in data.column_names or not ordering_fields:
        return pa.array(np.zeros(data.num_rows, dtype=bool))
    stored = data.column(STORED_ORDER)
    if len(ordering_fields) > 1:  # a struct of the fields, compared in order
        fields = pa.table(
            [pc.struct_field(stored, [i]) for i in range(len(ordering_fields))], names=list(ordering_fields)
        )
        stored = ordering_values(fields, ordering_fields)
    larger = stored_orders_after(stored, ordering_values(data, ordering_fields))
    return pa.array(np.asarray(moved.to_numpy(zero_copy_only=False), dtype=bool) & larger)


@reraised_named
def _route(
    operation: Operation, cfg: Config, ordering_fields: tuple[str, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Global routing of one task's records (`route_moves`), the stored ordering values joined."""
    for batch in batches:
        data = pa.Table.from_batches([batch])
        records = data.drop_columns([*LOCATION, *([STORED_ORDER] if STORED_ORDER in data.column_names else [])])
        locations = data.select(list(LOCATION))
        stored_wins = partial(_stored_orders_win, data, ordering_fields)
        records, locations = route_moves(records, locations, operation, cfg, ordering_fields, stored_wins)
        out = records
        for name in LOCATION:
            out = out.append_column(name, locations.column(name))
        yield from out.to_batches()
