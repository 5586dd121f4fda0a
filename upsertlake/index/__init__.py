"""Indexes: find the file group that holds each incoming key (DESIGN.md §3).

Floor 6 of the layers declared in pyproject.toml [tool.importlinter]; may import layout and every
floor below; not partitioner or concurrency.
"""

from upsertlake.index.base import Index, IndexUpdate
from upsertlake.index.bloom import BloomIndex
from upsertlake.index.inmemory import InMemoryIndex
from upsertlake.index.simple import SimpleIndex

_KINDS = {"SIMPLE": SimpleIndex, "BLOOM": BloomIndex, "INMEMORY": InMemoryIndex}


def make_index(index_type: str) -> Index:
    """The index named by `hoodie.index.type` (GLOBAL_ prefix: tag by key across partitions)."""
    name = index_type.upper()
    is_global = name.startswith("GLOBAL_")
    return _KINDS[name.removeprefix("GLOBAL_")](is_global=is_global)


__all__ = ["BloomIndex", "InMemoryIndex", "Index", "IndexUpdate", "SimpleIndex", "make_index"]
