"""Encode blocks as Hudi's HoodieLogFormatWriter does, and append them to a log file's bytes.

Headers are written in the order the block's header dict lists them (Hudi's order comes from a
Java HashMap; readers do not care). The helpers below build the blocks Hudi's append handle
writes: data blocks with INSTANT_TIME and SCHEMA, delete blocks likewise, rollback command blocks
with INSTANT_TIME, TARGET_INSTANT_TIME and COMMAND_BLOCK_TYPE.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from upsertlake.errors import UnsupportedLogBlockError
from upsertlake.hfile import Compression, write_hfile
from upsertlake.logfile.avro_records import encode_record_runs, encode_records, join_datums
from upsertlake.logfile.blocks import (
    CONTENT_VERSION,
    LOG_FORMAT_VERSION,
    MAGIC,
    Block,
    BlockType,
    Command,
    CommandBlock,
    DataBlock,
    DeleteBlock,
    Header,
    HeaderKey,
    HFileBlock,
)
from upsertlake.logfile.deletes import encode_delete_content

HFILE_BLOCK_SIZE = 64 * 1024  # an HFile data block's HFile blocks (HBase's default block size)


def data_block(instant: str, records: pa.Table, schema_json: str, *, parquet: bool = False) -> DataBlock:
    """A data block of `records` (meta columns included) under the writer schema `schema_json`."""
    header: Header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema_json}
    kind = BlockType.PARQUET_DATA if parquet else BlockType.AVRO_DATA
    return DataBlock(instant, schema_json, records, header, kind)


def hfile_block(instant: str, entries: pa.Table, schema_json: str) -> HFileBlock:
    """An HFile block (the metadata table's) of `entries`, columns key and value (binary), sorted
    by key: written as Hudi writes its HFile blocks, in GZ-compressed HFile blocks of 64 KB."""
    header: Header = {HeaderKey.SCHEMA: schema_json, HeaderKey.INSTANT_TIME: instant}
    content = write_hfile(
        entries.select(["key", "value"]), block_size=HFILE_BLOCK_SIZE, compression=Compression.GZ, file_creation_time=0
    )
    return HFileBlock(instant, schema_json, content, header)


def delete_block(instant: str, keys: pa.Table, schema_json: str | None = None) -> DeleteBlock:
    """A delete block (version 3) of `keys`: record_key, partition_path and optionally
    ordering_value / natural_order (see DeleteBlock); no ordering value means IntWrapper(0)."""
    header: Header = {HeaderKey.INSTANT_TIME: instant}
    if schema_json is not None:
        header[HeaderKey.SCHEMA] = schema_json
    return DeleteBlock(instant, keys, header)


def rollback_block(instant: str, target_instant: str) -> CommandBlock:
    """A rollback command block: written by rollback `instant`, voids `target_instant`'s blocks."""
    header: Header = {
        HeaderKey.INSTANT_TIME: instant,
        HeaderKey.TARGET_INSTANT_TIME: target_instant,
        HeaderKey.COMMAND_BLOCK_TYPE: str(Command.ROLLBACK.value),
    }
    return CommandBlock(instant, target_instant, Command.ROLLBACK, header)


def append_blocks(blocks: Iterable[Block | bytes], existing: bytes = b"") -> bytes:
    """A log file's bytes: `existing` (a log file's current bytes, or nothing) then `blocks`
    (bytes: a block framed already, e.g. by `avro_data_blocks`)."""
    parts = [existing]
    parts.extend(b if isinstance(b, bytes) else encode_block(b) for b in blocks)
    return b"".join(parts)


def avro_data_blocks(instant: str, records: pa.Table, schema_json: str, run_ends: Sequence[int]) -> list[bytes]:
    """Framed Avro data blocks, one for each run of rows records[run_ends[i-1]:run_ends[i]] (the
    rows of one file group each), their records encoded in one pass."""
    header: Header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema_json}
    payloads = encode_record_runs(records, schema_json, run_ends)
    counts = np.diff(np.concatenate([[0], np.asarray(run_ends, np.int64)]))
    return [
        _frame(BlockType.AVRO_DATA, header, struct.pack(">ii", CONTENT_VERSION, count), payload)
        for count, payload in zip(counts.tolist(), payloads)
    ]


def avro_datum_block(schema_json: str, datums: Sequence[bytes]) -> bytes:
    """A framed Avro data block of records already encoded as Avro binary datums under
    `schema_json`, its header the SCHEMA alone (as Hudi's archiver writes HoodieArchivedMetaEntry
    blocks)."""
    header: Header = {HeaderKey.SCHEMA: schema_json}
    return _frame(BlockType.AVRO_DATA, header, struct.pack(">ii", CONTENT_VERSION, len(datums)), join_datums(datums))


def encode_block(block: Block) -> bytes:
    """One framed block: magic, size, format version, type, header, content, footer, total."""
    if isinstance(block, DataBlock):
        return _frame(block.block_type, block.header, _data_content(block))
    if isinstance(block, HFileBlock):
        return _frame(BlockType.HFILE_DATA, block.header, block.content)
    if isinstance(block, DeleteBlock):
        return _frame(BlockType.DELETE, block.header, encode_delete_content(block.keys))
    if isinstance(block, CommandBlock):
        return _frame(BlockType.COMMAND, block.header, b"")
    raise UnsupportedLogBlockError(f"a {type(block).__name__} cannot be written")


def _frame(block_type: BlockType, block_header: Header, *content: bytes | memoryview) -> bytes:
    """A block around its content, given in parts (joined here, in the one copy of the block)."""
    header = _metadata(block_header)
    footer = _metadata({})
    length = sum(len(part) for part in content)
    size = 4 + 4 + len(header) + 8 + length + len(footer) + 8
    return b"".join(
        (
            MAGIC,
            struct.pack(">qii", size, LOG_FORMAT_VERSION, block_type),
            header,
            struct.pack(">q", length),
            *content,
            footer,
            struct.pack(">q", len(MAGIC) + size),  # everything before this field, magic included
        )
    )


def _data_content(block: DataBlock) -> bytes:
    if block.block_type == BlockType.AVRO_DATA:
        count = struct.pack(">ii", CONTENT_VERSION, block.records.num_rows)
        return count + encode_records(block.records, block.schema_json)
    if block.block_type == BlockType.PARQUET_DATA:
        sink = io.BytesIO()
        pq.write_table(block.records, sink, compression="snappy", store_schema=False)
        return sink.getvalue()
    raise UnsupportedLogBlockError(f"a {block.block_type.name} data block cannot be written")


def _metadata(entries: Header) -> bytes:
    out = [struct.pack(">i", len(entries))]
    for key, value in entries.items():
        data = value.encode("utf-8")
        out.append(struct.pack(">ii", int(key), len(data)))
        out.append(data)
    return b"".join(out)
