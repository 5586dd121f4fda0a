"""What a data instant changes in each metadata partition, as Hudi's writers record it
(HoodieTableMetadataUtil.convertMetadataTo*Records): docs/DESIGN.md §11.

- `files`: the `__all_partitions__` record naming the partitions written, and per partition the
  files written with their sizes (a cleaned file: deleted).
- `column_stats`: per base file written, one record per indexed column, from its footer (min, max,
  null and value counts, sizes). A file whose every indexed column cannot be described exactly
  gets none: a reader keeps a file it has no statistics for, while a partial set could make
  Hudi's reader skip it.
- `partition_stats`: per partition written, tight bounds over the columns of every file of its
  latest slices (Hudi 1.1 recomputes them so); a partition some file of which has no statistics
  loses its records (unindexed, so kept by readers).
- `record_index`: per key inserted its (partition, file id, instant), per key deleted a delete.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.metadata import keys as mkeys
from upsertlake.metadata.partitions import RecordType
from upsertlake.metadata.records import Record, record_index_info
from upsertlake.metadata.writer import Changes, Located
from upsertlake.schema.columns import (
    COMMIT_SEQNO,
    COMMIT_TIME,
    FILE_NAME,
    LOOKUP_KEY,
    PARTITION_PATH,
    RECORD_KEY,
    UPDATE_FILE_ID,
    UPDATE_PARTITION,
)

META_COLUMNS_INDEXED = (COMMIT_TIME, PARTITION_PATH, RECORD_KEY)
MAX_COLUMNS = 32  # hoodie.metadata.index.column.stats.max.columns.to.index
_NAMESPACE = "org.apache.hudi.avro.model."


def _empty_record(key: str, kind: RecordType) -> Record:
    return {COMMIT_TIME: None, COMMIT_SEQNO: None, RECORD_KEY: None,
            PARTITION_PATH: None, FILE_NAME: None, "key": key, "type": int(kind),
            "filesystemMetadata": None, "BloomFilterMetadata": None, "ColumnStatsMetadata": None,
            "recordIndexMetadata": None, "SecondaryIndexMetadata": None}


# -- files ------------------------------------------------------------------------------------------
def files_changes(added: Mapping[str, Mapping[str, int]], deleted: Mapping[str, Iterable[str]] = {}) -> Changes:
    """The `files` records of files added (partition -> name -> size) and deleted (partition -> names)."""
    changes = Changes()
    partitions = sorted(added)
    if partitions:
        listing = {mkeys.partition_identifier(p): {"size": 0, "isDeleted": False} for p in partitions}
        changes.upserts.append(
            {**_empty_record(mkeys.ALL_PARTITIONS_KEY, RecordType.ALL_PARTITIONS), "filesystemMetadata": listing}
        )
    for partition in sorted(set(added) | set(deleted)):
        files = {name: {"size": size, "isDeleted": False} for name, size in added.get(partition, {}).items()}
        files.update({name: {"size": 0, "isDeleted": True} for name in deleted.get(partition, ())})
        key = mkeys.partition_identifier(partition)
        changes.upserts.append({**_empty_record(key, RecordType.FILES), "filesystemMetadata": files})
    return changes


# -- column statistics ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ColumnStats:
    """One column of one file (or partition): what HoodieMetadataColumnStats holds, bounds as
    Python values of the column's Arrow type."""

    column: str
    type: pa.DataType
    low: Any
    high: Any
    values: int
    nulls: int
    size: int = 0
    uncompressed: int = 0


def indexed_columns(schema: pa.Schema, source_fields: Sequence[str] | None) -> list[str]:
    """The columns Hudi indexes: the index definition's when the table has one, else the three
    meta columns and the first 32 others of a supported type (getColumnsToIndex)."""
    if source_fields:
        return [c for c in source_fields if c in schema.names]
    meta = [c for c in META_COLUMNS_INDEXED if c in schema.names]
    data = [f.name for f in schema if not f.name.startswith("_hoodie_") and _supported(f.type)][:MAX_COLUMNS]
    return meta + data


def _supported(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
    )


def footer_stats(metadata: pq.FileMetaData, columns: Sequence[str]) -> list[ColumnStats] | None:
    """Exact statistics of `columns` from a parquet footer, or None when one cannot be given
    (a nested or unsupported column, a row group without statistics, values without a range)."""
    arrow = metadata.schema.to_arrow_schema()
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    out = []
    for name in columns:
        i = leaves.get(name)
        if i is None or name not in arrow.names or not _supported(arrow.field(name).type):
            return None
        low = high = None
        nulls = size = uncompressed = 0
        for g in range(metadata.num_row_groups):
            chunk = metadata.row_group(g).column(i)
            st = chunk.statistics
            if st is None or not st.has_null_count:
                return None
            nulls += st.null_count
            size += chunk.total_compressed_size
            uncompressed += chunk.total_uncompressed_size
            if st.has_min_max:
                low = st.min if low is None or st.min < low else low
                high = st.max if high is None or st.max > high else high
            elif st.null_count != metadata.row_group(g).num_rows:
                return None
        if isinstance(low, float) and (low != low or high != high):  # NaN: no range
            return None
        out.append(ColumnStats(name, arrow.field(name).type, low, high, metadata.num_rows, nulls, size, uncompressed))
    return out


@dataclass(frozen=True)
class RecordsStats:
    """Exact statistics of every column the metadata table can index of the records a log file
    holds (its data blocks), meta columns included: what Hudi's append handle keeps in its
    HoodieDeltaWriteStat's recordsStats. The task that writes the log file computes them from the
    rows it encodes, so the commit never reads the file back (on Spark: the driver opens no log
    file); the commit picks the columns the index covers (`select`). `nans`: floating columns
    holding NaN, which no range holds."""

    rows: int
    columns: Mapping[str, ColumnStats]
    nans: frozenset[str] = frozenset()

    @classmethod
    def of(cls, records: pa.Table) -> RecordsStats:
        """The statistics of `records` (the rows of a log file's data blocks, as written)."""
        columns, nans = {}, set()
        for name, column in zip(records.column_names, records.columns):
            t = column.type
            if not _supported(t):
                continue
            if pa.types.is_floating(t) and pc.any(pc.is_nan(column)).as_py():
                nans.add(name)
                continue
            bounds = pc.min_max(column)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            columns[name] = ColumnStats(name, t, low, high, records.num_rows, column.null_count)
        return cls(records.num_rows, columns, frozenset(nans))

    def select(self, names: Sequence[str]) -> list[ColumnStats] | None:
        """Those of `names` ([] for a log of deletes only: it adds no value), or None when one
        cannot be given exactly (a missing or unsupported column, NaN). Sizes are unknown (0)."""
        if not self.rows:
            return []
        if any(n not in self.columns for n in names):
            return None
        return [self.columns[n] for n in names]


NO_RECORDS = RecordsStats(0, {})  # a log file of deletes only


def merged(stats: Sequence[Sequence[ColumnStats]]) -> list[ColumnStats]:
    """Tight bounds of several files' statistics, column by column (counts and sizes added)."""
    out = []
    for column in zip(*stats):
        lows = [s.low for s in column if s.low is not None]
        highs = [s.high for s in column if s.high is not None]
        first = column[0]
        out.append(
            ColumnStats(
                first.column,
                first.type,
                min(lows) if lows else None,
                max(highs) if highs else None,
                sum(s.values for s in column),
                sum(s.nulls for s in column),
                sum(s.size for s in column),
                sum(s.uncompressed for s in column),
            )
        )
    return out


def column_stats_records(
    partition: str, file_name: str, stats: Sequence[ColumnStats], table_version: int
) -> list[Record]:
    """The `column_stats` records of one file (createColumnStatsRecords)."""
    return [
        {
            **_empty_record(mkeys.column_stats_key(s.column, partition, file_name), RecordType.COLUMN_STATS),
            "ColumnStatsMetadata": _stats_payload(file_name, s, table_version, tight=False),
        }
        for s in stats
    ]


def partition_stats_records(partition: str, stats: Sequence[ColumnStats], table_version: int) -> list[Record]:
    """The tight `partition_stats` records of one partition (createPartitionStatsRecords)."""
    name = mkeys.partition_identifier(partition)
    return [
        {
            **_empty_record(mkeys.partition_stats_key(s.column, partition), RecordType.PARTITION_STATS),
            "ColumnStatsMetadata": _stats_payload(name, s, table_version, tight=True),
        }
        for s in stats
    ]


def partition_stats_keys(partition: str, columns: Iterable[str]) -> list[str]:
    return [mkeys.partition_stats_key(c, partition) for c in columns]


def _stats_payload(file_name: str, s: ColumnStats, table_version: int, tight: bool) -> dict[str, Any]:
    low, value_type = _wrap(s.low, s.type, table_version)
    high, _ = _wrap(s.high, s.type, table_version)
    payload = {
        "fileName": file_name,
        "columnName": s.column,
        "minValue": low,
        "maxValue": high,
        "valueCount": s.values,
        "nullCount": s.nulls,
        "totalSize": s.size,
        "totalUncompressedSize": s.uncompressed,
        "isDeleted": False,
        "isTightBound": tight,
    }
    if table_version >= 9:
        payload["valueType"] = value_type
    return payload


# Hudi 1.1's ValueType ordinals (org.apache.hudi.stats.ValueType).
_BOOLEAN, _INT, _LONG, _FLOAT, _DOUBLE, _STRING, _BYTES, _DECIMAL, _DATE = 2, 3, 4, 5, 6, 7, 8, 10, 12
_TIMESTAMPS = {"ms": 15, "us": 16, "ns": 17}
_LOCAL_TIMESTAMPS = {"ms": 18, "us": 19, "ns": 20}


def _wrap(value: Any, t: pa.DataType, table_version: int) -> tuple[Any, dict[str, Any]]:
    """A bound as Hudi wraps it (version 8: a wrapper by Avro type; version 9: a primitive wrapper
    and the value type), and the value type."""
    if pa.types.is_boolean(t):
        ordinal, wrapper, v = _BOOLEAN, "BooleanWrapper", value
    elif pa.types.is_integer(t):
        wide = t.bit_width == 64
        ordinal, wrapper, v = (_LONG, "LongWrapper", value) if wide else (_INT, "IntWrapper", value)
    elif pa.types.is_floating(t):
        ordinal, wrapper, v = (
            (_DOUBLE, "DoubleWrapper", value) if t.bit_width == 64 else (_FLOAT, "FloatWrapper", value)
        )
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        ordinal, wrapper, v = _STRING, "StringWrapper", value
    elif pa.types.is_binary(t):
        ordinal, wrapper, v = _BYTES, "BytesWrapper", value
    elif pa.types.is_date32(t):
        days = None if value is None else pa.scalar(value, t).cast(pa.int32()).as_py()
        ordinal, wrapper, v = _DATE, ("IntWrapper" if table_version >= 9 else "DateWrapper"), days
    elif pa.types.is_timestamp(t):
        units = _TIMESTAMPS if t.tz is not None else _LOCAL_TIMESTAMPS
        count = None if value is None else pa.scalar(value, t).cast(pa.int64()).as_py()
        if table_version >= 9:
            ordinal, wrapper, v = units[t.unit], "LongWrapper", count
        else:  # version 8 wrote micros in a TimestampMicrosWrapper
            micros = (
                None if value is None else pa.scalar(value, t).cast(pa.timestamp("us", t.tz)).cast(pa.int64()).as_py()
            )
            ordinal, wrapper, v = units["us"], "TimestampMicrosWrapper", micros
    elif pa.types.is_decimal(t):
        if table_version >= 9:
            unscaled = None if value is None else int(Decimal(value).scaleb(t.scale))
            width = 0 if unscaled is None else max(1, (unscaled.bit_length() + 8) // 8)
            v = None if unscaled is None else unscaled.to_bytes(width, "big", signed=True)
            return (
                None if v is None else (_NAMESPACE + "BytesWrapper", {"value": v}),
                {"typeOrdinal": _DECIMAL, "additionalInfo": f"{t.precision},{t.scale}"},
            )
        ordinal, wrapper = _DECIMAL, "DecimalWrapper"
        v = None if value is None else Decimal(value).quantize(Decimal(1).scaleb(-15))
    else:
        raise ValueError(f"no column statistics for type {t}")
    wrapped = None if v is None else (_NAMESPACE + wrapper, {"value": v})
    return wrapped, {"typeOrdinal": ordinal, "additionalInfo": None}


# -- record index -----------------------------------------------------------------------------------
def record_index_changes(inserted: pa.Table, deleted: pa.Table, instant_millis: int) -> Changes:
    """The record index's changes: inserted keys (columns key, partition, file_id) located, deleted
    keys removed (a key both deleted and inserted, moved between partitions, is located)."""
    keys = inserted.column(LOOKUP_KEY)
    # one payload per file group, shared by its keys: made once per group, never once per key
    partitions, file_ids = inserted.column(UPDATE_PARTITION), inserted.column(UPDATE_FILE_ID)
    groups = pc.dictionary_encode(pc.binary_join_element_wise(partitions, file_ids, "/")).combine_chunks()
    at = np.asarray(groups.indices.to_numpy(zero_copy_only=False), np.int64)
    first = np.unique(at, return_index=True)[1]  # a row of each group, in the order of their codes
    template = _empty_record("", RecordType.RECORD_INDEX)
    located_at = [(partitions[i].as_py(), file_ids[i].as_py()) for i in first.tolist()]
    payloads = tuple({**template, "recordIndexMetadata": record_index_info(*pf, instant_millis)} for pf in located_at)
    gone = deleted.column(LOOKUP_KEY)
    if len(keys):
        gone = gone.filter(pc.invert(pc.is_in(gone, keys)))
    located = Located(pc.cast(keys, pa.string()).combine_chunks(), at, payloads) if len(keys) else None
    return Changes(deletes=gone.to_pylist(), located=located)
