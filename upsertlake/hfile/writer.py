"""Writing an HFile as Hudi 1.2.1's `HFileWriterImpl` writes it, byte for byte (but for an empty
file's last key, below).

The layout: data blocks (each closed before the next entry would take it past the block size,
counting 21 bytes per entry besides key and value, and never between equal keys), then one meta
block per named meta value, then the load-on-open section (root data index, meta index, file info)
and the trailer. The file info and the meta blocks come out in the order Java's `HashMap` iterates
them, as Hudi's do (docs/DESIGN.md §10). Keys must come sorted: an HFile is a sorted file and its
index is built on that, so an unsorted key is refused by name.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import HFileError
from upsertlake.hfile import file_info as info_keys
from upsertlake.hfile.blocks import BlockType, encode_block
from upsertlake.hfile.data_block import ENTRY_OVERHEAD, binary_parts, encode_entries
from upsertlake.hfile.file_info import encode_file_info
from upsertlake.hfile.index import encode_data_index, encode_meta_index
from upsertlake.hfile.java_order import hash_map_order
from upsertlake.hfile.trailer import HUDI_COMPARATOR, Compression, Trailer, encode_trailer

DEFAULT_BLOCK_SIZE = 1024 * 1024  # HFileContext's default
MAX_KEY_BYTES = 32767  # a row length is a signed 16-bit number


class HFileWriter:
    """Writes one HFile to `sink` (a binary file; an in-memory one when None: `getvalue()` then
    holds the file). `block_size`: the uncompressed bytes a data block is closed at;
    `compression`: NONE or GZ; `file_creation_time`: milliseconds since the epoch for the file
    info (now when None)."""

    def __init__(
        self, sink: BinaryIO | None = None, *, block_size: int = DEFAULT_BLOCK_SIZE,
        compression: Compression | str = Compression.NONE, file_creation_time: int | None = None,
    ) -> None:
        codec = Compression[compression.upper()] if isinstance(compression, str) else Compression(compression)
        if codec not in (Compression.NONE, Compression.GZ):
            raise HFileError(f"HFile compression {codec.name}: Hudi writes NONE or GZ")
        if block_size <= 0:
            raise HFileError(f"HFile block size {block_size}: must be positive")
        self._sink: BinaryIO = sink if sink is not None else io.BytesIO()
        self.block_size = block_size
        self.compression = codec
        self.file_creation_time = int(time.time() * 1000) if file_creation_time is None else file_creation_time
        self._offset = 0
        self._last_key: bytes | None = None
        # the open data block: its entries batch by batch, then those appended one at a time since
        self._chunks: list[tuple[pa.Array, pa.Array]] = []
        self._loose: tuple[list[bytes], list[bytes]] = ([], [])
        self._block_entries = self._block_bytes = 0
        self._block_first = self._block_last = b""
        self._index: tuple[list[bytes], list[int], list[int]] = ([], [], [])
        self._first_block_offset, self._last_block_offset = -1, 0
        self._entries = self._key_bytes = self._value_bytes = self._data_bytes = 0
        self._meta: dict[str, bytes] = {}
        # the file info as Hudi's writer fills it: the MVCC marker first, the user's entries, the
        # vitals at close
        self._info: dict[str, bytes] = {info_keys.MAX_MEMSTORE_TS_KEY: (0).to_bytes(8, "big")}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise HFileError("the HFile writer is closed")

    def append(self, key: bytes | str, value: bytes) -> None:
        """Adds an entry. Keys come in sorted order (bytewise, as Hudi compares them); equal keys
        may repeat and stay in one block."""
        self._check_open()
        k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        if self._last_key is not None and k < self._last_key:
            raise HFileError(f"HFile keys must be appended in sorted order: {k!r} after {self._last_key!r}")
        if len(k) > MAX_KEY_BYTES:
            raise HFileError(f"an HFile key of {len(k)} bytes: at most {MAX_KEY_BYTES}")
        size = len(k) + len(value) + ENTRY_OVERHEAD
        if k != self._block_last and self._block_bytes + size > self.block_size:
            self._flush_block()
        self._loose[0].append(k)
        self._loose[1].append(bytes(value))
        self._added(k, k, 1, size)
        self._key_bytes += len(k)
        self._value_bytes += len(value)

    def _added(self, first: bytes, last: bytes, entries: int, size: int) -> None:
        if not self._block_entries:
            self._block_first = first
        self._block_last = self._last_key = last
        self._block_entries += entries
        self._block_bytes += size
        self._data_bytes += size

    def append_batch(self, keys: Sequence[bytes | str] | pa.Array, values: Sequence[bytes] | pa.Array) -> None:
        """Adds many sorted entries at once (lists, or Arrow string or binary arrays): the same file
        as `append`ing them one by one, with the sort check and the block boundaries computed over
        the whole batch by Arrow and NumPy, one step per block instead of one per entry."""
        self._check_open()
        key_column, value_column = _column(keys, "key"), _column(values, "value")
        n = len(key_column)
        if len(value_column) != n:
            raise HFileError(f"{n} keys and {len(value_column)} values")
        if n == 0:
            return
        key_lengths, value_lengths = binary_parts(key_column)[1], binary_parts(value_column)[1]
        if key_lengths.max() > MAX_KEY_BYTES:
            raise HFileError(f"an HFile key of {key_lengths.max()} bytes: at most {MAX_KEY_BYTES}")
        first = key_column[0].as_py()
        if self._last_key is not None and first < self._last_key:
            raise HFileError(f"HFile keys must be appended in sorted order: {first!r} after {self._last_key!r}")
        unsorted = np.flatnonzero(pc.less(key_column[1:], key_column[:-1]).to_numpy(zero_copy_only=False))
        if len(unsorted):
            at = int(unsorted[0]) + 1
            raise HFileError(f"HFile keys must be appended in sorted order: {key_column[at].as_py()!r} "
                             f"after {key_column[at - 1].as_py()!r}")
        ends = np.cumsum(key_lengths + value_lengths + ENTRY_OVERHEAD)
        # new[j]: entry j's key differs from the one before it, so a block may close before it
        new = np.ones(n + 1, dtype=bool)
        new[0] = first != self._block_last
        new[1:n] = pc.not_equal(key_column[1:], key_column[:-1]).to_numpy(zero_copy_only=False)
        next_new = np.minimum.accumulate(np.where(new, np.arange(n + 1), n)[::-1])[::-1]
        i = 0
        while i < n:
            before = int(ends[i - 1]) if i else 0
            # the first entry that would take the open block past the block size ...
            j = max(i, int(np.searchsorted(ends, self.block_size - self._block_bytes + before, side="right")))
            if j == i and not self._block_entries:
                j = i + 1  # ... but an empty block takes its first entry, however large
            j = int(next_new[j])  # ... and never closes between equal keys
            if j > i:
                self._take_loose()
                self._chunks.append((key_column[i:j], value_column[i:j]))
                self._added(key_column[i].as_py(), key_column[j - 1].as_py(), j - i, int(ends[j - 1]) - before)
            if j < n:
                self._flush_block()
            i = j
        self._key_bytes += int(key_lengths.sum())
        self._value_bytes += int(value_lengths.sum())

    def append_meta_block(self, name: str, value: bytes) -> None:
        """A named meta block (Hudi's `appendMetaInfo`; its bloom filter goes in `bloomFilter`)."""
        self._meta[name] = bytes(value)

    def append_file_info(self, name: str, value: bytes) -> None:
        """A file info entry (Hudi's `appendFileInfo`: the schema, the key range, the bloom filter
        type); the writer's own entries, written at close, replace one of the same name."""
        self._info[name] = bytes(value)

    def _write(self, data: bytes) -> None:
        self._sink.write(data)
        self._offset += len(data)

    def _take_loose(self) -> None:
        if self._loose[0]:
            keys, values = self._loose
            self._chunks.append((pa.array(keys, pa.large_binary()), pa.array(values, pa.large_binary())))
            self._loose = ([], [])

    def _flush_block(self) -> None:
        if not self._block_entries:
            return
        self._take_loose()
        keys = pa.concat_arrays([k for k, _ in self._chunks])
        values = pa.concat_arrays([v for _, v in self._chunks])
        offset = self._offset
        prev = self._last_block_offset if self._first_block_offset >= 0 else -1
        if self._first_block_offset < 0:
            self._first_block_offset = offset
        self._last_block_offset = offset
        self._entries += self._block_entries
        block = encode_block(BlockType.DATA, encode_entries(keys, values), self.compression, prev)
        self._write(block)
        for column, value in zip(self._index, (self._block_first, offset, len(block)), strict=True):
            column.append(value)  # type: ignore[attr-defined]
        self._chunks = []
        self._block_entries = self._block_bytes = 0
        self._block_first = self._block_last = b""

    def close(self) -> None:
        """Writes what is pending, the meta blocks, the load-on-open section and the trailer."""
        if self._closed:
            return
        self._flush_block()
        names, offsets, sizes = [], [], []
        for name in hash_map_order(self._meta):
            offsets.append(self._offset)
            block = encode_block(BlockType.META, self._meta[name], self.compression)
            self._write(block)
            names.append(name.encode("utf-8"))
            sizes.append(len(block))
        load_on_open = self._offset
        self._write(encode_block(BlockType.ROOT_INDEX, encode_data_index(*self._index), self.compression))
        self._write(encode_block(BlockType.ROOT_INDEX, encode_meta_index(names, offsets, sizes), self.compression))
        file_info_offset = self._offset
        self._write(encode_block(BlockType.FILE_INFO, encode_file_info(self._file_info()), self.compression))
        self._write(
            encode_trailer(
                Trailer(
                    file_info_offset=file_info_offset,
                    load_on_open_offset=load_on_open,
                    uncompressed_data_index_size=self._data_bytes,
                    data_index_count=len(self._index[0]),
                    meta_index_count=len(names),
                    entry_count=self._entries,
                    data_index_levels=1,
                    first_data_block_offset=self._first_block_offset,
                    last_data_block_offset=self._last_block_offset,
                    comparator=HUDI_COMPARATOR,
                    compression=self.compression,
                )
            )
        )
        self._sink.flush()
        self._closed = True

    def _file_info(self) -> list[tuple[str, bytes]]:
        """The file info entries in the order Hudi's writer puts them into its `HashMap` (the
        writer's own last: last key, average key length, creation time, average value length,
        key-value version), iterated as Java iterates it. One departure from Hudi 1.2.1: a file
        without entries has no last key rather than an empty one."""
        last = self._last_key or b""
        n = self._entries
        if self._entries:
            self._info[info_keys.LAST_KEY] = len(last).to_bytes(2, "big") + last
        else:  # Hudi writes it empty, which HBase's reader (Hudi 0.x's) cannot open; HBase leaves it out
            self._info.pop(info_keys.LAST_KEY, None)
        self._info[info_keys.AVG_KEY_LEN] = (self._key_bytes // n if n else 0).to_bytes(4, "big")
        self._info[info_keys.CREATE_TIME_TS] = self.file_creation_time.to_bytes(8, "big", signed=True)
        self._info[info_keys.AVG_VALUE_LEN] = (self._value_bytes // n if n else 0).to_bytes(4, "big")
        self._info[info_keys.KEY_VALUE_VERSION] = (1).to_bytes(4, "big")
        return [(name, self._info[name]) for name in hash_map_order(self._info)]

    def getvalue(self) -> bytes:
        """The file written, when the writer wrote to memory (no `sink` given)."""
        if not isinstance(self._sink, io.BytesIO):
            raise HFileError("the HFile writer wrote to a file, not to memory")
        return self._sink.getvalue()

    def __enter__(self) -> HFileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()


def _column(values: Sequence[bytes | str] | pa.Array | pa.ChunkedArray, what: str) -> pa.Array:
    """Keys or values as one Arrow large binary array (strings as their UTF-8 bytes)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        try:
            values = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a mix of str and bytes, or bytes-likes
            values = pa.array(
                [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values], pa.large_binary()
            )
    if values.null_count:
        raise HFileError(f"a null {what}: an HFile entry has a {what}")
    if pa.types.is_null(values.type) or values.type in (pa.string(), pa.large_string(), pa.binary()):
        values = values.cast(pa.large_binary())
    if values.type != pa.large_binary():
        raise HFileError(f"HFile {what}s must be bytes or strings, not {values.type}")
    return values


def write_hfile(
    entries: Sequence[tuple[bytes | str, bytes]] | pa.Table,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    compression: Compression | str = Compression.NONE,
    file_creation_time: int | None = None,
    meta_blocks: dict[str, bytes] | None = None,
    file_info: dict[str, bytes] | None = None,
) -> bytes:
    """An HFile holding the sorted `entries` (pairs, or a table of `key` and `value`), in memory."""
    writer = HFileWriter(block_size=block_size, compression=compression, file_creation_time=file_creation_time)
    for name, value in (file_info or {}).items():
        writer.append_file_info(name, value)
    for name, value in (meta_blocks or {}).items():
        writer.append_meta_block(name, value)
    if isinstance(entries, pa.Table):
        writer.append_batch(entries.column("key").combine_chunks(), entries.column("value").combine_chunks())
    else:
        keys, values = zip(*entries) if entries else ((), ())
        writer.append_batch(keys, values)
    writer.close()
    return writer.getvalue()
