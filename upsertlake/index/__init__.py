"""Indexes: find the file group that holds each incoming key (docs/DESIGN.md §2).

Layers (pyproject.toml, docs/DESIGN.md §3): may import layout and every
floor below; not partitioner or concurrency.
"""

from upsertlake.index.base import Index, IndexUpdate
from upsertlake.index.bloom import BloomIndex
from upsertlake.index.bucket import BucketIndex, check_bucket_index_fields
from upsertlake.index.inmemory import InMemoryIndex
from upsertlake.index.record_index import RecordIndex
from upsertlake.index.simple import SimpleIndex

_KINDS = {"SIMPLE": SimpleIndex, "BLOOM": BloomIndex, "INMEMORY": InMemoryIndex}


def make_index(index_type: str, num_buckets: int = 256, hash_fields: list[str] | None = None) -> Index:
    """The index named by `hoodie.index.type` (GLOBAL_ prefix: tag by key across partitions;
    BUCKET: `num_buckets` buckets per partition, hashing `hash_fields` of the record key)."""
    name = index_type.upper()
    if name == "BUCKET":
        return BucketIndex(num_buckets, list(hash_fields or ()))
    if name == "RECORD_INDEX":
        return RecordIndex()
    is_global = name.startswith("GLOBAL_")
    return _KINDS[name.removeprefix("GLOBAL_")](is_global=is_global)


__all__ = ["BloomIndex", "BucketIndex", "check_bucket_index_fields", "InMemoryIndex", "Index", "IndexUpdate", "RecordIndex", "SimpleIndex", "make_index"]
