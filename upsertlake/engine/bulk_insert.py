"""Bulk insert: no index lookup and no small-file packing; records fill new files in sort order."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.engine.bucket_writer import KEY, PARTITION
from upsertlake.partitioner import Bucket, BucketType, PartitionerConfig, new_file_id


def bulk_insert_sort(records: pa.Table, locations: pa.Table, mode: str) -> tuple[pa.Table, pa.Table]:
    """`hoodie.bulkinsert.sort.mode`: the order records fill the new files in. NONE keeps the input
    order; PARTITION_PATH_REPARTITION groups by partition, which `bulk_insert_buckets` does anyway;
    GLOBAL_SORT, PARTITION_SORT and PARTITION_PATH_REPARTITION_AND_SORT sort by (partition path,
    record key), so each file holds a contiguous run of keys (one process is one Spark partition)."""
    if mode in ("NONE", "PARTITION_PATH_REPARTITION") or records.num_rows < 2:
        return records, locations
    order = pc.sort_indices(records, sort_keys=[(PARTITION, "ascending"), (KEY, "ascending")])
    return records.take(order), locations.take(order)


def bulk_insert_layout(
    counts: Mapping[str, int], avg: int, pconf: PartitionerConfig
) -> tuple[list[Bucket], dict[str, int], int]:
    """New file groups for `counts` records per partition: the buckets, each partition's first
    bucket number, and the records per file (the i-th record of a partition goes to bucket
    first + i // per_file)."""
    per_file = max(1, pconf.max_file_size // max(1, avg))
    buckets: list[Bucket] = []
    first: dict[str, int] = {}
    for partition, count in counts.items():
        first[partition] = len(buckets)
        for _ in range(-(-count // per_file)):
            buckets.append(Bucket(len(buckets), BucketType.INSERT, partition, new_file_id()))
    return buckets, first, per_file


def bulk_insert_buckets(records: pa.Table, avg: int, pconf: PartitionerConfig) -> tuple[list[Bucket], np.ndarray]:
    """Bulk insert: no small-file packing; each partition's records fill new files in order."""
    parts = records.column(PARTITION)
    encoded = pc.dictionary_encode(parts).combine_chunks() if isinstance(parts, pa.ChunkedArray) else pc.dictionary_encode(parts)
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False))
    names = encoded.dictionary.to_pylist()
    rows_of = {p: np.flatnonzero(codes == code) for code, p in enumerate(names)}
    buckets, first, per_file = bulk_insert_layout({p: len(r) for p, r in rows_of.items()}, avg, pconf)
    assignment = np.empty(len(codes), dtype=np.int64)
    for partition, rows in rows_of.items():
        assignment[rows] = first[partition] + np.arange(len(rows)) // per_file
    return buckets, assignment
