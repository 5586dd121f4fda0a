"""The bucket index's partitioner (Hudi's SparkBucketIndexPartitioner): every record goes to its
key's bucket. A tagged record goes to the file group its bucket already has (an UPDATE bucket,
new keys included); the others, per partition and bucket, to a new file group named by the bucket
(an INSERT bucket). No small-file packing and no size split: a bucket is one file group.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.layout.bucket_id import bucket_ids, new_bucket_file_id
from upsertlake.partitioner.profile import WorkloadProfile
from upsertlake.partitioner.upsert_partitioner import Bucket, BucketType, _combined, assign_tagged


def bucket_partition(
    profile: WorkloadProfile,
    partitions: pa.Array | pa.ChunkedArray,
    record_keys: pa.Array | pa.ChunkedArray,
    file_ids: pa.Array | pa.ChunkedArray,
    hash_fields: list[str],
    num_buckets: int,
    new_file_id: Callable[[int], str] = new_bucket_file_id,
) -> tuple[list[Bucket], np.ndarray]:
    """The write's buckets (UPDATE buckets first, in profile order, then the new buckets by
    partition and bucket number) and each record's bucket."""
    partitions, file_ids = _combined(partitions), _combined(file_ids)
    buckets: list[Bucket] = []
    update_numbers: dict[str, int] = {}
    for partition, workload in profile.partitions.items():
        for file_id in workload.updates:
            update_numbers[file_id] = len(buckets)
            buckets.append(Bucket(len(buckets), BucketType.UPDATE, partition, file_id))
    out = np.empty(len(partitions), np.int64)
    tagged = assign_tagged(out, file_ids, update_numbers)
    new = np.flatnonzero(~tagged)
    if len(new):
        mask = pa.array(~tagged)
        encoded = pc.dictionary_encode(partitions.filter(mask))
        if encoded.null_count:
            raise ValueError("a record has no partition path")
        paths = encoded.dictionary.to_pylist()
        # one code per (partition, bucket), ordered by partition path, then bucket
        rank = np.argsort(np.argsort(np.array(paths, object)))
        codes = rank[encoded.indices.to_numpy(zero_copy_only=False)] * num_buckets
        codes += bucket_ids(_combined(record_keys).filter(mask), hash_fields, num_buckets)
        distinct, inverse = np.unique(codes, return_inverse=True)
        by_rank = {int(r): p for r, p in zip(rank, paths)}
        first = len(buckets)
        for code in distinct.tolist():
            bucket = code % num_buckets
            buckets.append(Bucket(len(buckets), BucketType.INSERT, by_rank[code // num_buckets], new_file_id(bucket)))
        out[new] = first + inverse.reshape(-1)
    return buckets, out
