"""The keys of the metadata table's records, byte for byte as Hudi makes them, and the file group a
key goes to.

- `files`: the partition path (`.` for a non-partitioned table), and `__all_partitions__` for the
  list of partitions.
- `column_stats`: base64(XXH64(column)) + base64(XXH64(partition)) + base64(MD5(file name)), so a
  column's records sort together (ColumnIndexID, PartitionIndexID, FileIndexID; the XXH64 seed is
  Hudi's int 0xdabadaba widened to a long, as Java passes it).
- `partition_stats`: base64(XXH64(column)) + base64(XXH64(partition)).
- `record_index`: the record key itself.

A key's file group is Java's `String.hashCode` of the key modulo the partition's file group count
(HoodieTableMetadataUtil.mapRecordKeyToFileGroupIndex), computed here over UTF-16 code units.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa
import xxhash

from upsertlake.util.java_hash import java_hash_codes

ALL_PARTITIONS_KEY = "__all_partitions__"
NON_PARTITIONED = "."  # the identifier of a non-partitioned table's one partition ("")
_SEED = 0xFFFFFFFFDABADABA  # Java's int seed 0xdabadaba, sign-extended to the long XXH64 takes


def partition_identifier(partition: str) -> str:
    """The name the metadata table gives a data partition (getPartitionIdentifier)."""
    return NON_PARTITIONED if partition == "" else partition


def data_partition(identifier: str) -> str:
    """The data partition a metadata identifier names (the inverse of `partition_identifier`)."""
    return "" if identifier == NON_PARTITIONED else identifier


@lru_cache(maxsize=4096)
def _xxh64(text: str) -> str:
    digest = xxhash.xxh64_intdigest(text.encode("utf-8"), seed=_SEED)
    return base64.b64encode(struct.pack(">Q", digest)).decode("ascii")


def _md5(text: str) -> str:
    return base64.b64encode(hashlib.md5(text.encode("utf-8")).digest()).decode("ascii")


def column_id(column: str) -> str:
    return _xxh64(column)


def partition_id(partition: str) -> str:
    return _xxh64(partition_identifier(partition))


def column_stats_key(column: str, partition: str, file_name: str) -> str:
    """The key of one file's statistics of one column (getColumnStatsIndexKey)."""
    return column_id(column) + partition_id(partition) + _md5(file_name)


def partition_stats_key(column: str, partition: str) -> str:
    """The key of one partition's statistics of one column (getPartitionStatsIndexKey)."""
    return column_id(column) + partition_id(partition)


def file_group_index(keys: pa.Array | pa.ChunkedArray | Sequence[str], groups: int) -> np.ndarray:
    """The file group (0 .. groups-1) of each key: |(|hashCode(key)|) % groups|, Java's arithmetic
    (an int hash; abs of Integer.MIN_VALUE stays negative, and Java's % keeps the dividend's sign,
    which gives what Python's abs(h) % groups gives)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    array = (keys if isinstance(keys, pa.Array) else pa.array(keys, pa.string())).cast(pa.string())
    n = len(array)
    if groups == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    hashes = java_hash_codes(array).view(np.int32).astype(np.int64)  # as Java's signed int
    return np.abs(hashes) % groups
