"""Indexes: find the file group that holds each incoming key (docs/DESIGN.md §2).

Layers (pyproject.toml, docs/DESIGN.md §3): may import layout and every
floor below; not partitioner or concurrency.
"""

from upsertlake.config.enums import IndexType
from upsertlake.index.base import Index, IndexUpdate
from upsertlake.index.bloom import BloomIndex
from upsertlake.index.bucket import BucketIndex, check_bucket_index_fields
from upsertlake.index.inmemory import InMemoryIndex
from upsertlake.index.record_index import RecordIndex
from upsertlake.index.simple import SimpleIndex

_KINDS: dict[IndexType, type[SimpleIndex] | type[BloomIndex] | type[InMemoryIndex]] = {
    IndexType.SIMPLE: SimpleIndex, IndexType.BLOOM: BloomIndex, IndexType.INMEMORY: InMemoryIndex,
}


def make_index(index_type: IndexType, num_buckets: int = 256, hash_fields: list[str] | None = None) -> Index:
    """The index of `hoodie.index.type` (a GLOBAL_ type tags by key across partitions; BUCKET:
    `num_buckets` buckets per partition, hashing `hash_fields` of the record key; RECORD_INDEX: the
    metadata table's record index)."""
    if index_type is IndexType.BUCKET:
        return BucketIndex(num_buckets, list(hash_fields or ()))
    if index_type is IndexType.RECORD_INDEX:
        return RecordIndex()
    return _KINDS[index_type.local](is_global=index_type.is_global)


__all__ = [
    "BloomIndex",
    "BucketIndex",
    "InMemoryIndex",
    "Index",
    "IndexUpdate",
    "RecordIndex",
    "SimpleIndex",
    "check_bucket_index_fields",
    "make_index",
]
