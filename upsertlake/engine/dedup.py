"""Precombine: keep one record per key, the one with the largest ordering value.

Ties go to the record that comes later in the batch; a null ordering value loses to any value.
The first key column is hashed to integer ids: a batch without duplicates (the common case) is
known as such from the hash alone, and otherwise only the rows whose key repeats are sorted, by
(key ids, ordering, row), and the last of each run wins. No per-row Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.util.arrow import row_numbers


def dedup_indices(keys: list[pa.ChunkedArray | pa.Array], ordering: pa.ChunkedArray | pa.Array | None) -> pa.Array:
    """Row indices (ascending) of the winning record of each distinct key tuple."""
    n = len(keys[0])
    first = _ids(keys[0])
    repeated = np.flatnonzero(np.bincount(first)[first] > 1)
    if not len(repeated):
        return row_numbers(n)
    # Only rows whose first key column repeats can lose; the other key columns split them further.
    rows = pa.array(repeated)
    cols = {"k0": first[repeated]}
    cols.update({f"k{i}": _ids(column.take(rows)) for i, column in enumerate(keys[1:], 1)})
    key_names = list(cols)
    if ordering is not None:
        cols["o"] = ordering.take(rows)
    cols["r"] = repeated
    sort_keys = [(name, "ascending", "at_start") for name in cols]
    order = np.asarray(pc.sort_indices(pa.table(cols), sort_keys=sort_keys).to_numpy(), dtype=np.int64)
    same_as_next = np.ones(len(order) - 1, dtype=bool)
    for name in key_names:
        ids = cols[name][order]
        same_as_next &= ids[1:] == ids[:-1]
    is_last = np.append(~same_as_next, True)  # the last row of each run of equal key tuples wins
    keep = np.ones(n, dtype=bool)
    keep[repeated] = False
    keep[repeated[order[is_last]]] = True
    return pa.array(np.flatnonzero(keep))


def _ids(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """One integer per row, equal for equal values (two nulls are equal), by hashing."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column, null_encoding="encode")
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
