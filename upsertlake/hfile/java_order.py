"""The order in which a Java `HashMap<String, ...>` iterates its keys.

Hudi's writer keeps the file info and the meta blocks in `HashMap`s and writes them in iteration
order, so writing the same bytes means iterating as Java does: buckets in index order (the
string's hash, spread, masked by the table size), entries within a bucket in insertion order.
"""

from __future__ import annotations

from collections.abc import Iterable

from upsertlake.util.java_hash import java_string_hash

_INITIAL_CAPACITY = 16
_LOAD_FACTOR = 0.75
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


def hash_map_order(keys: Iterable[str]) -> list[str]:
    """The distinct `keys` (in the order they were first put) as a `HashMap` created with the
    default capacity iterates them. The table grows as Java's does: when the entry count passes
    three quarters of the capacity, and when a bucket gets a ninth entry while the table is
    smaller than 64 (a larger table turns such a bucket into a tree, whose order is not kept
    here; a file info or meta block set that large in one bucket does not occur)."""
    order: list[str] = []
    capacity = _INITIAL_CAPACITY
    for key in keys:
        if key in order:
            continue
        order.append(key)
        bucket = _bucket(key, capacity)
        if capacity < _MIN_TREEIFY_CAPACITY and sum(_bucket(k, capacity) == bucket for k in order) > _TREEIFY_THRESHOLD:
            capacity *= 2  # putVal's treeifyBin resizes a small table instead
        if len(order) > capacity * _LOAD_FACTOR:
            capacity *= 2
    return sorted(order, key=lambda k: _bucket(k, capacity))  # stable: insertion order within a bucket


def _bucket(key: str, capacity: int) -> int:
    h = java_string_hash(key)
    return (h ^ (h >> 16)) & (capacity - 1)
