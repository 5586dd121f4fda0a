"""Write options checked against the table's stored config (Hudi's "Config conflict" check).

A write option that names a different record key, partition path, precombine field, key
generator or table name than `hoodie.properties` would otherwise be ignored: the table's own
settings decide where records go. Hudi's `HoodieWriterUtils.validateTableConfig` refuses such a
write; so do we, naming the option, its value and the table's. So is, on a merge-on-read table,
another merge mode than the table's: readers merge its log files by the table's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from enum import Enum
from typing import Any

from upsertlake.config import options as opt
from upsertlake.config.enums import MergeMode
from upsertlake.config.option import Option, option_list
from upsertlake.config.resolved import Config
from upsertlake.config.table_config import (
    ORDERING_KEY,
    PRECOMBINE_KEY,
    WRITABLE_VERSIONS,
    TableConfig,
)
from upsertlake.errors import ConfigError, UnsupportedTableError

log = logging.getLogger(__name__)


def check_against_table(cfg: Config, table_config: TableConfig) -> None:
    """ConfigError listing every option set in `cfg` that contradicts the table's config (a
    table type other than the table's among them)."""
    stored: list[tuple[Option[Any], object, object, str]] = [
        (opt.TABLE_NAME, cfg.get(opt.TABLE_NAME), table_config.name, "hoodie.table.name"),
        (opt.TABLE_TYPE, cfg.get(opt.TABLE_TYPE), table_config.table_type, "hoodie.table.type"),
        (opt.RECORDKEY_FIELD, tuple(option_list(cfg.get(opt.RECORDKEY_FIELD))), table_config.record_key_fields,
         "hoodie.table.recordkey.fields"),
        (opt.PARTITIONPATH_FIELD, tuple(option_list(cfg.get(opt.PARTITIONPATH_FIELD))), table_config.partition_fields,
         "hoodie.table.partition.fields"),
        (opt.PRECOMBINE_FIELD, tuple(option_list(cfg.get(opt.PRECOMBINE_FIELD))), table_config.ordering_fields,
         ORDERING_KEY if table_config.table_version >= 9 else PRECOMBINE_KEY),
        (opt.KEYGEN_CLASS, cfg.get(opt.KEYGEN_CLASS), table_config.keygen_class, "hoodie.table.keygenerator.class"),
        (opt.HIVE_STYLE_PARTITIONING, cfg.get(opt.HIVE_STYLE_PARTITIONING), table_config.hive_style_partitioning,
         opt.HIVE_STYLE_PARTITIONING.key),
        (opt.PARTITIONPATH_URLENCODE, cfg.get(opt.PARTITIONPATH_URLENCODE), table_config.urlencode_partitions,
         opt.PARTITIONPATH_URLENCODE.key),
    ]
    conflicts = [
        f"{option.key}={_show(given)} but the table has {prop}={_show(have)}"
        for option, given, have, prop in stored
        if cfg.is_set(option) and given != have
    ]
    mode = merge_on_read_mode(table_config)
    if mode is not None and cfg.is_set(opt.RECORD_MERGE_MODE) and cfg.get(opt.RECORD_MERGE_MODE) != mode:
        stated = (
            "hoodie.record.merge.mode" if table_config.table_version >= 8 else "its hoodie.compaction.payload.class"
        )
        conflicts.append(f"{opt.RECORD_MERGE_MODE.key}={_show(cfg.get(opt.RECORD_MERGE_MODE))} but this merge-on-read "
                         f"table merges by {mode} ({stated}; its readers merge log files so)")
    if conflicts:
        raise ConfigError(
            "config conflict: the write options contradict the table's stored config: "
            + "; ".join(conflicts)
            + " (drop these options or make them match; a table's keys, partitioning and merge-on-read merge mode"
            " do not change)"
        )


TABLE_VERSION_KEY = "hoodie.table.version"


def take_table_version(options: Mapping[str, object] | None) -> tuple[dict[str, object], int | None]:
    """`hoodie.table.version` given among the options: the version it names, and the options
    without it. It is hoodie.properties' key, not a write option, but Hudi's table builder takes it
    as the version of a table it creates; so does `create_table`, and an existing table must be at
    that version."""
    rest = dict(options or {})
    given = rest.pop(TABLE_VERSION_KEY, None)
    if given is None:
        return rest, None
    try:
        version = int(str(given).strip())
    except ValueError:
        raise ConfigError(f"{TABLE_VERSION_KEY}={given!r} is not a table version (6, 8 or 9)") from None
    return rest, version


def upgrade_before_writing(table_config: TableConfig, cfg: Config) -> int | None:
    """The version this table is upgraded to before a write with these options (None: it is
    written at its own), as Hudi 1.x's writer decides: a `hoodie.write.table.version` above the
    table's upgrades it first while `hoodie.write.auto.upgrade` is on (the default); with it off
    the write goes at the table's version, warned. A version below the table's is an error."""
    if not cfg.is_set(opt.WRITE_TABLE_VERSION):
        return None
    wanted = cfg.get(opt.WRITE_TABLE_VERSION)
    if wanted <= table_config.table_version:
        table_config.check_write_version(wanted)
        return None
    if wanted not in WRITABLE_VERSIONS:
        raise ConfigError(
            f"{opt.WRITE_TABLE_VERSION.key}={wanted}: upsertlake writes table versions "
            f"{', '.join(map(str, WRITABLE_VERSIONS))}"
        )
    if not cfg.get(opt.WRITE_AUTO_UPGRADE):
        log.warning(
            "%s=false: writing table %r at its version %d, not %s=%d (as Hudi does)",
            opt.WRITE_AUTO_UPGRADE.key, table_config.name, table_config.table_version,
            opt.WRITE_TABLE_VERSION.key, wanted,
        )
        return None
    return wanted


def merge_on_read_mode(table_config: TableConfig) -> MergeMode | None:
    """A merge-on-read table's merge mode (version 6 states it by its payload class), which its
    writes merge by as its readers do; None on copy-on-write, or for a payload we do not merge by."""
    if not table_config.is_merge_on_read:
        return None
    try:
        return table_config.merge_mode
    except (UnsupportedTableError, ConfigError):
        return None


def table_layer(table_config: TableConfig) -> dict[str, str]:
    """hoodie.properties as the lowest layer of a table's write options, a merge-on-read table's
    merge mode among them."""
    props = table_config.to_properties()
    mode = merge_on_read_mode(table_config)
    if mode is not None:
        props.setdefault(opt.RECORD_MERGE_MODE.key, mode.value)
    return props


def _show(value: object) -> str:
    if isinstance(value, Enum):
        return repr(value.value)
    if isinstance(value, tuple):
        return repr(",".join(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
