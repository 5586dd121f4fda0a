"""The HFile trailer: the fixed 4096 bytes at the end of every HFile that say where the rest is.

A reader starts here: the trailer holds the offset of the load-on-open section (root data index,
meta index, file info), the number of entries of each root index, the index depth, the codec and
the entry count, as a protobuf `TrailerProto` after the magic `TRABLK"$`. The last four bytes are
the version: major in the low three bytes, minor in the high one (docs/DESIGN.md §10).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from upsertlake.errors import HFileError
from upsertlake.hfile.encoding import bytes_field, parse_message, read_varint, signed64, varint, varint_field

TRAILER_SIZE = 4096
TRAILER_MAGIC = b'TRABLK"$'
HUDI_COMPARATOR = "org.apache.hudi.io.storage.HoodieHBaseKVComparator"


class Compression(IntEnum):
    """HBase's codec ids, as the trailer stores them; Hudi reads and writes NONE and GZ only."""

    LZO = 0
    GZ = 1
    NONE = 2
    SNAPPY = 3
    LZ4 = 4
    BZIP2 = 5
    ZSTD = 6


@dataclass(frozen=True)
class Trailer:
    """What the trailer says. Offsets are from the start of the file; the first and last data
    block offsets are -1 and 0 in a file with no entries (Hudi's writer), or -1 and -1 (HBase's)."""

    file_info_offset: int
    load_on_open_offset: int
    uncompressed_data_index_size: int
    data_index_count: int
    meta_index_count: int
    entry_count: int
    data_index_levels: int
    first_data_block_offset: int
    last_data_block_offset: int
    comparator: str
    compression: Compression
    major_version: int = 3
    minor_version: int = 0


def parse_trailer(tail: bytes | memoryview, file_size: int, where: str) -> Trailer:
    """The trailer from the last `TRAILER_SIZE` bytes of a file of `file_size` bytes, checked
    against the file: a damaged trailer is refused here, before any offset in it is followed."""
    if file_size < TRAILER_SIZE or len(tail) != TRAILER_SIZE:
        raise HFileError(f"{where}: {file_size} bytes, shorter than the {TRAILER_SIZE}-byte trailer (truncated?)")
    if bytes(tail[:8]) != TRAILER_MAGIC:
        raise HFileError(f"{where}: no trailer magic at {file_size - TRAILER_SIZE} (found {bytes(tail[:8])!r}); "
                         "not an HFile, or truncated")
    version = int.from_bytes(tail[-4:], "big")
    major, minor = version & 0xFFFFFF, version >> 24
    if major != 3:
        raise HFileError(f"{where}: HFile version {major}.{minor}; only version 3 is read (Hudi writes 3)")
    size, pos = read_varint(tail, 8, f"{where}: trailer")
    if pos + size > TRAILER_SIZE - 4:
        raise HFileError(f"{where}: the trailer's protobuf ({size} bytes) runs past the trailer")
    fields = parse_message(tail[pos:pos + size], f"{where}: trailer")

    def number(field: int, default: int = 0) -> int:
        values = fields.get(field)
        value = values[-1] if values else default
        if not isinstance(value, int):
            raise HFileError(f"{where}: trailer field {field} is not a number")
        return signed64(value)

    comparator = fields.get(11, [b""])[-1]
    codec = number(12, Compression.NONE)
    if codec not in Compression._value2member_map_:
        raise HFileError(f"{where}: unknown compression codec id {codec} in the trailer")
    trailer = Trailer(
        file_info_offset=number(1), load_on_open_offset=number(2), uncompressed_data_index_size=number(3),
        data_index_count=number(5), meta_index_count=number(6), entry_count=number(7),
        data_index_levels=number(8), first_data_block_offset=number(9), last_data_block_offset=number(10),
        comparator=comparator.decode("utf-8", "replace") if isinstance(comparator, bytes) else "",
        compression=Compression(codec), major_version=major, minor_version=minor,
    )
    _check(trailer, file_size, where)
    return trailer


def _check(t: Trailer, file_size: int, where: str) -> None:
    """The offsets lie inside the file and in HFile's order, the counts are counts."""
    end = file_size - TRAILER_SIZE
    problem = None
    if not 0 <= t.load_on_open_offset < end:
        problem = f"load-on-open offset {t.load_on_open_offset} outside the file's {end} bytes before the trailer"
    elif not t.load_on_open_offset <= t.file_info_offset < end:
        problem = f"file info offset {t.file_info_offset} outside the load-on-open section"
    elif min(t.data_index_count, t.meta_index_count, t.entry_count) < 0:
        problem = "a negative count"
    elif t.data_index_levels < 1:
        problem = f"{t.data_index_levels} data index levels"
    elif t.entry_count > 0 and not (
        0 <= t.first_data_block_offset <= t.last_data_block_offset < t.load_on_open_offset
    ):
        problem = (f"data blocks from {t.first_data_block_offset} to {t.last_data_block_offset} do not lie "
                   f"before the load-on-open section at {t.load_on_open_offset}")
    elif (t.entry_count > 0) != (t.data_index_count > 0):
        problem = f"{t.entry_count} entries in {t.data_index_count} indexed data blocks"
    if problem:
        raise HFileError(f"{where}: bad trailer: {problem}")


def encode_trailer(t: Trailer) -> bytes:
    """The trailer as Hudi's `HFileWriterImpl` writes it: the fields it sets, in field order (a
    protobuf writer's order), padded with zeros to 4096 bytes, version 3.0 in the last byte."""
    message = b"".join([
        varint_field(1, t.file_info_offset), varint_field(2, t.load_on_open_offset),
        varint_field(3, t.uncompressed_data_index_size), varint_field(5, t.data_index_count),
        varint_field(6, t.meta_index_count), varint_field(7, t.entry_count),
        varint_field(8, t.data_index_levels), varint_field(9, t.first_data_block_offset),
        varint_field(10, t.last_data_block_offset), bytes_field(11, t.comparator.encode()),
        varint_field(12, t.compression),
    ])
    body = TRAILER_MAGIC + varint(len(message)) + message
    version = (t.minor_version << 24 | t.major_version).to_bytes(4, "big")
    return body + bytes(TRAILER_SIZE - len(body) - 4) + version
