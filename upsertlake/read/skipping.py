"""Data skipping: which files the filters rule out by their column statistics, before any is
opened (row groups inside the files left are skipped by pyarrow, from parquet's statistics).

A file is ruled out when some predicate of the filters can hold for none of its rows. Tuple
filters are judged here, value by value: a null satisfies no predicate, so a column of nulls
rules out `=`, `<`, `in`, ... (`!=` and `not in`, which NaN passes, never skip a file);
a value outside [min, max] rules out `=`, `<`, `>`, ... An Expression filter is judged by
pyarrow, against each file's `guarantee` (what its statistics say holds for every row: the same
expressions `Table.to_pyarrow_dataset` gives its fragments).

A merge-on-read slice is ruled out only when its base file and every log file are: an update in
a log may bring a row into the filter's range, while deletes (a log of deletes alone records no
rows) only take rows out. A log file whose statistics were not recorded keeps its slice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.read.filters import Filters, Predicate, conjunction
from upsertlake.timeline.column_stats import ColumnRange, FileColumnStats

_PRUNING_OPS = {"=", "<", "<=", ">", ">=", "in"}


def may_match(stats: FileColumnStats | None, predicates: Sequence[Predicate], schema: pa.Schema) -> bool:
    """False only when some predicate holds for none of the file's rows."""
    if stats is None:
        return True
    if stats.rows == 0:
        return False
    for column, op, value in predicates:
        if op not in _PRUNING_OPS or value is None or column not in schema.names:
            continue
        t = schema.field(column).type
        r = stats.range(column, t)
        if r is None:
            continue
        if r.nulls is not None and r.nulls >= stats.rows:
            return False  # only nulls: no comparison holds
        try:
            if not _range_may_hold(r, op, _typed(value, t, op)):
                return False
        except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue  # values that do not compare: keep the file
    return True


def all_match(stats: FileColumnStats | None, predicates: Sequence[Predicate], schema: pa.Schema) -> bool:
    """True only when every predicate holds for every row of the file, by its statistics (a
    count then needs no data): no nulls (a null satisfies no predicate), no NaN in a floating
    column (NaN fails `<`, `=`, ...; it passes `!=` and `not in`),
    the whole range on the right side."""
    if stats is None or not predicates:
        return False
    for column, op, value in predicates:
        if column not in schema.names or value is None:
            return False
        t = schema.field(column).type
        r = stats.range(column, t)
        if r is None or r.nulls is None or r.min is None or r.max is None:
            return False
        try:
            v = _typed(value, t, "in" if op in ("in", "not in") else op)
            if op in ("!=", "not in"):
                inside = [x for x in (v if op == "not in" else [v]) if r.min <= x <= r.max]
                holds = not inside and r.nulls == 0  # NaN passes both, nulls neither
            else:
                holds = r.nulls == 0 and not r.nans and _range_holds(r, op, v)
        except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
        if not holds:
            return False
    return True


def _range_holds(r: ColumnRange, op: str, v: Any) -> bool:
    if op in ("=", "in"):
        return r.min == r.max and (r.min in v if op == "in" else r.min == v)
    return bool({"<": r.max < v, "<=": r.max <= v, ">": r.min > v, ">=": r.min >= v}[op])


def _typed(value: Any, t: pa.DataType, op: str) -> Any:
    """The filter's value(s) as the column's type, as Python values; NaN is refused (no range holds it)."""
    values = list(value) if op == "in" else [value]
    typed = [pa.scalar(v).cast(t).as_py() for v in values]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in typed):
        raise ValueError("a null or NaN value: judged by the rows")
    return typed if op == "in" else typed[0]


def _range_may_hold(r: ColumnRange, op: str, v: Any) -> bool:
    low, high = r.min, r.max
    if op == "in":
        return any(_range_may_hold(r, "=", x) for x in v)
    if op == "=":
        return (low is None or low <= v) and (high is None or v <= high)
    if op == "<":
        return low is None or low < v
    if op == "<=":
        return low is None or low <= v
    if op == ">":
        return high is None or high > v
    return high is None or high >= v  # ">="


def guarantee(stats: FileColumnStats | None, schema: pa.Schema) -> pc.Expression:
    """What the statistics say holds for every row of the file, as a pyarrow expression: per
    recorded column `min <= c <= max`, or'ed with `is_null(c)` when it holds nulls (and with
    `is_nan(c)` when a floating column may hold NaN, which no range holds); `is_null(c)` for a
    column of nulls. pyarrow uses the plain ranges to skip files (the or'ed ones it cannot)."""
    if stats is None:
        return pc.scalar(True)
    parts = []
    for f in schema:
        r = stats.range(f.name, f.type) if f.name in stats.columns else None
        if r is None or r.nulls is None:
            continue
        c = pc.field(f.name)
        if stats.rows and r.nulls >= stats.rows:
            parts.append(c.is_null())
            continue
        bounds = [b for b in ((c >= _literal(r.min, f.type)) if r.min is not None else None,
                              (c <= _literal(r.max, f.type)) if r.max is not None else None) if b is not None]
        if not bounds:
            continue
        held = bounds[0] if len(bounds) == 1 else bounds[0] & bounds[1]
        if r.nans:
            held = held | pc.is_nan(c)
        if r.nulls:
            held = held | c.is_null()
        parts.append(held)
    if not parts:
        return pc.scalar(True)
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out


def _literal(value: Any, t: pa.DataType) -> pc.Expression:
    return pc.scalar(pa.scalar(value, t))


def expression_keeps(guarantees: Sequence[pc.Expression], expression: pc.Expression, schema: pa.Schema) -> list[bool]:
    """For each file's guarantee, whether `expression` may hold for some of its rows (pyarrow's
    simplification of the expression under the guarantee, as its datasets skip fragments)."""
    if not guarantees:
        return []
    import pyarrow.dataset as ds  # here: pyarrow's datasets import pandas, which no other read needs
    import pyarrow.fs as pafs

    names = [str(i) for i in range(len(guarantees))]  # never opened: only their guarantees are read
    dataset = ds.FileSystemDataset.from_paths(
        names, schema=schema, format=ds.ParquetFileFormat(), filesystem=pafs.LocalFileSystem(),
        partitions=list(guarantees),
    )
    kept = {f.path for f in dataset.get_fragments(filter=expression)}
    return [name in kept for name in names]


def keeps(stats: Sequence[FileColumnStats | None], schema: pa.Schema, filters: Filters) -> list[bool]:
    """For each file (or row group), whether the filters may hold for some of its rows."""
    predicates = conjunction(filters)
    if predicates:
        return [may_match(s, predicates, schema) for s in stats]
    return expression_keeps([guarantee(s, schema) for s in stats], filters, schema)


def needs_statistics(filters: Filters) -> bool:
    """Whether the filters can rule files out by statistics at all."""
    if filters is None:
        return False
    if isinstance(filters, pc.Expression):
        return True
    return any(op in _PRUNING_OPS and value is not None for _, op, value in conjunction(filters))
