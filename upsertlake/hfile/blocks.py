"""HFile blocks: the 33-byte header every block starts with, and its payload, compressed or not.

A version 3 block is: 8 bytes of magic (its type), the on-disk size without the header (payload and
checksums), the uncompressed payload size, the previous block's offset, the checksum type, the
bytes each checksum covers, and the on-disk size of header and payload; then the payload (whole
gzip streams for GZ), then 4-byte checksums. Neither Hudi's reader nor hudi-rs checks the
checksums, and Hudi's writer writes zeros (checksum type NULL); we read past them as they do
(docs/DESIGN.md §10).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import Enum

from upsertlake.errors import HFileError
from upsertlake.hfile.trailer import Compression

HEADER_SIZE = 33
BYTES_PER_CHECKSUM = 16 * 1024
_HEADER = struct.Struct(">8sIIqBII")
# Java's GZIPOutputStream (JDK 16 and later): no name, no mtime, no extra flags, OS "unknown".
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


class BlockType(Enum):
    """The block magics (HBase's `BlockType`; Hudi's `HFileBlockType`)."""

    DATA = b"DATABLK*"
    ENCODED_DATA = b"DATABLKE"
    LEAF_INDEX = b"IDXLEAF2"
    BLOOM_CHUNK = b"BLMFBLK2"
    META = b"METABLKc"
    INTERMEDIATE_INDEX = b"IDXINTE2"
    ROOT_INDEX = b"IDXROOT2"
    FILE_INFO = b"FILEINF2"
    GENERAL_BLOOM_META = b"BLMFMET2"
    DELETE_FAMILY_BLOOM_META = b"DFBLMET2"


_TYPES = {t.value: t for t in BlockType}


@dataclass(frozen=True)
class BlockHeader:
    type: BlockType
    on_disk_size_without_header: int
    uncompressed_size: int
    prev_offset: int
    checksum_type: int
    bytes_per_checksum: int
    on_disk_data_size_with_header: int

    @property
    def on_disk_size(self) -> int:
        """The whole block's bytes on disk: header, payload and checksums."""
        return HEADER_SIZE + self.on_disk_size_without_header


def parse_header(buf: bytes | memoryview, pos: int, where: str) -> BlockHeader:
    """The header of the block at `pos` of `buf`, checked: a known magic, sizes that agree."""
    if pos + HEADER_SIZE > len(buf):
        raise HFileError(f"{where}: the block header is cut short ({len(buf) - pos} of {HEADER_SIZE} bytes)")
    magic, disk, raw, prev, checksum, per_checksum, data_with_header = _HEADER.unpack_from(buf, pos)
    kind = _TYPES.get(magic)
    if kind is None:
        raise HFileError(f"{where}: bad block magic {magic!r}")
    if not HEADER_SIZE <= data_with_header <= HEADER_SIZE + disk:
        raise HFileError(f"{where}: {kind.name} block sizes disagree (on disk {disk} bytes after the header, "
                         f"{data_with_header} with the header before checksums)")
    return BlockHeader(kind, disk, raw, prev, checksum, per_checksum, data_with_header)


def read_block(
    buf: bytes | memoryview, pos: int, compression: Compression, expected: BlockType | tuple[BlockType, ...],
    where: str,
) -> tuple[BlockHeader, bytes | memoryview]:
    """The header and the uncompressed payload of the block at `pos`, which must be of the
    `expected` type(s) and lie whole inside `buf`."""
    header = parse_header(buf, pos, where)
    kinds = expected if isinstance(expected, tuple) else (expected,)
    if header.type not in kinds:
        if header.type is BlockType.ENCODED_DATA:
            raise HFileError(f"{where}: an encoded data block (HBase data block encoding), which Hudi never writes")
        raise HFileError(f"{where}: a {header.type.name} block where a {' or '.join(k.name for k in kinds)} "
                         "block belongs")
    end = pos + header.on_disk_data_size_with_header
    if pos + header.on_disk_size > len(buf):
        raise HFileError(f"{where}: the {header.type.name} block ({header.on_disk_size} bytes) runs past the "
                         "bytes there are (truncated?)")
    stored = memoryview(buf)[pos + HEADER_SIZE:end]
    payload = decompress(stored, compression, header.uncompressed_size, f"{where}: {header.type.name} block")
    return header, payload


def decompress(stored: memoryview, compression: Compression, size: int, where: str) -> bytes | memoryview:
    """A block payload as written: as is for NONE, gunzipped (one or more gzip members) for GZ;
    it must come to the `size` the header says."""
    if compression is Compression.NONE:
        payload: bytes | memoryview = stored
    elif compression is Compression.GZ:
        payload = _gunzip(stored, where)
    else:
        raise HFileError(f"{where}: {compression.name} compression; Hudi writes and reads NONE and GZ only")
    if len(payload) != size:
        raise HFileError(f"{where}: the payload is {len(payload)} bytes where the header says {size}")
    return payload


def _gunzip(stored: memoryview, where: str) -> bytes:
    parts = []
    data = bytes(stored)
    while data:
        inflater = zlib.decompressobj(wbits=31)
        try:
            parts.append(inflater.decompress(data))
        except zlib.error as e:
            raise HFileError(f"{where}: the gzip payload is damaged ({e})") from None
        if not inflater.eof:
            raise HFileError(f"{where}: the gzip payload is cut short")
        data = inflater.unused_data
    return b"".join(parts)


def gzip(payload: bytes) -> bytes:
    """`payload` gzipped as Hudi's writer does (aircompressor over Java's `GZIPOutputStream`:
    deflate at the default level 6, Java's fixed header)."""
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY)
    body = deflater.compress(payload) + deflater.flush()
    return _GZIP_HEADER + body + struct.pack("<II", zlib.crc32(payload), len(payload) & 0xFFFFFFFF)


def checksum_bytes(on_disk_data_size_with_header: int) -> int:
    """How many checksum bytes follow a payload: one 4-byte checksum per 16 KiB begun."""
    return 4 * -(-on_disk_data_size_with_header // BYTES_PER_CHECKSUM)


def encode_block(kind: BlockType, payload: bytes, compression: Compression, prev_offset: int = -1) -> bytes:
    """A block as Hudi's writer serializes it: header, payload (gzipped for GZ) and zeroed
    checksums of type NULL."""
    stored = gzip(payload) if compression is Compression.GZ else payload
    data_with_header = HEADER_SIZE + len(stored)
    checksums = checksum_bytes(data_with_header)
    header = _HEADER.pack(kind.value, len(stored) + checksums, len(payload), prev_offset, 0,
                          BYTES_PER_CHECKSUM, data_with_header)
    return header + stored + bytes(checksums)
