"""Hudi's simple bucket index: a record's file group is its key's bucket, found by hashing.

Each partition holds at most `num_buckets` file groups, each named by its bucket
(`layout.bucket_id`). Tagging reads no file: a record whose bucket has a file group in its
partition is tagged with it (new key or not, as Hudi's HoodieSimpleBucketIndex tags), the others
are new buckets' records. A merge-on-read write therefore appends inserts to a bucket's log too:
the index finds keys in logs (Hudi's canIndexLogFiles).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import ConfigError, UnsupportedTableError
from upsertlake.index.base import LOCATION_SCHEMA, Index, LiveCopies, rows_by_partition
from upsertlake.layout.bucket_id import bucket_ids, bucket_of
from upsertlake.layout.file_system_view import FileSlice, FileSystemView
from upsertlake.schema.columns import LOC_FILE_ID
from upsertlake.timeline.operation import Operation


class BucketIndex(Index):
    def __init__(self, num_buckets: int, hash_fields: list[str]) -> None:
        super().__init__(is_global=False)
        self.num_buckets = num_buckets
        self.hash_fields = hash_fields
        self._stats: dict[str, int] = {}

    def requires_tagging(self, operation: Operation) -> bool:
        """Every write goes to its keys' buckets, inserts and bulk inserts included (as Hudi)."""
        return not operation.overwrites

    def buckets(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        return bucket_ids(keys, self.hash_fields, self.num_buckets)

    def tag(
        self, keys: pa.Array, partitions: pa.Array, view: FileSystemView, unique: bool = False,
        live: LiveCopies | None = None,
    ) -> pa.Table:
        """Each record's bucket's file group, by hash; `live` does not apply (a key cannot leave
        its bucket: a merge-on-read write rewrites the slice instead, `slice_routing`)."""
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        partitions = partitions.combine_chunks() if isinstance(partitions, pa.ChunkedArray) else partitions
        wanted = set(pc.unique(partitions).to_pylist())
        groups = bucket_groups(view.latest_file_slices([p for p in view.partitions() if p in wanted]), self.num_buckets)
        stored = stored_buckets(groups)
        located = locate(stored, partitions, self.buckets(keys), self.num_buckets)
        self._stats = {
            "files_considered": sum(map(len, stored.values())),
            "files_opened": 0,
            "keys_matched": len(located) - located.column(LOC_FILE_ID).null_count,
        }
        return located

    def stats(self) -> dict[str, int]:
        return dict(self._stats)


def bucket_groups(slices: list[FileSlice], num_buckets: int) -> dict[str, dict[int, FileSlice]]:
    """partition -> bucket -> its file group's slice. A file group named by no bucket, a bucket
    beyond `num_buckets` or two groups of one bucket mean the partition was not written by the
    bucket index with this many buckets: tagging by hash would send keys to the wrong group."""
    out: dict[str, dict[int, FileSlice]] = {}
    for sl in slices:
        bucket = bucket_of(sl.file_id)
        where = f"partition {sl.partition_path or '(none)'!r}"
        if bucket is None or bucket >= num_buckets:
            gives = "no bucket" if bucket is None else f"bucket {bucket}"
            raise UnsupportedTableError(
                f"file group {sl.file_id} of {where} is none of the {num_buckets} buckets' (its name gives {gives}): "
                "the table was written without hoodie.index.type=BUCKET, or with more buckets "
                "(hoodie.bucket.index.num.buckets), whose number cannot change; write it as it was written")
        other = out.setdefault(sl.partition_path, {}).setdefault(bucket, sl)
        if other is not sl:
            raise UnsupportedTableError(
                f"file groups {other.file_id} and {sl.file_id} of {where} are both bucket {bucket}: "
                "the bucket index cannot tell which holds a key")
    return out


def stored_buckets(groups: Mapping[str, Mapping[int, FileSlice]]) -> dict[str, dict[int, tuple[str, str]]]:
    """partition -> bucket -> (fileId, instant) of its file group (`bucket_groups`): what tagging
    needs, small and picklable (Spark ships it to the tasks that tag)."""
    return {p: {b: (sl.file_id, _slice_instant(sl)) for b, sl in by_bucket.items()} for p, by_bucket in groups.items()}


def locate(
    stored: Mapping[str, Mapping[int, tuple[str, str]]], partitions: pa.Array, buckets: np.ndarray, num_buckets: int
) -> pa.Table:
    """The location (LOCATION_SCHEMA) of each record, whose partition and key's bucket are given:
    its bucket's file group in `stored` (`stored_buckets`), or nulls (a new bucket)."""
    rows = rows_by_partition(partitions)
    located: list[tuple[str, str, str]] = []  # (partition, fileId, instant) of each bucket's group
    at_group = np.full(len(partitions), -1, np.int64)
    for partition, at in rows.items():
        table = np.full(num_buckets, -1, np.int64)
        for bucket, (file_id, instant) in stored.get(partition, {}).items():
            table[bucket] = len(located)
            located.append((partition, file_id, instant))
        at_group[at] = table[buckets[at]]
    found = at_group >= 0
    take = pa.array(np.where(found, at_group, 0), mask=~found)
    columns: list[tuple[Any, ...]] = list(zip(*located)) if located else [(), (), ()]
    return pa.table(
        {f.name: pa.array(c, f.type).take(take) for f, c in zip(LOCATION_SCHEMA, columns)}, schema=LOCATION_SCHEMA
    )


def _slice_instant(sl: FileSlice) -> str:
    """The instant of a slice's base file (a log-only group's: its first log's)."""
    return sl.base.instant_time if sl.base is not None else min(log.name.instant for log in sl.logs)


def check_bucket_index_fields(hash_fields: list[str], record_key_fields: list[str]) -> None:
    """Hudi's rule: the hash fields are record key fields (else a key's bucket could change)."""
    extra = [f for f in hash_fields if f not in record_key_fields]
    if extra:
        raise ConfigError(
            f"hoodie.bucket.index.hash.field names {', '.join(extra)}, which are not record key fields "
            f"({', '.join(record_key_fields)})")


