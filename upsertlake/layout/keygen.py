"""Record keys and partition paths, computed column-wise as Hudi's key generators do.

- SimpleKeyGenerator: the key field's value as text; a null or empty key is an error.
- ComplexKeyGenerator: `f1:v1,f2:v2`, null as `__null__`, empty as `__empty__`; an error only
  when every key field is null or empty. With one key field, Hudi 0.14.1 to 1.0.2 wrote the bare
  value (HUDI-7001, undone in 1.1): such a table keeps the spelling its stored keys have
  (`stored_key_spelling`), or else its version's.
- NonpartitionedKeyGenerator: partition path "".
Partition paths join the partition values with '/', `field=value` when hive style, null or empty
as `__HIVE_DEFAULT_PARTITION__`, URL-encoded (Java's URLEncoder) when asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from urllib.parse import quote_plus, unquote_plus

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config.table_config import (
    COMPLEX_KEYGEN,
    NONPARTITIONED_KEYGEN,
    SIMPLE_KEYGEN,
    TableConfig,
)
from upsertlake.errors import SchemaError
from upsertlake.layout.footer import MIN_KEY
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
NULL_KEY = "__null__"
EMPTY_KEY = "__empty__"


def value_text(column: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """Column values as Hudi renders them in keys and partition paths (Java's toString)."""
    col = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
    t = col.type
    if pa.types.is_timestamp(t):
        col = pc.cast(col, pa.int64())  # Avro timestamp-micros/millis are longs in Hudi's keys
    if pa.types.is_dictionary(t):
        col = pc.cast(col, t.value_type)
    text = pc.cast(col, pa.string())
    if pa.types.is_floating(t):
        # Java prints whole doubles as "1.0" where Arrow prints "1".
        plain = pc.match_substring_regex(text, r"^-?\d+$")
        text = pc.if_else(plain, pc.binary_join_element_wise(text, ".0", ""), text)
    return text


def _column(batch: pa.Table, name: str, role: str) -> pa.ChunkedArray:
    if name not in batch.column_names:
        raise SchemaError(f"{role} field {name!r} is missing from the batch (columns: {batch.column_names})")
    return batch.column(name)


class KeyGenerator:
    """Computes `_hoodie_record_key` and `_hoodie_partition_path` for a batch."""

    def __init__(self, table_config: TableConfig) -> None:
        self.table_config = table_config
        one = len(table_config.record_key_fields) == 1
        simple = table_config.keygen_class in (SIMPLE_KEYGEN, NONPARTITIONED_KEYGEN)
        complex_bare = table_config.keygen_class == COMPLEX_KEYGEN and not table_config.names_single_key
        self.simple_key = one and (simple or complex_bare)

    # -- record keys -------------------------------------------------------------------------
    def record_keys(self, batch: pa.Table) -> pa.ChunkedArray:
        fields = self.table_config.record_key_fields
        if not fields:
            raise SchemaError("the table declares no record key field")
        if self.simple_key:
            return self._simple_key(batch, fields[0])
        return self._complex_key(batch, fields)

    def _simple_key(self, batch: pa.Table, name: str) -> pa.ChunkedArray:
        keys = value_text(_column(batch, name, "record key"))
        bad = pc.sum(pc.or_kleene(pc.is_null(keys), pc.equal(pc.utf8_length(keys), 0))).as_py() or 0
        if bad:
            raise SchemaError(f"record key field {name!r} is null or empty in {bad} row(s)")
        return keys

    def _complex_key(self, batch: pa.Table, fields: tuple[str, ...]) -> pa.ChunkedArray:
        parts = []
        all_missing = None
        for name in fields:
            text = value_text(_column(batch, name, "record key"))
            missing = pc.or_kleene(pc.is_null(text), pc.equal(pc.utf8_length(text), 0))
            missing = pc.fill_null(missing, True)
            all_missing = missing if all_missing is None else pc.and_(all_missing, missing)
            text = pc.if_else(pc.is_null(text), NULL_KEY, text)
            text = pc.if_else(pc.equal(pc.utf8_length(text), 0), EMPTY_KEY, text)
            parts.append(pc.binary_join_element_wise(f"{name}:", text, ""))
        bad = pc.sum(all_missing).as_py() or 0
        if bad:
            raise SchemaError(f"record key fields {list(fields)} are all null or empty in {bad} row(s)")
        return pc.binary_join_element_wise(*parts, ",")

    # -- partition paths ---------------------------------------------------------------------
    def partition_paths(self, batch: pa.Table) -> pa.ChunkedArray:
        fields = self.table_config.partition_fields
        if not fields:
            return pa.chunked_array([pa.array([""] * batch.num_rows, pa.string())])
        parts = [self._partition_part(_column(batch, name, "partition"), name) for name in fields]
        return parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "/")

    def _partition_part(self, column: pa.ChunkedArray, name: str) -> pa.ChunkedArray:
        text = value_text(column)
        text = pc.if_else(pc.fill_null(pc.equal(pc.utf8_length(text), 0), True), DEFAULT_PARTITION, text)
        if self.table_config.urlencode_partitions:
            text = _map_distinct(text, lambda v: v if v == DEFAULT_PARTITION else java_url_encode(v))
        if self.table_config.hive_style_partitioning:
            text = pc.binary_join_element_wise(f"{name}=", text, "")
        return text

    def partition_values(self, partition_path: str) -> dict[str, str | None]:
        """The partition fields' values (as text, None for the default partition) of a path."""
        fields = self.table_config.partition_fields
        if not fields:
            return {}
        parts = partition_path.split("/")
        if len(parts) != len(fields):
            return {}
        values: dict[str, str | None] = {}
        for name, part in zip(fields, parts):
            if self.table_config.hive_style_partitioning:
                part = part.split("=", 1)[1] if "=" in part else part
            if part == DEFAULT_PARTITION:
                values[name] = None
                continue
            values[name] = unquote_plus(part) if self.table_config.urlencode_partitions else part
        return values


def java_url_encode(value: str) -> str:
    """Java's URLEncoder.encode(value, UTF-8): keeps letters, digits and `.-*_`; space is '+'."""
    return quote_plus(value, safe="*").replace("~", "%7E")


def _map_distinct(text: pa.ChunkedArray, fn: Callable[[str], str]) -> pa.ChunkedArray:
    """Apply a Python function once per distinct value: partition values have few of them."""
    encoded = pc.dictionary_encode(text).combine_chunks()
    mapped = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return pa.chunked_array([pc.take(mapped, encoded.indices)])


STORED_KEY_LOOKBACK = 10  # the newest completed writes looked at for a base file's stored key


def stored_key_spelling(storage: Storage, timeline: Timeline, table_config: TableConfig) -> TableConfig:
    """`table_config` with `single_key_named` read from the stored keys, when its complex key generator
    has one key field: a write must spell keys as the stored ones are spelled, or it finds none of
    them and writes every key twice. The footer's smallest key of one base file of the newest
    writes tells (one footer read); with none, the table's version decides."""
    one_field = len(table_config.record_key_fields) == 1
    if table_config.keygen_class != COMPLEX_KEYGEN or not one_field or table_config.single_key_named is not None:
        return table_config
    prefix = f"{table_config.record_key_fields[0]}:"
    for inst in timeline.completed_writes()[::-1][:STORED_KEY_LOOKBACK]:
        for stat in timeline.commit_metadata(inst).write_stats():
            if not stat.path.endswith(".parquet"):
                continue
            try:
                footer = storage.parquet_file(stat.path).metadata.metadata or {}
            except FileNotFoundError:  # cleaned since
                continue
            if low := footer.get(MIN_KEY.encode()):
                return replace(table_config, single_key_named=low.decode().startswith(prefix))
    return table_config
