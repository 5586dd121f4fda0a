"""Whether `hoodie.properties` agrees with the table's data: the partition depth and field names
of the partitions commits wrote and of the data folders, the key generator, the fields' presence
in the schema. Readers prune partitions by the properties' fields only when they agree; writers
and the doctor refuse (or report) a table where they do not."""

from __future__ import annotations

import json
from collections.abc import Iterable

from upsertlake.config.table_config import TableConfig
from upsertlake.errors import CorruptTableError
from upsertlake.layout.file_system_view import PARTITION_METAFILE
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.layouts import METAFOLDER


def properties_disagreements(
    storage: Storage, table_config: TableConfig, timeline: Timeline, folders: Iterable[str] | None = None
) -> list[str]:
    """What the data says that the properties deny: the partition depth and field names of the
    partitions commits wrote and of the data folders (those holding partition metadata; given,
    or listed when no active commit names a partition: the listing walks the whole table, one
    request per 1,000 objects on a store), the key generator, the fields' presence in the
    table's schema."""
    problems = _keygen_problems(table_config)
    written: dict[str, str] = {}
    for inst in timeline.completed_writes():
        if inst in timeline.archived:
            continue
        try:
            meta = timeline.commit_metadata(inst)
        except CorruptTableError:
            continue  # reported by the doctor's instant check and by the write that reads it
        for partition in meta.partition_to_write_stats:
            written.setdefault(partition, f"commit {inst.file_name()}")
    if folders is None and not written:
        folders = partition_folders(storage.list_outside(METAFOLDER))
    seen = dict.fromkeys(folders or (), "a data folder")
    for partition, where in written.items():
        seen.setdefault(partition, where)
    for partition, where in sorted(seen.items()):
        problem = _partition_problem(table_config, partition, where)
        if problem:
            problems.append(problem)
            break  # one example says it; a table has thousands of partitions
    schema = _schema_fields(timeline, table_config)
    if schema is not None:
        named = [*table_config.record_key_fields, *partition_field_names(table_config), *table_config.ordering_fields]
        absent = [f for f in named if f not in schema]
        if absent:
            problems.append(f"it names field(s) {absent} that the table's schema does not have")
    return problems


def _keygen_problems(table_config: TableConfig) -> list[str]:
    keygen = table_config.keygen_class.rsplit(".", 1)[-1]
    kind = table_config.extra.get("hoodie.table.keygenerator.type", "")
    keys, parts = table_config.record_key_fields, table_config.partition_fields
    if (keygen == "NonpartitionedKeyGenerator" or kind == "NON_PARTITION") and parts:
        return [f"key generator {keygen or kind} does not go with partition fields {list(parts)}"]
    if (keygen == "SimpleKeyGenerator" or kind == "SIMPLE") and (len(keys) != 1 or len(parts) > 1):
        return [f"key generator {keygen or kind} takes one record key field and at most one partition field, "
                f"not {list(keys)} and {list(parts)}"]
    return []


def _partition_problem(table_config: TableConfig, partition: str, where: str) -> str | None:
    fields = partition_field_names(table_config)
    segments = partition.split("/") if partition else []
    if not fields:
        if segments:
            return f"it names no partition fields, but {where} holds partition {partition!r} (depth {len(segments)})"
        return None
    if not segments:
        return f"it names partition fields {fields}, but {where} holds files in the table's root (no partition)"
    names = [s.split("=", 1)[0] for s in segments if "=" in s]
    if table_config.hive_style_partitioning:
        if names != fields:
            return f"it names partition fields {fields}, but {where} holds partition {partition!r} (fields {names})"
    elif names == fields:
        return (f"hoodie.datasource.write.hive_style_partitioning is false, but {where} holds the hive-style "
                f"partition {partition!r}")
    elif len(segments) < len(fields):  # a value may hold '/', so deeper is possible, shallower is not
        return (f"it names {len(fields)} partition field(s) {fields}, but {where} holds partition {partition!r} "
                f"(depth {len(segments)})")
    return None


def partition_field_names(table_config: TableConfig) -> list[str]:
    """The partition fields without the `:TYPE` suffix CustomKeyGenerator tables give them."""
    return [f.split(":", 1)[0] for f in table_config.partition_fields]


def _schema_fields(timeline: Timeline, table_config: TableConfig) -> set[str] | None:
    try:
        schema = timeline.latest_schema() or table_config.create_schema
    except CorruptTableError:
        return None
    if not schema:
        return None
    try:
        return {f["name"] for f in json.loads(schema).get("fields", [])}
    except (ValueError, AttributeError, TypeError):
        return None


def partition_folders(entries: Iterable[FileEntry]) -> list[str]:
    """The data folders of a whole-table listing: those holding partition metadata (no file
    name is parsed: a stray file in a folder is the doctor's to report, not to trip on)."""
    return sorted({e.path.rpartition("/")[0] for e in entries if e.name == PARTITION_METAFILE})
