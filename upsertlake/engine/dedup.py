"""Precombine: keep one record per key, the one with the largest ordering value.

Ties go to the record that comes later in the batch; a null ordering value loses to any value.
The key columns are hashed to one integer id per distinct key tuple: a batch without duplicates
(the common case) is known as such from the hash alone, and otherwise one sort by (id, ordering,
row) and one comparison of neighbours find the winners. No per-row Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.util.arrow import row_numbers


def dedup_indices(keys: list[pa.ChunkedArray | pa.Array], ordering: pa.ChunkedArray | pa.Array | None) -> pa.Array:
    """Row indices (ascending) of the winning record of each distinct key tuple."""
    n = len(keys[0])
    ids, distinct = key_ids(keys)
    if distinct == n:
        return row_numbers(n)
    cols = {"k": ids}
    sort_keys = [("k", "ascending", "at_start")]
    if ordering is not None:
        cols["o"] = ordering
        sort_keys.append(("o", "ascending", "at_start"))
    cols["r"] = row_numbers(n)
    sort_keys.append(("r", "ascending", "at_start"))
    order = np.asarray(pc.sort_indices(pa.table(cols), sort_keys=sort_keys).to_numpy(), dtype=np.int64)
    # The winner of each key is the last row of its run in sorted order.
    sorted_ids = ids[order]
    is_last = np.ones(n, dtype=bool)
    is_last[:-1] = sorted_ids[1:] != sorted_ids[:-1]
    winners = order[is_last]
    winners.sort()
    return pa.array(winners)


def key_ids(keys: list[pa.ChunkedArray | pa.Array]) -> tuple[np.ndarray, int]:
    """One id per row (equal for equal key tuples; two nulls are the same key) and the number of
    distinct tuples, by hashing each column and combining the column ids."""
    ids, distinct = np.zeros(len(keys[0]), dtype=np.int64), 0
    for i, column in enumerate(keys):
        if i and distinct == len(ids):  # the first columns are distinct already: so are the tuples
            break
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        column_ids = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        if i == 0:
            ids, distinct = column_ids, len(encoded.dictionary)
        else:  # ids < n * n, then numbered densely again
            combined = pc.dictionary_encode(pa.array(ids * len(encoded.dictionary) + column_ids))
            ids, distinct = np.asarray(combined.indices.to_numpy(), dtype=np.int64), len(combined.dictionary)
    return ids, distinct
