"""No silent change of meaning: key, partition and precombine columns keep their type, null
ordering values and contradicting options are refused by name, a null partition value is logged."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake
from upsertlake import ConfigError, SchemaError, create_table, open_table

from helpers import tree_digest


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
    import pandas as pd
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


# -- options that contradict the table's stored config ------------------------------------------
@pytest.fixture
def uuid_table(tmp_path: Path):
    t = create_table(tmp_path / "u", "trips", record_key="uuid", precombine_field="ts", partition_fields="city")
    t.upsert(pa.table({"uuid": ["a"], "ts": [1], "city": ["sf"]}))
    return t


def test_open_table_with_another_record_key_is_a_config_conflict(uuid_table) -> None:
    before = tree_digest(Path(uuid_table.path))
    with pytest.raises(ConfigError) as info:
        open_table(uuid_table.path, options={"hoodie.datasource.write.recordkey.field": "id"})
    assert "hoodie.datasource.write.recordkey.field='id' but the table has hoodie.table.recordkey.fields='uuid'" in str(
        info.value
    )
    assert tree_digest(Path(uuid_table.path)) == before


@pytest.mark.parametrize(
    "key, value, stored",
    [
        ("hoodie.datasource.write.partitionpath.field", "region", "hoodie.table.partition.fields='city'"),
        ("hoodie.datasource.write.precombine.field", "event_time", "hoodie.table.precombine.field='ts'"),
        ("hoodie.table.name", "rides", "hoodie.table.name='trips'"),
        ("hoodie.datasource.write.hive_style_partitioning", "true", "hive_style_partitioning=false"),
        (
            "hoodie.datasource.write.keygenerator.class",
            "org.apache.hudi.keygen.ComplexKeyGenerator",
            "hoodie.table.keygenerator.class='org.apache.hudi.keygen.SimpleKeyGenerator'",
        ),
    ],
)
def test_per_call_option_contradicting_the_table_is_refused(uuid_table, key: str, value: str, stored: str) -> None:
    data = pa.table({"uuid": ["b"], "ts": [1], "city": ["sf"]})
    unchanged(uuid_table, lambda: uuid_table.upsert(data, options={key: value}), ConfigError, stored)
    with pytest.raises(ConfigError) as info:
        uuid_table.upsert(data, options={key: value})
    assert f"{key}={value}" in str(info.value).replace("'", "")


def test_matching_options_are_fine(uuid_table) -> None:
    t = open_table(uuid_table.path, options={
        "hoodie.datasource.write.recordkey.field": "uuid",
        "hoodie.datasource.write.partitionpath.field": "city",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.table.name": "trips",
    })
    assert t.upsert(pa.table({"uuid": ["b"], "ts": [1], "city": ["sf"]})).num_inserts == 1


def test_create_table_refuses_options_contradicting_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"recordkey.field='id' but the table has hoodie.table.recordkey.fields='uuid'"
    ):
        create_table(tmp_path / "c", "c", record_key="uuid", options={"hoodie.datasource.write.recordkey.field": "id"})
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("hoodie.properties"))


def test_create_table_takes_the_key_generator_option(tmp_path: Path) -> None:
    complex_keygen = "org.apache.hudi.keygen.ComplexKeyGenerator"
    t = create_table(tmp_path / "g", "g", record_key="id", partition_fields="p",
                     options={"hoodie.datasource.write.keygenerator.class": complex_keygen})
    assert open_table(t.path).table_config.keygen_class == complex_keygen


# -- named errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("filters", [[("p", "~", "x")], [("p", "=")], ["p = x"]])
def test_bad_filter_is_a_filter_error(table, filters) -> None:
    with pytest.raises(upsertlake.FilterError, match=re.escape(repr(filters[0]))):
        table.read(filters=filters)
    assert issubclass(upsertlake.FilterError, upsertlake.UpsertlakeError)


def test_delete_unknown_partition_is_partition_not_found(table) -> None:
    unchanged(
        table, lambda: table.delete_partitions(["x", "nowhere"]), upsertlake.PartitionNotFoundError,
        "no such partition(s) ['nowhere']",
    )
    assert issubclass(upsertlake.PartitionNotFoundError, upsertlake.UpsertlakeError)


def test_every_error_class_is_exported() -> None:
    import upsertlake.errors as errors

    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, errors.UpsertlakeError)]
    assert {c.__name__ for c in classes} <= set(upsertlake.__all__)
    assert all(getattr(upsertlake, c.__name__) is c for c in classes)


def test_naive_precombine_timestamps_do_not_become_zoned(tmp_path: Path) -> None:
    t = create_table(tmp_path / "z", "z", record_key="id", precombine_field="at")
    t.upsert(pa.table({"id": ["a"], "at": pa.array([1_000_000], pa.timestamp("us", "UTC"))}))
    t.upsert(pa.table({"id": ["b"], "at": pa.array([1_000], pa.timestamp("ms", "UTC"))}))  # exact: fine
    unchanged(
        t, lambda: t.upsert(pa.table({"id": ["c"], "at": pa.array([1_000_000], pa.timestamp("us"))})),
        SchemaError, "one has a time zone, the other not",
    )
