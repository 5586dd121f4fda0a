"""Java's `String.hashCode` (31-polynomials over UTF-16 code units, wrapping at 32 bits), which
Hudi hashes keys by: the bucket index's buckets, the record index's file groups, the order a Java
`HashMap` iterates its keys in (the metadata table's HFiles)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def java_hash_codes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Java's `String.hashCode` of each string (null: 0, as `List.hashCode` counts it), as uint32
    bits: Horner's rule over the byte columns (h = 31 h + c, wrapping as Java's int does), the
    strings longest first so that the ones having a j-th byte are a prefix. A string with
    non-ASCII characters is hashed over its UTF-16 code units instead (the rare path, one at a time)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    values = values.cast(pa.large_string())
    n = len(values)
    out = np.zeros(n, np.uint32)
    if n == 0:
        return out
    _, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, n + 1, values.offset * 8)
    starts, lengths = offsets[:-1] - offsets[0], np.diff(offsets)
    if not data_buf or not lengths.any():
        return out
    data = np.frombuffer(data_buf, np.uint8, offsets[-1] - offsets[0], offsets[0])
    width = int(lengths.max())
    if (lengths == width).all():  # one width (fixed-width keys): the bytes are an n x width matrix
        matrix = data.reshape(n, width)
        for j in range(width):
            out = out * np.uint32(31) + matrix[:, j]
        wide = np.flatnonzero((matrix >= 0x80).any(axis=1)) if data.max() >= 0x80 else np.zeros(0, np.int64)
    else:
        order = np.argsort(-lengths, kind="stable")
        at = starts[order]
        having = n - np.cumsum(np.bincount(lengths, minlength=width + 1))  # having[j]: strings longer than j
        h = np.zeros(n, np.uint32)
        for j in range(width):
            m = int(having[j])
            h[:m] = h[:m] * np.uint32(31) + data[at[:m] + j]
        out[order] = h
        nonempty = np.flatnonzero(lengths > 0)
        wide = nonempty[np.maximum.reduceat(data, starts[nonempty]) >= 0x80] if data.max() >= 0x80 else nonempty[:0]
    for k in wide.tolist():
        out[k] = java_string_hash(values[k].as_py())
    return out


def java_string_hash(text: str) -> int:
    """`String.hashCode()` of one string, as 32-bit unsigned bits."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h

