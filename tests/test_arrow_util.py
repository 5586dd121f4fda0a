"""util.arrow.constant: n copies of one value, of the asked type, nulls included."""

import pyarrow as pa
import pytest

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
