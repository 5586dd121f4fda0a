"""Tagging on the executors, in the shape of Hudi's HoodieSimpleIndex and HoodieBloomIndex.

Each index gives the same thing: the stored (key, partition, fileId, instant) rows of the batch's
keys, found by Spark tasks. SIMPLE reads the key column of the latest base files of the touched
partitions (all partitions when global) with Spark's own parquet reader. BLOOM reads one footer
per file on the driver for its key range, pairs each key with the files whose range holds it (in
tasks), then checks each file's bloom filter and its exact keys in tasks grouped by file.
The stored rows are grouped by key and left-joined to the batch; a key stored several times takes
the copy in the record's own partition, then the smallest (partition, fileId), as in process.
A global index then routes records that change partition, in tasks (`route_moves`).
The driver holds the file listing and footers only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.engine.bucket_writer import DELETE_FLAG, KEY, PARTITION
from upsertlake.engine.global_routing import route_moves, stored_orders_after
from upsertlake.layout.file_system_view import BaseFile, FileSystemView
from upsertlake.layout.footer import read_footer
from upsertlake.spark.types import spark_schema_of
from upsertlake.storage import Storage

log = logging.getLogger(__name__)

LOCATION = ("loc_partition", "loc_file_id", "loc_instant")
STORED_ORDER = "_upsertlake_stored_order"  # the stored record's ordering value (global routing)
_KEY, _NAME = "_upsertlake_stored_key", "_upsertlake_file_name"
_FILES_PER_TASK = 8  # bloom checks: files (filters and key columns) one task opens


def tag(
    prepared: DataFrame,
    operation: str,
    cfg: Config,
    view: FileSystemView,
    index_type: str,
    precombine_field: str | None,
    global_order: pa.DataType | None,
    parts: int,
) -> DataFrame:
    """The prepared records with LOCATION columns (nulls for new keys); deletes of keys not
    stored are dropped; under a global index records that change partition are routed.
    `global_order`: the ordering field's type when global routing compares stored values;
    `parts`: the tasks of the join (the write's parallelism)."""
    spark = prepared.sparkSession
    if index_type.endswith("INMEMORY"):
        # The in-memory index lives in one process; on Spark it would have to sit on the driver.
        index_type = index_type.replace("INMEMORY", "SIMPLE")
        log.warning("hoodie.index.type %s is single-process: this Spark write tags with %s", cfg.get(opt.INDEX_TYPE), index_type)
    if operation in ("insert", "bulk_insert"):  # insert-only operations skip the lookup, as in Hudi
        return prepared.select("*", *[F.lit(None).cast("string").alias(c) for c in LOCATION])
    is_global = index_type.startswith("GLOBAL_")
    if is_global:
        partitions = view.partitions()
    else:
        touched = {r[0] for r in prepared.select(PARTITION).distinct().collect()}  # one row a partition
        partitions = [p for p in view.partitions() if p in touched]
    files = view.latest_base_files(partitions)
    order = precombine_field if is_global and global_order is not None else None
    if not files:
        stored = None
    elif index_type.removeprefix("GLOBAL_") == "BLOOM":
        stored = _bloom_located(prepared, files, view.storage, is_global, order, global_order)
    else:
        stored = _simple_located(spark, files, view.storage, order, global_order)
    tagged = _join(prepared, stored, is_global, order, global_order, parts)
    if is_global:
        routed = prepared.select("*", *[F.lit(None).cast("string").alias(c) for c in LOCATION]).schema
        tagged = tagged.mapInArrow(partial(_route, operation, cfg, precombine_field), routed)
    return tagged.where(~(F.col(DELETE_FLAG) & F.col("loc_file_id").isNull()))


def _files_frame(spark: object, files: list[BaseFile]) -> DataFrame:
    """One row per file: its name and location (grows with files, not records)."""
    return spark.createDataFrame(
        pa.table(
            {
                _NAME: [bf.name for bf in files],
                "p": [bf.partition_path for bf in files],
                "f": [bf.file_id for bf in files],
                "i": [bf.instant_time for bf in files],
            }
        )
    )


def _simple_located(
    spark: object, files: list[BaseFile], storage: Storage, order: str | None, order_type: pa.DataType | None
) -> DataFrame:
    """Stored (key, location[, ordering value]) of every latest base file, through Spark's reader."""
    fields = [pa.field(KEY, pa.string())] + ([pa.field(order, order_type)] if order else [])
    scan = spark.read.schema(spark_schema_of(pa.schema(fields))).parquet(*[storage.full_path(bf.path) for bf in files])
    columns = [F.col(KEY).alias(_KEY), F.col("_metadata.file_name").alias(_NAME)]
    if order:
        columns.append(F.col(order).alias(STORED_ORDER))
    return scan.select(*columns).join(F.broadcast(_files_frame(spark, files)), _NAME).drop(_NAME)


def _bloom_located(
    prepared: DataFrame,
    files: list[BaseFile],
    storage: Storage,
    is_global: bool,
    order: str | None,
    order_type: pa.DataType | None,
) -> DataFrame:
    """Hudi's bloom index on Spark: key ranges from the footers (driver), (key, candidate file)
    pairs in tasks, then per file its bloom filter and exact keys in tasks grouped by file."""
    spark = prepared.sparkSession
    ranges = [(bf, read_footer(storage, bf)) for bf in files]
    table = [(n, bf.partition_path, f.min_key, f.max_key) for n, (bf, f) in enumerate(ranges)]
    pairs_schema = StructType([StructField(_KEY, StringType()), StructField("_file", IntegerType())])
    pairs = prepared.select(KEY, PARTITION).mapInArrow(partial(_pair_with_files, table, is_global), pairs_schema)
    out = [pa.field(_KEY, pa.string()), pa.field("p", pa.string()), pa.field("f", pa.string()), pa.field("i", pa.string())]
    if order:
        out.append(pa.field(STORED_ORDER, order_type))
    tasks = max(1, -(-len(files) // _FILES_PER_TASK))
    return pairs.repartition(tasks, "_file").mapInArrow(
        partial(_check_files, [bf for bf, _ in ranges], storage.base, order), spark_schema_of(pa.schema(out))
    )


def _join(
    prepared: DataFrame,
    stored: DataFrame | None,
    is_global: bool,
    order: str | None,
    order_type: pa.DataType | None,
    parts: int,
) -> DataFrame:
    """Left-join the batch to the stored rows of its keys and pick one location per record: under
    a global index the copy in the record's own partition, else the smallest (partition, fileId)."""
    extra = [STORED_ORDER] if order else []
    if stored is None:
        nulls = [F.lit(None).cast("string").alias(c) for c in LOCATION]
        if order:
            order_spark = spark_schema_of(pa.schema([pa.field(STORED_ORDER, order_type)]))[0].dataType
            nulls.append(F.lit(None).cast(order_spark).alias(STORED_ORDER))
        return prepared.select("*", *nulls)
    if not is_global:
        return _join_in_partition(prepared, stored, parts)
    fields = ["p", "f", "i", *extra]
    # Both sides hash-partitioned by key into `parts`: the group-by and the join add no shuffle.
    grouped = stored.repartition(parts, _KEY).groupBy(_KEY).agg(F.collect_list(F.struct(*fields)).alias("_locs"))
    batch = prepared.repartition(parts, KEY)
    joined = batch.join(grouped.hint("merge"), batch[KEY] == grouped[_KEY], "left")
    own = F.array_min(F.filter("_locs", lambda loc: loc["p"] == F.col(PARTITION)))
    joined = joined.withColumn("_loc", F.coalesce(own, F.array_min("_locs")))
    located = [F.col(f"_loc.{f}").alias(c) for f, c in zip(("p", "f", "i"), LOCATION)]
    stored_order = [F.col(f"_loc.{STORED_ORDER}").alias(STORED_ORDER) for _ in extra]
    return joined.select(*[batch[c] for c in prepared.columns], *located, *stored_order)


def _join_in_partition(prepared: DataFrame, stored: DataFrame, parts: int) -> DataFrame:
    """A key's location in the record's own partition: an equi-join on (key, partition); a key
    stored twice in one partition takes the smallest fileId, as in process. A sort-merge join:
    both sides grow with the records, so neither may be broadcast (that passes through the
    driver) nor held as one task's hash table (10M stored keys in two tasks ran out of memory);
    sorting spills to disk instead."""
    located = (
        stored.repartition(parts, _KEY, "p")
        .groupBy(_KEY, "p")
        .agg(F.min(F.struct("f", "i")).alias("_loc"))
    )
    batch = prepared.repartition(parts, KEY, PARTITION)
    on = (batch[KEY] == located[_KEY]) & (batch[PARTITION] == located["p"])
    joined = batch.join(located.hint("merge"), on, "left")
    return joined.select(
        *[batch[c] for c in prepared.columns],
        located["p"].alias(LOCATION[0]),
        F.col("_loc.f").alias(LOCATION[1]),
        F.col("_loc.i").alias(LOCATION[2]),
    )


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
                [pa.concat_arrays(out_keys), pa.concat_arrays(out_files)], names=[_KEY, "_file"]
            )


def _check_files(
    files: list[BaseFile], base: str, order: str | None, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """For each file of this task: its candidate keys through its bloom filter, then the exact
    keys it holds (with the stored ordering value when global routing needs it)."""
    listed = [b for b in batches if b.num_rows]
    if not listed:
        return
    pairs = pa.Table.from_batches(listed)
    storage = Storage(base)
    numbers = pairs.column("_file").to_numpy()
    for number in np.unique(numbers):
        bf = files[int(number)]
        candidates = pc.unique(pairs.column(_KEY).filter(pa.array(numbers == number)).combine_chunks())
        footer = read_footer(storage, bf)
        if footer.bloom is not None:
            candidates = candidates.filter(pa.array(np.asarray(footer.bloom.might_contain(candidates), dtype=bool)))
        if not len(candidates):
            continue
        parquet = pq.ParquetFile(storage.full_path(bf.path))
        columns = [KEY] + ([order] if order and order in parquet.schema_arrow.names else [])
        stored = parquet.read(columns=columns)
        found = stored.filter(pc.is_in(stored.column(KEY), value_set=candidates))
        n = found.num_rows
        if not n:
            continue
        out = {
            _KEY: pc.cast(found.column(KEY), pa.string()),
            "p": pa.array([bf.partition_path] * n, pa.string()),
            "f": pa.array([bf.file_id] * n, pa.string()),
            "i": pa.array([bf.instant_time] * n, pa.string()),
        }
        if order:
            out[STORED_ORDER] = found.column(order) if order in found.column_names else pa.nulls(n)
        yield from pa.table(out).to_batches()


def _route(
    operation: str, cfg: Config, precombine_field: str | None, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Global routing of one task's records (`route_moves`), the stored ordering values joined."""
    for batch in batches:
        data = pa.Table.from_batches([batch])
        records = data.drop_columns([*LOCATION, *([STORED_ORDER] if STORED_ORDER in data.column_names else [])])
        locations = data.select(list(LOCATION))

        def stored_wins(moved: pa.ChunkedArray) -> pa.Array:
            if STORED_ORDER not in data.column_names or precombine_field is None:
                return pa.array(np.zeros(data.num_rows, dtype=bool))
            larger = stored_orders_after(data.column(STORED_ORDER), data.column(precombine_field))
            return pa.array(np.asarray(moved.to_numpy(zero_copy_only=False), dtype=bool) & larger)

        records, locations = route_moves(records, locations, operation, cfg, precombine_field, stored_wins)
        out = records
        for name in LOCATION:
            out = out.append_column(name, locations.column(name))
        yield from out.to_batches()
