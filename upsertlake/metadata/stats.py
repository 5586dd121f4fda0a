"""Column statistics of the metadata table as upsertlake's FileColumnStats, for data skipping.

Hudi keeps each bound in a wrapper: table version 8 by Avro type (IntWrapper, LongWrapper,
DecimalWrapper as decimal(30,15), DateWrapper as days, TimestampMicrosWrapper, ...); version 9
also names the value's type (`valueType.typeOrdinal`, Hudi's ValueType: a decimal is its unscaled
bytes with "precision,scale", a timestamp a long in the unit its ordinal says). A bound is turned
into a Python value of the column's Arrow type; one that does not convert leaves the column
unknown (never a wrong range).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa

from upsertlake.metadata.records import Record, unwrap
from upsertlake.timeline.column_stats import FileColumnStats, column_entry

# ValueType ordinals of timestamps and their units (Hudi 1.1); version 8 wrote micros.
_TIMESTAMP_UNITS = {15: "ms", 16: "us", 17: "ns", 18: "ms", 19: "us", 20: "ns"}


def bound(stats: Record, field: str, t: pa.DataType) -> Any:
    """A column statistic's bound (`minValue` or `maxValue`) as a Python value of type `t`."""
    value = unwrap(stats, field)
    if value is None:
        return None
    ordinal: int | None = (stats.get("valueType") or {}).get("typeOrdinal")
    if pa.types.is_timestamp(t):
        unit = _TIMESTAMP_UNITS.get(ordinal, "us") if ordinal is not None else "us"
        return pa.scalar(int(value), pa.int64()).cast(pa.timestamp(unit, t.tz)).cast(t).as_py()
    if pa.types.is_date32(t):
        return pa.scalar(int(value), pa.int32()).cast(t).as_py()
    if pa.types.is_decimal(t):
        return Decimal(value).quantize(Decimal(1).scaleb(-t.scale))
    return pa.scalar(value).cast(t).as_py()


def file_stats(columns: Mapping[str, Record], schema: pa.Schema) -> FileColumnStats | None:
    """A file's statistics from its `column_stats` records (column -> record); None when none."""
    entries = {}
    rows = 0
    for name, stats in columns.items():
        if name not in schema.names:
            continue
        t = schema.field(name).type
        rows = max(rows, stats["valueCount"])
        try:
            low, high = bound(stats, "minValue", t), bound(stats, "maxValue", t)
        except (
            pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError, TypeError, ArithmeticError
        ):
            continue
        entries[name] = column_entry(t, low, high, stats["nullCount"], pa.types.is_floating(t))
    return FileColumnStats(rows, entries) if entries else None
