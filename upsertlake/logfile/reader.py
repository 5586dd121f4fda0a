"""Parse a log file's bytes into blocks, as Hudi's HoodieLogFileReader frames them.

A block is `#HUDI#`, an int64 size (the bytes after it), then format version, type, header,
content, footer and, last, the block's total length (magic included, this field not). A block
whose size runs past the end of the file, whose trailing total disagrees with its size, or that
is not followed by the next magic (or the end) is corrupt: the reader returns a CorruptBlock for
the bytes up to the next magic and goes on from there, as Hudi's scanner does after a torn write.
A block that frames correctly but whose content cannot be decoded is a CorruptTableError.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import pyarrow.parquet as pq

from upsertlake.errors import CorruptTableError, UnsupportedLogBlockError
from upsertlake.logfile.avro_records import Payload, decode_record_runs, decode_records, split_datums
from upsertlake.logfile.blocks import (
    LOG_FORMAT_VERSION,
    MAGIC,
    Block,
    BlockType,
    Command,
    CommandBlock,
    CorruptBlock,
    DataBlock,
    DeleteBlock,
    Header,
    HeaderKey,
    HFileBlock,
)
from upsertlake.logfile.deletes import decode_delete_content

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")


def read_blocks(data: bytes, name: str = "log file", keep: Callable[[str], bool] | None = None) -> list[Block]:
    """Every block of a log file, in file order (corrupt stretches as CorruptBlock). With `keep`,
    data and delete blocks of instants it refuses are left out undecoded (a time-travel read
    need not decode what came later); command blocks are always kept."""
    return read_logs([(data, name)], keep)


def read_logs(
    files: Sequence[tuple[bytes, str]],
    keep: Callable[[str], bool] | None = None,
    data_schemas: Callable[[str], bool] | None = None,
) -> list[Block]:
    """`read_blocks` of several log files (bytes, name), their blocks in order: the Avro data
    blocks of one schema are decoded together, in one pass (`decode_record_runs`). With
    `data_schemas`, data blocks whose writer schema (JSON) it refuses are left out undecoded (a
    writer looking for deletes need not decode blocks that cannot hold any)."""
    blocks: list[Block | _Avro] = []
    for data, name in files:
        blocks += _frame(data, name, keep, data_schemas)
    pending: dict[str, list[_Avro]] = {}
    for b in blocks:
        if isinstance(b, _Avro):
            pending.setdefault(b.schema_json, []).append(b)
    decoded: dict[int, pa.Table] = {}
    for schema_json, group in pending.items():
        try:
            tables = decode_record_runs([b.payload for b in group], [b.count for b in group], schema_json)
        except CorruptTableError as e:  # name the block
            for b in group:
                try:
                    decode_records(b.payload, b.count, schema_json)
                except CorruptTableError as one:
                    raise CorruptTableError(f"{b.where}: {one}") from one
            raise CorruptTableError(f"{group[0].where}: {e}") from e
        decoded.update((id(b), t) for b, t in zip(group, tables))
    return [
        DataBlock(b.instant, b.schema_json, decoded[id(b)], b.header) if isinstance(b, _Avro) else b
        for b in blocks
    ]


def read_avro_datums(data: bytes, name: str = "log file") -> list[tuple[str, list[Payload]]]:
    """The Avro data blocks of a log file as (writer schema JSON, each record's Avro binary
    datum), undecoded: for readers that decode records as Avro values, not as table rows (Hudi's
    archived timeline is a log file of HoodieArchivedMetaEntry records). Corrupt stretches (a
    torn write) are skipped as Hudi's reader skips them; other blocks are not data."""
    out = []
    for b in _frame(data, name, None):
        if isinstance(b, _Avro):
            try:
                out.append((b.schema_json, split_datums(b.payload, b.count)))
            except CorruptTableError as e:
                raise CorruptTableError(f"{b.where}: {e}") from e
    return out


@dataclass(frozen=True)
class _Avro:
    """An Avro data block framed but not decoded yet (see read_logs)."""

    instant: str
    schema_json: str
    header: Header
    count: int
    payload: memoryview
    where: str


def _frame(
    data: bytes, name: str, keep: Callable[[str], bool] | None, data_schemas: Callable[[str], bool] | None = None
) -> list[Block | _Avro]:
    blocks: list[Block | _Avro] = []
    pos, end = 0, len(data)
    while end - pos >= len(MAGIC):  # fewer bytes than a magic left: Hudi's reader stops (EOF)
        if data[pos : pos + len(MAGIC)] != MAGIC:
            # Hudi's reader fails here (it only lands off a magic at the file's start); skipping to
            # the next magic keeps the rest of the slice readable
            pos = _skip_corrupt(data, pos, blocks)
            continue
        start = pos + len(MAGIC)
        size = _block_size(data, start)
        if size is None:
            pos = _skip_corrupt(data, start, blocks)
            continue
        block_end = start + 8 + size
        where = f"{name}: block at byte {pos}"
        try:
            block = _parse_block(memoryview(data)[start + 8 : block_end], keep, where, data_schemas)
        except CorruptTableError as e:
            raise CorruptTableError(f"{where}: {e}") from e
        except UnsupportedLogBlockError as e:
            raise type(e)(f"{where}: {e}") from e
        if block is not None:
            blocks.append(block)
        pos = block_end
    return blocks


def _block_size(data: bytes, start: int) -> int | None:
    """The block's size if its framing checks out (HoodieLogFileReader.isBlockCorrupt), else None."""
    if len(data) - start < 8:
        return None
    size = _LONG.unpack_from(data, start)[0]
    block_end = start + 8 + size
    if size < 8 or block_end > len(data):
        return None
    if _LONG.unpack_from(data, block_end - 8)[0] - len(MAGIC) != size:
        return None
    rest = len(data) - block_end
    if rest >= len(MAGIC) and data[block_end : block_end + len(MAGIC)] != MAGIC:
        return None
    return cast("int | None", size)


def _skip_corrupt(data: bytes, start: int, blocks: list[Block | _Avro]) -> int:
    nxt = data.find(MAGIC, start)
    stop = len(data) if nxt < 0 else nxt
    blocks.append(CorruptBlock(start, stop - start))
    return stop


class _Cursor:
    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptTableError(f"a field of {n} bytes runs past the block's end")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def int32(self) -> int:
        return int(_INT.unpack(self.take(4))[0])

    def int64(self) -> int:
        return int(_LONG.unpack(self.take(8))[0])

    def metadata(self) -> Header:
        header: Header = {}
        for _ in range(self.int32()):
            key = self.int32()
            try:
                value = bytes(self.take(self.int32())).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorruptTableError(f"a header value is not UTF-8 ({exc})") from None
            header[HeaderKey(key) if key in HeaderKey._value2member_map_ else key] = value
        return header


def _parse_block(
    buf: memoryview, keep: Callable[[str], bool] | None, where: str, data_schemas: Callable[[str], bool] | None = None
) -> Block | _Avro | None:
    cur = _Cursor(buf)
    version = cur.int32()
    if version != LOG_FORMAT_VERSION:
        raise UnsupportedLogBlockError(f"log format version {version} (only {LOG_FORMAT_VERSION} is read)")
    type_id = cur.int32()
    header = cur.metadata()
    content = cur.take(cur.int64())  # a view of the file's bytes: a block's payload is not copied
    cur.metadata()  # the footer: Hudi defines no footer keys
    cur.int64()  # the total length, checked by the framing
    try:
        block_type = BlockType(type_id)
    except ValueError:
        raise UnsupportedLogBlockError(f"unknown log block type {type_id}") from None
    instant = header.get(HeaderKey.INSTANT_TIME, "")
    skippable = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE, BlockType.HFILE_DATA)
    if keep is not None and block_type in skippable and not keep(instant):
        return None
    data = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.HFILE_DATA)
    if data_schemas is not None and block_type in data and not data_schemas(_schema(header)):
        return None
    if block_type == BlockType.AVRO_DATA:
        return _avro_block(instant, _schema(header), header, content, where)
    if block_type == BlockType.PARQUET_DATA:
        records = pq.read_table(pa.BufferReader(content))
        return DataBlock(instant, _schema(header), records, header, BlockType.PARQUET_DATA)
    if block_type == BlockType.DELETE:
        return DeleteBlock(instant, decode_delete_content(content), header)
    if block_type == BlockType.COMMAND:
        command = header.get(HeaderKey.COMMAND_BLOCK_TYPE)
        if command != str(Command.ROLLBACK.value):
            raise UnsupportedLogBlockError(f"command block of type {command!r} (only rollback, 0, exists)")
        target = header.get(HeaderKey.TARGET_INSTANT_TIME)
        if not target:
            raise CorruptTableError("a rollback command block names no target instant")
        return CommandBlock(instant, target, Command.ROLLBACK, header)
    if block_type == BlockType.HFILE_DATA:  # the metadata table's records: a whole HFile, read when looked up
        return HFileBlock(instant, _schema(header), content, header, where)
    raise UnsupportedLogBlockError(f"a {block_type.name} block is not read by upsertlake")


def _schema(header: Header) -> str:
    schema = header.get(HeaderKey.SCHEMA)
    if not schema:
        raise CorruptTableError("a data block's header has no SCHEMA")
    return schema


def _avro_block(instant: str, schema_json: str, header: Header, content: memoryview, where: str) -> _Avro:
    """HoodieAvroDataBlock content: int32 version, int32 record count, then length-prefixed datums."""
    cur = _Cursor(content)
    version = cur.int32()
    if version < 2:
        raise UnsupportedLogBlockError(f"Avro data block version {version} (only 2 and 3 carry a record count)")
    count = cur.int32()
    return _Avro(instant, schema_json, header, count, content[8:], where)
