"""HFile entries of the metadata table as Arrow columns (`key`, `value`: binary)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def newest_indices(keys: pa.ChunkedArray | pa.Array) -> pa.Array | None:
    """The rows of `keys` in key order (bytewise, as HFile orders them), the last of each key:
    the keys alone are sorted, so a caller takes its whole rows once. None when every row is
    already so, in order (one HFile's alone): a compare, no sort and no copy."""
    n = len(keys)
    if n < 2 or pc.all(pc.less(keys.slice(0, n - 1), keys.slice(1))).as_py():
        return None
    order = pc.sort_indices(keys)  # stable: equal keys keep their order
    ordered = keys.take(order)
    last = pc.not_equal(ordered.slice(0, n - 1), ordered.slice(1))
    return order.filter(pa.chunked_array([last, pa.array([True])]).combine_chunks())


def one_per_key(entries: pa.Table) -> pa.Table:
    """`entries` sorted by key, the last of each key kept (`newest_indices`)."""
    newest = newest_indices(entries.column("key"))
    return entries if newest is None else entries.take(newest)
