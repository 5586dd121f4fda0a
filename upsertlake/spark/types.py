"""Spark <-> Arrow schemas, as pyspark converts them (timestamps with a zone are UTC instants)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, from_arrow_type, to_arrow_schema
from pyspark.sql.types import StructField, StructType


def arrow_schema_of(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def spark_schema_of(schema: pa.Schema) -> StructType:
    return from_arrow_schema(schema)


def with_types(schema: StructType, types: dict[str, pa.DataType]) -> StructType:
    """`schema` with the named fields given these Arrow types (in order, nullable)."""
    return StructType([
        StructField(f.name, from_arrow_type(types[f.name]), True) if f.name in types else f for f in schema.fields
    ])


def task_table(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    """A task's rows (a `mapInArrow` function's input) as one table; None when it has none (Spark
    may send no batch at all)."""
    listed = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(listed) if listed else None
