"""Spark <-> Arrow schemas, as pyspark converts them (timestamps with a zone are UTC instants)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType


def arrow_schema_of(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def spark_schema_of(schema: pa.Schema) -> StructType:
    return from_arrow_schema(schema)
