"""upsertlake on PySpark: the `upsertlake` data source, distributed writes, and reads through
Spark's own parquet reader.

Layers (pyproject.toml, docs/DESIGN.md §3): may import table and every floor below; not cli,
not simulation.

    import upsertlake.spark as uls
    uls.register(spark)
    spark.read.format("upsertlake").load(path)
    uls.upsert(df, path, table="trips", record_key="uuid", precombine_field="ts", partition_fields="city")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from upsertlake.engine.write_result import WriteResult
from upsertlake.services.cluster import ClusterResult
from upsertlake.services.compaction import CompactionResult
from upsertlake.spark.options import resolve_aliases, resolve_path, split_store_options, write_options
from upsertlake.spark.read import read
from upsertlake.spark.record_index import by_key_group_on
from upsertlake.spark.session import build_session
from upsertlake.spark.source import UpsertlakeDataSource
from upsertlake.spark.stream import write_batch
from upsertlake.spark.write import groups_on
from upsertlake.table.open import open_table
from upsertlake.timeline.operation import Operation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession



def cluster(spark: SparkSession, path: str, **options: object) -> ClusterResult:
    """Clustering with one Spark task per new file group; the plan and the commit stay on the driver."""
    options, store = split_store_options(options)
    return open_table(resolve_path(path), storage_options=store).cluster(
        resolve_aliases(options), map_groups=groups_on(spark), by_key=by_key_group_on(spark)
    )


def compact(spark: SparkSession, path: str, **options: object) -> CompactionResult:
    """Compaction of a merge-on-read table with one Spark task per file slice (each merged into its
    new base file on an executor); the plan and the commit stay on the driver (a compaction of the
    metadata table's record index it makes due runs as tasks too)."""
    options, store = split_store_options(options)
    return open_table(resolve_path(path), storage_options=store).compact(
        resolve_aliases(options), map_ops=groups_on(spark), by_key=by_key_group_on(spark)
    )


def register(spark: SparkSession) -> None:
    """Register the `upsertlake` data source with a session and let it see Spark's filters."""
    spark.dataSource.register(UpsertlakeDataSource)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def upsert(df: DataFrame, path: str, batch_id: int | None = None, **options: object) -> WriteResult | None:
    """Upsert a DataFrame: dedup and tag as Spark jobs, one task per file group, one commit.

    `batch_id` (in `foreachBatch`, Spark's id of the micro-batch) makes the write exactly once: a
    batch its stream (hoodie.datasource.write.streaming.checkpoint.identifier) already committed
    is skipped and None returned; otherwise the commit records it. So do insert, bulk_insert, delete."""
    return write_batch(df, write_options(options, path, Operation.UPSERT), batch_id)


def insert(df: DataFrame, path: str, batch_id: int | None = None, **options: object) -> WriteResult | None:
    return write_batch(df, write_options(options, path, Operation.INSERT), batch_id)


def bulk_insert(df: DataFrame, path: str, batch_id: int | None = None, **options: object) -> WriteResult | None:
    return write_batch(df, write_options(options, path, Operation.BULK_INSERT), batch_id)


def delete(df: DataFrame, path: str, batch_id: int | None = None, **options: object) -> WriteResult | None:
    """Delete the keys of a DataFrame (key and partition columns suffice)."""
    return write_batch(df, write_options(options, path, Operation.DELETE), batch_id)


__all__ = ["build_session", "bulk_insert", "cluster", "compact", "delete", "insert", "read", "register", "upsert"]
