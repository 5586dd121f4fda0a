"""The blocks of a log file as values: data (Avro or parquet), HFile, delete, command, corrupt.

Hudi serializes the block type and the header keys as Java enum ordinals (HoodieLogBlockType,
HeaderMetadataType): new members only ever go at the end, so the numbers below are stable across
Hudi 0.x and 1.x.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import UnsupportedLogBlockError
from upsertlake.hfile import HFileReader
from upsertlake.schema.columns import DELETED_KEY, IS_DELETED, RECORD_KEY

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1  # HoodieLogFormatVersion: 1 has type, header, content length, footer, total length
CONTENT_VERSION = 3  # Avro data block and delete block content version Hudi 0.12+ writes


class BlockType(IntEnum):
    """HoodieLogBlockType ordinals."""

    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    """HeaderMetadataType ordinals (the later ones arrived with table versions 5, 6 and 8)."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


class Command(IntEnum):
    """HoodieCommandBlockTypeEnum: the only command is a rollback of TARGET_INSTANT_TIME's blocks."""

    ROLLBACK = 0


Header = dict[int, str]
"""A block's header: HeaderKey (or an unknown ordinal) -> value, in the order the file lists them."""

@dataclass(frozen=True)
class DataBlock:
    """Records written by one instant (an Avro or parquet block), meta columns included, under the
    header's SCHEMA."""

    instant: str
    schema_json: str
    records: pa.Table
    header: Header = field(compare=False)
    block_type: BlockType = BlockType.AVRO_DATA


@dataclass(frozen=True)
class HFileBlock:
    """The metadata table's records written by one instant: a whole HFile, key -> Avro datum under
    the header's SCHEMA whose key field the writer emptied. Kept as the HFile's bytes (read from a
    log file: a view of its bytes) and read as any HFile is, through `reader`: a point lookup
    decodes only the HFile blocks its keys fall in, not the whole block."""

    instant: str
    schema_json: str
    content: bytes | memoryview
    header: Header = field(compare=False)
    name: str = field(compare=False, default="HFile log block")  # names the block in errors

    def reader(self) -> HFileReader:
        """A reader of the block's HFile (one per thread: a reader keeps the blocks it decoded)."""
        return HFileReader(self.content, self.name)


@dataclass(frozen=True)
class DeleteBlock:
    """Keys deleted by one instant: columns record_key, partition_path, ordering_value (the values
    unwrapped from Hudi's IntWrapper/LongWrapper/... unions, typed as they were written) and
    natural_order, true where the writer put Hudi's "no ordering" default IntWrapper(0) (or null):
    such a delete wins over any earlier record whatever its ordering value."""

    instant: str
    keys: pa.Table
    header: Header = field(compare=False)


@dataclass(frozen=True)
class CommandBlock:
    """A rollback: the blocks of `target_instant`, in any log file of the slice, are void."""

    instant: str
    target_instant: str
    command: Command
    header: Header = field(compare=False, default_factory=dict)


@dataclass(frozen=True)
class CorruptBlock:
    """Bytes that are no whole block (a torn write): readers skip them, as Hudi's scanner does."""

    offset: int
    length: int


Block = DataBlock | HFileBlock | DeleteBlock | CommandBlock | CorruptBlock


def refuse_hfile(blocks: Sequence[Block]) -> None:
    """A data table's log holds Avro and parquet data blocks: an HFile block there (Hudi writes
    them for a data table of HFile base files, which upsertlake does not read) is refused, never
    skipped."""
    for block in blocks:
        if isinstance(block, HFileBlock):
            raise UnsupportedLogBlockError(f"{block.name}: an HFile data block in a data table's log file")


def block_keys(blocks: Sequence[Block], instant: str | None = None) -> tuple[pa.Array, pa.Array]:
    """(upserted, deleted) record keys of the data and delete blocks written by `instant` (all
    instants when None): a data block's record flagged `_hoodie_is_deleted` is a delete."""
    refuse_hfile(blocks)
    upserted, deleted = [pa.array([], pa.string())], [pa.array([], pa.string())]
    for block in blocks:
        if instant is not None and getattr(block, "instant", None) != instant:
            continue
        if isinstance(block, DeleteBlock):
            deleted.append(block.keys.column(DELETED_KEY).combine_chunks().cast(pa.string()))
        elif isinstance(block, DataBlock):
            keys = block.records.column(RECORD_KEY).combine_chunks().cast(pa.string())
            if IS_DELETED not in block.records.column_names:
                upserted.append(keys)
                continue
            gone = pc.fill_null(block.records.column(IS_DELETED).combine_chunks(), False)
            upserted.append(keys.filter(pc.invert(gone)))
            deleted.append(keys.filter(gone))
    return pa.concat_arrays(upserted), pa.concat_arrays(deleted)
