"""One compaction operation: a file slice merged (its base file and log blocks, by record key
under the table's merge mode) and written as the file group's new base file, with the write stat
Hudi's compactor reports for it. Runs in a thread in process, or as a Spark task.

The new file keeps the records' meta columns but `_hoodie_file_name`. Over a base file we wrote,
its bloom filter, key range and dictionary choice are resumed, as copy-on-write rewrites do.
"""

from __future__ import annotations

import time

import pyarrow as pa

from upsertlake.config import Config
from upsertlake.layout.file_system_view import BaseFile, base_file_name
from upsertlake.layout.file_writer import (
    DICTIONARY_SAMPLE,
    dictionary_pages,
    file_writer_config,
    write_base_file,
)
from upsertlake.layout.footer import resumed_bloom, resumed_key_range
from upsertlake.layout.markers import marker_entry, write_markers
from upsertlake.layout.slice_reader import Merge, merge_inputs, slice_inputs
from upsertlake.logfile.blocks import Block, CommandBlock, CorruptBlock, DataBlock
from upsertlake.logfile.merge import live_blocks
from upsertlake.schema.columns import FILE_NAME
from upsertlake.services.compaction_plan import CompactionOperation
from upsertlake.storage import Storage
from upsertlake.timeline.commit_metadata import WriteStat
from upsertlake.util.arrow import constant


def compact_operation(
    storage: Storage,
    numbered: tuple[int, CompactionOperation],
    *,
    instant_time: str,
    schema: pa.Schema,
    merge: Merge,
    cfg: Config,
) -> WriteStat:
    """Merge one planned slice and write it as the file group's new base file (a task on Spark)."""
    n, op = numbered
    sl = op.file_slice(storage)
    began = time.monotonic()
    # The old file names are neither read nor merged: the new file names itself in every row.
    base, blocks = slice_inputs(storage, sl, skip=(FILE_NAME,))
    scanned = time.monotonic()
    at = schema.get_field_index(FILE_NAME)
    result = merge_inputs(base, blocks, merge, schema.remove(at))
    name = base_file_name(op.file_id, f"{n}-0-0", instant_time)
    path = f"{op.partition_path}/{name}" if op.partition_path else name
    merged = result.records.add_column(at, schema.field(at), constant(name, result.records.num_rows))
    counts = _block_counts(blocks, merge)
    added = result.added
    deletes = base.num_rows - (merged.num_rows - len(added)) if base is not None else 0
    file_config = file_writer_config(cfg)
    footer, kept = _previous_version(storage, sl.base, schema) if sl.base is not None else ({}, None)
    bloom = key_range = None
    if base is not None and deletes == 0:
        # Every base key is still there, and the logs added `added`: the base file's filter and
        # key range plus those keys, as copy-on-write rewrites resume them.
        bloom = resumed_bloom(footer, base.num_rows, added, file_config)
        key_range = resumed_key_range(footer, added) if bloom is not None else None
    write_markers(
        storage, instant_time, [marker_entry(op.partition_path, name, "MERGE" if base is not None else "CREATE")]
    )
    size, stats = write_base_file(storage, path, merged, file_config, bloom, key_range, kept)
    wrote = time.monotonic()
    log_bytes = sum(info.size for lf in sl.logs if (info := storage.stat(lf.path)) is not None)
    return WriteStat(
        fileId=op.file_id,
        path=path,
        partitionPath=op.partition_path,
        prevCommit=op.base_instant,
        numWrites=merged.num_rows,
        numDeletes=deletes,
        numUpdateWrites=result.updates,
        numInserts=merged.num_rows - result.updates,
        totalWriteBytes=size,
        fileSizeInBytes=size,
        totalLogRecords=counts["log_records"],
        totalLogFilesCompacted=len(sl.logs),
        totalLogSizeCompacted=log_bytes,
        totalUpdatedRecordsCompacted=result.log_keys,
        totalLogBlocks=counts["blocks"],
        totalCorruptLogBlock=counts["corrupt"],
        totalRollbackBlocks=counts["rollbacks"],
        totalLogReadTimeMs=int((scanned - began) * 1000),
        prevBaseFile=op.data_file,
        runtimeStats={
            "totalScanTime": int((scanned - began) * 1000),
            "totalCreateTime": 0,
            "totalUpsertTime": int((wrote - scanned) * 1000),
        },
        column_stats=stats,
    )


def _previous_version(
    storage: Storage, base: BaseFile, schema: pa.Schema
) -> tuple[dict[bytes, bytes], frozenset[str] | None]:
    """The base file's footer when we wrote it (Hudi's writers' filters are not reused: some miss
    their keys), and the columns it dictionary-encodes when that choice can be kept (we wrote it
    with every column, from enough rows), so the new version is not sampled again."""
    metadata = storage.parquet_file(base.path).metadata
    if not metadata.created_by.startswith("parquet-cpp"):
        return {}, None
    complete = set(schema.names) <= {metadata.schema.column(i).path for i in range(metadata.num_columns)}
    kept = frozenset(dictionary_pages(metadata)) if complete and metadata.num_rows >= DICTIONARY_SAMPLE else None
    return metadata.metadata or {}, kept


def _block_counts(blocks: list[Block], merge: Merge) -> dict[str, int]:
    """The counts of log records and blocks Hudi's compaction write stat reports."""
    live = live_blocks(blocks, merge.instants)
    return {
        "log_records": sum(b.records.num_rows if isinstance(b, DataBlock) else b.keys.num_rows for b in live),
        "blocks": len(live),
        "corrupt": sum(1 for b in blocks if isinstance(b, CorruptBlock)),
        "rollbacks": sum(1 for b in blocks if isinstance(b, CommandBlock)),
    }
