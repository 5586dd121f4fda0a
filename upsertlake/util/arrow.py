"""Small Arrow helpers shared across the write and read paths."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def constant(value: object, n: int, type: pa.DataType | None = None) -> pa.Array:
    """An array of `n` copies of `value` (of `type`, default string). `pa.repeat` copies the
    value's bytes; a `take` of one value n times looks each index up, an order of magnitude slower."""
    return pa.repeat(pa.scalar(value, pa.string() if type is None else type), n)


def row_numbers(n: int) -> pa.Array:
    return pa.array(np.arange(n, dtype=np.int64))
