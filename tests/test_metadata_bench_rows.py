"""benchmarks/metadata_bench.py builds its rows with numpy and Arrow (a 50M-row table in chunks):
they are exactly the rows its per-row f-string builder gave."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from metadata_bench import rows


def per_row(ids: np.ndarray, partitions: int, ts: int) -> pa.Table:
    return pa.table({
        "id": pa.array([f"key-{i:012d}" for i in ids.tolist()]),
        "part": pa.array([f"p{i % partitions:04d}" for i in ids.tolist()]),
        "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
        "val": pa.array(ids.astype(np.float64)),
    })


@pytest.mark.parametrize("partitions", [1, 10, 100, 1000])
def test_rows_equal_the_per_row_builder(partitions: int) -> None:
    ids = np.concatenate([np.arange(1100), [9_999, 10**6, 49_999_999, 123_456_789_012, 10**12 - 1]])
    np.random.default_rng(1).shuffle(ids)
    assert rows(ids, partitions, ts=2).equals(per_row(ids, partitions, 2))
    assert rows(ids[:0], partitions).num_rows == 0


def test_rows_refuse_ids_of_more_than_12_digits() -> None:
    with pytest.raises(ValueError, match="12 digits"):
        rows(np.array([10**12]), 10)
