"""Spark <-> Arrow schemas, as pyspark converts them (timestamps with a zone are UTC instants)."""

from __future__ import annotations

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
