"""Table schemas: Arrow <-> Avro as Hudi records them, batch normalization, and evolution.

`avro` speaks Hudi's schema format, `types` decides which Arrow data a table can hold (and
converts it), `evolution` decides how a table's schema changes with a batch and shapes data
read from any base file into the table's schema.
"""

from upsertlake.schema.avro import (
    META_COLUMNS,
    arrow_to_avro,
    avro_schema_json,
    avro_to_arrow,
)
from upsertlake.schema.evolution import conform, merge_schemas
from upsertlake.schema.types import normalize_batch

__all__ = [
    "META_COLUMNS",
    "arrow_to_avro",
    "avro_schema_json",
    "avro_to_arrow",
    "conform",
    "merge_schemas",
    "normalize_batch",
]
