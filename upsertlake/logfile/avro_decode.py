"""Vectorized decoding of flat Avro records (the read side of avro_records' encoder).

All records are decoded at once, one field at a time: a cursor per record walks the field's
bytes (union branch, zigzag varint, fixed width, or length-prefixed bytes), so the work is a
handful of numpy operations per field, not per record. A record whose fields do not end exactly
where its length says is corrupt.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pyarrow as pa

from upsertlake.errors import CorruptTableError

PAD = bytes(16)  # zero bytes after the data: a cursor past the end (corrupt records) reads zeros, and
# gathers clip to the last of them ("clip" takes, no bounds arrays); the end check names the damage


def decode_flat(
    payload: bytes | memoryview,
    starts: np.ndarray,
    ends: np.ndarray,
    fields: list[dict[str, Any]],
    schema: pa.Schema,
    padded: bool = False,
) -> pa.Table:
    """Records payload[starts[i]:ends[i]] under the flat Avro `fields`, as `schema` (same names).
    `padded`: the payload ends with PAD zero bytes already (spares a copy)."""
    data = np.frombuffer(payload if padded else b"".join((payload, PAD)), np.uint8)
    pos = starts.astype(np.int64)
    columns = []
    for field in fields:
        avro_type, null_index = branches(field["type"])
        n = len(pos)
        valid: np.ndarray | None = None
        if null_index is not None:
            branch = data.take(pos, mode="clip")
            if (branch & 0xFD).any():  # the branch index of a 2-branch union is zigzag 0 or 1: byte 0 or 2
                raise CorruptTableError(f"field {field['name']!r}: a union branch index out of range")
            valid = branch != (null_index << 1)
            if valid.all():  # no nulls (the common case): no masks from here on
                valid = None
            pos = pos + 1
        at = pos if valid is None else pos[valid]
        values, width = _read(data, at, avro_type, ends if valid is None else ends[valid], field["name"])
        if valid is None:
            pos = pos + width
        else:
            step = np.zeros(n, np.int64)
            step[valid] = width
            pos = pos + step
        columns.append(_arrow(values, valid, n, schema.field(field["name"]).type, avro_type))
    if not np.array_equal(pos, ends):
        raise CorruptTableError("Avro records do not end where their lengths say: they do not fit their block's schema")
    return pa.Table.from_arrays(columns, schema=schema)


def branches(avro_type: Any) -> tuple[Any, int | None]:
    """(the non-null type, the null branch's index or None) of a field type; (None, None) for a
    union other than [null, T] / [T, null]."""
    if isinstance(avro_type, list):
        if len(avro_type) != 2 or avro_type.count("null") != 1:
            return None, None
        null_index = avro_type.index("null")
        return avro_type[1 - null_index], null_index
    return avro_type, None


def _read(data: np.ndarray, at: np.ndarray, avro_type: Any, ends: np.ndarray, name: str) -> tuple[Any, Any]:
    """(values, bytes taken per record) of one field at cursors `at`."""
    kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
    if kind == "boolean":
        return data.take(at, mode="clip") != 0, 1
    if kind in ("int", "long"):
        return _varints(data, at)
    if kind in ("float", "double"):
        dtype = np.dtype("<f4" if kind == "float" else "<f8")
        return _fixed_width(data, at, dtype), dtype.itemsize
    if kind == "fixed":
        size = avro_type["size"]
        return _fixed_width(data, at, np.dtype(f"V{size}")).view(np.uint8).reshape(-1, size), size
    # string / bytes: a varint length, then the bytes
    lengths, width = _varints(data, at)
    body_start = at + width
    if (lengths < 0).any() or (body_start + lengths > ends).any():
        raise CorruptTableError(f"field {name!r}: a length runs past its record")
    return (data, body_start, lengths), width + lengths


def _fixed_width(data: np.ndarray, at: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The `dtype` values (little-endian, unaligned) at byte offsets `at`: one gather through a
    view of the bytes that starts a value at every offset, not one gather per byte. Indexed, not
    `take`n: numpy's take copies a strided view whole first (40 MB for a 5 MB payload's doubles,
    50x slower); cursors of corrupt records are clipped into the padding by hand instead."""
    starts = np.ndarray((len(data) - dtype.itemsize + 1,), dtype, data, 0, (1,))
    return cast(np.ndarray, starts[np.minimum(at, len(starts) - 1)])


def _varints(data: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at `at`: (values, byte lengths); only as many bytes are read as the longest needs."""
    cols = [data.take(at, mode="clip")]
    ended = cols[0] < 0x80
    if ended.all():  # every value in one byte (short strings' lengths, small numbers): the common case
        z = cols[0].astype(np.int64)
        return (z >> 1) ^ -(z & 1), np.ones(len(z), np.int64)
    while not ended.all():
        if len(cols) == 10:
            raise CorruptTableError("a varint runs longer than 10 bytes")
        nxt = data.take(at + len(cols), mode="clip")
        cols.append(nxt)
        ended |= nxt < 0x80
    raw = np.stack(cols, axis=1)
    low = raw < 0x80
    lengths = np.argmax(low, axis=1) + 1
    k = np.arange(raw.shape[1])
    groups = (raw & 0x7F).astype(np.uint64) << (np.uint64(7) * k.astype(np.uint64))
    groups[k[None, :] >= lengths[:, None]] = 0
    z = np.bitwise_or.reduce(groups, axis=1)
    values = (z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64)
    return values, lengths


def _arrow(values: Any, valid: np.ndarray | None, n: int, target: pa.DataType, avro_type: Any) -> pa.Array:
    mask = None if valid is None else ~valid
    kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
    if kind in ("string", "bytes"):
        data, starts, lengths = values
        array = _strings(data, starts, lengths, valid, n, pa.string() if kind == "string" else pa.binary())
        if kind == "string":
            try:
                array.validate(full=True)
            except pa.ArrowInvalid as e:
                raise CorruptTableError(f"a string is not valid UTF-8: {e}") from None
        return array if array.type == target else array.cast(target)
    if kind == "fixed":  # a decimal: big-endian two's complement, sign-extended to 16 bytes
        size = values.shape[1]
        wide = np.where(values[:, :1] >= 0x80, 0xFF, 0).astype(np.uint8).repeat(16, axis=1)
        wide[:, 16 - size :] = values
        little = np.ascontiguousarray(wide[:, ::-1])
        full = np.zeros((n, 16), np.uint8)
        full[slice(None) if valid is None else valid] = little
        validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(target, n, [validity, pa.py_buffer(full)])
    dtype = values.dtype
    full_values = values if valid is None else np.zeros(n, dtype)
    if valid is not None:
        full_values[valid] = values
    if pa.types.is_timestamp(target) or pa.types.is_date(target):
        storage = pa.int64() if target.bit_width == 64 else pa.int32()
        return pa.array(full_values.astype(storage.to_pandas_dtype()), storage, mask=mask).view(target)
    return pa.array(full_values, mask=mask).cast(target)


def _strings(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None, n: int, kind: pa.DataType
) -> pa.Array:
    """The byte strings data[starts[i]:starts[i]+lengths[i]] (null where not `valid`), copied by
    Arrow's take: the payload read as an array whose even elements are the strings and whose odd
    elements are the bytes between them (offsets that only grow), its even elements taken."""
    m = len(starts)
    bounds = np.empty(2 * m + 1, np.int64)
    bounds[0:-1:2] = starts
    bounds[1::2] = starts + lengths
    bounds[-1] = bounds[-2] if m else 0
    large = bounds[-1] >= 2**31
    interleaved = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        2 * m,
        [None, pa.py_buffer(bounds if large else bounds.astype(np.int32)), pa.py_buffer(data)],
    )
    if valid is None:
        picked = interleaved.take(pa.array(np.arange(0, 2 * m, 2)))
    else:
        index = np.zeros(n, np.int64)
        index[valid] = np.arange(0, 2 * m, 2)
        picked = interleaved.take(pa.array(index, mask=~valid))
    if large:
        try:
            picked = picked.cast(pa.binary())
        except pa.ArrowInvalid:
            raise CorruptTableError("a data block's strings exceed 2 GiB") from None
    return picked.view(kind)


def gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """data[starts[i]:starts[i]+lengths[i]] for every i, concatenated, without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    out_starts = np.cumsum(lengths) - lengths
    return data[np.repeat(starts - out_starts, lengths) + np.arange(total)]
