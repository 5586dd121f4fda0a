"""The entries of an HFile data block, decoded and encoded a whole block at a time.

Each entry is an HBase KeyValue: key length and value length (4 bytes each), the key (row length,
row, family length, family, qualifier, timestamp, type), the value, then tags (when the file has
them) and the MVCC version as a Hadoop VLong (when the file info's KEY_VALUE_VERSION is 1). Hudi's
keys are the row alone: empty family and qualifier, the newest timestamp, type Put, MVCC 0
(docs/DESIGN.md §10). Decoding walks the entries once for their starts (each entry's place
depends on the lengths before it: one `unpack_from` per entry), reads every entry's lengths with
NumPy, and gathers every key and every value with one NumPy mask each; encoding scatters them the
same way.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import HFileError
from upsertlake.hfile.encoding import read_vlong
from upsertlake.util.arrays import range_mask

# key length, value length, row length: the first ten bytes of every entry
_LENGTHS = struct.Struct(">IIH")
_KEY_VALUE_LENGTHS = struct.Struct(">II")
# bytes of a Hudi entry besides row and value: the two lengths (8), row length (2), family length
# (1), timestamp (8), type (1), MVCC (1)
ENTRY_OVERHEAD = 21
KEY_OVERHEAD = 12  # a key's bytes besides its row: row length, family length, timestamp, type


@dataclass(frozen=True)
class DataBlock:
    """One block's entries: where each row key and value lies in the uncompressed payload."""

    payload: bytes
    key_starts: np.ndarray  # int64, one per entry
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.key_starts)

    def key(self, i: int) -> bytes:
        start = int(self.key_starts[i])
        return self.payload[start:start + int(self.key_lengths[i])]

    def value(self, i: int) -> bytes:
        start = int(self.value_starts[i])
        return self.payload[start:start + int(self.value_lengths[i])]

    def search(self, key: bytes, lo: int = 0) -> int:
        """The first entry at or after `lo` whose key is not less than `key` (a binary search:
        keys are sorted); `len(self)` when there is none."""
        return bisect.bisect_left(_Keys(self), key, lo)

    def table(self, start: int = 0, stop: int | None = None) -> pa.Table:
        """Entries `start` to `stop` as an Arrow table of `key` and `value` (large binary)."""
        return entries_table([(self, start, len(self) if stop is None else stop)])


class _Keys(Sequence[bytes]):
    """A block's keys as a sequence for `bisect`: only the keys a search compares are sliced."""

    def __init__(self, block: DataBlock) -> None:
        self._block = block

    def __len__(self) -> int:
        return len(self._block)

    def __getitem__(self, i: int) -> bytes:  # type: ignore[override]
        return self._block.key(i)


def entries_table(parts: list[tuple[DataBlock, int, int]]) -> pa.Table:
    """The entries `start` to `stop` of each (block, start, stop), one block after another, as one
    Arrow table of `key` and `value` (large binary: a whole file may pass 2 GiB)."""
    keys, values = _columns(parts, ("key", "value"))
    return pa.table({"key": keys, "value": values})


def find(blocks: list[DataBlock], keys: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which of `keys` (large binary, distinct) the entries of `blocks` hold, and where: (key,
    block, entry) indexes of each key found, the first entry of each in block order. One hash
    lookup of all the blocks' entries in the keys, however many keys and blocks."""
    held = _columns([(b, 0, len(b)) for b in blocks], ("key",))[0]
    codes = np.asarray(pc.index_in(held, value_set=keys).fill_null(-1).to_numpy(), dtype=np.int64)
    hits = np.flatnonzero(codes >= 0)
    key, first = np.unique(codes[hits], return_index=True)
    at = hits[first]
    starts = np.cumsum([0] + [len(b) for b in blocks])
    block = np.searchsorted(starts, at, side="right") - 1
    return key, block, at - starts[block]


def _columns(parts: list[tuple[DataBlock, int, int]], names: tuple[str, ...]) -> list[pa.Array]:
    """The `names` (key, value) of the entries `start` to `stop` of each (block, start, stop), one
    block after another: the payloads are joined and each column gathered with one NumPy mask,
    however many blocks."""
    data = np.frombuffer(b"".join(block.payload for block, _, _ in parts), dtype=np.uint8)
    bases = np.cumsum([0] + [len(block.payload) for block, _, _ in parts])[:-1]
    out = []
    for name in names:
        begin = np.concatenate(
            [getattr(b, f"{name}_starts")[lo:hi] + base for (b, lo, hi), base in zip(parts, bases, strict=True)]
            or [np.empty(0, np.int64)]
        )
        size = np.concatenate([getattr(b, f"{name}_lengths")[lo:hi] for b, lo, hi in parts] or [np.empty(0, np.int64)])
        out.append(_gather(data, begin, size))
    return out


def _gather(data: np.ndarray, begin: np.ndarray, size: np.ndarray) -> pa.Array:
    """The byte ranges (`begin`, `size`) of `data` as a large binary array, gathered by one mask."""
    offsets = np.zeros(len(size) + 1, dtype=np.int64)
    np.cumsum(size, out=offsets[1:])
    body = data[range_mask(len(data), begin, size)]
    return pa.Array.from_buffers(pa.large_binary(), len(size), [None, pa.py_buffer(offsets), pa.py_buffer(body)])


def decode_entries(payload: bytes | memoryview, mvcc: bool, tags: bool, where: str) -> DataBlock:
    """The entries of an uncompressed data block payload. `mvcc`: each entry ends with its MVCC
    version (file info KEY_VALUE_VERSION 1); `tags`: each value is followed by tags (HFile v3
    written with tags, which Hudi never does). A payload whose entries do not fill it exactly is
    damaged."""
    buf = bytes(payload)
    block = None if tags else _decode_usual(buf, 9 if mvcc else 8)
    return block if block is not None else _decode_each(buf, mvcc, tags, where)


# An entry's first ten bytes, as NumPy reads them off every entry's start at once.
_HEADER = np.dtype([("key", ">u4"), ("value", ">u4"), ("row", ">u2")])


def _headers(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The (key length, value length, row length) header of the entry at each of `starts`: one
    gather of ten bytes per entry, read as big-endian fields (starts end ten bytes before the end)."""
    headers: np.ndarray = np.lib.stride_tricks.sliding_window_view(data, _HEADER.itemsize)[starts].view(_HEADER)
    return headers.ravel()


def _decode_usual(buf: bytes, extra: int) -> DataBlock | None:
    """The block every Hudi and HBase writer writes: no tags, MVCC versions absent or 0 (one byte),
    so an entry takes its key and value length plus `extra` bytes. One `unpack_from` per entry
    finds the starts, NumPy the rest; None when the block is not like that (or is damaged: the
    entry-by-entry decoding then says where)."""
    end = len(buf)
    starts = array("q")
    append, unpack = starts.append, _KEY_VALUE_LENGTHS.unpack_from
    pos = 0
    try:
        while pos < end:
            key_length, value_length = unpack(buf, pos)
            append(pos)
            pos += key_length + value_length + extra
    except struct.error:
        return None
    if pos != end:
        return None
    entry = np.frombuffer(starts, dtype=np.int64)
    if not len(entry):
        return DataBlock(buf, entry, entry, entry, entry)
    if entry[-1] + _HEADER.itemsize > end:
        return None
    data = np.frombuffer(buf, dtype=np.uint8)
    header = _headers(data, entry)
    key_lengths, value_lengths = header["key"].astype(np.int64), header["value"].astype(np.int64)
    if (key_lengths < KEY_OVERHEAD).any():
        return None
    row_lengths = header["row"].astype(np.int64)
    value_starts = entry + 8 + key_lengths
    if (row_lengths + KEY_OVERHEAD > key_lengths).any():
        return None
    if extra == 9:
        versions = data[value_starts + value_lengths]
        if ((versions >= 0x80) & (versions < 0x90)).any():  # a VLong longer than a byte: not 0
            return None
    return DataBlock(buf, entry + 10, row_lengths, value_starts, value_lengths)


def _decode_each(buf: bytes, mvcc: bool, tags: bool, where: str) -> DataBlock:
    """Entry by entry, for blocks with tags or MVCC versions and for damaged blocks: every length
    is checked as it is read, and a damaged entry is named by its place."""
    end = len(buf)
    key_starts, key_lengths, value_starts, value_lengths = array("q"), array("q"), array("q"), array("q")
    unpack = _LENGTHS.unpack_from
    pos = 0
    while pos < end:
        if pos + 10 > end:
            raise HFileError(f"{where}: an entry at {pos} is cut short")
        key_length, value_length, row_length = unpack(buf, pos)
        if row_length + KEY_OVERHEAD > key_length:
            raise HFileError(f"{where}: the entry at {pos} has a {row_length}-byte row in a {key_length}-byte key")
        if pos + 8 + key_length + value_length > end:
            raise HFileError(
                f"{where}: the entry at {pos} ({key_length}-byte key, {value_length}-byte value) "
                f"runs past the block's {end} bytes"
            )
        key_starts.append(pos + 10)
        key_lengths.append(row_length)
        pos += 8 + key_length
        value_starts.append(pos)
        value_lengths.append(value_length)
        pos += value_length
        if tags:
            if pos + 2 > end:
                raise HFileError(f"{where}: an entry's tags are cut short")
            pos += 2 + int.from_bytes(buf[pos : pos + 2], "big")
        if mvcc:
            if pos < end and (buf[pos] < 0x80 or buf[pos] >= 0x90):  # a one-byte VLong (HBase writes 0)
                pos += 1
            else:
                _, pos = read_vlong(buf, pos, where)
    if pos != end:
        raise HFileError(f"{where}: the last entry runs {pos - end} bytes past the block's {end}")
    columns = (np.frombuffer(a, dtype=np.int64) for a in (key_starts, key_lengths, value_starts, value_lengths))
    return DataBlock(buf, *columns)


def _put_big_endian(out: np.ndarray, positions: np.ndarray, values: np.ndarray, width: int) -> None:
    for j in range(width):
        out[positions + j] = (values >> (8 * (width - 1 - j))) & 0xFF


def binary_parts(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A large binary array's bytes, one value after another, and each value's length."""
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)[column.offset : column.offset + len(column) + 1]
    body = column.buffers()[2]
    data = np.frombuffer(body, dtype=np.uint8) if body is not None else np.empty(0, dtype=np.uint8)
    return data[offsets[0] : offsets[-1]], np.diff(offsets)


def encode_entries(keys: pa.Array, values: pa.Array) -> bytes:
    """A data block payload holding these entries (large binary arrays) as Hudi's `HFileDataBlock`
    writes them: each row with an empty family and qualifier, timestamp Long.MAX_VALUE, type Put
    (4) and MVCC 0."""
    key_bytes, key_lengths = binary_parts(keys)
    value_bytes, value_lengths = binary_parts(values)
    n = len(key_lengths)
    sizes = key_lengths + value_lengths + ENTRY_OVERHEAD
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    out = np.zeros(int(sizes.sum()), dtype=np.uint8)
    _put_big_endian(out, starts, key_lengths + KEY_OVERHEAD, 4)
    _put_big_endian(out, starts + 4, value_lengths, 4)
    _put_big_endian(out, starts + 8, key_lengths, 2)
    out[range_mask(len(out), starts + 10, key_lengths)] = key_bytes
    timestamps = starts + 11 + key_lengths  # after the row and the family length (0)
    out[timestamps] = 0x7F
    for j in range(1, 8):
        out[timestamps + j] = 0xFF
    out[timestamps + 8] = 4
    out[range_mask(len(out), timestamps + 9, value_lengths)] = value_bytes
    return out.tobytes()
