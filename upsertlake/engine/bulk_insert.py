"""Bulk insert: no index lookup and no small-file packing; records fill new files in sort order."""

from __future__ import annotations

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


def bulk_insert_buckets(records: pa.Table, avg: int, pconf: PartitionerConfig) -> tuple[list[Bucket], np.ndarray]:
    """Bulk insert: no small-file packing; each partition's records fill new files in order."""
    per_file = max(1, pconf.max_file_size // max(1, avg))
    parts = records.column(PARTITION)
    encoded = pc.dictionary_encode(parts).combine_chunks() if isinstance(parts, pa.ChunkedArray) else pc.dictionary_encode(parts)
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False))
    assignment = np.empty(len(codes), dtype=np.int64)
    buckets: list[Bucket] = []
    for code, partition in enumerate(encoded.dictionary.to_pylist()):
        rows = np.flatnonzero(codes == code)
        chunks = (len(rows) + per_file - 1) // per_file
        for c in range(chunks):
            assignment[rows[c * per_file : (c + 1) * per_file]] = len(buckets)
            buckets.append(Bucket(len(buckets), BucketType.INSERT, partition, new_file_id()))
    return buckets, assignment
