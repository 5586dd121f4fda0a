"""Row filters: pyarrow-style tuples or an Expression, and the file pruning they allow.

Filters always apply exactly to the rows read. Before that, a conjunction of tuples prunes whole
partitions (predicates on partition fields, evaluated on the values in the partition path) and
whole files (predicates on a single record key field, against the key range in each footer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.errors import FilterError

Predicate = tuple[str, str, Any]
Filters = Union[Sequence[Predicate], pc.Expression, None]

_OPS = {"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"}


def to_expression(filters: Filters) -> pc.Expression | None:
    if filters is None:
        return None
    if isinstance(filters, pc.Expression):
        return filters
    predicates = conjunction(filters)
    if not predicates:
        return None
    return pq.filters_to_expression([tuple(p) for p in predicates])


def conjunction(filters: Filters) -> list[Predicate]:
    """The predicates of a tuple filter list (a plain AND); [] for an Expression."""
    if filters is None or isinstance(filters, pc.Expression):
        return []
    out = []
    for item in filters:
        if not (isinstance(item, (tuple, list)) and len(item) == 3 and isinstance(item[0], str)):
            raise FilterError(f"a filter must be (column, op, value) tuples or an Expression, got {item!r}")
        column, op, value = item
        if op not in _OPS:
            raise FilterError(f"unknown filter operator {op!r} in {item!r}; use one of {sorted(_OPS)}")
        out.append((column, "=" if op == "==" else op, value))
    return out


def _holds(op: str, left: Any, right: Any) -> bool:
    if op == "=":
        return left == right
    if op == "!=":
        return left != right
    if op == "in":
        return left in right
    if op == "not in":
        return left not in right
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


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
                # __HIVE_DEFAULT_PARTITION__); null never satisfies these operators.
                field_type = schema.field(column).type
                empty = "" if pa.types.is_string(field_type) or pa.types.is_large_string(field_type) else None
                if op in ("=", "in", "<", "<=", ">", ">=") and not (empty is not None and _holds(op, empty, value)):
                    return False
                continue
            wanted = [pa.scalar(v).cast(schema.field(column).type).as_py() for v in value] if op in ("in", "not in") else value
            if not _holds(op, typed, wanted):
                return False
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
            continue  # cannot compare safely: read the partition
    return True


def key_range_may_match(lo: str | None, hi: str | None, column: str, predicates: list[Predicate]) -> bool:
    """False only when a predicate on the record key column excludes the whole [lo, hi] range."""
    if lo is None or hi is None:
        return True
    for col, op, value in predicates:
        if col != column:
            continue
        try:
            if op == "=" and not (lo <= str(value) <= hi):
                return False
            if op == "in" and not any(lo <= str(v) <= hi for v in value):
                return False
            if op == "<" and not lo < str(value):
                return False
            if op == "<=" and not lo <= str(value):
                return False
            if op == ">" and not hi > str(value):
                return False
            if op == ">=" and not hi >= str(value):
                return False
        except TypeError:
            continue
    return True
