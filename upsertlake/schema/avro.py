"""Arrow <-> Avro schemas, written exactly as Apache Hudi's Spark writer records them.

Hudi stores the table's Avro schema in every commit (`extraMetadata.schema`) and in
`hoodie.table.create.schema`; its readers take the columns from there. We mirror what Hudi's
writer produces: Spark's `SchemaConverters.toAvroType` names the top record
`hoodie.<table>.<table>_record`, a nested record after its field (namespace: the enclosing
record's full name), a decimal a `fixed` named `fixed` (namespace: `<record>.<field>`), and
Hudi's `AvroInternalSchemaConverter.fixNullOrdering` rewrites every nullable type as
`["null", T]` with `"default": null` on record fields. Keys are emitted in the order Java's Avro
prints them, so `avro_schema_json` gives the same text Hudi stores.

List elements and map values are always declared nullable, whatever the Arrow schema says:
Hudi declares them so (Spark's default `containsNull`), and the parquet-avro files Hudi writes
use 2-level lists that cannot store element nullability, so a non-null element read back from
such a file says nothing about the table.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import fastavro
import pyarrow as pa

from upsertlake.errors import SchemaError
from upsertlake.schema.columns import META_COLUMNS

META_SCHEMA = pa.schema([(name, pa.string()) for name in META_COLUMNS])



def full_schema(data_schema: pa.Schema) -> pa.Schema:
    """The schema of a base file: the five meta columns, then the data columns."""
    return pa.schema([*META_SCHEMA, *data_schema])


MAX_DECIMAL_PRECISION = 38  # Spark's (and so Hudi's) limit; decimal128 holds exactly this much

_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
_TIMESTAMPS = {
    "timestamp-millis": pa.timestamp("ms", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("ms"),
    "local-timestamp-micros": pa.timestamp("us"),
}


def check_avro_name(name: str, path: str) -> None:
    """Avro (and so Hudi's writer) rejects field names outside `[A-Za-z_][A-Za-z0-9_]*`."""
    if not _AVRO_NAME.match(name):
        raise SchemaError(
            f"column {path!r}: {name!r} is not a valid Avro name ([A-Za-z_][A-Za-z0-9_]*); rename it"
        )


def sanitize_name(name: str) -> str:
    """Hudi's `HoodieAvroUtils.sanitizeName`: each invalid UTF-16 unit becomes `__`."""
    out = []
    for i, ch in enumerate(name):
        valid = ch.isascii() and (ch.isalpha() or ch == "_" or (i > 0 and ch.isdigit()))
        out.append(ch if valid else "__" * (2 if ord(ch) > 0xFFFF else 1))
    return "".join(out)


def min_bytes_for_precision(precision: int) -> int:
    """Size of the `fixed` holding a decimal of this precision (Spark's `minBytesForPrecision`)."""
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def arrow_to_avro(schema: pa.Schema, table_name: str) -> dict[str, Any]:
    """The Avro schema Hudi records for a table with these data columns (meta columns left out)."""
    name = sanitize_name(table_name)
    namespace = f"hoodie.{name}"
    record = f"{name}_record"
    fields = [_avro_field(f, f"{namespace}.{record}", f.name) for f in schema if f.name not in META_COLUMNS]
    return {"type": "record", "name": record, "namespace": namespace, "fields": fields}


def _avro_field(field: pa.Field, parent: str, path: str) -> dict[str, Any]:
    check_avro_name(field.name, path)
    avro_type = _avro_type(field.type, f"{parent}.{field.name}", path)
    if field.nullable:
        return {"name": field.name, "type": ["null", avro_type], "default": None}
    return {"name": field.name, "type": avro_type}


def _avro_type(t: pa.DataType, fullname: str, path: str) -> Any:
    """`fullname` is the name a record (or decimal) at this position gets: `<record>.<field>`."""
    if pa.types.is_struct(t):
        namespace, _, name = fullname.rpartition(".")
        fields = [_avro_field(f, fullname, f"{path}.{f.name}") for f in t]
        return {"type": "record", "name": name, "namespace": namespace, "fields": fields}
    if pa.types.is_list(t):
        return {"type": "array", "items": ["null", _avro_type(t.value_type, fullname, f"{path}.element")]}
    if pa.types.is_map(t):
        if not pa.types.is_string(t.key_type):
            raise SchemaError(f"column {path!r}: Avro map keys are strings, not {t.key_type}")
        return {"type": "map", "values": ["null", _avro_type(t.item_type, fullname, f"{path}.value")]}
    if pa.types.is_decimal128(t) and 0 <= t.scale <= t.precision:
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": fullname,
            "size": min_bytes_for_precision(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t) and t.unit in ("ms", "us"):
        local = "" if t.tz else "local-"
        return {"type": "long", "logicalType": f"{local}timestamp-{'millis' if t.unit == 'ms' else 'micros'}"}
    for avro_name, arrow_type in _PRIMITIVES.items():
        if t == arrow_type:
            return avro_name
    raise SchemaError(f"column {path!r}: {t} has no Avro type Hudi writes; pass the data through normalize_batch")


def avro_schema_json(schema: dict[str, Any]) -> str:
    """Compact JSON, as Java's Avro prints a schema into commit metadata and hoodie.properties."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


@lru_cache(maxsize=64)
def parsed_avro_schema(schema_json: str) -> Any:
    """fastavro's parsed form of a schema's JSON, which its readers and writers take: log blocks,
    archived timeline files and metadata records repeat a few schemas, each parsed once."""
    return fastavro.parse_schema(json.loads(schema_json))


def avro_to_arrow(avro: dict[str, Any] | str, *, keep_meta: bool = False) -> pa.Schema:
    """The canonical Arrow schema of a Hudi table's Avro schema (meta columns left out unless
    `keep_meta`: a log block's records carry them).

    Logical types are honoured as Spark reads them: decimal, date, (local-)timestamp-millis/micros;
    others (time-millis/micros, uuid, ...) are read as their underlying type, as the Avro spec says.
    """
    root = json.loads(avro) if isinstance(avro, str) else avro
    if not isinstance(root, dict) or root.get("type") != "record":
        raise SchemaError(f"a table's Avro schema must be a record, got {str(root)[:200]}")
    struct = _ArrowBuilder().build(root, "", "")
    return pa.schema([f for f in struct if keep_meta or f.name not in META_COLUMNS])


class _ArrowBuilder:
    """Walks one Avro schema, remembering named types so later references to them resolve."""

    def __init__(self) -> None:
        self.named: dict[str, pa.DataType] = {}

    def build(self, avro: Any, namespace: str, path: str) -> pa.DataType:
        if isinstance(avro, str):
            if avro in _PRIMITIVES:
                return _PRIMITIVES[avro]
            for name in (f"{namespace}.{avro}", avro):
                if name in self.named:
                    return self.named[name]
            raise SchemaError(f"column {path!r}: unknown Avro type {avro!r}")
        if isinstance(avro, list):
            raise SchemaError(f"column {path!r}: a union other than [\"null\", T] is not supported: {avro}")
        kind = avro.get("type")
        if kind == "record":
            fullname, namespace = _fullname(avro, namespace)
            fields = [self.field(f, namespace, path) for f in avro["fields"]]
            return self._define(fullname, pa.struct(fields))
        if kind == "array":
            return pa.list_(pa.field("element", self._nullable(avro["items"], namespace, f"{path}.element")[0]))
        if kind == "map":
            value = self._nullable(avro["values"], namespace, f"{path}.value")[0]
            return pa.map_(pa.string(), pa.field("value", value))
        if kind == "enum":
            return self._define(_fullname(avro, namespace)[0], pa.string())
        logical = avro.get("logicalType")
        if logical == "decimal" and kind in ("fixed", "bytes"):
            precision, scale = avro["precision"], avro.get("scale", 0)
            if precision > MAX_DECIMAL_PRECISION:
                raise SchemaError(f"column {path!r}: decimal precision {precision} exceeds {MAX_DECIMAL_PRECISION}")
            arrow_type = pa.decimal128(precision, scale)
        elif logical == "date" and kind == "int":
            arrow_type = pa.date32()
        elif logical in _TIMESTAMPS and kind == "long":
            arrow_type = _TIMESTAMPS[logical]
        elif kind == "fixed":
            arrow_type = pa.binary()
        else:
            arrow_type = self.build(kind, namespace, path)
        if kind == "fixed":
            self._define(_fullname(avro, namespace)[0], arrow_type)
        return arrow_type

    def field(self, field: dict[str, Any], namespace: str, path: str) -> pa.Field:
        path = f"{path}.{field['name']}" if path else field["name"]
        arrow_type, nullable = self._nullable(field["type"], namespace, path)
        return pa.field(field["name"], arrow_type, nullable=nullable)

    def _nullable(self, avro: Any, namespace: str, path: str) -> tuple[pa.DataType, bool]:
        """A `["null", T]` (or `[T, "null"]`) union is a nullable T; null alone has no Arrow column."""
        branches = avro if isinstance(avro, list) else [avro]
        types = [b for b in branches if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")]
        if len(types) != 1:
            raise SchemaError(f"column {path!r}: only [\"null\", T] unions are supported, got {avro}")
        return self.build(types[0], namespace, path), len(types) < len(branches)

    def _define(self, fullname: str, arrow_type: pa.DataType) -> pa.DataType:
        self.named[fullname] = arrow_type
        return arrow_type


def _fullname(named: dict[str, Any], enclosing: str) -> tuple[str, str]:
    """(full name, namespace) of a named Avro type, by the spec's rules."""
    name = named["name"]
    if "." in name:
        return name, name.rpartition(".")[0]
    namespace = named.get("namespace", enclosing) or ""
    return (f"{namespace}.{name}" if namespace else name), namespace
