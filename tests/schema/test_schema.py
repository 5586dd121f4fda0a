"""Schemas: Avro as Hudi records it, batch normalization, evolution and conforming base-file data."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upsertlake.config.java_properties import parse_java_properties
from upsertlake.errors import SchemaError
from upsertlake.schema import (
    META_COLUMNS,
    arrow_to_avro,
    avro_schema_json,
    avro_to_arrow,
    conform,
    merge_schemas,
    normalize_batch,
)

HUDI_TABLES = [
    "v6_simplekeygen_nonhivestyle",
    "v6_complexkeygen_hivestyle",
    "v6_nonpartitioned",
    "v6_timebasedkeygen_nonhivestyle",
    "v6_simplekeygen_nonhivestyle_overwritetable",
    "v6_simplekeygen_hivestyle_no_metafields",
    "v8_simplekeygen_nonhivestyle",
    "v8_complexkeygen_hivestyle",
    "v8_nonpartitioned",
]
UTC = dt.timezone.utc
META_SCHEMA = pa.schema([(name, pa.string()) for name in META_COLUMNS])


def exact(schema: pa.Schema) -> str:
    """Schema text with child names and nullability: Arrow's `==` ignores list/map child names."""
    return schema.to_string(show_schema_metadata=False, show_field_metadata=False)


def latest_commit_schema(table: Path) -> str:
    """`extraMetadata.schema` of the newest completed write: JSON instants (v6) or Avro ones (v8)."""
    timeline = table / ".hoodie" / "timeline" if (table / ".hoodie" / "timeline").is_dir() else table / ".hoodie"
    completed = [p for p in timeline.iterdir() if p.suffix in (".commit", ".replacecommit")]
    newest = max(completed, key=lambda p: p.name)
    raw = newest.read_bytes()
    metadata = json.loads(raw) if raw.startswith(b"{") else next(iter(fastavro.reader(io.BytesIO(raw))))
    return metadata["extraMetadata"]["schema"]


def properties(table: Path) -> dict[str, str]:
    return parse_java_properties((table / ".hoodie" / "hoodie.properties").read_text("latin-1"))


def base_files(table: Path) -> list[Path]:
    return sorted(p for p in table.rglob("*.parquet") if ".hoodie" not in p.parts)


# --- Avro schemas as Hudi writes them ----------------------------------------------------------


@pytest.mark.parametrize("name", HUDI_TABLES)
def test_arrow_to_avro_of_hudi_data_is_the_commit_schema(hudi_table, name: str) -> None:
    table = hudi_table(name)
    committed = latest_commit_schema(table)
    data = pq.read_table(base_files(table)[-1]).drop_columns(list(META_COLUMNS))
    avro = arrow_to_avro(data.schema, properties(table)["hoodie.table.name"])
    assert avro == json.loads(committed)
    assert avro_schema_json(avro) == committed  # even the text: key order as Java's Avro prints it


@pytest.mark.parametrize("name", ["v6_simplekeygen_nonhivestyle", "v8_nonpartitioned"])
def test_create_schema_reads_as_the_commit_schema(hudi_table, name: str) -> None:
    """hoodie.table.create.schema has Spark's `[T, "null"]` unions without defaults: same columns."""
    table = hudi_table(name)
    create = properties(table)["hoodie.table.create.schema"]
    assert '["int","null"]' in create
    assert exact(avro_to_arrow(create)) == exact(avro_to_arrow(latest_commit_schema(table)))


@pytest.mark.parametrize("name", ["v6_complexkeygen_hivestyle", "v8_simplekeygen_nonhivestyle"])
def test_conform_hudi_base_file_to_canonical_schema(hudi_table, name: str) -> None:
    table = hudi_table(name)
    canonical = avro_to_arrow(latest_commit_schema(table))
    full = pa.schema([*META_SCHEMA, *canonical])
    for path in base_files(table):
        raw = pq.read_table(path)
        assert b"org.apache.hudi.bloomfilter" in raw.schema.metadata
        out = conform(raw, full)
        assert exact(out.schema) == exact(full)
        assert out.schema.metadata is None  # a file's footer keys must not leak into a rewrite
        assert out.to_pylist() == raw.to_pylist()
        assert out.column("_hoodie_record_key").to_pylist() == raw.column("_hoodie_record_key").to_pylist()
    element = canonical.field("arrayField").type.value_field  # the file's is `array`, not null
    assert (element.name, element.nullable) == ("element", True)
    assert canonical.field("mapField").type.key_field.name == "key"


ALL_TYPES = pa.schema(
    [
        ("b", pa.bool_()),
        pa.field("i", pa.int32(), nullable=False),
        ("l", pa.int64()),
        ("f", pa.float32()),
        ("d", pa.float64()),
        pa.field("s", pa.string(), nullable=False),
        ("bin", pa.binary()),
        ("dec", pa.decimal128(10, 5)),
        ("dec38", pa.decimal128(38, 10)),
        ("date", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ts_ms", pa.timestamp("ms", tz="UTC")),
        ("local_ts", pa.timestamp("us")),
        (
            "arr",
            pa.list_(
                pa.field(
                    "element",
                    pa.struct([("x", pa.string()), pa.field("y", pa.int32(), nullable=False)]),
                )
            ),
        ),
        ("m", pa.map_(pa.string(), pa.field("value", pa.struct([("v", pa.float64()), ("w", pa.bool_())])))),
        (
            "st",
            pa.struct(
                [
                    ("a", pa.string()),
                    (
                        "inner",
                        pa.struct([("dec", pa.decimal128(5, 2)), ("ints", pa.list_(pa.field("element", pa.int64())))]),
                    ),
                ]
            ),
        ),
        pa.field("st_required", pa.struct([("k", pa.int64())]), nullable=False),
    ]
)


def test_avro_round_trip_of_every_supported_type() -> None:
    avro = arrow_to_avro(ALL_TYPES, "t")
    fastavro.parse_schema(avro)  # valid Avro: names legal and unique
    assert exact(avro_to_arrow(avro)) == exact(ALL_TYPES)
    assert exact(avro_to_arrow(avro_schema_json(avro))) == exact(ALL_TYPES)
    fields = {f["name"]: f for f in avro["fields"]}
    assert fields["i"] == {"name": "i", "type": "int"}
    assert fields["l"] == {"name": "l", "type": ["null", "long"], "default": None}
    assert fields["local_ts"]["type"][1] == {"type": "long", "logicalType": "local-timestamp-micros"}
    assert fields["ts_ms"]["type"][1] == {"type": "long", "logicalType": "timestamp-millis"}
    assert fields["dec38"]["type"][1]["size"] == 16
    inner = fields["st"]["type"][1]["fields"][1]["type"][1]
    assert (inner["name"], inner["namespace"]) == ("inner", "hoodie.t.t_record.st")
    assert inner["fields"][0]["type"][1]["namespace"] == "hoodie.t.t_record.st.inner.dec"


def test_arrow_to_avro_naming_and_what_it_leaves_out() -> None:
    schema = pa.schema([*META_SCHEMA, ("x", pa.list_(pa.field("item", pa.int32(), nullable=False)))])
    avro = arrow_to_avro(schema, "my-table")
    assert (avro["name"], avro["namespace"]) == ("my__table_record", "hoodie.my__table")
    assert [f["name"] for f in avro["fields"]] == ["x"]  # meta columns are Hudi's, not the table's
    # elements are declared nullable whatever Arrow says (Hudi does; its 2-level lists cannot say)
    assert avro["fields"][0]["type"][1] == {"type": "array", "items": ["null", "int"]}
    with pytest.raises(SchemaError, match="'bad col'"):
        arrow_to_avro(pa.schema([("bad col", pa.int32())]), "t")
    with pytest.raises(SchemaError, match=r"'k'.*int16"):
        arrow_to_avro(pa.schema([("k", pa.int16())]), "t")


def test_avro_to_arrow_reads_other_avro_writers() -> None:
    avro = {
        "type": "record",
        "name": "r",
        "namespace": "n",
        "fields": [
            {"name": "_hoodie_commit_time", "type": ["null", "string"]},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
            {"name": "again", "type": ["E", "null"]},
            {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 3}},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1}},
            {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "arr", "type": {"type": "array", "items": "long"}},
        ],
    }
    assert exact(avro_to_arrow(avro)) == exact(
        pa.schema(
            [
                pa.field("e", pa.string(), nullable=False),
                ("again", pa.string()),
                pa.field("fx", pa.binary(), nullable=False),
                pa.field("dec", pa.decimal128(4, 1), nullable=False),
                pa.field("t", pa.int32(), nullable=False),
                pa.field("u", pa.string(), nullable=False),
                pa.field("arr", pa.list_(pa.field("element", pa.int64())), nullable=False),
            ]
        )
    )
    with pytest.raises(SchemaError, match="'x'"):
        avro_to_arrow({"type": "record", "name": "r", "fields": [{"name": "x", "type": ["int", "string"]}]})


# --- data through parquet and back ------------------------------------------------------------

ALL_TYPES_ROWS = [
    {
        "b": True,
        "i": 1,
        "l": 2**40,
        "f": 1.5,
        "d": 3.14159,
        "s": "é",
        "bin": b"\x00\xff",
        "dec": Decimal("12345.67890"),
        "dec38": Decimal("1234567890123456789012345678.0123456789"),
        "date": dt.date(2023, 4, 1),
        "ts": dt.datetime(2023, 4, 1, 17, 1, 2, 3, tzinfo=UTC),
        "ts_ms": dt.datetime(2023, 4, 1, 17, 1, 2, 3000, tzinfo=UTC),
        "local_ts": dt.datetime(2023, 4, 1, 17, 1, 2, 3),
        "arr": [{"x": "red", "y": 1}, {"x": None, "y": 2}],
        "m": [("k1", {"v": 1.0, "w": True}), ("k2", None)],
        "st": {"a": "x", "inner": {"dec": Decimal("1.25"), "ints": [1, None, 3]}},
        "st_required": {"k": 7},
    },
    {
        **{k: None for k in ALL_TYPES.names},
        "i": 2,
        "s": "",
        "arr": [],
        "m": [],
        "st": {"a": None, "inner": None},
        "st_required": {"k": None},
    },
    {**{k: None for k in ALL_TYPES.names}, "i": 3, "s": "z", "st_required": {"k": 9}},
]


def test_all_types_through_parquet_and_conform(tmp_path: Path) -> None:
    table = pa.Table.from_pylist(ALL_TYPES_ROWS, schema=ALL_TYPES)
    path = tmp_path / "all.parquet"
    pq.write_table(table, path, store_schema=False)  # as our file writer does
    back = pq.read_table(path)
    out = conform(back, avro_to_arrow(arrow_to_avro(ALL_TYPES, "t")))
    assert exact(out.schema) == exact(ALL_TYPES)
    assert out.equals(table)
    assert out.to_pylist() == ALL_TYPES_ROWS


# --- normalize_batch ----------------------------------------------------------------------------


def one_column(arr: pa.Array, name: str = "c") -> pa.Table:
    return pa.table({name: arr})


@pytest.mark.parametrize(
    ("arr", "expected_type", "expected_values"),
    [
        (pa.array([-128, None, 127], pa.int8()), pa.int32(), None),
        (pa.array([-(2**15), 2**15 - 1], pa.int16()), pa.int32(), None),
        (pa.array([255], pa.uint8()), pa.int32(), None),
        (pa.array([65535], pa.uint16()), pa.int32(), None),
        (pa.array([2**32 - 1], pa.uint32()), pa.int64(), None),
        (pa.array(np.array([1.5, 0.25], np.float16)), pa.float32(), None),
        (pa.array(["a", None], pa.large_string()), pa.string(), None),
        (pa.array(["a", None], pa.string_view()), pa.string(), None),
        (pa.array([b"a"], pa.large_binary()), pa.binary(), None),
        (pa.array([b"a"], pa.binary_view()), pa.binary(), None),
        (pa.array([b"ab", None], pa.binary(2)), pa.binary(), None),
        (pa.array(["x", "y", "x", None]).dictionary_encode(), pa.string(), None),
        (pa.array([Decimal("1.25")], pa.decimal32(5, 2)), pa.decimal128(5, 2), None),
        (pa.array([Decimal("1.25")], pa.decimal64(12, 2)), pa.decimal128(12, 2), None),
        (pa.array([Decimal("1.25")], pa.decimal256(38, 2)), pa.decimal128(38, 2), None),
        (pa.array([dt.date(2024, 2, 29), None], pa.date64()), pa.date32(), None),
        (pa.array([1, None], pa.timestamp("s")), pa.timestamp("ms"), None),
        (pa.array([1], pa.timestamp("ms", tz="UTC")), pa.timestamp("ms", tz="UTC"), None),
        (
            pa.array([dt.datetime(2024, 1, 1, 12, tzinfo=UTC)], pa.timestamp("us", tz="Europe/Paris")),
            pa.timestamp("us", tz="UTC"),
            [dt.datetime(2024, 1, 1, 12, tzinfo=UTC)],
        ),
        (pa.array([1_000, 2_000_000], pa.timestamp("ns")), pa.timestamp("us"), [1, 2_000]),
        (
            pa.array([[1, None], None, []], pa.large_list(pa.int8())),
            pa.list_(pa.field("element", pa.int32())),
            None,
        ),
        (pa.array([[1, 2], None], pa.list_(pa.int64(), 2)), pa.list_(pa.field("element", pa.int64())), None),
        (pa.array([[1], [2, 3], None], pa.list_view(pa.int64())), pa.list_(pa.field("element", pa.int64())), None),
        (
            pa.array([[("k", 1)], None], pa.map_(pa.large_string(), pa.int16())),
            pa.map_(pa.string(), pa.field("value", pa.int32())),
            None,
        ),
        (
            pa.array(
                [{"a": 1, "b": {"c": "x"}}, None],
                pa.struct([("a", pa.uint8()), ("b", pa.struct([("c", pa.large_string())]))]),
            ),
            pa.struct([("a", pa.int32()), ("b", pa.struct([("c", pa.string())]))]),
            None,
        ),
        (pa.RunEndEncodedArray.from_arrays([2, 3], pa.array([7, 8], pa.int16())), pa.int32(), [7, 7, 8]),
        (pa.nulls(2), pa.null(), None),
    ],
    ids=lambda v: str(v) if isinstance(v, pa.DataType) else None,
)
def test_normalize_batch_widens_losslessly(arr: pa.Array, expected_type: pa.DataType, expected_values) -> None:
    out = normalize_batch(one_column(arr))
    assert exact(out.schema) == exact(pa.schema([("c", expected_type)]))
    if expected_values is None:
        expected_values = arr.to_pylist()
    if pa.types.is_timestamp(expected_type) and expected_values and isinstance(expected_values[0], int):
        assert out.column("c").cast(pa.int64()).to_pylist() == expected_values
    else:
        assert out.column("c").to_pylist() == expected_values


def test_normalize_batch_keeps_canonical_batches_as_they_are() -> None:
    table = pa.Table.from_pylist(ALL_TYPES_ROWS, schema=ALL_TYPES)
    assert normalize_batch(table) is table


def test_normalize_batch_renames_list_and_map_children() -> None:
    arr = pa.array([[1]], pa.list_(pa.field("item", pa.int64(), nullable=False)))
    out = normalize_batch(one_column(arr))
    assert exact(out.schema) == "c: list<element: int64>\n  child 0, element: int64"


def test_normalize_batch_handles_sliced_chunks_with_nulls() -> None:
    lists = pa.chunked_array(
        [pa.array([[1], None, [2, 3]], pa.large_list(pa.int64()))[1:], pa.array([[4], None], pa.large_list(pa.int64()))]
    )
    maps = pa.chunked_array([pa.array([[("a", 1)], None, [("b", 2)]], pa.map_(pa.large_string(), pa.int64()))[1:]] * 2)
    structs = pa.array([{"a": 1}, None, {"a": 2}], pa.struct([("a", pa.int8())]))[1:]
    table = pa.table({"l": lists, "m": maps.combine_chunks(), "s": pa.concat_arrays([structs, structs])})
    out = normalize_batch(table)
    assert out.to_pylist() == table.to_pylist()
    out.validate(full=True)


@pytest.mark.parametrize(
    ("arr", "message"),
    [
        (pa.array([2**64 - 1], pa.uint64()), "uint64"),
        (pa.array([1_001], pa.timestamp("ns")), "timestamp"),
        (pa.array([86_400_000 + 1], pa.date64()), "date64"),
        (pa.array([Decimal(1)], pa.decimal256(40, 0)), "precision"),
        (pa.array([1], pa.duration("s")), "duration"),
        (pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval()), "interval"),
        (pa.array([1], pa.time32("s")), "TIME"),
        (pa.array([1], pa.time64("us")), "TIME"),
        (pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1]), pa.array(["a"])]), "union"),
        (pa.ExtensionArray.from_storage(pa.uuid(), pa.array([b"0" * 16], pa.binary(16))), "extension"),
        (pa.array([[(1, "a")]], pa.map_(pa.int32(), pa.string())), "map keys"),
        (pa.array([{}], pa.struct([])), "without fields"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_normalize_batch_refuses_what_it_cannot_keep(arr: pa.Array, message: str) -> None:
    with pytest.raises(SchemaError, match=f"'col_x'.*{message}|{message}.*'col_x'"):
        normalize_batch(one_column(arr, "col_x"))


@pytest.mark.parametrize(
    ("arr", "path"),
    [
        (pa.array([{"b": 1}], pa.struct([("b", pa.uint64())])), "a.b"),
        (pa.array([[1]], pa.list_(pa.time32("ms"))), "a.element"),
        (pa.array([[("k", 1)]], pa.map_(pa.string(), pa.duration("s"))), "a.value"),
        (pa.array([{"b": [{"c": 1}]}], pa.struct([("b", pa.list_(pa.struct([("c", pa.uint64())])))])), "a.b.element.c"),
        (pa.array([{"b": [1_001]}], pa.struct([("b", pa.list_(pa.timestamp("ns")))])), "a.b.element"),
    ],
)
def test_normalize_batch_refusals_name_the_nested_path(arr: pa.Array, path: str) -> None:
    with pytest.raises(SchemaError, match=f"'{path}'"):
        normalize_batch(one_column(arr, "a"))


def test_normalize_batch_refuses_names_avro_or_spark_reject() -> None:
    with pytest.raises(SchemaError, match="'my-col'"):
        normalize_batch(pa.table({"my-col": [1]}))
    with pytest.raises(SchemaError, match=r"'s.1x'"):
        normalize_batch(pa.table({"s": pa.array([{"1x": 1}])}))
    with pytest.raises(SchemaError, match=r"'id'.*'ID'"):
        normalize_batch(pa.table({"id": [1], "ID": [2]}))


# --- merge_schemas ------------------------------------------------------------------------------

TABLE = pa.schema([("id", pa.int32()), ("name", pa.string()), ("st", pa.struct([("a", pa.int64())]))])


def test_merge_into_a_new_table_is_the_batch_schema() -> None:
    batch = pa.schema([pa.field("id", pa.int64(), nullable=False)], metadata={"pandas": "{}"})
    assert exact(merge_schemas(None, batch)) == exact(batch)
    with pytest.raises(SchemaError, match=r"'n'.*all null"):
        merge_schemas(None, pa.schema([("n", pa.null())]))


def test_merge_appends_new_columns_as_nullable() -> None:
    batch = pa.schema(
        [
            ("name", pa.string()),
            pa.field("new", pa.int64(), nullable=False),
            ("id", pa.int32()),
            ("st", pa.struct([pa.field("b", pa.string(), nullable=False), ("a", pa.int64())])),
        ]
    )
    merged = merge_schemas(TABLE, batch)
    assert exact(merged) == exact(
        pa.schema(
            [
                ("id", pa.int32()),
                ("name", pa.string()),
                ("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
                ("new", pa.int64()),
            ]
        )
    )
    with pytest.raises(SchemaError, match=r"'ID'.*'id'"):
        merge_schemas(TABLE, pa.schema([*TABLE, ("ID", pa.int32())]))
    with pytest.raises(SchemaError, match=r"'x'.*all null"):
        merge_schemas(TABLE, pa.schema([*TABLE, ("x", pa.null())]))


def test_merge_missing_columns_are_refused_unless_allowed_and_nullable() -> None:
    batch = pa.schema([("id", pa.int32()), ("st", pa.struct([("a", pa.int64())]))])
    with pytest.raises(SchemaError, match="'name' is missing"):
        merge_schemas(TABLE, batch)
    assert exact(merge_schemas(TABLE, batch, allow_missing=True)) == exact(TABLE)
    with pytest.raises(SchemaError, match=r"'st.a' is missing"):
        merge_schemas(TABLE, pa.schema([*[*TABLE][:2], ("st", pa.struct([("b", pa.int64())]))]))
    required = pa.schema([pa.field("id", pa.int32(), nullable=False), ("name", pa.string())])
    with pytest.raises(SchemaError, match=r"'id' is missing.*not nullable"):
        merge_schemas(required, pa.schema([("name", pa.string())]), allow_missing=True)


@pytest.mark.parametrize(
    ("table_type", "batch_type", "merged"),
    [
        (pa.int32(), pa.int64(), pa.int64()),  # int -> long widens the table
        (pa.int32(), pa.float32(), pa.float32()),
        (pa.int32(), pa.float64(), pa.float64()),
        (pa.int64(), pa.float64(), pa.float64()),
        (pa.float32(), pa.float64(), pa.float64()),
        (pa.int64(), pa.int32(), pa.int64()),  # a narrower batch is cast up; the table never narrows
        (pa.float64(), pa.int64(), pa.float64()),
        (pa.string(), pa.binary(), pa.string()),
        (pa.binary(), pa.string(), pa.binary()),
        (pa.decimal128(10, 5), pa.decimal128(3, 1), pa.decimal128(10, 5)),
        (pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")),
        (pa.int64(), pa.null(), pa.int64()),
        (
            pa.list_(pa.field("element", pa.struct([("a", pa.int32())]))),
            pa.list_(pa.field("element", pa.struct([("a", pa.int64()), ("b", pa.string())]))),
            pa.list_(pa.field("element", pa.struct([("a", pa.int64()), ("b", pa.string())]))),
        ),
        (
            pa.map_(pa.string(), pa.field("value", pa.int32())),
            pa.map_(pa.string(), pa.field("value", pa.float64())),
            pa.map_(pa.string(), pa.field("value", pa.float64())),
        ),
    ],
    ids=str,
)
def test_merge_promotes_types_as_avro_does(table_type, batch_type, merged) -> None:
    out = merge_schemas(pa.schema([("c", table_type)]), pa.schema([("c", batch_type)]))
    assert exact(out) == exact(pa.schema([("c", merged)]))


@pytest.mark.parametrize(
    ("table_type", "batch_type"),
    [
        (pa.string(), pa.int32()),
        (pa.int32(), pa.string()),
        (pa.float64(), pa.decimal128(10, 2)),
        (pa.decimal128(10, 5), pa.decimal128(12, 5)),
        (pa.decimal128(10, 5), pa.decimal128(10, 6)),
        (pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")),
        (pa.timestamp("us", tz="UTC"), pa.timestamp("us")),
        (pa.date32(), pa.timestamp("us", tz="UTC")),
        (pa.bool_(), pa.int32()),
        (pa.struct([("a", pa.int32())]), pa.int32()),
        (pa.list_(pa.field("element", pa.int32())), pa.int32()),
    ],
    ids=str,
)
def test_merge_refuses_other_changes_naming_column_and_types(table_type, batch_type) -> None:
    with pytest.raises(SchemaError) as err:
        merge_schemas(pa.schema([("col", table_type)]), pa.schema([("col", batch_type)]))
    assert "'col'" in str(err.value) and str(table_type) in str(err.value) and str(batch_type) in str(err.value)


def test_merge_refuses_nested_changes_by_path() -> None:
    table = pa.schema([("s", pa.struct([("l", pa.list_(pa.field("element", pa.struct([("x", pa.int64())]))))]))])
    batch = pa.schema([("s", pa.struct([("l", pa.list_(pa.field("element", pa.struct([("x", pa.string())]))))]))])
    with pytest.raises(SchemaError, match=r"'s.l.element.x'"):
        merge_schemas(table, batch)


def test_upsert_shaping_end_to_end() -> None:
    """normalize -> merge -> conform, as the write path does: the batch comes out in the table's schema."""
    tags = pa.list_(pa.field("element", pa.string()))
    table_schema = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("tags", tags)])
    batch = pa.table(
        {
            "tags": pa.array([["a"], None], pa.large_list(pa.large_string())),
            "id": pa.array([1, 2], pa.int8()),
            "v": pa.array([1, None], pa.int32()),
            "extra": pa.array([None, None]),
        }
    )
    batch = normalize_batch(batch)
    with pytest.raises(SchemaError, match="'extra'"):
        merge_schemas(table_schema, batch.schema)
    batch = batch.drop_columns(["extra"]).append_column("extra", pa.array([Decimal("1.5"), None]))
    schema = merge_schemas(table_schema, batch.schema)
    out = conform(batch, schema)
    assert exact(out.schema) == exact(pa.schema([*table_schema, ("extra", pa.decimal128(2, 1))]))
    assert out.to_pylist() == [
        {"id": 1, "v": 1.0, "tags": ["a"], "extra": Decimal("1.5")},
        {"id": 2, "v": None, "tags": None, "extra": None},
    ]


# --- conform ------------------------------------------------------------------------------------


def test_conform_returns_conforming_tables_as_they_are() -> None:
    table = pa.Table.from_pylist(ALL_TYPES_ROWS, schema=ALL_TYPES)
    assert conform(table, ALL_TYPES) is table
    tagged = table.replace_schema_metadata({"hoodie_min_record_key": "1"})
    out = conform(tagged, ALL_TYPES)
    assert out.schema.metadata is None and out.equals(table)
    assert out.column("l").chunk(0).buffers()[1].address == table.column("l").chunk(0).buffers()[1].address


def test_conform_reorders_fills_drops_and_widens() -> None:
    schema = pa.schema(
        [
            ("_hoodie_commit_time", pa.string()),
            ("id", pa.int64()),
            ("s", pa.struct([("a", pa.float64()), ("new", pa.string())])),
            ("missing", pa.list_(pa.field("element", pa.int32()))),
        ]
    )
    table = pa.table(
        {
            "dropped": [1, 2],
            "s": pa.array([{"z": 1, "a": 2}, None], pa.struct([("z", pa.int8()), ("a", pa.int32())])),
            "id": pa.array([5, None], pa.int32()),
            "_hoodie_commit_time": ["20240101000000000", None],
        }
    )
    out = conform(table, schema)
    assert exact(out.schema) == exact(schema)
    assert out.to_pylist() == [
        {"_hoodie_commit_time": "20240101000000000", "id": 5, "s": {"a": 2.0, "new": None}, "missing": None},
        {"_hoodie_commit_time": None, "id": None, "s": None, "missing": None},
    ]
    out.validate(full=True)


def test_conform_refuses_nulls_in_non_nullable_columns() -> None:
    required_k = pa.struct([pa.field("k", pa.int64(), nullable=False)])
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", required_k)])
    assert conform(pa.table({"id": [1], "s": [None]}), schema).num_rows == 1  # a null parent may hide its child
    with pytest.raises(SchemaError, match="'id' is not nullable"):
        conform(pa.table({"id": [1, None]}), schema)
    with pytest.raises(SchemaError, match=r"'s.k' is not nullable"):
        conform(pa.table({"id": [1], "s": [{"k": None}]}), schema)
    with pytest.raises(SchemaError, match="'id' is missing"):
        conform(pa.table({"s": [None]}), schema)


def test_conform_refuses_values_that_do_not_convert() -> None:
    with pytest.raises(SchemaError, match="'b'"):
        conform(pa.table({"b": pa.array([b"\xff"])}), pa.schema([("b", pa.string())]))


# --- random nested schemas ----------------------------------------------------------------------

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True).filter(lambda n: not n.startswith("_hoodie"))
PRIMITIVES = st.one_of(
    st.sampled_from(
        [
            pa.bool_(),
            pa.int32(),
            pa.int64(),
            pa.float32(),
            pa.float64(),
            pa.string(),
            pa.binary(),
            pa.date32(),
            pa.timestamp("us", tz="UTC"),
            pa.timestamp("ms", tz="UTC"),
            pa.timestamp("us"),
            pa.timestamp("ms"),
        ]
    ),
    st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: pa.decimal128(p, s))),
)


def fields_of(children: st.SearchStrategy) -> st.SearchStrategy:
    """Uniquely named (ignoring case, as Spark does) fields of the given types."""
    named = st.lists(
        st.tuples(NAMES, children, st.booleans()), min_size=1, max_size=4, unique_by=lambda f: f[0].lower()
    )
    return named.map(lambda fs: [pa.field(n, t, nullable=nullable) for n, t, nullable in fs])


TYPES = st.recursive(
    PRIMITIVES,
    lambda children: st.one_of(
        children.map(lambda t: pa.list_(pa.field("element", t))),
        children.map(lambda t: pa.map_(pa.string(), pa.field("value", t))),
        fields_of(children).map(pa.struct),
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(fields_of(TYPES), NAMES)
def test_random_nested_schemas_round_trip_through_avro(fields: list[pa.Field], table_name: str) -> None:
    schema = pa.schema(fields)
    avro = arrow_to_avro(schema, table_name)
    fastavro.parse_schema(json.loads(avro_schema_json(avro)))  # valid Avro: no clashing record names
    assert exact(avro_to_arrow(avro_schema_json(avro))) == exact(schema)
    assert normalize_batch(schema.empty_table()).schema == schema
    assert exact(merge_schemas(schema, schema)) == exact(schema)
