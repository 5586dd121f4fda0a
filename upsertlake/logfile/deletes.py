"""Delete block content: version 3's Avro `HoodieDeleteRecordList`, ordering values wrapped.

Hudi (HoodieDeleteBlock) writes int32 version, int32 length, then the list; each record's
ordering value is a union of wrapper records (BooleanWrapper, IntWrapper, LongWrapper, ...), so
an int 0 is the union branch then the int. Hudi's writers put IntWrapper(0) when a delete has no
ordering value of its own; readers then let the delete win over any earlier record. A table
ordered by several fields (Hudi 1.1) gives a delete an ArrayWrapper: the fields' values in order,
each wrapped (or null), which reads here as a struct of them. Version 2
(and 1) content is Java-serialized (Kryo) by Hudi releases before delete blocks went to Avro:
refused by name.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import struct
from typing import Any, cast

import fastavro
import pyarrow as pa

from upsertlake.errors import CorruptTableError, UnsupportedLogBlockError
from upsertlake.logfile.blocks import CONTENT_VERSION
from upsertlake.schema.columns import DELETED_KEY, DELETED_NATURAL, DELETED_ORDERING, DELETED_PARTITION

_NS = "org.apache.hudi.avro.model"
_DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}
# (wrapper name, value type, the Arrow type its values unwrap to); the union's order is Hudi's
_WRAPPERS: list[tuple[str, Any, pa.DataType]] = [
    ("BooleanWrapper", "boolean", pa.bool_()),
    ("IntWrapper", "int", pa.int32()),
    ("LongWrapper", "long", pa.int64()),
    ("FloatWrapper", "float", pa.float32()),
    ("DoubleWrapper", "double", pa.float64()),
    ("BytesWrapper", "bytes", pa.binary()),
    ("StringWrapper", "string", pa.string()),
    ("DateWrapper", "int", pa.date32()),
    ("DecimalWrapper", "bytes", pa.decimal128(30, 15)),
    ("TimeMicrosWrapper", "long", pa.int64()),
    ("TimestampMicrosWrapper", "long", pa.timestamp("us", tz="UTC")),
]
_INT_WRAPPER = 2  # union branch of IntWrapper (branch 0 is null)
_ARRAY_WRAPPER = len(_WRAPPERS) + 1  # the branch after the scalar wrappers: several fields' values
# an ArrayWrapper's elements are of the scalar wrappers, or of LocalDateWrapper (a date too)
_ELEMENTS = [*_WRAPPERS, ("LocalDateWrapper", "int", pa.date32())]



def _wrapper(name: str, value: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": "value", "type": value}]}


_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "HoodieDeleteRecordList",
        "namespace": _NS,
        "fields": [
            {
                "name": "deleteRecordList",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieDeleteRecord",
                        "fields": [
                            {"name": "recordKey", "type": ["null", "string"], "default": None},
                            {"name": "partitionPath", "type": ["null", "string"], "default": None},
                            {
                                "name": "orderingVal",
                                "type": [
                                    "null",
                                    *(_wrapper(name, value) for name, value, _ in _WRAPPERS),
                                    {
                                        "type": "record",
                                        "name": "ArrayWrapper",
                                        "fields": [
                                            {
                                                "name": "wrappedValues",
                                                "type": [
                                                    "null",
                                                    {
                                                        "type": "array",
                                                        "items": [
                                                            "null",
                                                            *(name for name, _, _ in _WRAPPERS),
                                                            _wrapper("LocalDateWrapper", "int"),
                                                        ],
                                                    },
                                                ],
                                                "default": None,
                                            }
                                        ],
                                    },
                                ],
                                "default": None,
                            },
                        ],
                    },
                },
            }
        ],
    }
)
_BRANCH_OF = {f"{_NS}.{name}": i + 1 for i, (name, _, _) in enumerate(_ELEMENTS)}


def decode_delete_content(content: bytes | memoryview) -> pa.Table:
    """The keys of a delete block's content (columns: see DeleteBlock)."""
    if len(content) < 8:
        raise CorruptTableError(f"a delete block's content is {len(content)} bytes, too short for its header")
    version, length = struct.unpack_from(">ii", content)
    if version != CONTENT_VERSION:
        raise UnsupportedLogBlockError(
            f"delete block version {version}: only version {CONTENT_VERSION} (Avro, Hudi 0.12 and later) "
            "is read; older versions are Java-serialized"
        )
    try:
        records = cast("dict[str, Any]", fastavro.schemaless_reader(
            io.BytesIO(content[8 : 8 + length]), _SCHEMA, None, return_record_name=True
        ))
    except (EOFError, ValueError, IndexError) as e:
        raise CorruptTableError(f"a delete block's record list cannot be decoded: {e}") from e
    entries = records["deleteRecordList"]
    keys = pa.array([rec["recordKey"] for rec in entries], pa.string())
    partitions = pa.array([rec["partitionPath"] for rec in entries], pa.string())
    wrapped = [rec["orderingVal"] for rec in entries]
    natural = [w is None or (w[0] == f"{_NS}.IntWrapper" and w[1]["value"] == 0) for w in wrapped]
    given = [w for w, nat in zip(wrapped, natural) if not nat]
    arrays = [w for w in given if w[0] == f"{_NS}.ArrayWrapper"]
    if arrays and len(arrays) < len(given):
        raise CorruptTableError("a delete block mixes single ordering values with several fields' (ArrayWrapper)")
    if arrays:
        values = _tuples([(None if nat else w[1]["wrappedValues"]) for w, nat in zip(wrapped, natural)])
    else:
        values = _column([None if nat else w for w, nat in zip(wrapped, natural)])
    return pa.table(
        {
            DELETED_KEY: keys,
            DELETED_PARTITION: partitions,
            DELETED_ORDERING: values,
            DELETED_NATURAL: pa.array(natural, pa.bool_()),
        }
    )


def _column(wrapped: list[Any]) -> pa.Array:
    """Wrapped values ((wrapper name, {"value": v}), or None), all of one wrapper, as an array."""
    branches = {_BRANCH_OF[w[0]] for w in wrapped if w is not None}
    if len(branches) > 1:
        raise CorruptTableError(
            f"a delete block mixes ordering value types: {sorted(_ELEMENTS[b - 1][0] for b in branches)}"
        )
    if not branches:
        return pa.nulls(len(wrapped))
    branch = branches.pop()
    return pa.array([None if w is None else _unwrap(branch, w[1]["value"]) for w in wrapped], _ELEMENTS[branch - 1][2])


def _tuples(lists: list[list[Any] | None]) -> pa.Array:
    """ArrayWrappers' element lists (None: no values) as a struct array, field i the i-th values."""
    widths = {len(w) for w in lists if w is not None}
    if len(widths) != 1:
        raise CorruptTableError(f"a delete block's ordering values have different numbers of fields: {sorted(widths)}")
    (width,) = widths
    children = [_column([None if w is None else w[i] for w in lists]) for i in range(width)]
    mask = pa.array([w is None for w in lists], pa.bool_())
    return pa.StructArray.from_arrays(children, names=[str(i) for i in range(width)], mask=mask)


def _unwrap(branch: int, value: Any) -> Any:
    name = _ELEMENTS[branch - 1][0]
    if name in ("DateWrapper", "LocalDateWrapper"):
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if name == "DecimalWrapper":
        return decimal.Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-15)
    if name == "TimestampMicrosWrapper":
        return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=value)
    return value


def encode_delete_content(keys: pa.Table) -> bytes:
    """Version-3 delete block content for `keys` (record_key, partition_path, and optionally
    ordering_value and natural_order; without them every delete is a natural-order one). An
    ordering_value struct holds several fields' values, in order: Hudi 1.1's ArrayWrapper."""
    n = keys.num_rows
    record_keys = keys.column(DELETED_KEY).to_pylist()
    partitions = keys.column(DELETED_PARTITION).to_pylist() if DELETED_PARTITION in keys.column_names else [None] * n
    has_values = DELETED_ORDERING in keys.column_names
    values = keys.column(DELETED_ORDERING).to_pylist() if has_values else [None] * n
    natural = keys.column(DELETED_NATURAL).to_pylist() if DELETED_NATURAL in keys.column_names else [not has_values] * n
    value_type = keys.column(DELETED_ORDERING).type if has_values else pa.null()
    several = pa.types.is_struct(value_type)
    branches = [_branch_for(value_type.field(i).type) for i in range(value_type.num_fields)] if several else []
    branch = None if several else _branch_for(value_type)
    records = []
    for key, partition, value, nat in zip(record_keys, partitions, values, natural):
        if nat or (branch is None and not several):
            wrapped: Any = (f"{_NS}.IntWrapper", {"value": 0})
        elif value is None:
            wrapped = None
        elif several:
            elements = [_wrapped(b, v) for b, v in zip(branches, value.values())]
            wrapped = (f"{_NS}.ArrayWrapper", {"wrappedValues": elements})
        else:
            wrapped = _wrapped(branch, value)
        records.append({"recordKey": key, "partitionPath": partition, "orderingVal": wrapped})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _SCHEMA, {"deleteRecordList": records})
    body = out.getvalue()
    return struct.pack(">ii", CONTENT_VERSION, len(body)) + body


def _branch_for(t: pa.DataType) -> int | None:
    """The wrapper Hudi's wrapValueIntoAvro picks for a value of this Arrow type."""
    if pa.types.is_null(t):
        return None
    if pa.types.is_timestamp(t):
        return _BRANCH_OF[f"{_NS}.TimestampMicrosWrapper"]
    if pa.types.is_decimal(t):
        return _BRANCH_OF[f"{_NS}.DecimalWrapper"]
    for i, (_, _, arrow_type) in enumerate(_WRAPPERS):
        if t == arrow_type:
            return i + 1  # int64 finds LongWrapper before TimeMicrosWrapper, as Java's Long does
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _BRANCH_OF[f"{_NS}.StringWrapper"]
    raise UnsupportedLogBlockError(f"an ordering value of type {t} has no Hudi wrapper")


def _wrapped(branch: int | None, value: Any) -> Any:
    """A value in its wrapper, as fastavro writes a union branch (None stays null)."""
    if value is None or branch is None:
        return None
    return (f"{_NS}.{_WRAPPERS[branch - 1][0]}", {"value": _wrap(branch, value)})


def _wrap(branch: int, value: Any) -> Any:
    name = _WRAPPERS[branch - 1][0]
    if name == "DateWrapper":
        return (value - dt.date(1970, 1, 1)).days
    if name == "DecimalWrapper":
        unscaled = int(decimal.Decimal(value).scaleb(15).to_integral_value())
        return unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)
    if name == "TimestampMicrosWrapper":
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return value
