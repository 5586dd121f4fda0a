"""The ordering value of a record: what decides which of two records of one key wins under event
time ordering (Hudi's precombine field; since Hudi 1.1 `hoodie.table.ordering.fields`, several
fields compared in order: the second decides a tie of the first, and so on).

`ordering_values` gives one comparable column for any number of fields, so that every place that
compares, sorts or deduplicates by the ordering value works on one column: the field itself when
there is one; for several, each row's values encoded so that comparing the bytes compares the
tuples (a null sorts before any value of its field, as a null ordering value loses to any).
Integers, floats, booleans, dates, times, timestamps, strings and binaries are encoded; other
types in a tuple are refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import SchemaError

_NULL, _VALUE, _NOTHING = (pa.scalar(b, pa.large_binary()) for b in (b"\x00", b"\x01", b""))
_SIGN = np.uint64(1 << 63)


def ordering_values(data: pa.Table, fields: Sequence[str]) -> pa.ChunkedArray | pa.Array:
    """The ordering value of each row of `table` by `fields` (all of them must be columns)."""
    if len(fields) == 1:
        return data.column(fields[0])
    parts = [_encoded(data.column(name).combine_chunks(), name) for name in fields]
    return pc.binary_join_element_wise(*parts, _NOTHING)


def _encoded(column: pa.Array, name: str) -> pa.Array:
    """One field's values as bytes that sort as the values do, each prefixed by its null marker."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.dictionary_decode(), kind.value_type
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        raw = column.cast(pa.large_binary())
        # NUL becomes NUL 0xFF and every value ends in NUL NUL: a prefix sorts before its extensions
        escaped = pc.replace_substring(raw, b"\x00", b"\x00\xff")
        body = pc.binary_join_element_wise(escaped, pa.scalar(b"\x00\x00", pa.large_binary()), _NOTHING)
    else:
        body = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(8), len(column), [None, pa.py_buffer(_big_endian(column, name).tobytes())]
        ).cast(pa.large_binary())
    marked = pc.binary_join_element_wise(_VALUE, body, _NOTHING)
    return pc.if_else(pc.is_valid(column), marked, _NULL)


def _big_endian(column: pa.Array, name: str) -> np.ndarray:
    """Fixed-width values as unsigned 64-bit big-endian keys in the values' order."""
    kind = column.type
    if pa.types.is_boolean(kind):
        column, kind = column.cast(pa.uint8()), pa.uint8()
    if pa.types.is_date(kind) or pa.types.is_time(kind) or pa.types.is_timestamp(kind) or pa.types.is_duration(kind):
        column, kind = column.cast(pa.int64()), pa.int64()
    if pa.types.is_unsigned_integer(kind):
        keys = _filled(column.cast(pa.uint64()), np.uint64)
    elif pa.types.is_integer(kind):
        keys = _filled(column.cast(pa.int64()), np.int64).view(np.uint64) ^ _SIGN
    elif pa.types.is_floating(kind):
        bits = _filled(column.cast(pa.float64()), np.float64).view(np.uint64)
        keys = np.where(bits & _SIGN, ~bits, bits | _SIGN)
    else:
        raise SchemaError(
            f"ordering field {name!r} is of type {kind}: several ordering fields are compared as integers, "
            "floats, booleans, dates, times, timestamps, strings or binaries"
        )
    return keys.astype(">u8")


def _filled(column: pa.Array, dtype: type) -> np.ndarray:
    """The values as numpy (nulls as zero: their null marker decides before them)."""
    return np.asarray(pc.fill_null(column, pa.scalar(0, column.type)).to_numpy(zero_copy_only=False), dtype=dtype)
