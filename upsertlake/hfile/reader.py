"""Reading an HFile from bytes or a random-access file, touching only the blocks a read needs.

Opening reads the file's tail once: the trailer and, in all but very large files, the
load-on-open section (root data index, meta index, file info) with it. A point lookup then reads
the one data block the root index points to (plus one intermediate or leaf index block per extra
index level, in files HBase wrote with a deep index); a prefix scan starts at the block the first
matching key is in and reads on until the keys pass the prefix; a full scan reads the data blocks
in file order, ahead in large windows (docs/DESIGN.md §10).

`Cursor` is Hudi's `HFileReader` seek API (`seekTo`, `next`, the five seek results), kept for the
behaviour Hudi's tests pin down; the metadata table reads through `get`, `get_many` and `scan`.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from itertools import islice
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import HFileError
from upsertlake.hfile import file_info as info_keys
from upsertlake.hfile.blocks import HEADER_SIZE, BlockType, parse_header, read_block
from upsertlake.hfile.data_block import DataBlock, decode_entries, entries_table, find
from upsertlake.hfile.file_info import parse_file_info
from upsertlake.hfile.index import BlockIndex, parse_nonroot_index, parse_root_index
from upsertlake.hfile.trailer import TRAILER_SIZE, Compression, Trailer, parse_trailer

TAIL_BYTES = 64 * 1024  # read with the trailer: the load-on-open section of most files
READ_AHEAD = 4 * 2**20  # a scan's reads from a file that is not in memory
_CACHED_BLOCKS = 8
READ_BLOCKS = 256  # blocks a whole read gathers into a table at a time (16 MiB of 64 KiB blocks)
MATCHED_BLOCKS = 64  # data blocks whose entries get_many matches at once (a few MiB of keys)
SEARCH_OR_HASH = 32  # entries per key above which get_many searches (~4 us a key), not hashes (~0.15 us an entry)


class RandomAccess(Protocol):
    """What the reader needs of a file: its size and reads at an offset (`pyarrow.NativeFile`,
    which `Storage.open_input` returns, has both)."""

    def size(self) -> int: ...

    def read_at(self, nbytes: int, offset: int) -> bytes: ...


class SeekResult(IntEnum):
    """What `Cursor.seek_to` found, with the values of Hudi's `HFileReader.SEEK_TO_*`."""

    BEFORE_BLOCK_FIRST_KEY = -2  # between a block's (shortened) index key and its first key
    BEFORE_FILE_FIRST_KEY = -1
    FOUND = 0
    IN_RANGE = 1  # not there; the cursor is on the greatest key less than it
    EOF = 2


@dataclass(frozen=True)
class BlockRef:
    """A data block as its index entry names it: its (possibly shortened) first key, offset and
    on-disk size."""

    index_key: bytes
    offset: int
    size: int


def _key(key: bytes | str) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


class HFileReader:
    """An open HFile. `source`: the file's bytes, or a random-access file (read only where
    needed; the caller closes it); `name` names the file in errors. One reader serves one thread:
    it keeps the last blocks it decoded, and a `Cursor`'s position."""

    def __init__(self, source: bytes | bytearray | memoryview | RandomAccess, name: str = "HFile") -> None:
        self.name = name
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._bytes: memoryview | None = memoryview(source).cast("B")
            self._file: RandomAccess | None = None
            self.size = len(self._bytes)
        else:
            self._bytes, self._file = None, source
            self.size = source.size()
        tail_start = max(0, self.size - TAIL_BYTES)
        tail = self._read(tail_start, self.size - tail_start)
        self.trailer: Trailer = parse_trailer(tail[-TRAILER_SIZE:], self.size, name)
        load_on_open = self.trailer.load_on_open_offset
        end = self.size - TRAILER_SIZE
        section = (tail[load_on_open - tail_start:end - tail_start] if load_on_open >= tail_start
                   else self._read(load_on_open, end - load_on_open))
        self._root, self._meta_index, self.file_info = self._load_on_open(section)
        self._mvcc = self.file_info.get(info_keys.KEY_VALUE_VERSION, b"") == (1).to_bytes(4, "big")
        self._tags = info_keys.MAX_TAGS_LEN in self.file_info
        self._index_blocks: dict[int, BlockIndex] = {}
        self._blocks: OrderedDict[int, DataBlock] = OrderedDict()

    # -- opening --------------------------------------------------------------------------------

    def _read(self, offset: int, length: int) -> memoryview:
        if self._bytes is not None:
            return self._bytes[offset:offset + length]
        assert self._file is not None
        data = memoryview(self._file.read_at(length, offset)).cast("B")
        if len(data) != length:
            raise HFileError(f"{self.name}: {length} bytes at {offset} asked, {len(data)} read (truncated?)")
        return data

    def _where(self, offset: int) -> str:
        return f"{self.name}: block at {offset}"

    def _load_on_open(self, section: memoryview) -> tuple[BlockIndex, BlockIndex, dict[str, bytes]]:
        """The root data index, the meta index and the file info, which follow each other at the
        start of the load-on-open section (HBase may follow them with bloom filter metadata, which
        Hudi does not use)."""
        t, base, pos = self.trailer, self.trailer.load_on_open_offset, 0
        parts = []
        for kind in (BlockType.ROOT_INDEX, BlockType.ROOT_INDEX, BlockType.FILE_INFO):
            header, payload = read_block(section, pos, t.compression, kind, self._where(base + pos))
            parts.append((base + pos, payload))
            pos += header.on_disk_size
        (root_at, root_payload), (meta_at, meta_payload), (info_at, info_payload) = parts
        if info_at != t.file_info_offset:
            raise HFileError(f"{self.name}: bad trailer: the file info is at {info_at}, "
                             f"the trailer says {t.file_info_offset}")
        root = parse_root_index(root_payload, t.data_index_count, True, self._where(root_at))
        meta = parse_root_index(meta_payload, t.meta_index_count, False, self._where(meta_at))
        info = parse_file_info(info_payload, self._where(info_at))
        if int.from_bytes(info.get(info_keys.MAX_MEMSTORE_TS_KEY, b""), "big") > 0:
            raise HFileError(f"{self.name}: the entries carry MVCC timestamps, which Hudi never writes")
        return root, meta, info

    # -- what the file says ---------------------------------------------------------------------

    @property
    def entry_count(self) -> int:
        return self.trailer.entry_count

    @property
    def compression(self) -> Compression:
        return self.trailer.compression

    @property
    def last_key(self) -> bytes | None:
        """The file's last key (from the file info), None when the file has no entries."""
        last = self.file_info.get(info_keys.LAST_KEY, b"")
        if len(last) < 2:
            return None
        return last[2:2 + int.from_bytes(last[:2], "big")]

    @property
    def meta_block_names(self) -> list[str]:
        return [name.decode("utf-8", "replace") for name in self._meta_index.keys]

    def meta_block(self, name: str) -> bytes | None:
        """The content of the meta block `name` (Hudi keeps a file's bloom filter in `bloomFilter`),
        None when there is none."""
        wanted = name.encode("utf-8")
        i = next((i for i, key in enumerate(self._meta_index.keys) if key == wanted), None)
        if i is None:
            return None
        offset, size = self._meta_index.offsets[i], self._meta_index.sizes[i]
        _, payload = read_block(self._read(offset, size), 0, self.compression, BlockType.META, self._where(offset))
        return bytes(payload)

    # -- blocks: how a Cursor (or a caller that wants blocks) finds and decodes them ---------------

    def _index_block(self, offset: int, size: int, kind: BlockType) -> BlockIndex:
        index = self._index_blocks.get(offset)
        if index is None:
            _, payload = read_block(self._read(offset, size), 0, self.compression, kind, self._where(offset))
            index = self._index_blocks[offset] = parse_nonroot_index(payload, self._where(offset))
        return index

    def locate(self, key: bytes) -> BlockRef | None:
        """The data block `key` is in if any holds it: the last whose index key is not greater;
        None when `key` sorts before the file's first key. Descends one index block per level."""
        return self._locate(key)[0]

    def _locate(self, key: bytes) -> tuple[BlockRef | None, bytes | None]:
        """`locate`, and the least key past the block's keys (the next index entry's key, at the
        deepest level that has one; None after the last block): every key from `key` up to it
        is in the same block."""
        index, bound = self._root, None
        for level in range(self.trailer.data_index_levels, 1, -1):
            if not index.keys:
                return None, None
            i = max(index.floor(key), 0)
            bound = index.keys[i + 1] if i + 1 < len(index) else bound
            kind = BlockType.INTERMEDIATE_INDEX if level > 2 else BlockType.LEAF_INDEX
            index = self._index_block(index.offsets[i], index.sizes[i], kind)
        i = index.floor(key)
        if i < 0:
            return None, index.keys[0] if index.keys else None
        bound = index.keys[i + 1] if i + 1 < len(index) else bound
        return BlockRef(index.keys[i], index.offsets[i], index.sizes[i]), bound

    def first_block(self) -> BlockRef | None:
        """The first data block; None in a file without entries."""
        if self.entry_count == 0 or not self._root.keys:
            return None
        ref = self.locate(self._root.keys[0])
        if ref is None:
            raise HFileError(f"{self.name}: the data index does not lead to its first block")
        return ref

    def _decode(self, payload: bytes | memoryview, offset: int) -> DataBlock:
        return decode_entries(payload, self._mvcc, self._tags, self._where(offset))

    def data_block(self, offset: int, size: int) -> DataBlock:
        """The decoded data block at `offset` of `size` bytes on disk (the last few decoded are
        kept)."""
        block = self._blocks.get(offset)
        if block is None:
            _, payload = read_block(self._read(offset, size), 0, self.compression, BlockType.DATA, self._where(offset))
            block = self._remember(offset, self._decode(payload, offset))
        self._blocks.move_to_end(offset)
        return block

    def _remember(self, offset: int, block: DataBlock) -> DataBlock:
        self._blocks[offset] = block
        if len(self._blocks) > _CACHED_BLOCKS:
            self._blocks.popitem(last=False)
        return block

    def blocks_from(self, offset: int) -> Iterator[tuple[int, DataBlock]]:
        """The data blocks from the one at `offset` to the last, in file order, with the blocks
        between them (HBase's leaf index and bloom chunks) skipped; read ahead in large windows
        when the file is not in memory."""
        last, end = self.trailer.last_data_block_offset, self.trailer.load_on_open_offset
        window_start, window = offset, memoryview(b"")
        while offset <= last:
            if offset + HEADER_SIZE > window_start + len(window):
                window_start, window = offset, self._read(offset, min(end - offset, max(READ_AHEAD, HEADER_SIZE)))
            header = parse_header(window, offset - window_start, self._where(offset))
            if offset + header.on_disk_size > window_start + len(window):
                length = min(end - offset, max(READ_AHEAD, header.on_disk_size))
                window_start, window = offset, self._read(offset, length)
            if header.type is BlockType.DATA:
                block = self._blocks.get(offset)
                if block is None:
                    _, payload = read_block(window, offset - window_start, self.compression, BlockType.DATA,
                                            self._where(offset))
                    block = self._remember(offset, self._decode(payload, offset))
                yield offset, block
            elif header.type is BlockType.ENCODED_DATA:
                raise HFileError(f"{self._where(offset)}: an encoded data block (HBase data block encoding), "
                                 "which Hudi never writes")
            offset += header.on_disk_size

    # -- reads ----------------------------------------------------------------------------------

    def get(self, key: bytes | str) -> bytes | None:
        """The value of `key` (the first, if the file holds it more than once), None when the
        file does not hold it. Reads the one block the index points to."""
        k = _key(key)
        ref = self.locate(k)
        if ref is None:
            return None
        block = self.data_block(ref.offset, ref.size)
        i = block.search(k)
        return block.value(i) if i < len(block) and block.key(i) == k else None

    def get_many(self, keys: Iterable[bytes] | Iterable[str]) -> dict[bytes, bytes]:
        """The values of those of `keys` (all bytes or all str) the file holds (the first of
        each), in key order. The sorted keys walk the blocks once: one index descent per block a
        key falls in, none for the other keys of that block. The keys of up to MATCHED_BLOCKS
        blocks are then matched together: by one hash lookup over those blocks' entries (`find`)
        when they are many, by a binary search each when they are few (fewer than one per
        SEARCH_OR_HASH entries: hashing every entry would cost more than the searches)."""
        column = pc.unique(pa.array(list(keys)).cast(pa.large_binary()))
        column = column.take(pc.sort_indices(column))
        wanted: list[bytes] = column.to_pylist()
        found: dict[bytes, bytes] = {}

        def match(runs: list[tuple[DataBlock, int, int]]) -> None:
            blocks, start, end = [b for b, _, _ in runs], runs[0][1], runs[-1][2]
            if (end - start) * SEARCH_OR_HASH < sum(len(b) for b in blocks):
                for block, first, stop in runs:
                    i = 0
                    for key in wanted[first:stop]:
                        i = block.search(key, i)
                        if i < len(block) and block.key(i) == key:
                            found[key] = block.value(i)
                return
            for key, block, entry in zip(*(a.tolist() for a in find(blocks, column.slice(start, end - start)))):
                found[wanted[start + key]] = blocks[block].value(entry)

        runs: list[tuple[DataBlock, int, int]] = []
        start = 0
        while start < len(wanted):
            ref, bound = self._locate(wanted[start])
            end = len(wanted) if bound is None else max(bisect.bisect_left(wanted, bound, start), start + 1)
            if ref is not None:  # else the keys sort before the file's first key
                runs.append((self.data_block(ref.offset, ref.size), start, end))
                if len(runs) == MATCHED_BLOCKS:
                    match(runs)
                    runs = []
            start = end
        if runs:
            match(runs)
        return found

    def _ranges(self, prefix: bytes, start: bytes | None) -> Iterator[tuple[DataBlock, int, int]]:
        """(block, first, end) of the entries whose keys start with `prefix` and are not less than
        `start`, block by block in key order, from the block the first such key is in."""
        s = max(prefix, start) if start is not None else prefix
        ref = self.locate(s) if s else None
        first = ref or self.first_block()
        if first is None:
            return
        searching = True
        for _, block in self.blocks_from(first.offset):
            lo = block.search(s) if searching else 0
            searching = False
            hi = _prefix_end(block, prefix, lo) if prefix else len(block)
            if hi > lo:
                yield block, lo, hi
            if hi < len(block):
                return

    def batches(self, prefix: bytes | str = b"", start: bytes | str | None = None) -> Iterator[pa.Table]:
        """The entries whose keys start with `prefix` (and are not less than `start`), in key
        order, as one Arrow table (`key`, `value`: large binary) per data block read."""
        for part in self._ranges(_key(prefix), None if start is None else _key(start)):
            yield entries_table([part])

    def scan(self, prefix: bytes | str = b"", start: bytes | str | None = None) -> Iterator[tuple[bytes, bytes]]:
        """The (key, value) pairs whose keys start with `prefix` (and are not less than `start`),
        in key order."""
        for block, lo, hi in self._ranges(_key(prefix), None if start is None else _key(start)):
            for i in range(lo, hi):
                yield block.key(i), block.value(i)

    def read(self, prefix: bytes | str = b"", start: bytes | str | None = None) -> pa.Table:
        """The entries whose keys start with `prefix` (and are not less than `start`; all when
        neither is given), in key order, as one Arrow table (`key`, `value`: large binary). The
        table is gathered READ_BLOCKS blocks at a time: a whole file's decoded blocks are never
        held at once (they take about three times the table's memory)."""
        ranges = self._ranges(_key(prefix), None if start is None else _key(start))
        tables = []
        while chunk := list(islice(ranges, READ_BLOCKS)):
            tables.append(entries_table(chunk))
        return pa.concat_tables(tables) if tables else entries_table([])

    def cursor(self) -> Cursor:
        return Cursor(self)


def _prefix_end(block: DataBlock, prefix: bytes, lo: int) -> int:
    """The first entry at or after `lo` whose key no longer starts with `prefix`: keys with a
    prefix are contiguous in key order, so a binary search for the least key past them."""
    stripped = prefix.rstrip(b"\xff")
    if stripped:
        return block.search(stripped[:-1] + bytes([stripped[-1] + 1]), lo)
    i = lo  # a prefix of 0xFF bytes only has no successor of its length
    while i < len(block) and block.key(i).startswith(prefix):
        i += 1
    return i


class Cursor:
    """A position in the file that moves forward only, as Hudi's `HFileReaderImpl` does: `seek_to_first`,
    `seek_to(key)`, `next`, and `key_value` at the position."""

    def __init__(self, reader: HFileReader) -> None:
        self._reader = reader
        self._block: DataBlock | None = None
        self._offset = -1  # the current block's offset
        self._index_key: bytes | None = None  # the current block's index key, when known
        self._i = -1
        self._eof = False

    @property
    def is_seeked(self) -> bool:
        return self._block is not None or self._eof

    @property
    def _valid(self) -> bool:
        return self._block is not None and not self._eof

    @property
    def key_value(self) -> tuple[bytes, bytes] | None:
        if not self._valid:
            return None
        assert self._block is not None
        return self._block.key(self._i), self._block.value(self._i)

    def _enter(self, ref: BlockRef) -> None:
        self._block = self._reader.data_block(ref.offset, ref.size)
        self._offset, self._index_key, self._i = ref.offset, ref.index_key, 0

    def _set_eof(self) -> None:
        self._eof = True

    def seek_to_first(self) -> bool:
        """To the file's first entry; False when the file has none."""
        first = self._reader.first_block()
        if first is None:
            self._set_eof()
            return False
        self._eof = False
        self._enter(first)
        return True

    def next(self) -> bool:
        """To the next entry; False at the end (or when not positioned)."""
        if not self._valid:
            return False
        assert self._block is not None
        self._i += 1
        if self._i < len(self._block):
            return True
        reader = self._reader
        following = reader.blocks_from(self._offset)
        next(following)  # the current block
        for offset, block in following:
            self._block, self._offset, self._index_key, self._i = block, offset, None, 0
            return True
        self._set_eof()
        return False

    def seek_to(self, key: bytes | str) -> SeekResult:
        """To `key`, or just before it, without moving backwards (Hudi's `seekTo(Key)`); see
        `SeekResult`. A key before the position raises ValueError, except when the cursor is on a
        block's first key and `key` is between the block's index key and that key, or on the
        file's first key."""
        k = _key(key)
        if not self._valid:
            return SeekResult.EOF
        assert self._block is not None
        current = self._block.key(self._i)
        reader = self._reader
        if k > current:
            ref = reader.locate(k)
            if ref is not None and ref.offset > self._offset:
                self._enter(ref)
            if self._offset == reader.trailer.last_data_block_offset:
                last = reader.last_key
                if last is not None and k > last:
                    self._block, self._eof = None, True
                    return SeekResult.EOF
            return self._seek_in_block(k)
        if k == current:
            return SeekResult.FOUND
        if self._i == 0 and k >= self._block_index_key():
            return SeekResult.BEFORE_BLOCK_FIRST_KEY
        if self._i == 0 and self._offset == reader.trailer.first_data_block_offset:
            return SeekResult.BEFORE_FILE_FIRST_KEY
        raise ValueError(f"{reader.name}: seek back from {current!r} to {k!r}: the cursor moves forward only")

    def _block_index_key(self) -> bytes:
        if self._index_key is None:
            assert self._block is not None
            ref = self._reader.locate(self._block.key(0))
            self._index_key = ref.index_key if ref is not None else self._block.key(0)
        return self._index_key

    def _seek_in_block(self, k: bytes) -> SeekResult:
        assert self._block is not None
        start = self._i
        j = self._block.search(k, start)
        if j < len(self._block) and self._block.key(j) == k:
            self._i = j
            return SeekResult.FOUND
        if j == len(self._block):
            self._i = len(self._block) - 1
            return SeekResult.IN_RANGE
        if j == 0:
            self._i = 0
            return SeekResult.BEFORE_BLOCK_FIRST_KEY
        self._i = max(j - 1, start)
        return SeekResult.IN_RANGE
