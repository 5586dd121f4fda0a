"""Block indexes: the first key, offset and on-disk size of every data block (or meta block).

The root index (in the load-on-open section) lists, per entry, the offset (8 bytes), the size (4)
and the key behind a Hadoop VInt length. A data index key is an HBase KeyValue key (row length,
row, family, qualifier, timestamp, type), of which only the row is compared; a meta index key is
the meta block's name. With more than one level, the root's entries point at intermediate or leaf
index blocks, whose entries (a count, a table of entry offsets, then offset, size and key each)
point at the level below (docs/DESIGN.md §10).

The key an entry holds may be a "fake" first key that HBase shortened: not less than the previous
block's last key and not greater than the block's own first key, so the entry's block is still
the last one whose index key is not greater than a key looked up.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from upsertlake.errors import HFileError
from upsertlake.hfile.data_block import KEY_OVERHEAD
from upsertlake.hfile.encoding import read_vlong, vint

_ENTRY = struct.Struct(">qi")
# what follows the row in a Hudi index key: empty family, timestamp Long.MAX_VALUE, type Put
_KEY_SUFFIX = b"\x00\x7f\xff\xff\xff\xff\xff\xff\xff\x04"


@dataclass(frozen=True)
class BlockIndex:
    """The entries of one index block, in key order."""

    keys: list[bytes]
    offsets: list[int]
    sizes: list[int]

    def __len__(self) -> int:
        return len(self.keys)

    def floor(self, key: bytes) -> int:
        """The last entry whose key is not greater than `key`; -1 when `key` sorts first."""
        return bisect.bisect_right(self.keys, key) - 1


def _row(key: bytes | memoryview, where: str) -> bytes:
    """The row of an index key that is an HBase KeyValue key (or, as Hudi 1.1 and 1.2.0 wrote
    them, a row behind its length alone)."""
    if len(key) < 2:
        raise HFileError(f"{where}: an index key of {len(key)} bytes has no row length")
    length = int.from_bytes(key[:2], "big")
    if 2 + length > len(key):
        raise HFileError(f"{where}: an index key's row ({length} bytes) runs past the key ({len(key)} bytes)")
    return bytes(key[2:2 + length])


def parse_root_index(payload: bytes | memoryview, count: int, data_keys: bool, where: str) -> BlockIndex:
    """The `count` entries of a root index block; `data_keys`: the keys are KeyValue keys (a data
    index) rather than names (a meta index)."""
    keys, offsets, sizes = [], [], []
    pos = 0
    for _ in range(count):
        if pos + 12 > len(payload):
            raise HFileError(f"{where}: the root index holds fewer than the trailer's {count} entries")
        offset, size = _ENTRY.unpack_from(payload, pos)
        length, pos = read_vlong(payload, pos + 12, where)
        if length < 0 or pos + length > len(payload):
            raise HFileError(f"{where}: a root index key ({length} bytes) runs past the block")
        key = payload[pos:pos + length]
        keys.append(_row(key, where) if data_keys else bytes(key))
        offsets.append(offset)
        sizes.append(size)
        pos += length
    return BlockIndex(keys, offsets, sizes)


def parse_nonroot_index(payload: bytes | memoryview, where: str) -> BlockIndex:
    """The entries of an intermediate or leaf index block."""
    if len(payload) < 4:
        raise HFileError(f"{where}: an index block of {len(payload)} bytes")
    count = int.from_bytes(payload[:4], "big")
    table_end = 4 + 4 * (count + 1)
    if table_end > len(payload):
        raise HFileError(f"{where}: an index block of {count} entries in {len(payload)} bytes")
    relative = struct.unpack_from(f">{count + 1}i", payload, 4)
    keys, offsets, sizes = [], [], []
    for i in range(count):
        start, stop = table_end + relative[i], table_end + relative[i + 1]
        if not start + 12 <= stop <= len(payload):
            raise HFileError(f"{where}: index entry {i} lies outside its block")
        offset, size = _ENTRY.unpack_from(payload, start)
        keys.append(_row(payload[start + 12:stop], where))
        offsets.append(offset)
        sizes.append(size)
    return BlockIndex(keys, offsets, sizes)


def encode_data_index(keys: list[bytes], offsets: list[int], sizes: list[int]) -> bytes:
    """A root data index as Hudi 1.2.1's writer writes it: each key a whole KeyValue key (the row
    with an empty family, timestamp Long.MAX_VALUE and type Put), so HBase's reader, which Hudi
    0.x reads metadata tables with, can compare it."""
    return b"".join(
        _ENTRY.pack(offset, size) + vint(len(key) + KEY_OVERHEAD) + len(key).to_bytes(2, "big") + key + _KEY_SUFFIX
        for key, offset, size in zip(keys, offsets, sizes, strict=True)
    )


def encode_meta_index(names: list[bytes], offsets: list[int], sizes: list[int]) -> bytes:
    """A root meta index: each meta block's name behind its VInt length."""
    return b"".join(
        _ENTRY.pack(offset, size) + vint(len(name)) + name
        for name, offset, size in zip(names, offsets, sizes, strict=True)
    )
