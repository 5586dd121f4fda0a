"""util: `constant` gives n copies of one value of the asked type (nulls included);
`sorted_unique` gives what np.unique gives; `group_rows` lists each code's rows in order."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from upsertlake.util.arrays import group_rows, sorted_unique
from upsertlake.util.arrow import constant


@pytest.mark.parametrize(
    ("value", "type_"),
    [("20261123000000000", pa.string()), ("", pa.string()), (None, pa.string()), (False, pa.bool_()), (7, pa.int64())],
)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_constant_is_n_copies_of_the_value(value: object, type_: pa.DataType, n: int) -> None:
    got = constant(value, n, type_)
    assert got.type == type_
    assert got.to_pylist() == [value] * n


@given(arrays(np.uint32, st.integers(0, 300), elements=st.integers(0, 40)))
def test_sorted_unique_is_np_unique(values: np.ndarray) -> None:
    got = sorted_unique(values)
    assert got.dtype == values.dtype
    assert got.tolist() == np.unique(values).tolist()


@given(arrays(np.int32, st.integers(0, 200), elements=st.integers(0, 6)))
def test_group_rows_lists_each_groups_rows_in_row_order(codes: np.ndarray) -> None:
    order, bounds = group_rows(codes, 7)
    for g in range(7):
        assert order[bounds[g] : bounds[g + 1]].tolist() == np.flatnonzero(codes == g).tolist()
