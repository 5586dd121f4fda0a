"""Options of the Spark entry points: Hudi's keys (validated by the option registry) plus short
aliases, split into the table to open or create, the operation and the write options."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

import pyarrow as pa

from upsertlake.config import Config, option_list
from upsertlake.config import options as opt
from upsertlake.errors import ConfigError, TableNotFoundError
from upsertlake.storage import parse_location
from upsertlake.table.open import create_table, open_table
from upsertlake.table.table import Table
from upsertlake.timeline.operation import BATCH_OPERATIONS, Operation

ALIASES = {
    "table": opt.TABLE_NAME.key,
    "record_key": opt.RECORDKEY_FIELD.key,
    "precombine_field": opt.PRECOMBINE_FIELD.key,
    "partition_fields": opt.PARTITIONPATH_FIELD.key,
    "operation": opt.OPERATION.key,
    "table_type": opt.TABLE_TYPE.key,
}
# Older spellings, still accepted with a DeprecationWarning: one name per setting, as create_table.
DEPRECATED = {"precombine": "precombine_field", "partition": "partition_fields"}
AS_OF = "as.of.instant"
QUERY_TYPE = "hoodie.datasource.query.type"
BEGIN = "hoodie.datasource.read.begin.instanttime"
END = "hoodie.datasource.read.end.instanttime"
READ_KEYS = (AS_OF, QUERY_TYPE, BEGIN, END)
# Options of the streaming query itself, which Spark hands the sink with the others.
QUERY_KEYS = ("checkpointlocation",)
# `.save()` merges the staged rows in one Python worker (the data source's commit cannot start
# Spark jobs); above this many rows it refuses and points to `upsertlake.spark.upsert`.
SAVE_MAX_RECORDS = "upsertlake.save.max.records"
SAVE_MAX_RECORDS_DEFAULT = 1_000_000
# A write whose input Spark estimates at most this many bytes (its optimizer's statistics, no job)
# is prepared and tagged in one task by the in-process index: no job finds the touched
# partitions and no join shuffles stored keys, which cost a small batch seconds. 0: never.
SMALL_BATCH_BYTES = "upsertlake.small.batch.bytes"
SMALL_BATCH_BYTES_DEFAULT = 32 * 1024 * 1024
# The one-task path whatever Spark estimates: for inputs the user knows to be small that Spark
# cannot size (a streaming micro-batch of the rate or Kafka source, an RDD's rows).
SMALL_BATCH_FORCE = "upsertlake.small.batch.force"


# Keys of the object store's settings among a data source's options (delta-rs's and obstore's).
STORE_PREFIXES = ("aws_", "google_", "azure_", "allow_http")


def split_store_options(options: Mapping[str, object]) -> tuple[dict[str, object], dict[str, str]]:
    """The options without the store's settings, and those settings: a `storage_options` mapping
    (the Python functions) and keys like `aws_endpoint` or `AWS_REGION` (the data source's)."""
    rest: dict[str, object] = {}
    store: dict[str, str] = {
        str(k): str(v) for k, v in cast("Mapping[str, object]", options.get("storage_options") or {}).items()
    }
    for key, value in options.items():
        if key == "storage_options" or key.lower() in QUERY_KEYS:
            continue
        if key.lower().startswith(STORE_PREFIXES):
            store[key] = str(value)
        else:
            rest[key] = value
    return rest, store


def resolve_path(path: str) -> str:
    """The table's absolute path or URI, resolved once on the driver: a task runs in another
    working folder (an executor's), where a relative path would name another table."""
    return parse_location(path).uri


@dataclass(frozen=True)
class WriteOptions:
    path: str
    operation: Operation
    hoodie: dict[str, str]  # every hoodie.* key given (aliases resolved), validated
    save_max_records: int = SAVE_MAX_RECORDS_DEFAULT  # `.save()` refuses larger batches
    small_batch_bytes: int = SMALL_BATCH_BYTES_DEFAULT  # inputs up to this size are tagged in one task
    small_batch_force: bool = False  # every input is (SMALL_BATCH_FORCE)
    storage: dict[str, str] = field(default_factory=dict)  # the object store's settings

    def existing(self) -> Table | None:
        """The table at `path`, or None when there is none yet."""
        try:
            return open_table(self.path, self.hoodie, self.storage)
        except TableNotFoundError:
            return None

    def open_or_create(self, schema: pa.Schema) -> Table:
        """The table at `path`; the first write creates it from the options and the data's schema."""
        table = self.existing()
        if table is not None:
            return table
        cfg = Config.resolve(self.hoodie)
        name, key = cfg.get(opt.TABLE_NAME), cfg.get(opt.RECORDKEY_FIELD)
        if not name or not key:
            raise ConfigError(
                f"no table at {self.path} yet: creating one needs {opt.TABLE_NAME.key} and {opt.RECORDKEY_FIELD.key}"
            )
        partitions = option_list(cfg.get(opt.PARTITIONPATH_FIELD))
        return create_table(
            self.path,
            name=name,
            record_key=option_list(key),
            precombine_field=cfg.get(opt.PRECOMBINE_FIELD) or None,
            partition_fields=partitions,
            hive_style_partitioning=cfg.get(opt.HIVE_STYLE_PARTITIONING),
            schema=schema,
            options=self.hoodie,
            storage_options=self.storage,
        )


def resolve_aliases(options: Mapping[str, object]) -> dict[str, str]:
    """Short names to Hudi keys; a list of fields (record_key, partition_fields) is joined by commas."""
    out: dict[str, str] = {}
    for key, value in options.items():
        if value is None:
            continue
        name = key.lower()
        if name in DEPRECATED:
            warnings.warn(f"{key}= is deprecated; use {DEPRECATED[name]}=", DeprecationWarning, stacklevel=3)
            name = DEPRECATED[name]
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        out[ALIASES.get(name, key)] = text
    return out


def write_options(
    options: Mapping[str, object], path: str | None = None, operation: str | Operation | None = None
) -> WriteOptions:
    """Split and check a write's options; ConfigError names a missing path or a bad operation."""
    options, store = split_store_options(options)
    given = resolve_aliases(options)
    path = path or given.pop("path", None)
    given.pop("path", None)
    if not path:
        raise ConfigError("no table path: pass it to save(path) or as the 'path' option")
    path = resolve_path(path)
    hoodie = {
        k: v for k, v in given.items() if k not in (*READ_KEYS, SAVE_MAX_RECORDS, SMALL_BATCH_BYTES, SMALL_BATCH_FORCE)
    }
    cfg = Config.resolve(hoodie)  # unknown keys and bad values fail here, before any Spark job runs
    return WriteOptions(
        path, Operation.of(operation or cfg.get(opt.OPERATION), BATCH_OPERATIONS), hoodie, storage=store,
        save_max_records=_limit(given, SAVE_MAX_RECORDS, SAVE_MAX_RECORDS_DEFAULT, "rows"),
        small_batch_bytes=_limit(given, SMALL_BATCH_BYTES, SMALL_BATCH_BYTES_DEFAULT, "bytes"),
        small_batch_force=_flag(given, SMALL_BATCH_FORCE),
    )


def _flag(options: Mapping[str, object], key: str) -> bool:
    """A true/false option (false when absent)."""
    value = str(options.get(key, "false")).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key}={options.get(key)!r}: give true or false")
    return value == "true"


def _limit(options: Mapping[str, str], key: str, default: int, unit: str) -> int:
    """A limit among the options: a number, 0 or more."""
    value = options.get(key)
    if value is None:
        return default
    try:
        limit = int(value)
    except ValueError:
        limit = -1
    if limit < 0:
        raise ConfigError(f"{key}={value!r}: give a number of {unit} (0 or more)")
    return limit
