"""Schema evolution: which batches a table accepts, and data made to match the table's schema.

The rules follow Avro's schema resolution, which is what Hudi checks (the new schema must read
every file already written):
- a new column (top level or inside a struct) is appended at the end and becomes nullable, so
  rows written before it read as null;
- a column missing from the batch is refused by default, as Hudi does unless
  `hoodie.write.set.null.for.missing.columns`: an upsert rewrites whole rows, so a forgotten
  column would silently null the stored values of every updated row. With `allow_missing=True`
  a nullable column is filled with nulls (a non-nullable one is still refused);
- types widen as Avro promotes: int -> long, float, double; long -> float, double;
  float -> double. A narrower batch type is cast to the table's type. string and bytes read as
  each other, so the table keeps its own. Also accepted without changing the table, because the
  batch converts exactly: a decimal with no more integer or fraction digits than the table's
  (Python decimals infer their precision per batch), and timestamp[ms] into a timestamp[us]
  column of the same time-zone kind. Anything else is refused, naming column and both types;
- nullability is the table's: a non-nullable column stays so, and `conform` refuses a batch
  that actually has nulls in it (batches built by pyarrow declare every column nullable, so
  widening on the declaration would drop the constraint on the first write).
"""

from __future__ import annotations

import pyarrow as pa

from upsertlake.errors import SchemaError
from upsertlake.schema.types import (
    canonical_list,
    canonical_map,
    check_no_nulls,
    convert,
    same_type,
)

_PROMOTIONS = {
    pa.int32(): (pa.int64(), pa.float32(), pa.float64()),
    pa.int64(): (pa.float32(), pa.float64()),
    pa.float32(): (pa.float64(),),
}


def merge_schemas(
    table_schema: pa.Schema | None, batch_schema: pa.Schema, *, allow_missing: bool = False
) -> pa.Schema:
    """The table's data schema after accepting a batch of `batch_schema` (a normalized batch's)."""
    if table_schema is None:
        _check_typed(list(batch_schema), "")
        return pa.schema([f.remove_metadata() for f in batch_schema])
    return pa.schema(_merge_fields(list(table_schema), list(batch_schema), "", allow_missing))


def _merge_fields(table: list[pa.Field], batch: list[pa.Field], path: str, allow_missing: bool) -> list[pa.Field]:
    incoming = {f.name: f for f in batch}
    merged = []
    for field in table:
        field_path = f"{path}.{field.name}" if path else field.name
        if field.name in incoming:
            merged_type = _merge_type(field.type, incoming[field.name].type, field_path, allow_missing)
            merged.append(field.with_type(merged_type).remove_metadata())
        elif not field.nullable:
            raise SchemaError(f"column {field_path!r} is missing from the batch and is not nullable")
        elif not allow_missing:
            raise SchemaError(
                f"column {field_path!r} is missing from the batch; updated rows would lose its values "
                "(hoodie.write.set.null.for.missing.columns=true writes nulls instead)"
            )
        else:
            merged.append(field.remove_metadata())
    names = {f.name for f in table}
    known = {name.lower(): name for name in names}
    for field in batch:
        if field.name in names:
            continue
        field_path = f"{path}.{field.name}" if path else field.name
        if field.name.lower() in known:
            raise SchemaError(
                f"new column {field_path!r} differs from the table's {known[field.name.lower()]!r} only by case"
            )
        _check_typed([field], path)
        merged.append(field.with_nullable(True).remove_metadata())
    return merged


def _merge_type(table: pa.DataType, batch: pa.DataType, path: str, allow_missing: bool) -> pa.DataType:
    if same_type(table, batch) or pa.types.is_null(batch):
        return table
    if pa.types.is_struct(table) and pa.types.is_struct(batch):
        return pa.struct(_merge_fields(list(table), list(batch), path, allow_missing))
    if pa.types.is_list(table) and pa.types.is_list(batch):
        return canonical_list(_merge_type(table.value_type, batch.value_type, f"{path}.element", allow_missing))
    if pa.types.is_map(table) and pa.types.is_map(batch):
        return canonical_map(_merge_type(table.item_type, batch.item_type, f"{path}.value", allow_missing))
    if batch in _PROMOTIONS.get(table, ()):
        return batch
    if table in _PROMOTIONS.get(batch, ()) or {table, batch} == {pa.string(), pa.binary()}:
        return table
    if _converts_exactly(batch, table):
        return table
    raise SchemaError(f"column {path!r}: the table's type {table} cannot take the batch's type {batch}")


def _converts_exactly(batch: pa.DataType, table: pa.DataType) -> bool:
    if pa.types.is_decimal(batch) and pa.types.is_decimal(table):
        return bool(batch.scale <= table.scale and batch.precision - batch.scale <= table.precision - table.scale)
    if pa.types.is_timestamp(batch) and pa.types.is_timestamp(table):
        return (batch.tz is None) == (table.tz is None) and (batch.unit, table.unit) == ("ms", "us")
    return False


def _check_typed(fields: list[pa.Field], path: str) -> None:
    """A new column must say its type: one of only nulls (type null) gives none to record."""
    for field in fields:
        field_path = f"{path}.{field.name}" if path else field.name
        t = field.type
        if pa.types.is_null(t):
            raise SchemaError(f"column {field_path!r} is new and all null: give it a type (cast the column)")
        if pa.types.is_struct(t):
            _check_typed(list(t), field_path)
        elif pa.types.is_list(t):
            _check_typed([t.value_field.with_name("element")], field_path)
        elif pa.types.is_map(t):
            _check_typed([t.item_field.with_name("value")], field_path)


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s data as exactly `schema`: columns reordered, missing ones null, types converted.

    Reads Hudi's parquet-avro files (2-level lists with non-null `array` items, `key_value` map
    entries) and ours alike; columns not in `schema` are dropped. A table already in `schema`
    comes back as is (only its schema metadata replaced, e.g. the stale bloom filter footer keys
    a parquet file's schema carries, which must not leak into a rewritten file).
    """
    if same_type(pa.struct(list(data.schema)), pa.struct(list(schema))):
        if data.schema.equals(schema, check_metadata=True):
            return data
        return pa.Table.from_arrays(data.columns, schema=schema)
    present = set(data.column_names)
    columns = []
    for field in schema:
        if field.name in present:
            column = convert(data.column(field.name), field.type, field.name)
            if not field.nullable:
                check_no_nulls(column, None, field.name)
        elif field.nullable or not data.num_rows:
            column = pa.chunked_array([pa.nulls(data.num_rows, field.type)])
        else:
            raise SchemaError(f"column {field.name!r} is missing and is not nullable")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)
