"""Hudi's simple bucket index layout (BucketIdentifier): which bucket a record key hashes to, and
the file ids that name a bucket's file group.

A key's bucket is `(hashKeys.hashCode() & Integer.MAX_VALUE) % numBuckets`, where `hashKeys` is a
Java `List<String>` (the whole record key, or for a key of `field:value` pairs the values of the
hash fields) and its hashCode folds the strings' own `String.hashCode` (31-polynomials over UTF-16
code units, wrapping at 32 bits). A bucket's file id is a UUID whose first 8 characters are the
bucket number, zero-padded, plus the create handle's "-0".
"""

from __future__ import annotations

import re
import uuid
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import SchemaError
from upsertlake.util.java_hash import java_hash_codes

_BUCKET_PREFIX = re.compile(r"^(\d{8})")
_MAX_INT = np.uint32(0x7FFFFFFF)


def hash_keys(record_keys: pa.Array | pa.ChunkedArray, hash_fields: list[str]) -> list[pa.Array]:
    """Hudi's getHashKeys: the whole record key where it holds no ':' (a simple key), else the
    values of `hash_fields` in its `field:value,field:value` pairs (null where a field is absent;
    a value is what Java's `split(":")[1]` gives: up to a next ':')."""
    keys = record_keys.combine_chunks() if isinstance(record_keys, pa.ChunkedArray) else record_keys
    keys = keys.cast(pa.string())
    data = keys.buffers()[2]
    if data is None or not (np.frombuffer(data, np.uint8) == ord(":")).any():  # no key holds a ':' (one scan)
        return [keys]
    paired = np.asarray(pc.match_substring(keys, ":").to_numpy(zero_copy_only=False), bool)
    rows = np.flatnonzero(paired)
    pairs = pc.split_pattern(keys.take(pa.array(rows)), ",")
    owner = rows[np.asarray(pc.list_parent_indices(pairs).to_numpy(), np.int64)]
    parts = pc.split_pattern(pc.list_flatten(pairs), ":")
    if pc.min(pc.list_value_length(parts)).as_py() < 2:
        raise SchemaError(f"the bucket index cannot hash record keys of field:value pairs whose values hold ',' "
                          f"(a part without ':'), such as {keys[int(rows[0])]}")
    names, values = pc.list_element(parts, 0), pc.list_element(parts, 1)
    columns = []
    for field in hash_fields:
        at = np.full(len(keys), -1, np.int64)
        hits = np.flatnonzero(np.asarray(pc.equal(names, field).to_numpy(zero_copy_only=False), bool))
        at[owner[hits]] = hits
        found = at >= 0
        picked = values.take(pa.array(np.where(found, at, 0), mask=~found))
        columns.append(pc.if_else(pa.array(paired), picked, keys))
    return columns


def bucket_ids(record_keys: pa.Array | pa.ChunkedArray, hash_fields: list[str], num_buckets: int) -> np.ndarray:
    """The bucket (0 .. num_buckets - 1) of each record key, as Hudi's BucketIdentifier.getBucketId."""
    h = np.ones(len(record_keys), np.uint32)  # List.hashCode: 1, then 31 * h + element hash
    for column in hash_keys(record_keys, hash_fields):
        h = h * np.uint32(31) + java_hash_codes(column)
    return cast(np.ndarray, ((h & _MAX_INT) % np.uint32(num_buckets)).astype(np.int64))


def bucket_of(file_id: str) -> int | None:
    """The bucket a file id names (its first 8 characters), or None for a file id that names none."""
    found = _BUCKET_PREFIX.match(file_id)
    return int(found.group(1)) if found else None


def new_bucket_file_id(bucket: int) -> str:
    """A new file id for `bucket`'s file group: a UUID with the bucket number over its first 8
    characters (Hudi's newBucketFileIdPrefix), plus "-0"."""
    return f"{bucket:08d}{str(uuid.uuid4())[8:]}-0"
