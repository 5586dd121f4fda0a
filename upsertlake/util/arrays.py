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


def range_mask(size: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A mask over `size` bytes marking the bytes of many ranges (`starts[i]` up to `starts[i] +
    lengths[i]`, sorted, not overlapping): indexing a buffer with it gathers every range's bytes,
    one range after another, and assigning through it scatters them, in one NumPy operation and
    one byte of memory per byte of buffer (an index of positions would take eight). Built as one
    `repeat` of alternating gaps and ranges."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(starts)
    if n == 0:
        return np.zeros(size, dtype=bool)
    ends = starts + lengths
    counts = np.empty(2 * n + 1, dtype=np.int64)
    counts[0] = starts[0]
    counts[2:2 * n:2] = starts[1:] - ends[:-1]  # the gap before each range
    counts[1:2 * n:2] = lengths
    counts[-1] = size - ends[-1]
    pattern = np.zeros(2 * n + 1, dtype=bool)
    pattern[1::2] = True
    return np.repeat(pattern, counts)
