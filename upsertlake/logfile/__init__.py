"""Hudi's log files (merge-on-read): their names, their blocks, and the codec between a log
file's bytes and those blocks (Avro and parquet data, HFile, delete, rollback command, corrupt).

Layers (pyproject.toml, docs/DESIGN.md §3): its own floor, below `timeline` (Hudi's archived
timeline of table version 6 is a log file); may import schema and every floor below.
"""

from upsertlake.logfile.avro_records import with_meta_fields
from upsertlake.logfile.blocks import (
    Block,
    BlockType,
    Command,
    CommandBlock,
    CorruptBlock,
    DataBlock,
    DeleteBlock,
    HeaderKey,
    HFileBlock,
    block_keys,
)
from upsertlake.logfile.names import LogFileName, is_log_path, sort_log_files
from upsertlake.logfile.reader import read_avro_datums, read_blocks
from upsertlake.logfile.writer import (
    append_blocks,
    avro_data_blocks,
    avro_datum_block,
    data_block,
    delete_block,
    encode_block,
    hfile_block,
    rollback_block,
)

__all__ = [
    "Block",
    "BlockType",
    "Command",
    "CommandBlock",
    "CorruptBlock",
    "DataBlock",
    "DeleteBlock",
    "HFileBlock",
    "HeaderKey",
    "LogFileName",
    "append_blocks",
    "avro_data_blocks",
    "avro_datum_block",
    "block_keys",
    "data_block",
    "delete_block",
    "encode_block",
    "hfile_block",
    "is_log_path",
    "read_avro_datums",
    "read_blocks",
    "rollback_block",
    "sort_log_files",
    "with_meta_fields",
]
