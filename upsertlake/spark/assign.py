"""Hudi's UpsertPartitioner.getPartition as a Spark SQL expression, so that assigning buckets
costs no pass of the records through Python (`UpsertPartitioner.assign` is the in-process form;
tests check that both give every record the same bucket).

The expression holds the partitioner's small state as literals: fileId -> update bucket, and per
partition its number of inserts and its (cumulative weight, bucket) insert targets. It grows with
the file groups and buckets, never with the records.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from upsertlake.partitioner import UpsertPartitioner


def md5_key_hash(key: Column) -> Column:
    """Hudi's NumericUtils.getMessageDigestHash("MD5", key): the first 8 bytes of the key's MD5,
    little-endian, as a signed long (the same value as partitioner.md5_key_hash)."""
    digest = F.md5(key)  # 32 hex digits, byte 0 first
    little_endian = F.concat(*[F.substring(digest, 15 - 2 * i, 2) for i in range(8)])
    return F.conv(little_endian, 16, -10).cast("long")


def bucket_column(partitioner: UpsertPartitioner, partition: Column, key: Column, file_id: Column) -> Column:
    """The bucket number of each record: its file group's UPDATE bucket when tagged; for an insert,
    `r = floorMod(md5(key), numInserts) / numInserts` of its partition and the first target whose
    cumulative weight is >= r (the first target when none is), as Hudi's binary search picks it."""
    updates = partitioner.update_buckets
    update = F.element_at(_literal_map({f: F.lit(b) for f, b in updates.items()}), file_id) if updates else F.lit(None)
    targets, totals = {}, {}
    for p, workload in partitioner.profile.partitions.items():
        if workload.num_inserts > 0 and (buckets := partitioner.insert_buckets(p)):
            totals[p] = F.lit(max(1, workload.num_inserts)).cast("long")
            targets[p] = F.array(*[F.struct(F.lit(w).alias("w"), F.lit(b).alias("b")) for b, w in buckets])
    if not targets:
        return _required(update)
    total = F.element_at(_literal_map(totals), partition)
    candidates = F.element_at(_literal_map(targets), partition)
    r = F.pmod(md5_key_hash(key), total).cast("double") / total.cast("double")
    reached = F.filter(candidates, lambda t: t["w"] >= r)
    insert = F.coalesce(F.element_at(reached, 1)["b"], F.element_at(candidates, 1)["b"])
    return _required(F.when(file_id.isNotNull(), update).otherwise(insert))


def _required(bucket: Column) -> Column:
    """Fail the task, as the in-process assign raises, when a record has no bucket."""
    return F.coalesce(bucket, F.raise_error(F.lit("a record has no bucket: its file group or partition was not profiled"))).cast("int")


def _literal_map(entries: dict[str, Column]) -> Column:
    return F.create_map(*[x for k, v in entries.items() for x in (F.lit(k), v)])
