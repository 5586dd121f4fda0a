"""Creating, opening and upgrading a table: where its config comes from (the options of a new
table, hoodie.properties of an existing one) and the checks before a `Table` is handed out."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from upsertlake.config import Config, option_list
from upsertlake.config import options as opt
from upsertlake.config.enums import MergeMode, TableType
from upsertlake.config.properties_file import BACKUP_FILE, PROPERTIES_FILE
from upsertlake.config.table_config import (
    WRITABLE_VERSIONS,
    TableConfig,
    merge_on_read_payload,
)
from upsertlake.config.table_options import TABLE_VERSION_KEY, check_against_table, take_table_version
from upsertlake.errors import (
    ConfigError,
    SchemaError,
    TableExistsError,
)
from upsertlake.schema import arrow_to_avro, avro_schema_json, normalize_batch
from upsertlake.storage import Storage, table_storage

if TYPE_CHECKING:
    import pyarrow.dataset

    from upsertlake.services.upgrade import UpgradeResult

from upsertlake.table.table import Table

log = logging.getLogger(__name__)


def _fields(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(option_list(value))
    return tuple(value)


def create_table(
    path: str | os.PathLike[str],
    name: str,
    record_key: str | Sequence[str],
    precombine_field: str | Sequence[str] | None = None,
    partition_fields: str | Sequence[str] | None = None,
    hive_style_partitioning: bool = False,
    schema: pa.Schema | None = None,
    options: Mapping[str, object] | None = None,
    storage_options: Mapping[str, object] | None = None,
    table_type: str | TableType | None = None,
) -> Table:
    """Create an empty table (its `.hoodie/hoodie.properties`); TableExistsError if one is there.
    `table_type` is COPY_ON_WRITE (default) or MERGE_ON_READ (a `TableType` or its name in any
    case; also by the option hoodie.table.type / hoodie.datasource.write.table.type): updates and
    deletes are appended to log files, which readers merge, instead of rewriting base files.
    `precombine_field` names the ordering field, or several (a sequence or comma-separated, compared
    in order: Hudi 1.1's `hoodie.table.ordering.fields`).
    `path` is a local folder or an `s3://`, `gs://`, `abfs://` URI; `storage_options` hold the
    store's settings (endpoint, credentials, region) over its standard environment variables."""
    storage = table_storage(path, storage_options)
    storage.check()
    options, asked = _creation_options(options, table_type)
    resolved = Config.resolve(options)
    keys, ordering = _fields(record_key), _fields(precombine_field)
    if not keys:
        raise ConfigError("record_key must name at least one field")
    create_schema = _create_schema(schema, name, (*keys, *_fields(partition_fields), *ordering))
    # as Hudi 1.x infers it: the option, else event time when there is a precombine field
    mode = resolved.get(opt.RECORD_MERGE_MODE) if resolved.is_set(opt.RECORD_MERGE_MODE) else None
    mode = mode or (MergeMode.EVENT_TIME if ordering else MergeMode.COMMIT_TIME)
    kind = resolved.get(opt.TABLE_TYPE)
    table_config = TableConfig(
        name=name,
        record_key_fields=keys,
        partition_fields=_fields(partition_fields),
        ordering_fields=ordering,
        database=resolved.get(opt.DATABASE_NAME),
        keygen_class=resolved.get(opt.KEYGEN_CLASS),
        hive_style_partitioning=hive_style_partitioning,
        urlencode_partitions=resolved.get(opt.PARTITIONPATH_URLENCODE),
        create_schema=create_schema,
        table_type=kind,
        extra=merge_on_read_payload(mode) if kind is TableType.MERGE_ON_READ else {},
    )
    table_config = _at_version(table_config, resolved.get(opt.WRITE_TABLE_VERSION), mode, asked is not None)
    check_against_table(resolved, table_config)
    _write_new_table(storage, table_config)
    return Table(storage, table_config, options)


def _creation_options(
    options: Mapping[str, object] | None, table_type: str | TableType | None
) -> tuple[dict[str, object], int | None]:
    """The options a new table is created with, and the version `hoodie.table.version` asked for
    (None: not given). That key is taken as Hudi's table builder takes it, as the version of the
    table it creates (hoodie.write.table.version, which must agree when given too); `table_type`
    as hoodie.table.type."""
    options, asked = take_table_version(options)
    if asked is not None:
        write_version = Config.resolve(options).get(opt.WRITE_TABLE_VERSION)
        if opt.WRITE_TABLE_VERSION.key in options and write_version != asked:
            raise ConfigError(f"{TABLE_VERSION_KEY}={asked} and {opt.WRITE_TABLE_VERSION.key}={write_version} "
                              "disagree: name the version of the new table once")
        options[opt.WRITE_TABLE_VERSION.key] = asked
    if table_type is not None:
        options = {**options, opt.TABLE_TYPE.key: table_type}
    return options, asked


def _create_schema(schema: pa.Schema | None, name: str, fields: Sequence[str]) -> str | None:
    """`hoodie.table.create.schema` of a table created with `schema` (None: without one), which
    must hold the key, partition and ordering `fields`."""
    if schema is None:
        return None
    schema = normalize_batch(schema.empty_table()).schema
    for f in fields:
        if f not in schema.names:
            raise SchemaError(f"field {f!r} is not in the given schema {schema.names}")
    return avro_schema_json(arrow_to_avro(schema, name))


def _at_version(table_config: TableConfig, version: int, mode: MergeMode, by_table_version: bool) -> TableConfig:
    """A new table's config at the `version` it is created at (6, 8 or 9); `by_table_version`:
    the version was asked for by hoodie.table.version (an error names that key)."""
    if version not in WRITABLE_VERSIONS:
        key = TABLE_VERSION_KEY if by_table_version else opt.WRITE_TABLE_VERSION.key
        raise ConfigError(f"{key}={version}: upsertlake creates tables at version 6, 8 or 9")
    if version == 8:
        return table_config.as_version_8(mode, 8)
    if version == 9:
        return table_config.as_version_9(mode, 9)
    return table_config


def _write_new_table(storage: Storage, table_config: TableConfig) -> None:
    """A new table's folders and `hoodie.properties`; TableExistsError if a table is there, or
    appears meanwhile (the properties are written only where none are)."""
    if storage.exists(PROPERTIES_FILE) or storage.exists(BACKUP_FILE):
        raise TableExistsError(f"a table already exists at {storage.base}")
    storage.makedirs(".hoodie/archived")
    if table_config.table_version >= 8:
        storage.makedirs(f".hoodie/{table_config.timeline_path}/{table_config.extra['hoodie.timeline.history.path']}")
    if not table_config.create(storage):
        raise TableExistsError(f"a table already exists at {storage.base}")


def upgrade_table(
    path: str | os.PathLike[str],
    version: int = 8,
    options: Mapping[str, object] | None = None,
    storage_options: Mapping[str, object] | None = None,
) -> UpgradeResult:
    """Upgrade the table at `path` to table version `version`, 8 or 9 (6 -> 8, 6 -> 9 and 8 -> 9, as
    Apache Hudi's upgrade handlers do), crash-safe and resumable (`upsertlake.services.upgrade`);
    refuses while a write is running. A `version` below the table's (8 on a version 9 table, 6 on
    a version 8 or 9 one) downgrades it, where that is safe (else a ConfigError says why, the
    table untouched), as Hudi's downgrade handlers do."""
    from upsertlake.concurrency.lock import make_lock
    from upsertlake.services.upgrade import upgrade

    storage = table_storage(path, storage_options)
    cfg = Config.resolve(options)
    return upgrade(storage, make_lock(storage, cfg), cfg, version)


def open_table(
    path: str | os.PathLike[str],
    options: Mapping[str, object] | None = None,
    storage_options: Mapping[str, object] | None = None,
) -> Table:
    """Open an existing table; TableNotFoundError if the path holds none."""
    storage = table_storage(path, storage_options)
    storage.check()
    return Table(storage, TableConfig.load(storage), options)
