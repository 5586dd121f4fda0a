"""Records of an Avro data block: Avro binary datums under the block's writer schema, each
preceded (in the block) by its length.

The MOR upsert writes these on its hot path and the merged read decodes them, so flat records
(every field a primitive, a date, a timestamp or a decimal, nullable or not) are encoded column
by column with numpy (zigzag varints, length-prefixed strings, union branch indexes), the
columns' bytes then interleaved into rows, and decoded the same way (avro_decode); records with
nested fields (structs, lists, maps) go through fastavro row by row. Both ways give the same
bytes and the same tables (tests compare them on random data).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import CorruptTableError, SchemaError
from upsertlake.logfile.avro_decode import PAD, branches, decode_flat, gather
from upsertlake.schema import META_COLUMNS, avro_to_arrow, parsed_avro_schema

# A block's bytes: a view of the log file's bytes (not copied) or bytes of their own.
Payload = bytes | memoryview

_INT32 = struct.Struct(">i")
_META_FIELD = {"type": ["null", "string"], "doc": "", "default": None}


def with_meta_fields(table_schema: dict[str, Any]) -> dict[str, Any]:
    """The writer schema of a log block: Hudi's meta fields first (HoodieAvroUtils.addMetadataFields)."""
    fields = [f for f in table_schema["fields"] if f["name"] not in META_COLUMNS]
    meta = [{"name": name, **_META_FIELD} for name in META_COLUMNS]
    return {**table_schema, "fields": meta + fields}


@lru_cache(maxsize=64)
def arrow_schema_of(schema_json: str) -> pa.Schema:
    """The Arrow schema of a block's records (meta columns kept)."""
    return avro_to_arrow(schema_json, keep_meta=True)


def decode_records(payload: Payload, count: int, schema_json: str) -> pa.Table:
    """`count` records as an Avro data block lists them (int32 length, then the datum) as an
    Arrow table in the schema's canonical Arrow types (meta columns kept)."""
    starts, ends = _bounds(payload, count)
    fields = json.loads(schema_json)["fields"]
    if all(_flat(f["type"]) for f in fields):
        return decode_flat(payload, starts, ends, fields, arrow_schema_of(schema_json))
    return _decode_rows(payload, starts, ends, schema_json)


def decode_record_runs(payloads: Sequence[Payload], counts: Sequence[int], schema_json: str) -> list[pa.Table]:
    """`decode_records` of each (payload, count) under one schema, in one pass over the fields
    (a pass costs a few milliseconds per block on top of its records: a slice's log files are
    read together). If the records of one payload do not end exactly where the next begins, each
    is decoded on its own, which names the damage as `decode_records` does."""
    if len(payloads) == 1:
        return [decode_records(payloads[0], counts[0], schema_json)]
    padded = b"".join([*payloads, PAD])  # the decoder reads past the end into PAD: one copy
    size = len(padded) - len(PAD)
    offsets = np.cumsum([0, *(len(p) for p in payloads)])
    firsts = np.cumsum([0, *counts])
    try:
        starts, ends = _bounds(padded, int(firsts[-1]), size)
    except CorruptTableError:
        starts = None
    aligned = starts is not None and all(
        c == 0 or starts[f] - 4 == o for c, f, o in zip(counts, firsts[:-1].tolist(), offsets[:-1].tolist())
    ) and (not len(ends) or ends[-1] == size)
    if not aligned:
        return [decode_records(p, c, schema_json) for p, c in zip(payloads, counts)]
    assert starts is not None  # aligned
    fields = json.loads(schema_json)["fields"]
    if all(_flat(f["type"]) for f in fields):
        table = decode_flat(padded, starts, ends, fields, arrow_schema_of(schema_json), padded=True)
    else:
        table = _decode_rows(padded, starts, ends, schema_json)
    return [table.slice(f, c) for f, c in zip(firsts[:-1].tolist(), counts)]


def decode_rows(payload: Payload, count: int, schema_json: str) -> pa.Table:
    """`decode_records` through fastavro, one record at a time (any schema)."""
    return _decode_rows(payload, *_bounds(payload, count), schema_json)


def _decode_rows(payload: Payload, starts: np.ndarray, ends: np.ndarray, schema_json: str) -> pa.Table:
    parsed = parsed_avro_schema(schema_json)
    try:
        rows = [fastavro.schemaless_reader(io.BytesIO(payload[s:e]), parsed, None) for s, e in zip(starts, ends)]
        return pa.Table.from_pylist(rows, schema=arrow_schema_of(schema_json))
    except (EOFError, ValueError, IndexError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise CorruptTableError(f"Avro records do not fit their block's schema: {e}") from e


def split_datums(payload: Payload, count: int) -> list[Payload]:
    """The `count` records of a block's payload as their Avro binary datums, undecoded (for
    readers that decode them as Avro values, not as table rows: the archived timeline)."""
    starts, ends = _bounds(payload, count)
    return [payload[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def join_datums(datums: Sequence[bytes]) -> bytes:
    """A block's payload of the given Avro binary datums, each preceded by its length."""
    return b"".join(part for d in datums for part in (_INT32.pack(len(d)), d))


def _bounds(payload: Payload, count: int, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Where each record's datum starts and ends in the payload (its first `size` bytes)."""
    length_at = _INT32.unpack_from
    prefixes: list[int] = []
    add = prefixes.append
    pos = 0
    try:
        for _ in range(count):  # each length says where the next record starts: a chain, walked once
            add(pos)
            pos += 4 + length_at(payload, pos)[0]
    except struct.error:
        raise CorruptTableError(f"the lengths of {count} records run past the block's end") from None
    starts = np.array(prefixes, np.int64) + 4
    ends = np.empty(count, np.int64)
    ends[:-1] = starts[1:] - 4
    if count:
        ends[-1] = pos
    if pos > (len(payload) if size is None else size) or (ends < starts).any():
        raise CorruptTableError(f"the lengths of {count} records run past the block's end")
    return starts, ends


def encode_records(data: pa.Table, schema_json: str) -> bytes:
    """Each row of `table` as an Avro data block lists it: int32 (big-endian) length, then the
    row's Avro binary datum under `schema_json`. Columns are matched by name; a nullable field
    the table lacks is written null."""
    return bytes(encode_record_runs(data, schema_json, [data.num_rows])[0])


def encode_record_runs(data: pa.Table, schema_json: str, run_ends: Sequence[int]) -> list[bytes | memoryview]:
    """`encode_records` of each run of rows, table[run_ends[i-1]:run_ends[i]], in one pass over
    the columns: a write encodes the rows of all its file groups at once, then frames a block
    for each (encoding a run at a time costs about a millisecond a run on top). The runs are
    views of one buffer (no copy: the framing copies them once, into the blocks)."""
    schema = json.loads(schema_json)
    cuts = np.concatenate([[0], np.asarray(run_ends, np.int64)])
    if not all(_flat(f["type"]) for f in schema["fields"]):
        return [encode_rows(data.slice(a, b - a), schema_json) for a, b in pairwise(cuts)]
    payload, offsets = _encode_flat(data, schema)
    at = offsets[cuts]
    return [payload[a:b] for a, b in pairwise(at)]


def encode_rows(data: pa.Table, schema_json: str) -> bytes:
    """`encode_records` through fastavro, one row at a time (any schema)."""
    parsed = parsed_avro_schema(schema_json)
    names = {f["name"] for f in json.loads(schema_json)["fields"]}
    rows = data.select([n for n in data.column_names if n in names]).to_pylist(maps_as_pydicts="strict")
    out = io.BytesIO()
    datum = io.BytesIO()
    for row in rows:
        datum.seek(0)
        datum.truncate()
        fastavro.schemaless_writer(datum, parsed, row)
        out.write(datum.tell().to_bytes(4, "big"))
        out.write(datum.getvalue())
    return out.getvalue()


# ---- vectorized encoding of flat records ------------------------------------------------------

_PRIMITIVE = {"boolean", "int", "long", "float", "double", "string", "bytes"}


def _flat(avro_type: Any) -> bool:
    t, _ = branches(avro_type)
    if isinstance(t, str):
        return t in _PRIMITIVE
    if isinstance(t, dict):
        kind, logical = t.get("type"), t.get("logicalType")
        if kind in ("int", "long") and logical is not None:
            return True
        return kind == "fixed" and logical == "decimal"
    return False


class _Rows:
    """Per-row byte segments, appended in field order, interleaved into rows by `finish`.

    Arrow's binary join interleaves them at a cost per row and segment, so adjacent segments of
    the same width in every row (union branches, doubles, varints that all take the same bytes,
    and the leading length) are first joined into one with numpy."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.segments: list[tuple[np.ndarray, np.ndarray]] = []  # (flat bytes, per-row lengths)
        self.fixed: list[np.ndarray] = [np.zeros((n, 4), np.uint8)]  # (n, width) pieces; first: the length

    def add(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        if self.n and (lengths == lengths[0]).all():
            self.fixed.append(flat.reshape(self.n, int(lengths[0])))
        else:
            self._close_fixed()
            self.segments.append((flat, lengths))

    def _close_fixed(self) -> None:
        if self.fixed:
            joined = _side_by_side(self.fixed, self.n)
            self.segments.append((joined.reshape(-1), np.full(self.n, joined.shape[1], np.int64)))
            self.fixed = []

    def finish(self) -> tuple[memoryview, np.ndarray]:
        """(the rows, each preceded by its length as a big-endian int32, in Arrow's buffer, not
        copied; where each row starts)."""
        if not self.n:
            return memoryview(b""), np.zeros(1, np.int64)
        self._close_fixed()
        row_len = sum((lengths for _, lengths in self.segments), np.zeros(self.n, np.int64)) - 4
        first, widths = self.segments[0]
        first.reshape(self.n, int(widths[0]))[:, :4] = row_len.astype(">i4").view(np.uint8).reshape(self.n, 4)
        pieces = [_binary(flat, lengths) for flat, lengths in self.segments]
        if len(pieces) == 1:
            rows = pieces[0]
        else:  # Arrow concatenates the pieces row by row in one pass; the result's data are the rows
            rows = pc.binary_join_element_wise(*pieces, pa.scalar(b"", pa.binary()))
        offsets = np.frombuffer(rows.buffers()[1], np.int32, self.n + 1, rows.offset * 4).astype(np.int64)
        return memoryview(rows.buffers()[2])[offsets[0] : offsets[-1]], offsets - offsets[0]


def _side_by_side(pieces: list[np.ndarray], n: int) -> np.ndarray:
    """The (n, width) byte pieces joined row by row into one (n, total width): each piece copied
    as one field of a packed record per row, a copy per row and piece (np.hstack copies byte by
    byte, twice as slow)."""
    pieces = [p for p in pieces if p.shape[1]]
    if len(pieces) == 1:
        return pieces[0]
    record = np.dtype([(f"f{i}", f"V{p.shape[1]}") for i, p in enumerate(pieces)])
    out = np.empty(n, record)
    for i, p in enumerate(pieces):
        out[f"f{i}"] = np.ascontiguousarray(p).view(f"V{p.shape[1]}").reshape(n)
    return out.view(np.uint8).reshape(n, record.itemsize)


def _binary(flat: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array whose row i is the next lengths[i] bytes of flat (zero-copy)."""
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    body = pa.py_buffer(np.ascontiguousarray(flat))
    return pa.Array.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(offsets), body])


def _varints(values: np.ndarray, valid: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Avro's zigzag varint of each int64: (flat bytes, per-value lengths); nothing where not valid."""
    v = values.astype(np.int64, copy=False)
    if valid is not None:
        v = v[valid]
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    lengths = np.ones(len(z), np.int64)
    rest = z.copy()
    for _ in range(9):
        rest >>= np.uint64(7)
        more = rest != 0
        if not more.any():
            break
        lengths += more
    width = int(lengths.max()) if len(lengths) else 1
    k = np.arange(width, dtype=np.uint64)
    groups = ((z[:, None] >> (np.uint64(7) * k)) & np.uint64(0x7F)).astype(np.uint8)
    position = k.astype(np.int64)[None, :]
    groups |= (position < (lengths[:, None] - 1)).astype(np.uint8) << 7
    flat = groups[position < lengths[:, None]]
    return flat, _spread(lengths, valid)


def _spread(lengths: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """Per-row lengths from the valid rows' lengths (0 where not valid)."""
    if valid is None:
        return lengths
    out = np.zeros(len(valid), np.int64)
    out[valid] = lengths
    return out


def _fixed(values: np.ndarray, width: int, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-width little-endian (or already ordered) bytes per value, nothing for invalid rows."""
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(len(values), width)
    if valid is None:
        return raw.reshape(-1), np.full(len(values), width, np.int64)
    return raw[valid].reshape(-1), np.where(valid, width, 0).astype(np.int64)


def _encode_flat(data: pa.Table, schema: dict[str, Any]) -> tuple[memoryview, np.ndarray]:
    n = data.num_rows
    if not n:
        return memoryview(b""), np.zeros(1, np.int64)
    rows = _Rows(n)
    for field in schema["fields"]:
        name = field["name"]
        avro_type, null_index = branches(field["type"])
        if name in data.column_names:
            column = data.column(name).combine_chunks()
        elif null_index is None:
            raise SchemaError(f"column {name!r} is missing and its Avro type is not nullable")
        else:
            column = pa.nulls(n)
        valid = None
        if null_index is not None:
            valid = np.ones(n, bool) if column.null_count == 0 else np.asarray(column.is_valid())
            branch = np.where(valid, 1 - null_index, null_index).astype(np.uint8) << 1  # zigzag of 0/1
            rows.add(branch, np.ones(n, np.int64))
            if pa.types.is_null(column.type):
                continue
        elif column.null_count:
            raise SchemaError(f"column {name!r} has null values but its Avro type is not nullable")
        _encode_values(rows, column, avro_type, valid, name)
    return rows.finish()


def _encode_values(rows: _Rows, column: pa.Array, avro_type: Any, valid: np.ndarray | None, name: str) -> None:
    kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
    logical = None if isinstance(avro_type, str) else avro_type.get("logicalType")
    has_nulls = valid is not None and not valid.all()
    if kind in ("string", "bytes"):
        if pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
            column = column.cast(pa.string() if kind == "string" else pa.binary())
        if not (pa.types.is_string(column.type) or pa.types.is_binary(column.type)):
            raise SchemaError(f"column {name!r}: {column.type} cannot be written as Avro {kind}")
        offsets = np.frombuffer(column.buffers()[1], np.int32, len(column) + 1, column.offset * 4).astype(np.int64)
        lengths = np.diff(offsets)
        if has_nulls:
            assert valid is not None
            lengths = np.where(valid, lengths, 0)
        data = column.buffers()[2]
        body = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        if has_nulls or offsets[0] != 0:
            body = gather(body, offsets[:-1], lengths)
        else:
            body = body[: offsets[-1]]
        rows.add(*_varints(lengths, valid if has_nulls else None))
        rows.add(body, lengths)
        return
    if kind == "boolean":
        values = np.asarray(pc.fill_null(column, False)).astype(np.uint8)
        rows.add(*_fixed(values, 1, valid if has_nulls else None))
        return
    if kind in ("float", "double"):
        dtype = np.float32 if kind == "float" else np.float64
        values = np.asarray(pc.fill_null(column.cast(pa.from_numpy_dtype(dtype)), 0)).astype(dtype, copy=False)
        rows.add(*_fixed(values, dtype().itemsize, valid if has_nulls else None))
        return
    if kind == "fixed" and logical == "decimal":
        size = avro_type["size"]
        column = _cast(column, pa.decimal128(avro_type["precision"], avro_type.get("scale", 0)), name)
        raw = np.frombuffer(column.buffers()[1], np.uint8, len(column) * 16, column.offset * 16).reshape(-1, 16)
        big_endian = np.ascontiguousarray(raw[:, ::-1][:, 16 - size :])
        rows.add(*_fixed(big_endian, size, valid if has_nulls else None))
        return
    if kind in ("int", "long"):
        if logical in _LOGICAL:  # the values in the logical type's unit, then their storage integers
            target = _LOGICAL[logical]
            if pa.types.is_timestamp(target) and pa.types.is_timestamp(column.type):
                target = pa.timestamp(target.unit, column.type.tz)
            column = _cast(column, target, name)
            column = column.view(pa.int64() if column.type.bit_width == 64 else pa.int32())
        if not pa.types.is_integer(column.type):
            raise SchemaError(f"column {name!r}: {column.type} cannot be written as Avro {kind}")
        values = np.asarray(pc.fill_null(column, 0)).astype(np.int64)
        rows.add(*_varints(values, valid if has_nulls else None))
        return
    raise SchemaError(f"column {name!r}: Avro type {avro_type} is not a flat type")


_LOGICAL = {
    "date": pa.date32(),
    "timestamp-millis": pa.timestamp("ms"),
    "timestamp-micros": pa.timestamp("us"),
    "local-timestamp-millis": pa.timestamp("ms"),
    "local-timestamp-micros": pa.timestamp("us"),
}


def _cast(column: pa.Array, target: pa.DataType, name: str) -> pa.Array:
    """`column` as `target` exactly (a value that would change is a SchemaError)."""
    if column.type == target:
        return column
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"column {name!r}: {column.type} values do not convert exactly to {target}: {e}") from e
