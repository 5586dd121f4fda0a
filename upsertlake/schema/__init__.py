"""Table schemas: Arrow <-> Avro as Hudi records them, batch normalization, and evolution.

Layers (pyproject.toml, docs/DESIGN.md §3): may import config, storage,
util, errors; not timeline.

`columns` names every column a table or a write uses, `avro` speaks Hudi's schema format, `types`
decides which Arrow data a table can hold (and converts it), `evolution` decides how a table's
schema changes with a batch and shapes data read from any base file into the table's schema.
"""

from upsertlake.schema.avro import (
    META_SCHEMA,
    arrow_to_avro,
    avro_schema_json,
    avro_to_arrow,
    full_schema,
    parsed_avro_schema,
)
from upsertlake.schema.columns import META_COLUMNS
from upsertlake.schema.evolution import conform, merge_schemas
from upsertlake.schema.types import normalize_batch

__all__ = [
    "META_COLUMNS",
    "META_SCHEMA",
    "arrow_to_avro",
    "avro_schema_json",
    "avro_to_arrow",
    "conform",
    "full_schema",
    "merge_schemas",
    "normalize_batch",
    "parsed_avro_schema",
]
