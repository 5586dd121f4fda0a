"""Bulk insert: no index lookup and no small-file packing; records fill new files in sort order.

Hudi's bulk insert rolls a file over when its written data reaches hoodie.parquet.max.file.size,
whatever hoodie.copyonwrite.record.size.estimate says. Files here are laid out before they are
written (so Spark tasks can write them), so the bytes a record takes on disk are measured first:
the first SAMPLE_ROWS records of the largest partition, in the order files are filled (the start
of its first file), are encoded as a base file in memory with the table's parquet settings
(`written_record_size`). Spark measures the same records on an executor, so both lay files out
alike. A contiguous run matters: consecutive keys and repeating values compress far better than
a scattered sample of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.engine.bucket_writer import with_meta
from upsertlake.layout.file_system_view import base_file_name
from upsertlake.layout.file_writer import FileWriterConfig, data_bytes
from upsertlake.partitioner import Bucket, BucketType, PartitionerConfig, new_file_id
from upsertlake.schema.columns import KEY, PARTITION

# Rows encoded to measure the record size: enough that a column's dictionary page weighs little
# per record (a few milliseconds of encoding).
SAMPLE_ROWS = 32768
SORTED_MODES = ("GLOBAL_SORT", "PARTITION_SORT", "PARTITION_PATH_REPARTITION_AND_SORT")


def bulk_insert_sort(records: pa.Table, locations: pa.Table, mode: str) -> tuple[pa.Table, pa.Table]:
    """`hoodie.bulkinsert.sort.mode`: the order records fill the new files in. NONE keeps the input
    order; PARTITION_PATH_REPARTITION groups by partition, which `bulk_insert_buckets` does anyway;
    GLOBAL_SORT, PARTITION_SORT and PARTITION_PATH_REPARTITION_AND_SORT sort by (partition path,
    record key), so each file holds a contiguous run of keys (one process is one Spark partition)."""
    if mode not in SORTED_MODES or records.num_rows < 2:
        return records, locations
    order = pc.sort_indices(records, sort_keys=[(PARTITION, "ascending"), (KEY, "ascending")])
    return records.take(order), locations.take(order)


def sample_partition(counts: Mapping[str, int]) -> str | None:
    """The partition whose records bulk insert measures: the largest (the first by path on a tie,
    so in process and Spark measure the same records)."""
    return min(counts, key=lambda p: (-counts[p], p)) if counts else None


@dataclass(frozen=True)
class RecordSize:
    """What records take in a file's data: a part paid once a row group (dictionary pages, page
    headers), the bytes each record adds, and the records a row group holds (0: a file is one)."""

    fixed: float
    per_record: float
    rows_per_group: int = 0

    def records_per_file(self, max_file_size: int) -> int:
        """The records that fill `max_file_size`: j row groups hold at most j G records and cost
        j fixed + n per_record; the best j is the fewest whose full groups reach the size, or
        one fewer, filled up."""
        per_record = max(self.per_record, 1e-3)
        if not self.rows_per_group:
            return max(1, int((max_file_size - self.fixed) / per_record))
        full = max(1, math.ceil(max_file_size / (self.fixed + self.rows_per_group * per_record)))
        return max(1, *(min(j * self.rows_per_group, int((max_file_size - j * self.fixed) / per_record))
                        for j in (full - 1, full) if j >= 1))


def written_record_size(sample: pa.Table, data_schema: pa.Schema, file_config: FileWriterConfig) -> RecordSize:
    """What records like `sample`'s (data columns, key and partition) take in a base file, meta
    columns included. `sample` is the start of a file, in its order: sorted keys share prefixes
    and repeating values compress, so a scattered sample would overstate the bytes.

    A full sample (SAMPLE_ROWS) is written as one row group and fitted as fixed + n × per_record
    through its first half and the whole, so files larger than the sample are charged its
    dictionary pages once per row group they will hold, not once per sample; a partition smaller
    than that is measured whole, as the one file it fills."""
    n = sample.num_rows
    if n == 0:
        return RecordSize(0.0, 1.0)
    instant = "0" * 17  # an instant time's length; the meta columns cost what they will cost
    rows = with_meta(sample, instant, 0, base_file_name(new_file_id(), "0-0-0", instant), data_schema)
    if n < SAMPLE_ROWS:
        return RecordSize(0.0, data_bytes(rows, file_config) / n)
    one_group = replace(file_config, row_group_bytes=2**62)
    whole = data_bytes(rows, one_group)
    half = n // 2
    per_record = (whole - data_bytes(rows.slice(0, half), one_group)) / (n - half)
    if per_record <= 0:  # cannot happen with real encoders; the average is then the safe answer
        return RecordSize(0.0, whole / n)
    group = file_config.row_group_bytes // max(1, rows.nbytes // n)  # as the writer cuts row groups (`rows_per_group`)
    return RecordSize(max(0.0, whole - per_record * n), per_record, max(1, group))


def bulk_insert_layout(
    counts: Mapping[str, int], record_size: RecordSize, pconf: PartitionerConfig
) -> tuple[list[Bucket], dict[str, int], int]:
    """New file groups for `counts` records per partition, each file's data about max_file_size
    bytes: the buckets, each partition's first bucket number, and the records per file (the i-th
    record of a partition goes to bucket first + i // per_file)."""
    per_file = record_size.records_per_file(pconf.max_file_size)
    buckets: list[Bucket] = []
    first: dict[str, int] = {}
    for partition, count in counts.items():
        first[partition] = len(buckets)
        for _ in range(-(-count // per_file)):
            buckets.append(Bucket(len(buckets), BucketType.INSERT, partition, new_file_id()))
    return buckets, first, per_file


def bulk_insert_buckets(
    records: pa.Table, data_schema: pa.Schema, file_config: FileWriterConfig, pconf: PartitionerConfig
) -> tuple[list[Bucket], np.ndarray]:
    """Bulk insert: no small-file packing; each partition's records (in `bulk_insert_sort`
    order) fill new files of about max_file_size bytes in order."""
    parts = records.column(PARTITION)
    encoded = (
        pc.dictionary_encode(parts).combine_chunks()
        if isinstance(parts, pa.ChunkedArray)
        else pc.dictionary_encode(parts)
    )
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False))
    names = encoded.dictionary.to_pylist()
    rows_of = {p: np.flatnonzero(codes == code) for code, p in enumerate(names)}
    record_size = RecordSize(0.0, 1.0)
    counts = {p: len(r) for p, r in rows_of.items()}
    if (largest := sample_partition(counts)) is not None:
        sample = records.take(pa.array(rows_of[largest][:SAMPLE_ROWS]))
        record_size = written_record_size(sample, data_schema, file_config)
    buckets, first, per_file = bulk_insert_layout(counts, record_size, pconf)
    assignment = np.empty(len(codes), dtype=np.int64)
    for partition, rows in rows_of.items():
        assignment[rows] = first[partition] + np.arange(len(rows)) // per_file
    return buckets, assignment
