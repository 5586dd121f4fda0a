"""Delete block content: version 3's Avro `HoodieDeleteRecordList`, ordering values wrapped.

Hudi (HoodieDeleteBlock) writes int32 version, int32 length, then the list; each record's
ordering value is a union of wrapper records (BooleanWrapper, IntWrapper, LongWrapper, ...), so
an int 0 is the union branch then the int. Hudi's writers put IntWrapper(0) when a delete has no
ordering value of its own; readers then let the delete win over any earlier record. Version 2
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
                                "type": ["null"]
                                + [
                                    {"type": "record", "name": name, "fields": [{"name": "value", "type": value}]}
                                    for name, value, _ in _WRAPPERS
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
_BRANCH_OF = {f"{_NS}.{name}": i + 1 for i, (name, _, _) in enumerate(_WRAPPERS)}


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
    keys: list[str] = []
    partitions: list[str] = []
    values: list[Any] = []
    natural: list[bool] = []
    branches: set[int] = set()
    for rec in records["deleteRecordList"]:
        keys.append(rec["recordKey"])
        partitions.append(rec["partitionPath"])
        wrapped = rec["orderingVal"]
        if wrapped is None:
            values.append(None)
            natural.append(True)
            continue
        name, inner = wrapped
        branch = _BRANCH_OF[name]
        value = inner["value"]
        if branch == _INT_WRAPPER and value == 0:
            values.append(None)
            natural.append(True)
            continue
        branches.add(branch)
        values.append(_unwrap(branch, value))
        natural.append(False)
    if len(branches) > 1:
        raise CorruptTableError(
            f"a delete block mixes ordering value types: {sorted(_WRAPPERS[b - 1][0] for b in branches)}"
        )
    value_type = _WRAPPERS[branches.pop() - 1][2] if branches else pa.null()
    return pa.table(
        {
            DELETED_KEY: pa.array(keys, pa.string()),
            DELETED_PARTITION: pa.array(partitions, pa.string()),
            DELETED_ORDERING: pa.array(values, value_type),
            DELETED_NATURAL: pa.array(natural, pa.bool_()),
        }
    )


def _unwrap(branch: int, value: Any) -> Any:
    name = _WRAPPERS[branch - 1][0]
    if name == "DateWrapper":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if name == "DecimalWrapper":
        return decimal.Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-15)
    if name == "TimestampMicrosWrapper":
        return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=value)
    return value


def encode_delete_content(keys: pa.Table) -> bytes:
    """Version-3 delete block content for `keys` (record_key, partition_path, and optionally
    ordering_value and natural_order; without them every delete is a natural-order one)."""
    n = keys.num_rows
    record_keys = keys.column(DELETED_KEY).to_pylist()
    partitions = keys.column(DELETED_PARTITION).to_pylist() if DELETED_PARTITION in keys.column_names else [None] * n
    has_values = DELETED_ORDERING in keys.column_names
    values = keys.column(DELETED_ORDERING).to_pylist() if has_values else [None] * n
    natural = keys.column(DELETED_NATURAL).to_pylist() if DELETED_NATURAL in keys.column_names else [not has_values] * n
    branch = _branch_for(keys.column(DELETED_ORDERING).type) if has_values else None
    records = []
    for key, partition, value, nat in zip(record_keys, partitions, values, natural):
        if nat or branch is None:
            wrapped: Any = (f"{_NS}.IntWrapper", {"value": 0})
        elif value is None:
            wrapped = None
        else:
            wrapped = (f"{_NS}.{_WRAPPERS[branch - 1][0]}", {"value": _wrap(branch, value)})
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
