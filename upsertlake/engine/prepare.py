"""Preparing a batch: validate it, fit it to the table schema, compute keys, flag deletes, dedup.

Everything here raises before a single file is written, so bad input leaves the table as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config.table_config import TableConfig
from upsertlake.engine.dedup import dedup_indices
from upsertlake.engine.input import to_arrow_table
from upsertlake.errors import SchemaError
from upsertlake.layout.keygen import KeyGenerator
from upsertlake.schema import conform, merge_schemas, normalize_batch
from upsertlake.schema.columns import DELETE_FLAG, FORCE_FLAG, IS_DELETED, KEY, META_COLUMNS, PARTITION, POSITION
from upsertlake.schema.ordering import ordering_values
from upsertlake.schema.types import same_type
from upsertlake.timeline.operation import Operation
from upsertlake.util.arrow import constant

# Internal: a record's place in the whole input (Spark numbers rows before any shuffle). When the
# batch carries it, it rides along with each record, so a task's winners keep their input order.


class Distinct(Enum):
    """What deduplication made distinct in a batch; tagging skips a hash pass when it knows."""

    NOTHING = "nothing"  # keys may repeat
    KEY_IN_PARTITION = "key in partition"  # no key twice in one partition
    KEY = "key"  # no key twice

    def unique_for(self, global_index: bool) -> bool:
        """Does no key of the batch repeat where the index looks (the table, or a partition)?"""
        return self is Distinct.KEY or (self is Distinct.KEY_IN_PARTITION and not global_index)


@dataclass(frozen=True)
class PreparedBatch:
    """A batch ready to tag: data columns in table-schema order plus key, partition, delete flag."""

    records: pa.Table
    data_schema: pa.Schema
    num_input: int
    distinct: Distinct = Distinct.NOTHING

    @property
    def keys(self) -> pa.ChunkedArray:
        return self.records.column(KEY)

    @property
    def partitions(self) -> pa.ChunkedArray:
        return self.records.column(PARTITION)


def _require(batch: pa.Table, fields: tuple[str, ...] | list[str], role: str) -> None:
    for name in fields:
        if name not in batch.column_names:
            raise SchemaError(f"{role} field {name!r} is missing from the batch (columns: {batch.column_names})")


def _keep_key_types(batch: pa.Table, table_schema: pa.Schema, table_config: TableConfig) -> pa.Table:
    """Record key, partition and precombine columns never change type (other columns widen):
    they decide where a record lives and which version wins, so a batch whose ts became float64
    (a pandas column with a NaN) must not turn the table's long into a double. A batch type is
    cast to the table's when every value survives the round trip, else refused."""
    roles = {name: "precombine" for name in table_config.ordering_fields}
    roles.update({name: "partition" for name in table_config.partition_fields})
    roles.update({name: "record key" for name in table_config.record_key_fields})
    for name, role in roles.items():
        if name not in table_schema.names or name not in batch.column_names:
            continue
        want = table_schema.field(name).type
        column = batch.column(name)
        if same_type(column.type, want) or pa.types.is_null(column.type):
            continue
        try:
            cast = column.cast(want)
            exact = pc.all(pc.equal(cast.cast(column.type), column)).as_py() is not False
            why = "some values change"
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            exact, why = False, str(exc)
        if _tz_kind_differs(column.type, want):
            exact, why = False, "one has a time zone, the other not"
        if not exact:
            raise SchemaError(
                f"{role} column {name!r} keeps the table's type {want}: the batch's {column.type} values "
                f"do not convert to it exactly ({why}); cast the column to {want}"
            )
        batch = batch.set_column(batch.schema.get_field_index(name), pa.field(name, want), cast)
    return batch


def _tz_kind_differs(a: pa.DataType, b: pa.DataType) -> bool:
    """A naive timestamp is not an instant: it never becomes a zoned one (or back) silently."""
    return pa.types.is_timestamp(a) and pa.types.is_timestamp(b) and (a.tz is None) != (b.tz is None)


def _require_ordering(batch: pa.Table, name: str) -> None:
    """Hudi refuses a null ordering value (it cannot say which version wins); so do we."""
    nulls = batch.column(name).null_count
    if nulls:
        raise SchemaError(
            f"precombine field {name!r} is null in {nulls} of {batch.num_rows} row(s); "
            "every record needs an ordering value"
        )


@dataclass(frozen=True)
class PrepareSpec:
    """How one write prepares its batch. Picklable: Spark runs it on each hash partition of the
    input (by record key, so every duplicate of a key meets in one partition)."""

    table_config: TableConfig
    table_schema: pa.Schema | None
    operation: Operation
    combine: bool
    dedup_by_key_only: bool
    allow_missing_columns: bool

    def run(self, data: object) -> PreparedBatch:
        return prepare_batch(
            data,
            self.table_config,
            self.table_schema,
            operation=self.operation,
            combine=self.combine,
            dedup_by_key_only=self.dedup_by_key_only,
            allow_missing_columns=self.allow_missing_columns,
        )


def prepare_batch(
    data: object,
    table_config: TableConfig,
    table_schema: pa.Schema | None,
    *,
    operation: Operation,
    combine: bool,
    dedup_by_key_only: bool,
    allow_missing_columns: bool,
) -> PreparedBatch:
    """Validate and shape `data` for `operation` (upsert, insert, bulk_insert or delete)."""
    batch = to_arrow_table(data)
    batch = batch.drop_columns([c for c in batch.column_names if c in META_COLUMNS])
    position = batch.column(POSITION) if POSITION in batch.column_names else None
    if position is not None:
        batch = batch.drop_columns([POSITION])
    num_input = batch.num_rows
    _require(batch, table_config.record_key_fields, "record key")
    if operation is Operation.DELETE:
        if not dedup_by_key_only:
            _require(batch, table_config.partition_fields, "partition")
        return _prepare_delete(batch, table_config, table_schema, num_input, position)
    _require(batch, table_config.partition_fields, "partition")
    _require(batch, table_config.ordering_fields, "precombine")
    batch = normalize_batch(batch)
    if table_schema is not None:
        batch = _keep_key_types(batch, table_schema, table_config)
    for name in table_config.ordering_fields:
        _require_ordering(batch, name)
    data_schema = merge_schemas(table_schema, batch.schema, allow_missing=allow_missing_columns)
    batch = conform(batch, data_schema)
    keygen = KeyGenerator(table_config)
    keys = keygen.record_keys(batch)
    partitions = keygen.partition_paths(batch)
    if IS_DELETED in batch.column_names:
        if not pa.types.is_boolean(batch.schema.field(IS_DELETED).type):
            raise SchemaError(
                f"column {IS_DELETED!r} must be boolean (it marks deletes), not "
                f"{batch.schema.field(IS_DELETED).type}"
            )
        flag = pc.fill_null(batch.column(IS_DELETED), False)
    else:
        flag = constant(False, batch.num_rows, pa.bool_())
    records = (
        batch.append_column(KEY, keys)
        .append_column(PARTITION, partitions)
        .append_column(DELETE_FLAG, flag)
        .append_column(FORCE_FLAG, constant(False, batch.num_rows, pa.bool_()))
    )
    if position is not None:
        records = records.append_column(POSITION, position)
    if combine:
        by = [keys] if dedup_by_key_only else [keys, partitions]
        ordering = ordering_values(batch, table_config.ordering_fields) if table_config.ordering_fields else None
        winners = dedup_indices(by, ordering)
        if len(winners) != records.num_rows:
            records = records.take(winners)
        distinct = Distinct.KEY if dedup_by_key_only else Distinct.KEY_IN_PARTITION
        return PreparedBatch(records, data_schema, num_input, distinct)
    return PreparedBatch(records, data_schema, num_input)


def _prepare_delete(
    batch: pa.Table,
    table_config: TableConfig,
    table_schema: pa.Schema | None,
    num_input: int,
    position: pa.ChunkedArray | None = None,
) -> PreparedBatch:
    """Deletes need only the key (and partition) columns; data columns are carried as nulls."""
    keygen = KeyGenerator(table_config)
    keys = keygen.record_keys(batch)
    # A non-partitioned table's partition path is "" (not unknown), so its keys are found.
    if all(f in batch.column_names for f in table_config.partition_fields):
        partitions = keygen.partition_paths(batch)
    else:
        partitions = constant(None, batch.num_rows)
    schema = table_schema if table_schema is not None else pa.schema([])
    columns = {f.name: pa.nulls(batch.num_rows, f.type) for f in schema}
    records = pa.table(
        {
            **columns,
            KEY: keys,
            PARTITION: partitions,
            DELETE_FLAG: constant(True, batch.num_rows, pa.bool_()),
            FORCE_FLAG: constant(True, batch.num_rows, pa.bool_()),
            **({POSITION: position} if position is not None else {}),
        }
    )
    by_key = table_config.partition_fields == ()
    winners = dedup_indices([keys] if by_key else [keys, partitions], None)
    if len(winners) != records.num_rows:
        records = records.take(winners)
    return PreparedBatch(records, schema, num_input, Distinct.KEY if by_key else Distinct.KEY_IN_PARTITION)
