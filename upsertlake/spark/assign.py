"""Hudi's UpsertPartitioner.getPartition (and the bucket index's partitioner) as a Spark SQL
expression, so that assigning buckets costs no pass of the records through Python
(`UpsertPartitioner.assign` and `BucketPartitioner.assign` are the in-process forms; tests check
that both give every record the same bucket).

The expression holds the partitioner's small state as literals: fileId -> update bucket, and per
partition its number of inserts and its (cumulative weight, bucket) insert targets. It grows with
the file groups and buckets, never with the records, and is built as SQL text (`spark.literals`).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from upsertlake.partitioner import BucketPartitioner, UpsertPartitioner
from upsertlake.spark.literals import identifier, sql_literal, sql_map

NO_BUCKET = "a record has no bucket: its file group or partition was not profiled"


def md5_key_hash(key: str) -> str:
    """Hudi's NumericUtils.getMessageDigestHash("MD5", key) of the SQL expression `key`: the first
    8 bytes of the key's MD5, little-endian, as a signed long (as partitioner.md5_key_hash)."""
    digest = f"md5({key})"  # 32 hex digits, byte 0 first
    little_endian = ", ".join(f"substring({digest}, {15 - 2 * i}, 2)" for i in range(8))
    return f"CAST(conv(concat({little_endian}), 16, -10) AS BIGINT)"


def bucket_column(partitioner: UpsertPartitioner, partition: str, key: str, file_id: str) -> Column:
    """The bucket number of each record (columns named `partition`, `key`, `file_id`): its file
    group's UPDATE bucket when tagged; for an insert, `r = floorMod(md5(key), numInserts) /
    numInserts` of its partition and the first target whose cumulative weight is >= r (the first
    target when none is), as Hudi's binary search picks it. A record without a bucket fails its
    task, as the in-process assign raises."""
    partition, key, file_id = identifier(partition), identifier(key), identifier(file_id)
    updates = partitioner.update_buckets
    update = f"element_at({sql_map({f: sql_literal(b) for f, b in updates.items()})}, {file_id})" if updates else "NULL"
    targets, totals = {}, {}
    for p, workload in partitioner.profile.partitions.items():
        if workload.num_inserts > 0 and (buckets := partitioner.insert_buckets(p)):
            totals[p] = f"{max(1, workload.num_inserts)}L"  # BIGINT
            structs = (f"named_struct('w', {sql_literal(float(w))}, 'b', {sql_literal(b)})" for b, w in buckets)
            targets[p] = f"array({', '.join(structs)})"
    bucket = update
    if targets:
        total = f"element_at({sql_map(totals)}, {partition})"
        candidates = f"element_at({sql_map(targets)}, {partition})"
        r = f"CAST(pmod({md5_key_hash(key)}, {total}) AS DOUBLE) / CAST({total} AS DOUBLE)"
        insert = f"coalesce(element_at(filter({candidates}, t -> t.w >= {r}), 1).b, element_at({candidates}, 1).b)"
        bucket = f"CASE WHEN {file_id} IS NOT NULL THEN {update} ELSE {insert} END"
    return F.expr(f"CAST(coalesce({bucket}, raise_error({sql_literal(NO_BUCKET)})) AS INT)")


def bucket_index_column(partitioner: BucketPartitioner, partition: str, key_bucket: str, file_id: str) -> Column:
    """The bucket number of each record under the bucket index (columns named `partition`,
    `key_bucket`: the bucket its key hashes to, `file_id`): its file group's UPDATE bucket when
    tagged, else the INSERT bucket of its partition and key bucket. A record without a bucket
    fails its task, as the in-process assign raises."""
    partition, key_bucket, file_id = identifier(partition), identifier(key_bucket), identifier(file_id)
    updates, inserts = partitioner.update_buckets, partitioner.insert_buckets
    update = f"element_at({sql_map({f: sql_literal(b) for f, b in updates.items()})}, {file_id})" if updates else "NULL"
    by_partition = {p: sql_map({k: sql_literal(n) for k, n in numbers.items()}) for p, numbers in inserts.items()}
    insert = f"element_at(element_at({sql_map(by_partition)}, {partition}), {key_bucket})" if inserts else "NULL"
    bucket = f"CASE WHEN {file_id} IS NOT NULL THEN {update} ELSE {insert} END"
    return F.expr(f"CAST(coalesce({bucket}, raise_error({sql_literal(NO_BUCKET)})) AS INT)")
