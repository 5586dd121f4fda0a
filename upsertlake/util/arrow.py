"""Small Arrow helpers shared across the write and read paths."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def constant(value: object, n: int, type: pa.DataType = pa.string()) -> pa.Array:
    """An array of `n` copies of `value`, without building a Python list of n items."""
    return pa.array([value], type).take(pa.array(np.zeros(n, dtype=np.int32)))


def row_numbers(n: int) -> pa.Array:
    return pa.array(np.arange(n, dtype=np.int64))
