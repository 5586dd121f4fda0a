"""Arrow types as a Hudi table can hold them, and the one converter that rebuilds data to a type.

A batch may use any Arrow type; the table stores only what Avro (and Spark, Hudi's main reader)
can express. `normalize_batch` widens what converts without loss and refuses the rest up front,
naming the column, so a bad batch fails before anything is written:

widened: int8/int16/uint8/uint16 -> int32; uint32 -> int64; float16 -> float32;
    large_string/string_view -> string; large_binary/binary_view/fixed_size_binary -> binary;
    decimal32/decimal64, and decimal256 of precision <= 38 -> decimal128; dictionary and
    run-end encoded -> their value type; large_list/fixed_size_list/list_view -> list;
    timestamp[s] -> timestamp[ms]; timestamp with any time zone -> the same instants in UTC;
    date64 -> date32 and timestamp[ns] -> timestamp[us] when every value converts exactly
    (whole days, whole microseconds), else refused.
refused: uint64 (no Avro type holds values above 2^63-1), time32/time64 (Spark cannot read
    parquet TIME columns, so the table would be unreadable to Hudi), duration, interval, union,
    extension types, decimals beyond precision 38 or with a negative scale, map keys that are
    not strings, empty structs, column names Avro rejects, duplicate names (also by case, as
    Spark resolves names case-insensitively).
kept for `merge_schemas` to resolve: null-typed columns (all values null, no type of their own).

Canonical nested types: `list<element: T>` and `map<string, T>` (entries/key/value), elements
and values always nullable (see `avro.py`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import SchemaError
from upsertlake.schema.avro import MAX_DECIMAL_PRECISION, check_avro_name

_WIDER = {
    pa.int8(): pa.int32(),
    pa.int16(): pa.int32(),
    pa.uint8(): pa.int32(),
    pa.uint16(): pa.int32(),
    pa.uint32(): pa.int64(),
    pa.float16(): pa.float32(),
    pa.large_string(): pa.string(),
    pa.string_view(): pa.string(),
    pa.large_binary(): pa.binary(),
    pa.binary_view(): pa.binary(),
    pa.date64(): pa.date32(),
}
_KEPT = (
    pa.null(),
    pa.bool_(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.binary(),
    pa.date32(),
)
_WHY_NOT = {
    "uint64": "values above 2^63-1 have no Avro type; cast to int64 or decimal128(20, 0)",
    "time": "Spark, Hudi's main engine, cannot read parquet TIME columns; cast to int64 or string",
    "duration": "Avro has no duration type; cast to int64",
    "interval": "Avro has no interval type Spark reads",
    "union": "Avro unions other than [null, T] are not readable by Spark",
    "extension": "extension types are not kept; cast to the storage type",
}


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Type equality including child field names (Arrow's `==` ignores list and map child names)."""
    return a == b and all(_same_field(a.field(i), b.field(i)) for i in range(a.num_fields))


def _same_field(a: pa.Field, b: pa.Field) -> bool:
    return a.name == b.name and a.nullable == b.nullable and same_type(a.type, b.type)


def canonical_list(element: pa.DataType) -> pa.DataType:
    """`list<element: T>`, nullable elements: the names parquet's LIST spec and pyarrow write."""
    return pa.list_(pa.field("element", element))


def canonical_map(value: pa.DataType) -> pa.DataType:
    """`map<string, T>` (entries/key/value), nullable values: Avro map keys are strings."""
    return pa.map_(pa.string(), pa.field("value", value))


def normalize_batch(data: pa.Table) -> pa.Table:
    """The batch with every column widened to its canonical type; SchemaError if one cannot be."""
    check_unique_names(data.schema.names, "")
    fields = []
    for field in data.schema:
        check_avro_name(field.name, field.name)
        fields.append(field.with_type(normalize_type(field.type, field.name)))
    if all(same_type(f.type, c.type) for f, c in zip(fields, data.columns)):
        return data
    columns = [convert(col, f.type, f.name) for col, f in zip(data.columns, fields)]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=data.schema.metadata))


def check_unique_names(names: list[str], path: str) -> None:
    """Avro needs unique field names; Spark, matching names case-insensitively, needs them by case too."""
    seen: dict[str, str] = {}
    for name in names:
        if name.lower() in seen:
            where = f" in {path!r}" if path else ""
            other = seen[name.lower()]
            raise SchemaError(f"columns {other!r} and {name!r}{where} clash (names are matched ignoring case)")
        seen[name.lower()] = name


def normalize_type(t: pa.DataType, path: str) -> pa.DataType:
    """The canonical type data of type `t` is stored as, or SchemaError naming `path`."""
    if t in _KEPT:
        return t
    if t in _WIDER:
        return _WIDER[t]
    if pa.types.is_dictionary(t) or pa.types.is_run_end_encoded(t):
        return normalize_type(t.value_type, path)
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_decimal(t):
        if t.precision > MAX_DECIMAL_PRECISION or not 0 <= t.scale <= t.precision:
            raise SchemaError(
                f"column {path!r}: {t} does not fit a Hudi decimal (precision <= {MAX_DECIMAL_PRECISION}, "
                "0 <= scale <= precision)"
            )
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        unit = {"s": "ms", "ns": "us"}.get(t.unit, t.unit)
        return pa.timestamp(unit, tz="UTC" if t.tz else None)
    if _is_list_like(t):
        return canonical_list(normalize_type(t.value_type, f"{path}.element"))
    if pa.types.is_map(t):
        if not pa.types.is_string(normalize_type(t.key_type, f"{path}.key")):
            raise SchemaError(f"column {path!r}: Avro map keys are strings, not {t.key_type}")
        return canonical_map(normalize_type(t.item_type, f"{path}.value"))
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            raise SchemaError(f"column {path!r}: a struct without fields cannot be stored")
        check_unique_names([f.name for f in t], path)
        fields = []
        for f in t:
            check_avro_name(f.name, f"{path}.{f.name}")
            fields.append(pa.field(f.name, normalize_type(f.type, f"{path}.{f.name}"), f.nullable))
        return pa.struct(fields)
    raise SchemaError(f"column {path!r}: {t} cannot be stored losslessly in a Hudi table ({_why_not(t)})")


def _why_not(t: pa.DataType) -> str:
    if isinstance(t, pa.BaseExtensionType):
        kind = "extension"
    elif pa.types.is_uint64(t):
        kind = "uint64"
    elif pa.types.is_time(t):
        kind = "time"
    elif pa.types.is_duration(t):
        kind = "duration"
    elif pa.types.is_interval(t):
        kind = "interval"
    elif pa.types.is_union(t):
        kind = "union"
    else:
        return "no Avro type holds it"
    return _WHY_NOT[kind]


def _is_list_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def convert(
    data: pa.Array | pa.ChunkedArray, target: pa.DataType, path: str
) -> pa.Array | pa.ChunkedArray:
    """`data` rebuilt as `target`: nested fields matched by name, missing ones null, extra dropped.

    Scalar casts are exact (SchemaError naming `path` if a value would change), except
    int -> float, which rounds as Avro's promotion does.
    """
    if same_type(data.type, target):
        return data
    if isinstance(data, pa.ChunkedArray):
        return pa.chunked_array([_convert_array(c, target, path) for c in data.chunks], type=target)
    return _convert_array(data, target, path)


def _convert_array(arr: pa.Array, target: pa.DataType, path: str) -> pa.Array:
    src = arr.type
    if same_type(src, target):
        return arr
    if pa.types.is_dictionary(src):
        return _convert_array(arr.dictionary_decode(), target, path)
    if pa.types.is_run_end_encoded(src):
        return _convert_array(pc.run_end_decode(arr), target, path)
    if pa.types.is_null(src):
        return pa.nulls(len(arr), target)
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(src) and pa.types.is_struct(target):
        children = []
        for field in target:
            child_path = f"{path}.{field.name}"
            index = src.get_field_index(field.name)
            child = _convert_array(arr.field(index), field.type, child_path) if index >= 0 else None
            child = pa.nulls(len(arr), field.type) if child is None else child
            if not field.nullable:
                check_no_nulls(child, mask, child_path)
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if _is_list_like(src) and pa.types.is_list(target):
        # Rebuilt from the visible values: pyarrow's cast from list views loses values, and
        # ListArray.from_arrays cannot combine a validity mask with sliced offsets.
        values = _convert_array(pc.list_flatten(arr), target.value_type, f"{path}.element")
        if not target.value_field.nullable:
            check_no_nulls(values, None, f"{path}.element")
        lengths = pc.fill_null(pc.list_value_length(arr), 0).cast(pa.int64())
        ends = pc.cumulative_sum(lengths)
        offsets = pa.concat_arrays([pa.array([0], pa.int64()), ends]).cast(pa.int32())
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
    if pa.types.is_map(src) and pa.types.is_map(target):
        if arr.offset:
            arr = pa.concat_arrays([arr])  # from_arrays cannot combine a validity mask with sliced offsets
        keys = _convert_array(arr.keys, target.key_type, f"{path}.key")
        items = _convert_array(arr.items, target.item_type, f"{path}.value")
        if not target.item_field.nullable:
            check_no_nulls(items, None, f"{path}.value")
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=target, mask=mask)
    if pa.types.is_nested(src) or pa.types.is_nested(target):
        raise SchemaError(f"column {path!r}: {src} cannot become {target}")
    rounding = pa.types.is_integer(src) and pa.types.is_floating(target)
    try:
        return arr.cast(target, safe=not rounding)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"column {path!r}: {src} values do not convert exactly to {target}: {e}") from e


def check_no_nulls(arr: pa.Array | pa.ChunkedArray, parent_nulls: pa.Array | None, path: str) -> None:
    """A non-nullable field may hold nulls only under a null parent."""
    if not arr.null_count:
        return
    nulls = arr.is_null() if parent_nulls is None else pc.and_not(arr.is_null(), parent_nulls)
    if pc.any(nulls).as_py():
        raise SchemaError(f"column {path!r} is not nullable but the data has null values")
