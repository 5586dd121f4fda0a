"""Row filters: pyarrow-style tuples or an Expression, and the file pruning they allow.

Filters always apply exactly to the rows read. Before that, a conjunction of tuples prunes whole
partitions (predicates on partition fields, evaluated on the values in the partition path); files
and row groups are skipped by their column statistics (`upsertlake.read.skipping`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import time, timedelta, timezone, tzinfo
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import FilterError, SchemaError
from upsertlake.util.times import as_aware, parse_time, zone_name

Predicate = tuple[str, str, Any]
Filters: TypeAlias = Sequence[Predicate] | pc.Expression | None

_OPS = {"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"}
_LISTS = (list, tuple, set, frozenset)


def to_expression(filters: Filters) -> pc.Expression | None:
    """The rows a filter keeps, as an Arrow expression: comparisons as Arrow's (IEEE 754: NaN
    equals nothing, itself included, and passes `!=`; -0.0 equals 0.0); `in` holds where some `=`
    holds (so NaN or None in the list matches nothing, and 0.0 matches -0.0); nulls satisfy no
    predicate, `!=` and `not in` included, as in SQL."""
    if filters is None:
        return None
    if isinstance(filters, pc.Expression):
        return filters
    parts = [_predicate(column, op, value) for column, op, value in conjunction(filters)]
    if not parts:
        return None
    out = parts[0]
    for part in parts[1:]:
        out = out & part
    return out


def _predicate(column: str, op: str, value: Any) -> pc.Expression:
    field = pc.field(column)
    if op in ("in", "not in"):
        values = _equal_set(value)
        inside = field.isin(values) if values else pc.scalar(False)
        return inside if op == "in" else field.is_valid() & ~inside
    compared = {"=": field == value, "!=": field != value, "<": field < value, "<=": field <= value,
                ">": field > value, ">=": field >= value}[op]  # fmt: skip
    return compared if value is not None else pc.scalar(False)  # null compares with nothing


def _equal_set(values: Any) -> list[Any]:
    """The values `in` matches by `=`: no None or NaN (`=` never holds for them), both zeros
    when either is there (Arrow's set lookup tells -0.0 from 0.0, its `=` does not)."""
    out = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if any(isinstance(v, float) and v == 0.0 for v in out):
        out += [0.0, -0.0]
    return out


def conjunction(filters: Filters) -> list[Predicate]:
    """The predicates of a tuple filter list (a plain AND); [] for an Expression. FilterError for
    a malformed one, naming it: not a (column, op, value) tuple, an unknown operator, a single
    value where `in` takes a list (a string is not split into characters) or a list where a
    comparison takes one value."""
    if filters is None or isinstance(filters, pc.Expression):
        return []
    if isinstance(filters, (str, bytes)) or not isinstance(filters, Sequence):
        raise FilterError(f"filters are a list of (column, op, value) tuples or a pyarrow Expression, got {filters!r}")
    out = []
    for item in filters:
        if not (isinstance(item, (tuple, list)) and len(item) == 3 and isinstance(item[0], str)):
            raise FilterError(f"a filter must be (column, op, value) tuples or an Expression, got {item!r}")
        column, op, value = item
        if op not in _OPS:
            raise FilterError(f"unknown filter operator {op!r} in {item!r}; use one of {sorted(_OPS)}")
        listed = isinstance(value, _LISTS) or (hasattr(value, "__array__") and not isinstance(value, (str, bytes)))
        if op in ("in", "not in") and not listed:
            raise FilterError(f"{op!r} takes a list of values, got the {type(value).__name__} {value!r} in {item!r}: "
                              f"write ({column!r}, {op!r}, [{value!r}])")
        if op not in ("in", "not in") and isinstance(value, _LISTS):
            raise FilterError(f"{op!r} compares with one value, got the {type(value).__name__} {value!r} in {item!r}"
                              f"{': for a list of values use in' if op in ('=', '==') else ''}")
        out.append((column, "=" if op == "==" else op, list(value) if op in ("in", "not in") else value))
    return out


def _holds(op: str, left: Any, right: Any) -> bool:
    """A predicate on one (non-null) value, as `to_expression` judges rows."""
    if op in ("in", "not in"):
        found = any(left == x for x in right if x is not None)
        return found if op == "in" else not found
    if right is None:
        return False
    return bool({"=": left == right, "!=": left != right, "<": left < right, "<=": left <= right,
                 ">": left > right, ">=": left >= right}[op])  # fmt: skip


def partition_may_match(values: dict[str, str | None], predicates: list[Predicate], schema: pa.Schema) -> bool:
    """False only when some predicate on a partition field surely fails for this partition."""
    for column, op, value in predicates:
        if column not in values or column not in schema.names:
            continue
        raw = values[column]
        try:
            typed = pa.array([raw], pa.string()).cast(schema.field(column).type)[0].as_py()
            if typed is None:
                # The default partition holds nulls, and empty strings too (both write as
                # __HIVE_DEFAULT_PARTITION__); a null satisfies no predicate.
                field_type = schema.field(column).type
                if not (pa.types.is_string(field_type) or pa.types.is_large_string(field_type)) or not _holds(
                    op, "", value
                ):
                    return False
                continue
            if not _holds(op, typed, value):
                return False
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
            continue  # cannot compare safely: read the partition
    return True


def checked_filters(filters: Filters, schema: pa.Schema) -> Filters:
    """The filters with each value in its column's type, refused before any row is read when a
    column is unknown (SchemaError) or a value does not compare with its column (FilterError,
    naming both): pyarrow would fail on the first file it filters, or, for some types, compare
    the wrong way. Date and timestamp columns take every form of time (`upsertlake.util.times`);
    a naive time on a column with a zone is local time, an aware one on a column without a
    zone is refused (its zone cannot be told)."""
    if filters is None:
        return None
    # One row of nulls: evaluated, an expression's kernels run (an empty table leaves some
    # mismatches, such as timestamps with and without a zone, to the first file read).
    empty = pa.table({f.name: pa.nulls(1, f.type) for f in schema}, schema=schema)
    if isinstance(filters, pc.Expression):
        _evaluate(empty, filters, f"filter {filters}")
        return filters
    out = []
    for column, op, value in conjunction(filters):
        if column not in schema.names:
            raise SchemaError(f"filter on unknown column {column!r}; the table has {schema.names}")
        t = schema.field(column).type
        what = f"filter {(column, op, value)!r} on a {t} column"
        typed = [_typed(v, t, what) for v in value] if op in ("in", "not in") else _typed(value, t, what)
        predicate = (column, op, typed)
        _evaluate(empty, predicate, what)
        out.append(predicate)
    return out


def _typed(value: Any, t: pa.DataType, what: str) -> Any:
    """One filter value as its column compares with it: a time in the column's type and zone,
    a NumPy or Arrow scalar as a Python value, an integer for a floating column as a float,
    anything else as given."""
    if value is None:
        return None
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return _time_value(value, t, what)
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    elif hasattr(value, "item") and not isinstance(value, (str, bytes)):  # a NumPy scalar
        value = value.item()
    if pa.types.is_floating(t) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # 0 is 0.0, which `in` matches with -0.0
    return value


def _time_value(value: Any, t: pa.DataType, what: str) -> Any:
    try:
        when = parse_time(value.as_py() if isinstance(value, pa.Scalar) else value).when
    except ValueError as exc:
        raise FilterError(f"{what}: {exc}") from None
    if pa.types.is_date(t):
        if when.tzinfo is not None or when.time() != time():
            raise FilterError(
                f"{what}: {value!r} is not a date (a date column compares with dates, "
                "such as '2026-12-06' or datetime.date(2026, 12, 6))"
            )
        return when.date()
    if t.tz is None:
        if when.tzinfo is not None:
            raise FilterError(
                f"{what}: the column's timestamps have no zone and {value!r} is in {zone_name(when)}: "
                "give a time without a zone, in the zone the column was written in"
            )
        return when
    return as_aware(when).astimezone(_zone(t.tz))


def _zone(name: str) -> tzinfo:
    """An Arrow timestamp's zone (`UTC`, `+01:00`, `Europe/Paris`) as a tzinfo."""
    if name.upper() in ("UTC", "Z"):
        return timezone.utc
    if name[:1] in "+-":
        hours, _, minutes = name[1:].partition(":")
        offset = timedelta(hours=int(hours), minutes=int(minutes or 0))
        return timezone(-offset if name[0] == "-" else offset)
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def _evaluate(empty: pa.Table, filters: pc.Expression | Predicate, what: str) -> None:
    try:
        empty.filter(filters if isinstance(filters, pc.Expression) else _predicate(*filters))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError) as exc:
        message = " ".join(str(exc).split())
        if "No match for FieldRef" in message:
            raise SchemaError(
                f"{what} names a column the table lacks ({message}); the table has {empty.schema.names}"
            ) from exc
        raise FilterError(f"{what}: its value cannot be compared with the column ({message})") from exc
