"""Writing one base file: meta columns first, Hudi's bloom filter and key range in the footer.

The footer keys go in with `add_key_value_metadata` and `store_schema=False`: pyarrow would
otherwise copy them into the serialized `ARROW:schema` too and double every file (docs/DESIGN.md §8).

Each file carries parquet's page index (each page's range and place), which Spark's parquet
reader (Apache Hudi's, and upsertlake's Spark reads) and DataFusion use to skip pages inside a
row group; it costs no measurable write time.

Encodings are chosen per column (`column_encodings`): the record key and seqno, unique and sharing
long prefixes, are delta-encoded byte arrays (each value stored as the length of the prefix it
shares with the one before, plus its suffix); columns that repeat values are dictionary-encoded;
the rest are plain.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.layout.bloom_filter import BloomFilter, StoredFilter
from upsertlake.layout.footer import footer_metadata
from upsertlake.schema.columns import COMMIT_SEQNO, COMMIT_TIME, FILE_NAME, PARTITION_PATH, RECORD_KEY
from upsertlake.storage import Storage
from upsertlake.timeline import column_stats

# Unique per row and prefix-sharing (`k0000000123`, `20261123124731085_3_17`): delta-encoded.
DELTA_COLUMNS = (COMMIT_SEQNO, RECORD_KEY)
# One or a few values per file (commit time, partition path, file name): always a dictionary.
DICTIONARY_COLUMNS = (COMMIT_TIME, PARTITION_PATH, FILE_NAME)
DICTIONARY_SAMPLE = 4096  # rows `dictionary_columns` looks at

class WrittenFile(NamedTuple):
    size: int
    column_stats: column_stats.FileColumnStats


@dataclass(frozen=True)
class FileWriterConfig:
    """What a base file is written with (from the write config)."""

    compression: str = "snappy"
    row_group_bytes: int = 4 * 2**20
    bloom_num_entries: int = 60000
    bloom_fpp: float = 1e-9
    bloom_filter_type: str = "DYNAMIC_V0"
    bloom_max_entries: int = 100000


def write_base_file(
    storage: Storage,
    path: str,
    data: pa.Table,
    file_config: FileWriterConfig,
    bloom: BloomFilter | StoredFilter | None = None,
    key_range: tuple[str, str] | None = None,
    dictionary: Collection[str] | None = None,
) -> WrittenFile:
    """Write `table` (meta + data columns) as a Hudi base file; returns its size in bytes and its
    column statistics (from the footer just written), which its commit records.

    `bloom` is a filter already holding the file's keys in order (see `BloomFilter.resume` and
    `BloomFilter.unchanged`); `key_range` their (min, max), when known (`resumed_key_range`);
    `dictionary` the columns the file group's previous version dictionary-encodes, when it
    should keep that choice (`column_encodings`).
    """
    group_rows = rows_per_group(data, file_config.row_group_bytes)
    with storage.open_output(path) as sink:
        writer = _parquet_writer(sink, data, file_config, dictionary)
        writer.write_table(data, row_group_size=group_rows)
        writer.add_key_value_metadata(
            footer_metadata(
                data.column(RECORD_KEY),
                file_config.bloom_num_entries,
                file_config.bloom_fpp,
                file_config.bloom_filter_type,
                file_config.bloom_max_entries,
                bloom,
                key_range,
            )
        )
        writer.close()
        stats = column_stats.of_parquet(writer.writer.metadata, column_stats.float_nans(data))
        return WrittenFile(sink.tell(), stats)


def data_bytes(data: pa.Table, file_config: FileWriterConfig) -> int:
    """The bytes of `table`'s column chunks as `write_base_file` encodes and compresses them,
    measured by writing it to memory. The footer (bloom filter, statistics) is left out, as
    Hudi's rollover check (HoodieBaseParquetWriter.canWrite) leaves it out: a file's data fills
    hoodie.parquet.max.file.size and its footer comes on top."""
    sink = pa.BufferOutputStream()
    writer = _parquet_writer(sink, data, file_config)
    writer.write_table(data, row_group_size=rows_per_group(data, file_config.row_group_bytes))
    writer.close()
    meta = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    return sum(
        meta.row_group(g).column(c).total_compressed_size
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    )


def _parquet_writer(
    sink: object, data: pa.Table, file_config: FileWriterConfig, dictionary: Collection[str] | None = None
) -> pq.ParquetWriter:
    chosen, encodings = column_encodings(data, dictionary)
    return pq.ParquetWriter(
        sink,
        data.schema,
        compression=file_config.compression,
        use_dictionary=chosen,
        column_encoding=encodings or None,
        store_schema=False,
        write_statistics=True,
        write_page_index=True,
    )


def column_encodings(data: pa.Table, kept: Collection[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(columns to dictionary-encode, explicit encodings of the others) for writing `table`.
    `kept`: the data columns the file group's previous version dictionary-encodes; a rewrite keeps
    that choice (the meta columns and dictionary-typed ones follow their rules), which spares
    sampling the rows of every file again."""
    delta = {
        name: "DELTA_BYTE_ARRAY"
        for name in DELTA_COLUMNS
        if name in data.column_names and pa.types.is_string(data.schema.field(name).type)
    }
    if kept is None:
        dictionary = dictionary_columns(data)
    else:
        always = set(_always_dictionary(data))
        dictionary = [c for c in data.column_names if c in kept or c in always]
    return [c for c in dictionary if c not in delta], delta


def dictionary_pages(metadata: pq.FileMetaData) -> set[str]:
    """The top-level columns (names hold no dots: they are Avro names) with a dictionary page in
    every row group of a parquet file: the choice a rewrite of it keeps (`column_encodings`)."""
    leaves = [metadata.schema.column(i) for i in range(metadata.num_columns)]
    return {
        c.path
        for i, c in enumerate(leaves)
        if c.max_repetition_level == 0 and "." not in c.path
        and all(metadata.row_group(g).column(i).has_dictionary_page for g in range(metadata.num_row_groups))
    }


def _always_dictionary(data: pa.Table) -> list[str]:
    """The meta columns of one value per file, and the columns already dictionary-typed or nested."""
    return [
        f.name
        for f in data.schema
        if f.name in DICTIONARY_COLUMNS or pa.types.is_dictionary(f.type) or pa.types.is_nested(f.type)
    ]


def dictionary_columns(data: pa.Table, sample: int = DICTIONARY_SAMPLE) -> list[str]:
    """Columns worth dictionary encoding: the meta columns of one value per file, those already
    dictionary-typed, and those repeating values in a sample of rows spread over the table (the
    unique record key and seqno are not sampled). The sample rows are drawn at random (a fixed
    seed): evenly spaced rows alias with values that cycle (`rider-{id % 5000}` read every 43rd
    row looks unique), and the choice would change with the row count, so the bytes of a file
    (which bulk insert measures on a sample of its records) would not scale with it.

    Dictionary-encoding a column of unique values (keys, seqnos, measurements) costs time and
    bytes for nothing; parquet-mr falls back per page, pyarrow pays for the attempt. The sample
    is spread out because files are often sorted: the first rows of `rider-0 … rider-4999`
    repeating over 100K rows are all distinct.
    """
    n = data.num_rows
    if n < 64:
        return list(data.column_names)
    decided = _always_dictionary(data)
    rest = data.drop_columns([*decided, *(c for c in DELTA_COLUMNS if c in data.column_names)])
    rows = rest.take(pa.array(np.sort(np.random.default_rng(0).choice(n, min(sample, n), replace=False))))
    repeating = {
        name
        for name, col in zip(rows.column_names, rows.columns)
        if pc.count_distinct(col).as_py() <= rows.num_rows * 9 // 10
    }
    return [name for name in data.column_names if name in repeating or name in decided]


def rows_per_group(data: pa.Table, row_group_bytes: int) -> int:
    """The rows of `data` a row group of `row_group_bytes` (of rows in memory) holds."""
    if data.num_rows == 0:
        return 1
    per_row = max(1, data.nbytes // data.num_rows)
    return int(max(1, min(data.num_rows, row_group_bytes // per_row)))


def file_writer_config(cfg: Config) -> FileWriterConfig:
    """The file writer settings a write config names."""
    return FileWriterConfig(
        compression=cfg.get(opt.PARQUET_COMPRESSION),
        row_group_bytes=cfg.get(opt.PARQUET_BLOCK_SIZE),
        bloom_num_entries=cfg.get(opt.BLOOM_NUM_ENTRIES),
        bloom_fpp=cfg.get(opt.BLOOM_FPP),
        bloom_filter_type=cfg.get(opt.BLOOM_FILTER_TYPE),
        bloom_max_entries=cfg.get(opt.BLOOM_MAX_ENTRIES),
    )
