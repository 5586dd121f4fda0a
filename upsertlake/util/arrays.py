"""NumPy helpers for the hot path."""

from __future__ import annotations

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, sorted: `np.unique` without its hash pass. NumPy 2.3+
    deduplicates through a hash table before sorting, which for random 32-bit key hashes is several
    times slower than one sort."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]]


def group_rows(codes: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by a small non-negative code: (order, bounds), group g being the rows
    order[bounds[g]:bounds[g + 1]], each group in row order (a stable sort)."""
    order = np.argsort(codes, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=groups))])
    return order, bounds


def range_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions of many ranges one after another (`starts[i]` up to `starts[i] + lengths[i]`,
    exclusive): the index that gathers or scatters all the byte ranges of a buffer in one NumPy
    indexing instead of one Python slice per range."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    if len(ends) == 0 or ends[-1] == 0:
        return np.empty(0, dtype=np.int64)
    shifts = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return shifts + np.arange(ends[-1], dtype=np.int64)
