"""The bucket index's partitioner (Hudi's SparkBucketIndexPartitioner): every record goes to its
key's bucket. A tagged record goes to the file group its bucket already has (an UPDATE bucket,
new keys included); the others, per partition and bucket, to a new file group named by the bucket
(an INSERT bucket). No small-file packing and no size split: a bucket is one file group.

Its state grows with the buckets written, never with the records: the in-process write builds it
from its records (`for_records`), a Spark write from the (partition, bucket) pairs its tasks
counted, and ships it to the tasks that assign their own records (as `UpsertPartitioner`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.layout.bucket_id import bucket_ids, new_bucket_file_id
from upsertlake.partitioner.profile import WorkloadProfile
from upsertlake.partitioner.upsert_partitioner import Bucket, BucketType, SmallFile, _combined, assign_tagged


class BucketPartitioner:
    """The write's buckets, UPDATE buckets first (in profile order), then the new buckets by
    partition and bucket number; `new_buckets`: the (partition, bucket) pairs of the untagged
    records."""

    small_files: tuple[SmallFile, ...] = ()  # a bucket takes no other file's inserts

    def __init__(
        self,
        profile: WorkloadProfile,
        new_buckets: Iterable[tuple[str, int]],
        hash_fields: list[str],
        num_buckets: int,
        new_file_id: Callable[[int], str] = new_bucket_file_id,
    ) -> None:
        self.profile = profile
        self.hash_fields = hash_fields
        self.num_buckets = num_buckets
        self.buckets: list[Bucket] = []
        self.update_buckets: dict[str, int] = {}  # fileId -> UPDATE bucket number
        self.insert_buckets: dict[str, dict[int, int]] = {}  # partition -> bucket id -> INSERT bucket number
        for partition, workload in profile.partitions.items():
            for file_id in workload.updates:
                self.update_buckets[file_id] = len(self.buckets)
                self.buckets.append(Bucket(len(self.buckets), BucketType.UPDATE, partition, file_id))
        for partition, bucket in sorted(set(new_buckets)):
            self.insert_buckets.setdefault(partition, {})[bucket] = len(self.buckets)
            self.buckets.append(Bucket(len(self.buckets), BucketType.INSERT, partition, new_file_id(bucket)))

    @classmethod
    def for_records(
        cls,
        profile: WorkloadProfile,
        partitions: pa.Array | pa.ChunkedArray,
        record_keys: pa.Array | pa.ChunkedArray,
        file_ids: pa.Array | pa.ChunkedArray,
        hash_fields: list[str],
        num_buckets: int,
    ) -> tuple[BucketPartitioner, np.ndarray]:
        """The partitioner of a batch held in process, and each record's bucket (its keys hashed once)."""
        file_ids = _combined(file_ids)
        new, ids = _untagged(file_ids, record_keys, hash_fields, num_buckets)
        pairs = []
        if ids is not None:
            news = _combined(partitions).take(pa.array(new))
            encoded = pc.dictionary_encode(news)
            if encoded.null_count:
                raise ValueError("a record has no partition path")
            codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64) * num_buckets + ids
            paths = encoded.dictionary.to_pylist()
            pairs = [(paths[c // num_buckets], int(c % num_buckets)) for c in np.unique(codes).tolist()]
        chosen = cls(profile, pairs, hash_fields, num_buckets)
        return chosen, chosen._assign(partitions, file_ids, new, ids)

    def assign(
        self,
        partitions: pa.Array | pa.ChunkedArray,
        record_keys: pa.Array | pa.ChunkedArray,
        file_ids: pa.Array | pa.ChunkedArray,
    ) -> np.ndarray:
        """Bucket number of each record: its file group's UPDATE bucket when tagged, else the
        INSERT bucket of its partition and key's bucket."""
        file_ids = _combined(file_ids)
        return self._assign(partitions, file_ids, *_untagged(file_ids, record_keys, self.hash_fields, self.num_buckets))

    def _assign(
        self, partitions: pa.Array | pa.ChunkedArray, file_ids: pa.Array, new: np.ndarray, ids: np.ndarray | None
    ) -> np.ndarray:
        """`new`: the untagged records' rows; `ids`: their keys' buckets."""
        out = np.empty(len(file_ids), np.int64)
        assign_tagged(out, file_ids, self.update_buckets)
        if ids is None:
            return out
        encoded = pc.dictionary_encode(_combined(partitions).take(pa.array(new)))
        if encoded.null_count:
            raise ValueError("a record has no partition path")
        table = np.full((len(encoded.dictionary), self.num_buckets), -1, np.int64)
        for code, partition in enumerate(encoded.dictionary.to_pylist()):
            for bucket, number in self.insert_buckets.get(partition, {}).items():
                table[code, bucket] = number
        numbers = table[encoded.indices.to_numpy(zero_copy_only=False), ids]
        if (numbers < 0).any():
            raise KeyError("a record's bucket has no INSERT bucket: its partition and bucket were not profiled")
        out[new] = numbers
        return out


def _untagged(
    file_ids: pa.Array, record_keys: pa.Array | pa.ChunkedArray, hash_fields: list[str], num_buckets: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows of the untagged records (no fileId) and their keys' buckets (None: there are none)."""
    new = np.flatnonzero(~np.asarray(file_ids.is_valid().to_numpy(zero_copy_only=False), dtype=bool))
    if not len(new):
        return new, None
    return new, bucket_ids(_combined(record_keys).take(pa.array(new)), hash_fields, num_buckets)
