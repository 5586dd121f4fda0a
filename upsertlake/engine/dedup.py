"""Precombine: keep one record per key, the one with the largest ordering value.

Ties go to the record that comes later in the batch; a null ordering value loses to any value.
One sort and one comparison of neighbours, no per-row Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.util.arrow import row_numbers


def dedup_indices(keys: list[pa.ChunkedArray | pa.Array], ordering: pa.ChunkedArray | pa.Array | None) -> pa.Array:
    """Row indices (ascending) of the winning record of each distinct key tuple."""
    n = len(keys[0])
    if n == 0:
        return pa.array([], pa.int64())
    cols = {f"k{i}": k for i, k in enumerate(keys)}
    sort_keys = [(name, "ascending", "at_start") for name in cols]
    if ordering is not None:
        cols["o"] = ordering
        sort_keys.append(("o", "ascending", "at_start"))
    cols["r"] = row_numbers(n)
    sort_keys.append(("r", "ascending", "at_start"))
    table = pa.table(cols)
    order = pc.sort_indices(table, sort_keys=sort_keys)
    # The winner of each key is the last row of its run in sorted order.
    is_last = np.ones(n, dtype=bool)
    if n > 1:
        differs = np.zeros(n - 1, dtype=bool)
        for name in [f"k{i}" for i in range(len(keys))]:
            col = table.column(name).take(order)
            a, b = col.slice(0, n - 1), col.slice(1)
            ne = pc.fill_null(pc.not_equal(a, b), True)
            # two nulls are the same key
            both_null = pc.and_(pc.is_null(a), pc.is_null(b))
            ne = pc.and_(ne, pc.invert(both_null))
            differs |= np.asarray(ne.to_numpy(zero_copy_only=False), dtype=bool)
        is_last[:-1] = differs
    winners = np.asarray(order.to_numpy(), dtype=np.int64)[is_last]
    winners.sort()
    return pa.array(winners)
