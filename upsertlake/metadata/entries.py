"""HFile entries of the metadata table as Arrow columns (`key`, `value`: binary)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def one_per_key(entries: pa.Table) -> pa.Table:
    """`entries` sorted by key (bytewise, as HFile orders them), the last of each key kept
    (entries already so, one HFile's alone, are given back as they are: a compare, no sort)."""
    keys = entries.column("key")
    if len(keys) > 1 and pc.all(pc.less(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py():
        return entries
    entries = entries.take(pc.sort_indices(entries, [("key", "ascending")]))  # stable: equal keys keep their order
    keys = entries.column("key")
    if len(keys) < 2:
        return entries
    last = pc.not_equal(keys.slice(0, len(keys) - 1), keys.slice(1))
    return entries.filter(pa.chunked_array([last, pa.array([True])]))
