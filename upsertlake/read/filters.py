"""Row filters: pyarrow-style tuples or an Expression, and the file pruning they allow.

Filters always apply exactly to the rows read. Before that, a conjunction of tuples prunes whole
partitions (predicates on partition fields, evaluated on the values in the partition path); files
and row groups are skipped by their column statistics (`upsertlake.read.skipping`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.errors import FilterError, SchemaError

Predicate = tuple[str, str, Any]
Filters: TypeAlias = Sequence[Predicate] | pc.Expression | None

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
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op == "in":
        return left in right
    if op == "not in":
        return left not in right
    return bool({"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op])


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
            wanted = (
                [pa.scalar(v).cast(schema.field(column).type).as_py() for v in value]
                if op in ("in", "not in")
                else value
            )
            if not _holds(op, typed, wanted):
                return False
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
            continue  # cannot compare safely: read the partition
    return True


def check_filters(filters: Filters, schema: pa.Schema) -> None:
    """Refuse, before any row is read, a filter on a column the table lacks (SchemaError) or one
    whose value cannot be compared with its column (FilterError): pyarrow would fail on the first
    file it filters, or, for some types, compare the wrong way."""
    if filters is None:
        return
    empty = schema.empty_table()
    if isinstance(filters, pc.Expression):
        _evaluate(empty, filters, f"filter {filters}")
        return
    for predicate in conjunction(filters):
        column = predicate[0]
        if column not in schema.names:
            raise SchemaError(f"filter on unknown column {column!r}; the table has {schema.names}")
        _evaluate(empty, predicate, f"filter {predicate!r} on a {schema.field(column).type} column")


def _evaluate(empty: pa.Table, filters: pc.Expression | Predicate, what: str) -> None:
    try:
        empty.filter(filters if isinstance(filters, pc.Expression) else to_expression([filters]))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError) as exc:
        message = " ".join(str(exc).split())
        if "No match for FieldRef" in message:
            raise SchemaError(f"{what} names a column the table lacks ({message}); the table has "
                              f"{empty.schema.names}") from exc
        raise FilterError(f"{what}: its value cannot be compared with the column ({message})") from exc
