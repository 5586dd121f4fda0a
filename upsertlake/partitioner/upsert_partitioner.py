"""Hudi's UpsertPartitioner: which bucket (file group to write) each record of a write goes to.

Updates go to the file group they were tagged with, one UPDATE bucket per file group. Inserts of
a partition first top up its small files (each an UPDATE bucket, so the file is rewritten with the
inserts appended), the rest go to new INSERT buckets of about `max_file_size / avg_record_size`
records. Each insert picks its bucket from the MD5 of its key against the buckets' cumulative
weights, so a retried write routes every key exactly as the first attempt did.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.partitioner.profile import WorkloadProfile
from upsertlake.util.arrays import group_rows


class BucketType(Enum):
    UPDATE = "UPDATE"
    INSERT = "INSERT"


@dataclass(frozen=True)
class SmallFile:
    """The latest base file of a file group, smaller than the small-file limit."""

    file_id: str
    size_bytes: int


@dataclass(frozen=True)
class Bucket:
    """One unit of writing: a new file group (INSERT) or a new version of an existing one (UPDATE)."""

    number: int
    type: BucketType
    partition_path: str
    file_id: str


@dataclass(frozen=True)
class PartitionerConfig:
    """Hudi's sizing options: parquet max file size, small file limit, insert split size, auto split."""

    max_file_size: int = 125829120
    small_file_limit: int = 104857600
    insert_split_size: int = 500000
    auto_split: bool = True


def new_file_id() -> str:
    """A new file group id: Hudi's UUID prefix plus the create handle's first file counter, "-0"."""
    return f"{uuid.uuid4()}-0"


class UpsertPartitioner:
    """Buckets of one write, numbered as Hudi numbers them: all update buckets first (profile order),
    then per partition the small files newly taking inserts and the new insert buckets.

    `small_files` lists, per partition, the latest base files in the order they should be topped
    up (Hudi takes the file-system view's order); files not below `small_file_limit`, all files when
    the limit is ≤ 0, and file groups in `pending_clustering` (partition -> fileIds) are ignored, as
    Hudi's getSmallFiles and filterSmallFilesInClustering do.
    """

    def __init__(
        self,
        profile: WorkloadProfile,
        small_files: Mapping[str, Sequence[SmallFile]],
        avg_record_size: int,
        partitioner_config: PartitionerConfig,
        new_file_id: Callable[[], str] = new_file_id,
        *,
        pending_clustering: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        self.profile = profile
        self.partitioner_config = partitioner_config
        # Hudi divides by the estimate; an estimate of 0 would make it throw.
        self.avg_record_size = max(1, avg_record_size)
        self.buckets: list[Bucket] = []
        self.small_files: list[SmallFile] = []  # the candidates considered, as Hudi's `smallFiles`
        self._update_buckets: dict[str, int] = {}
        self._insert_buckets: dict[str, list[tuple[int, float]]] = {}
        for partition, workload in profile.partitions.items():
            for file_id in workload.updates:
                self._add_update_bucket(partition, file_id)
        for partition, workload in profile.partitions.items():
            if workload.num_inserts > 0:
                candidates = self._small_file_candidates(
                    small_files.get(partition, ()), (pending_clustering or {}).get(partition, ())
                )
                self.small_files.extend(candidates)
                self._assign_inserts(partition, workload.num_inserts, candidates, new_file_id)

    def update_bucket(self, file_id: str) -> int:
        """The UPDATE bucket of a file group (keyed by fileId alone, as Hudi keys it)."""
        return self._update_buckets[file_id]

    @property
    def update_buckets(self) -> dict[str, int]:
        """fileId -> UPDATE bucket number, for every file group the write rewrites."""
        return dict(self._update_buckets)

    def insert_buckets(self, partition_path: str) -> list[tuple[int, float]]:
        """(bucket number, cumulative weight) of the partition's insert targets, small files first."""
        return list(self._insert_buckets.get(partition_path, ()))

    def assign(
        self,
        partition_paths: pa.Array | pa.ChunkedArray,
        record_keys: pa.Array | pa.ChunkedArray,
        file_ids: pa.Array | pa.ChunkedArray,
    ) -> np.ndarray:
        """Bucket number of each record (Hudi's getPartition, vectorised).

        A tagged record (fileId not null) goes to its file's UPDATE bucket. An insert takes
        `r = floorMod(md5(key), numInserts) / numInserts` of its partition and the first bucket
        whose cumulative weight is ≥ r (Collections.binarySearch), or the first bucket if none is.
        """
        partitions = _combined(partition_paths)
        file_ids = _combined(file_ids)
        out = np.empty(len(partitions), dtype=np.int64)
        tagged = assign_tagged(out, file_ids, self._update_buckets)
        inserts = np.flatnonzero(~tagged)
        if len(inserts) == 0:
            return out
        mask = pa.array(~tagged)
        keys = _combined(record_keys).filter(mask)
        if keys.null_count:
            raise ValueError("a record key is null")
        encoded = pc.dictionary_encode(partitions.filter(mask))
        if encoded.null_count:
            raise ValueError("a record has no partition path")
        order, bounds = group_rows(encoded.indices.to_numpy(zero_copy_only=False), len(encoded.dictionary))
        spread = []  # (rows, targets, inserts) of the partitions with more than one target
        for code, partition in enumerate(encoded.dictionary.to_pylist()):
            rows = order[bounds[code] : bounds[code + 1]]
            targets = self._insert_buckets.get(partition)
            if not targets:
                raise KeyError(f"partition {partition!r} has inserts but no insert buckets")
            if len(targets) == 1:  # every r picks the only target: no key needs hashing
                out[inserts[rows]] = targets[0][0]
            else:
                spread.append((rows, targets, max(1, self.profile.partitions[partition].num_inserts)))
        if not spread:
            return out
        hashed = np.concatenate([rows for rows, _, _ in spread])
        hashes = np.empty(len(inserts), dtype=np.int64)
        hashes[hashed] = md5_key_hash(keys.take(pa.array(hashed)))
        for rows, targets, total in spread:
            r = np.mod(hashes[rows], total).astype(np.float64) / float(total)
            cumulative = np.array([w for _, w in targets], dtype=np.float64)
            index = np.searchsorted(cumulative, r, side="left")
            index[index == len(targets)] = 0
            out[inserts[rows]] = np.array([b for b, _ in targets], dtype=np.int64)[index]
        return out

    def _add_update_bucket(self, partition: str, file_id: str) -> int:
        number = len(self.buckets)
        self._update_buckets[file_id] = number
        self.buckets.append(Bucket(number, BucketType.UPDATE, partition, file_id))
        return number

    def _small_file_candidates(self, files: Sequence[SmallFile], clustering: Collection[str]) -> list[SmallFile]:
        limit = self.partitioner_config.small_file_limit
        if limit <= 0:
            return []
        excluded = set(clustering)
        return [f for f in files if f.size_bytes < limit and f.file_id not in excluded]

    def _assign_inserts(
        self, partition: str, num_inserts: int, small_files: list[SmallFile], new_file_id: Callable[[], str]
    ) -> None:
        pconf, avg = self.partitioner_config, self.avg_record_size
        numbers: list[int] = []
        counts: list[int] = []
        remaining = num_inserts
        for small in small_files:
            to_append = min((pconf.max_file_size - small.size_bytes) // avg, remaining)
            if to_append > 0:
                bucket = self._update_buckets.get(small.file_id)
                if bucket is None:
                    bucket = self._add_update_bucket(partition, small.file_id)
                numbers.append(bucket)
                counts.append(to_append)
                remaining -= to_append
                if remaining <= 0:
                    break
        if remaining > 0:
            per_bucket = pconf.max_file_size // avg if pconf.auto_split else pconf.insert_split_size
            # Guard: a record estimate above the max file size gives Hudi 0 records per bucket.
            per_bucket = max(1, per_bucket)
            n_buckets = -(-remaining // per_bucket)  # Hudi: (int) Math.ceil(1.0 * remaining / perBucket)
            for b in range(n_buckets):
                numbers.append(len(self.buckets))
                counts.append(per_bucket if b < n_buckets - 1 else remaining - (n_buckets - 1) * per_bucket)
                self.buckets.append(Bucket(len(self.buckets), BucketType.INSERT, partition, new_file_id()))
        cumulative = 0.0
        targets = []
        for number, count in zip(numbers, counts):
            cumulative += float(count) / num_inserts
            targets.append((number, cumulative))
        self._insert_buckets[partition] = targets


def assign_tagged(out: np.ndarray, file_ids: pa.Array, update_buckets: Mapping[str, int]) -> np.ndarray:
    """Set each tagged record's bucket in `out`: its file group's UPDATE bucket (fileId ->
    number); returns which records are tagged (their fileId is not null)."""
    tagged = np.asarray(file_ids.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if tagged.any():
        known = pa.array(list(update_buckets), pa.string())
        position = pc.index_in(file_ids.filter(pa.array(tagged)).cast(pa.string()), value_set=known)
        if position.null_count:
            raise KeyError("a record is tagged with a file group that has no update bucket")
        numbers = np.fromiter(update_buckets.values(), dtype=np.int64, count=len(known))
        out[tagged] = numbers[position.to_numpy(zero_copy_only=False)]
    return tagged


def md5_key_hash(record_keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Hudi's NumericUtils.getMessageDigestHash("MD5", key): the first 8 bytes of MD5 over the key's
    UTF-8 bytes, byte i shifted left by 8·i (little-endian), as a signed 64-bit integer.

    Hashes the key bytes straight from the Arrow buffers, without building Python strings.
    """
    keys = _combined(record_keys)
    if keys.null_count:
        raise ValueError("a record key is null")
    if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
        keys = keys.cast(pa.large_string())
    if len(keys) == 0:
        return np.empty(0, dtype=np.int64)
    offset_type = np.int64 if pa.types.is_large_string(keys.type) else np.int32
    _, offsets_buffer, data_buffer = keys.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[keys.offset : keys.offset + len(keys) + 1]
    start, stop = int(offsets[0]), int(offsets[-1])
    data = data_buffer.slice(start, stop - start).to_pybytes() if data_buffer is not None else b""
    bounds = (offsets - start).tolist()
    md5 = hashlib.md5
    digests = b"".join([md5(data[a:b]).digest() for a, b in pairwise(bounds)])
    # Each digest is 16 bytes; its first 8, read little-endian, are Hudi's hash.
    return np.frombuffer(digests, dtype="<i8")[::2].astype(np.int64)


def _combined(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
