"""No silent change of meaning: key, partition and precombine columns keep their type, null
ordering values and contradicting options are refused by name, a null partition value is logged."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import tree_digest

import upsertlake
from upsertlake import ConfigError, SchemaError, create_table, open_table


def batch(ids=("a", "b"), ts=(1, 2), p=("x", "y"), v=(1.0, 2.0)) -> pa.Table:
    return pa.table({"id": list(ids), "ts": pa.array(list(ts), pa.int64()), "p": list(p), "v": list(v)})


@pytest.fixture
def table(tmp_path: Path):
    t = create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(batch())
    return t


def unchanged(t, call, error, culprit: str) -> None:
    before = tree_digest(Path(t.path))
    with pytest.raises(error, match=re.escape(culprit)):
        call()
    assert tree_digest(Path(t.path)) == before


# -- key, partition and precombine columns keep their type --------------------------------------
def test_pandas_ts_with_nan_is_refused_and_names_the_rows(table) -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"id": ["a", "c"], "ts": [5, float("nan")], "p": ["x", "x"], "v": [1.0, 2.0]})
    assert df["ts"].dtype == "float64"
    unchanged(table, lambda: table.upsert(df), SchemaError, "precombine field 'ts' is null in 1 of 2 row(s)")
    assert table.schema().field("ts").type == pa.int64()


def test_float_precombine_with_whole_values_is_cast_to_the_tables_long(table) -> None:
    data = batch(ids=("a", "c"), ts=(5, 7)).set_column(1, "ts", pa.array([5.0, 7.0]))
    table.upsert(data)
    assert table.schema().field("ts").type == pa.int64()
    rows = table.read().sort_by("id")
    assert rows.column("ts").type == pa.int64()
    assert rows.column("ts").to_pylist() == [5, 2, 7]


def test_fractional_precombine_is_refused(table) -> None:
    data = batch().set_column(1, "ts", pa.array([1.5, 2.0]))
    unchanged(table, lambda: table.upsert(data), SchemaError, "precombine column 'ts' keeps the table's type int64")


def test_other_columns_still_widen(table) -> None:
    data = batch(ids=("c", "d")).set_column(1, "ts", pa.array([3, 4], pa.int32()))
    data = data.set_column(3, "v", pa.array([1, 2], pa.int32()))  # v is a double: int32 converts
    table.upsert(data)
    assert table.schema().field("ts").type == pa.int64()
    # a long column v2 that a double batch widens (the documented rule) still does
    table.upsert(batch(ids=("e", "f")).append_column("w", pa.array([1, 2], pa.int64())))
    table.upsert(batch(ids=("g", "h")).append_column("w", pa.array([1.5, 2.5])))
    assert table.schema().field("w").type == pa.float64()


def test_record_key_long_table_takes_exact_strings_and_refuses_others(tmp_path: Path) -> None:
    t = create_table(tmp_path / "k", "k", record_key="id", precombine_field="ts")
    t.upsert(pa.table({"id": pa.array([1, 2], pa.int64()), "ts": [1, 1]}))
    t.upsert(pa.table({"id": ["2", "3"], "ts": [2, 2]}))
    assert t.schema().field("id").type == pa.int64()
    assert sorted(t.read().column("id").to_pylist()) == [1, 2, 3]
    unchanged(
        t, lambda: t.upsert(pa.table({"id": ["04", "5"], "ts": [3, 3]})), SchemaError,
        "record key column 'id' keeps the table's type int64",
    )
    unchanged(
        t, lambda: t.upsert(pa.table({"id": ["x", "5"], "ts": [3, 3]})), SchemaError,
        "record key column 'id' keeps the table's type int64",
    )


def test_partition_column_keeps_its_type(tmp_path: Path) -> None:
    t = create_table(tmp_path / "p", "p", record_key="id", precombine_field="ts", partition_fields="day")
    t.upsert(pa.table({"id": ["a"], "ts": [1], "day": pa.array([20261101], pa.int32())}))
    t.upsert(pa.table({"id": ["b"], "ts": [1], "day": pa.array([20261101], pa.int64())}))
    assert t.schema().field("day").type == pa.int32()
    unchanged(
        t, lambda: t.upsert(pa.table({"id": ["c"], "ts": [1], "day": pa.array([2**40], pa.int64())})),
        SchemaError, "partition column 'day' keeps the table's type int32",
    )


# -- null precombine values ----------------------------------------------------------------------
@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert"])
def test_null_precombine_is_refused_with_the_count(table, operation: str) -> None:
    data = batch(ids=("a", "b", "c"), ts=(None, 3, None), p=("x", "y", "x"), v=(1.0, 2.0, 3.0))
    unchanged(
        table, lambda: getattr(table, operation)(data), SchemaError, "precombine field 'ts' is null in 2 of 3 row(s)"
    )


def test_null_precombine_refused_on_the_first_write(tmp_path: Path) -> None:
    t = create_table(tmp_path / "f", "f", record_key="id", precombine_field="ts")
    with pytest.raises(SchemaError, match=re.escape("precombine field 'ts' is null in 1 of 1 row(s)")):
        t.upsert(pa.table({"id": ["a"], "ts": pa.array([None], pa.int64())}))
    assert t.timeline() == []


# -- null partition values -----------------------------------------------------------------------
def test_null_partition_value_is_logged_once_with_the_count(table, caplog) -> None:
    data = batch(ids=("n1", "n2", "n3"), ts=(1, 1, 1), p=(None, "", "x"), v=(1.0, 2.0, 3.0))
    with caplog.at_level(logging.WARNING, logger="upsertlake"):
        table.upsert(data)
    messages = [r.getMessage() for r in caplog.records if "__HIVE_DEFAULT_PARTITION__" in r.getMessage()]
    assert messages == [
        "2 record(s) have a null or empty partition value (p): they go to partition __HIVE_DEFAULT_PARTITION__"
    ]
    rows = table.read(filters=[("_hoodie_partition_path", "=", "__HIVE_DEFAULT_PARTITION__")])
    assert sorted(rows.column("id").to_pylist()) == ["n1", "n2"]


def test_no_log_without_null_partition_values(table, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="upsertlake"):
        table.upsert(batch(ids=("c",), ts=(1,), p=("x",), v=(1.0,)))
    assert not [r for r in caplog.records if "__HIVE_DEFAULT_PARTITION__" in r.getMessage()]
