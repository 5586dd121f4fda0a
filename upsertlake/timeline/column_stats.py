"""Per-file column statistics: each column's minimum, maximum and null count, recorded by the
commit that wrote the file, so that a read skips files without opening them (on an object store,
without a request per file).

The shape is Hudi's column range metadata (HoodieColumnRangeMetadata: min, max, null count per
column of a file), which Hudi keeps in its metadata table's column-stats partition. We keep it in
the commit's `extraMetadata` under `upsertlake.column.stats` (one JSON string): the commit
documents are what every read loads anyway (from the commit digest on an object store), they
move with their commit to the archive and vanish with it at rollback, and Hudi's readers ignore
extraMetadata keys they do not know. As Hudi's index does by default, the first 32 flat columns
of the types below are recorded, the meta columns left out.

A base file's statistics come from the footer its writer just closed (`of_parquet`), a log
file's from the records it appends (`of_table`): delete blocks add no records, so a log of
deletes alone records no column. Files other writers wrote have their footers read instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STATS_KEY = "upsertlake.column.stats"
FORMAT = 1
MAX_COLUMNS = 32  # as Hudi's hoodie.metadata.index.column.stats.max.columns.to.index
MAX_TEXT = 64  # longer strings keep a prefix as their minimum and no maximum
META_PREFIX = "_hoodie_"


@dataclass(frozen=True)
class ColumnRange:
    """One column of one file: its smallest and largest value (None: unknown), its nulls (None:
    unknown) and, for floating columns, whether it may hold NaN (which no range holds)."""

    min: Any
    max: Any
    nulls: int | None
    nans: bool = False


@dataclass(frozen=True)
class FileColumnStats:
    """A file's rows and its recorded columns: name -> (type, min, max, nulls, nans), the values
    encoded as JSON holds them (`_encode`). A column not named is unknown, never "absent"."""

    rows: int
    columns: Mapping[str, tuple[str, Any, Any, int | None, bool]] = field(default_factory=dict)

    def range(self, column: str, as_type: pa.DataType) -> ColumnRange | None:
        """The column's range in `as_type` (the table's type now: a widened int reads as long);
        None when the column is not recorded or its values do not convert to that type."""
        entry = self.columns.get(column)
        if entry is None:
            return None
        token, low, high, nulls, nans = entry
        try:
            stored = _parse_type(token)
            return ColumnRange(_decode(low, stored, as_type), _decode(high, stored, as_type), nulls, nans)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError, TypeError):
            return None

    def to_json(self) -> list[Any]:
        return [self.rows, {name: list(entry) for name, entry in self.columns.items()}]

    @classmethod
    def from_json(cls, doc: list[Any]) -> FileColumnStats:
        rows, columns = doc
        return cls(int(rows), {name: tuple(entry) for name, entry in columns.items()})


def of_parquet(metadata: pq.FileMetaData, nans: Mapping[str, bool] | None = None) -> FileColumnStats:
    """A parquet file's statistics from its footer's row groups. `nans`: for floating columns,
    whether the file holds NaN (the writer knows; parquet's statistics leave NaN out), else
    assumed possible."""
    groups = range(metadata.num_row_groups)
    return FileColumnStats(metadata.num_rows, {
        f.name: _footer_entry(metadata, i, f, groups, (nans or {}).get(f.name, True)) for f, i in _leaves(metadata)
    })


def of_row_groups(metadata: pq.FileMetaData, columns: Collection[str]) -> list[FileColumnStats]:
    """Each row group's statistics of those of `columns` that are recorded, or are meta columns
    named there (NaN assumed possible), the footer's schema resolved once: what skipping row
    groups by a filter needs (an incremental read's by `_hoodie_commit_time`, as Hudi 0.x does)."""
    leaves = [(f, i) for f, i in _leaves(metadata, meta=columns) if f.name in columns]
    return [
        FileColumnStats(
            metadata.row_group(g).num_rows, {f.name: _footer_entry(metadata, i, f, [g], True) for f, i in leaves}
        )
        for g in range(metadata.num_row_groups)
    ]


def _leaves(metadata: pq.FileMetaData, meta: Collection[str] = ()) -> list[tuple[pa.Field, int]]:
    """The recorded columns of a parquet file, and the meta columns named in `meta`, with their
    leaf column index."""
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    schema = metadata.schema.to_arrow_schema()
    named = [f for f in schema if f.name.startswith(META_PREFIX) and f.name in meta and _supported(f.type)]
    return [(f, leaves[f.name]) for f in named + _indexed(schema) if f.name in leaves]


def _footer_entry(
    metadata: pq.FileMetaData, i: int, f: pa.Field, groups: Iterable[int], nans: bool
) -> tuple[str, Any, Any, int | None, bool]:
    """Column `i`'s (field `f`'s) range and nulls over the row groups `groups`."""
    low = high = None
    nulls: int | None = 0
    known = True
    for g in groups:
        group = metadata.row_group(g)
        st = group.column(i).statistics
        if st is None:
            known, nulls = False, None
            break
        nulls = None if nulls is None or not st.has_null_count else nulls + st.null_count
        if st.has_min_max:
            low = st.min if low is None or st.min < low else low
            high = st.max if high is None or st.max > high else high
        elif not (st.has_null_count and st.null_count == group.num_rows):
            known = False  # values without a range: no bound holds
    if not known:
        low = high = None
    return column_entry(f.type, low, high, nulls, nans)


def of_table(data: pa.Table) -> FileColumnStats:
    """The statistics of records about to be written (a log file's data block)."""
    if not data.num_rows:
        return FileColumnStats(0)
    out = {}
    for f in _indexed(data.schema):
        column = data.column(f.name)
        bounds = pc.min_max(column)
        nans = pa.types.is_floating(f.type) and bool(pc.any(pc.is_nan(column)).as_py())
        out[f.name] = column_entry(f.type, bounds["min"].as_py(), bounds["max"].as_py(), column.null_count, nans)
    return FileColumnStats(data.num_rows, out)


def float_nans(data: pa.Table) -> dict[str, bool]:
    """Whether each floating column of `table` holds NaN (parquet's statistics cannot say)."""
    return {
        f.name: bool(pc.any(pc.is_nan(data.column(f.name))).as_py())
        for f in _indexed(data.schema)
        if pa.types.is_floating(f.type)
    }


class StatWithColumns(Protocol):
    """A write stat (commit_metadata.WriteStat): its file and the statistics the write kept."""

    @property
    def path(self) -> str: ...
    @property
    def column_stats(self) -> FileColumnStats | None: ...


def commit_entries(stats: Iterable[StatWithColumns]) -> dict[str, str]:
    """The extraMetadata entry recording the column statistics the write stats carry ({} when
    none does): a commit's part."""
    files = {s.path: c.to_json() for s in stats if (c := s.column_stats) is not None}
    if not files:
        return {}
    return {STATS_KEY: json.dumps({"format": FORMAT, "files": files}, separators=(",", ":"), allow_nan=True)}


def recorded(extra_metadata: Mapping[str, str]) -> dict[str, FileColumnStats]:
    """The statistics a commit recorded, by file path ({} when none, or unreadable)."""
    text = extra_metadata.get(STATS_KEY)
    if not text:
        return {}
    try:
        doc = json.loads(text)
        if doc.get("format") != FORMAT:
            return {}
        return {path: FileColumnStats.from_json(entry) for path, entry in doc["files"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}  # a cache of what the footers say: unreadable, the footers are read


# -- types and values --------------------------------------------------------------------------
def _indexed(schema: pa.Schema) -> list[pa.Field]:
    """The columns recorded: flat, of a supported type, not meta columns; the first MAX_COLUMNS."""
    return [f for f in schema if not f.name.startswith(META_PREFIX) and _supported(f.type)][:MAX_COLUMNS]


def _supported(t: pa.DataType) -> bool:
    return (
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or t in (pa.float32(), pa.float64())
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal128(t)
    )


def column_entry(
    t: pa.DataType, low: Any, high: Any, nulls: int | None, nans: bool
) -> tuple[str, Any, Any, int | None, bool]:
    """One column of a FileColumnStats from its bounds as Python values of type `t` (a NaN bound
    or a long string's maximum is dropped; a long minimum keeps its prefix)."""
    floating = pa.types.is_floating(t)
    if floating and ((low is not None and math.isnan(low)) or (high is not None and math.isnan(high))):
        low = high = None
    if isinstance(low, str) and len(low) > MAX_TEXT:
        low = low[:MAX_TEXT]  # a prefix sorts no later than the string
    if isinstance(high, str) and len(high) > MAX_TEXT:
        high = None
    return (str(t), _encode(low, t), _encode(high, t), nulls, bool(nans) and floating)


def _encode(value: Any, t: pa.DataType) -> Any:
    """A value as JSON holds it: dates as days, timestamps as integers of their unit, decimals as text."""
    if value is None:
        return None
    if pa.types.is_date32(t):
        return pa.scalar(value, t).cast(pa.int32()).as_py()
    if pa.types.is_timestamp(t):
        return pa.scalar(value, t).cast(pa.int64()).as_py()
    if pa.types.is_decimal(t):
        return str(value)
    return value


def _decode(value: Any, stored: pa.DataType, as_type: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_date32(stored):
        scalar = pa.scalar(value, pa.int32()).cast(stored)
    elif pa.types.is_timestamp(stored):
        scalar = pa.scalar(value, pa.int64()).cast(stored)
    elif pa.types.is_decimal(stored):
        scalar = pa.scalar(Decimal(value), stored)
    else:
        scalar = pa.scalar(value, stored)
    return (scalar if scalar.type == as_type else scalar.cast(as_type)).as_py()


_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns)(?:, tz=(.+))?\]\Z")
_DECIMAL = re.compile(r"decimal128\((\d+), (-?\d+)\)\Z")


def _parse_type(token: str) -> pa.DataType:
    if m := _TIMESTAMP.match(token):
        return pa.timestamp(m.group(1), tz=m.group(2))
    if m := _DECIMAL.match(token):
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    if token == "date32[day]":
        return pa.date32()
    return pa.type_for_alias(token)
