"""Rebuild a damaged or lost `hoodie.properties` from what the table holds (`doctor --fix`).

Each setting comes from the first source that tells it:
1. the user (`upsertlake doctor PATH --fix --option KEY=VALUE`);
2. the settings the newest commit recorded in its extraMetadata (`TableConfig.recorded_properties`);
3. the table itself: the timeline layout (table version), the latest schema (the table name is
   its record's name), the partition folders (depth, hive style, field names), the meta columns
   and values of a few data files (record key fields; partition fields of plain folders);
4. the lines of the damaged file (and of an invalid backup) that survived and fit the table: the
   last line of a file cut short may be cut itself and is not used;
5. defaults no read depends on (the archive folder; a database named by the surviving checksum).
For the table name, database, partition fields and key generator a surviving line that fits comes
before what the table shows: it keeps what the table cannot (the name before Avro sanitized it,
CustomKeyGenerator's `field:TYPE`, a time-based key generator). A setting none of them tells (the
precombine field of a table written by Apache Hudi, say) is named, with the option that supplies
it, and nothing is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.config import option_list
from upsertlake.config.enums import MergeMode, TableType
from upsertlake.config.properties_file import (
    BACKUP_FILE,
    CHECKSUM_KEY,
    PROPERTIES_FILE,
    PropertiesFile,
    properties_checksum,
)
from upsertlake.config.table_config import (
    COMPLEX_KEYGEN,
    KEYGEN_TYPE_KEY,
    KEYGEN_TYPES,
    LEGACY_PAYLOAD_KEY,
    NATIVE_FORMAT,
    ORDERING_KEY,
    RECORDED_KEYS,
    TABLE_FORMAT_KEY,
    TIMELINE_PATH_KEY,
    WRITABLE_KEYGENS,
    default_keygen,
)
from upsertlake.errors import CorruptTableError
from upsertlake.layout.file_system_view import BaseFile, Listing, list_partitions_and_files
from upsertlake.layout.keygen import DEFAULT_PARTITION
from upsertlake.schema.avro import sanitize_name
from upsertlake.schema.columns import RECORD_KEY
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.layouts import METAFOLDER, TimelineLayout

KEY_FIELDS = "hoodie.table.recordkey.fields"
PARTITION_FIELDS = "hoodie.table.partition.fields"
PRECOMBINE = "hoodie.table.precombine.field"
HIVE_STYLE = "hoodie.datasource.write.hive_style_partitioning"
MERGE_MODE = "hoodie.record.merge.mode"

# Write options a user may pass instead of the table's own keys.
_ALIASES = {
    "hoodie.datasource.write.recordkey.field": KEY_FIELDS,
    "hoodie.datasource.write.partitionpath.field": PARTITION_FIELDS,
    "hoodie.datasource.write.precombine.field": PRECOMBINE,
    ORDERING_KEY: PRECOMBINE,  # version 9's name for it; written back under it at 9
    "hoodie.datasource.write.keygenerator.class": "hoodie.table.keygenerator.class",
}
HUDI_DEFAULT, UPSERTLAKE_DEFAULT = "Hudi's default", "upsertlake's default"
NOT_SET = "not set: the surviving valid file or the commit record lacks it"
_DEFAULTS = {HUDI_DEFAULT, UPSERTLAKE_DEFAULT, NOT_SET, "the only type with base files alone"}
_SAMPLE_FILES = 8  # data files (one per partition) read to tell key and partition fields apart
_SAMPLE_ROWS = 1000


@dataclass(frozen=True)
class Rebuild:
    """The rebuilt properties (checksum included), where each value came from, and what no source
    told (key -> why): then `props` is incomplete and must not be written."""

    props: dict[str, str]
    sources: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        """Where the values came from: counted, and named where a default stood in."""
        by_source: dict[str, list[str]] = {}
        for key, source in self.sources.items():
            by_source.setdefault(source, []).append(key)
        parts = []
        for source, keys in by_source.items():
            named = ", ".join(f"{k}={self.props.get(k, '')}" for k in keys)
            parts.append(f"{source}: {named}" if source in _DEFAULTS else f"{source}: {len(keys)} value(s)")
        return "; ".join(parts)

    def missing_hint(self, base: str) -> str:
        """Which values could not be recovered and how to pass them."""
        what = "; ".join(f"{key} ({why})" for key, why in self.unknown.items())
        options = " ".join(f"--option {key}=..." for key in self.unknown)
        return f"could not recover {what}: pass them as in `upsertlake doctor {base} --fix {options}`"


def split_table_values(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """`--option` pairs split into values for hoodie.properties (its own keys, or the write keys
    naming the same fields) and the rest (write options)."""
    mine = {k: v for k, v in options.items() if k in _ALIASES or k in _KNOWN or k.startswith("hoodie.table.")}
    return mine, {k: v for k, v in options.items() if k not in mine}


def holds_a_timeline(storage: Storage) -> bool:
    """Whether `.hoodie/` holds instant files (in either layout): a table, whatever its properties."""
    for layout in (TimelineLayout(1, METAFOLDER), TimelineLayout(2, f"{METAFOLDER}/timeline")):
        if any(not e.is_dir and layout.parse(e.name) for e in storage.list(layout.folder)):
            return True
    return False


def layout_on_disk(storage: Storage, remnants: Mapping[str, str]) -> TimelineLayout:
    """The timeline layout the instant files use, whatever the damaged properties say."""
    folder = f"{METAFOLDER}/{remnants.get(TIMELINE_PATH_KEY) or 'timeline'}"
    return TimelineLayout(2, folder) if storage.exists(folder) else TimelineLayout(1, METAFOLDER)


def remnants(storage: Storage) -> tuple[dict[str, str], bool]:
    """The lines that survived in `hoodie.properties` (over those of its backup), and whether one
    of the two is valid (a file that only disagrees with the table): then a key it lacks is one
    the table does not set. A damaged file may have lost any line."""
    found: dict[str, str] = {}
    whole = False
    for rel in (BACKUP_FILE, PROPERTIES_FILE):
        file = PropertiesFile.read(storage, rel)
        if file.props is None or file.raw is None:
            continue
        props = dict(file.props)
        if props and not file.raw.endswith(b"\n"):
            props.pop(list(props)[-1])  # a value cut short would pass for a true one
        found.update(props)
        whole = whole or file.valid
    return found, whole


def rebuild_properties(
    storage: Storage, timeline: Timeline, given: Mapping[str, str], listing: Listing | None = None
) -> Rebuild:
    """hoodie.properties as the table's sources tell it (see the module's docstring); `listing`:
    the table's, if the caller has listed it already."""
    old, whole = remnants(storage)
    schema_json = _schema(timeline, old)
    columns = _columns(schema_json)
    partitions, files, _ = listing or list_partitions_and_files(storage)
    completed = {i.time for i in timeline.completed_writes()}
    sample = _sample(storage, [f for f in files if f.instant_time in completed])
    recorded = _recorded(timeline)
    rb = _Builder(*({_ALIASES.get(k, k): v for k, v in source.items()} for source in (given, recorded or {}, old)))
    version = _version(timeline, old, recorded or {})
    rb.set("hoodie.table.version", str(version), "the timeline layout")
    rb.set("hoodie.timeline.layout.version", "2" if version >= 8 else "1", "the timeline layout")
    _identity(rb, schema_json, sample)
    _fields(rb, columns, partitions, sample)
    if PRECOMBINE not in rb.values and (whole or recorded or _merge_mode(old.get(MERGE_MODE)) is MergeMode.COMMIT_TIME):
        rb.set(PRECOMBINE, "", NOT_SET)
    _settings(rb, schema_json)
    _keygen(rb, sample)
    if version >= 8:
        _version_8(rb, version)
    if version >= 9:
        _version_9(rb)
    unknown = {key: why for key, why in _REQUIRED.items() if key not in rb.values}
    if PARTITION_FIELDS not in rb.values and (partitions or not whole):
        unknown[PARTITION_FIELDS] = (
            "the folders are not named field=value and no one column's values match them" if partitions
            else "the table has no data to tell (pass an empty value if it is not partitioned)"
        )
    props = {k: v for k, v in rb.values.items() if v != ""}
    if version >= 9 and PRECOMBINE in props:
        props[ORDERING_KEY] = props.pop(PRECOMBINE)
        rb.sources[ORDERING_KEY] = rb.sources.pop(PRECOMBINE)
    props.update({k: v for k, v in old.items() if k not in rb.values and k not in _KNOWN and _EXTRA_KEY.fullmatch(k)})
    if "hoodie.table.name" in props:
        props[CHECKSUM_KEY] = str(properties_checksum(props))
    return Rebuild(props, rb.sources, unknown)


def _identity(rb: _Builder, schema_json: str | None, sample: list[pa.Table]) -> None:
    """Table name, database, type, and whether the meta fields are populated."""
    from_schema = _table_name(schema_json)
    rb.pick("hoodie.table.name", from_schema, "the schema's record name", prefer_old=True,
            fits=lambda v: from_schema in (None, sanitize_name(v)))
    rb.pick("hoodie.database.name", _database(rb.old), "the surviving checksum", prefer_old=True)
    rb.set_default("hoodie.database.name", "default", UPSERTLAKE_DEFAULT)
    rb.pick("hoodie.table.type", None, fits=lambda v: v in {t.value for t in TableType})
    rb.set_default("hoodie.table.type", TableType.COPY_ON_WRITE.value, "the only type with base files alone")
    if sample:  # Hudi writes the meta columns of a table without meta fields too, all null
        keys = sample[0].column(RECORD_KEY) if RECORD_KEY in sample[0].schema.names else None
        rb.pick("hoodie.populate.meta.fields", _bool(keys is not None and keys.null_count < len(keys)),
                "the data files' columns")


def _fields(rb: _Builder, columns: list[str], partitions: list[str], sample: list[pa.Table]) -> None:
    """Record key, partition and precombine fields, and the folders' style."""
    in_schema = (lambda v: all(f in columns for f in option_list(v))) if columns else bool
    rb.pick(KEY_FIELDS, _key_fields(sample, columns), "the record keys of the data files", fits=in_schema)
    hive, names = _partition_layout(partitions)
    if partitions == [""]:
        names = ""  # files in the table's root only: not partitioned
    elif names is None and partitions:
        names = _plain_partition_fields(sample, columns, rb.old.get(PARTITION_FIELDS))

    def fits(value: str) -> bool:  # a surviving line keeps CustomKeyGenerator's `field:TYPE`
        plain = [f.split(":", 1)[0] for f in option_list(value)]
        return plain == option_list(names) if names is not None else all(f in columns for f in plain) or not columns

    rb.pick(PARTITION_FIELDS, names, "the partition folders", prefer_old=True, fits=fits)
    rb.pick(HIVE_STYLE, hive, "the partition folders")
    rb.set_default(HIVE_STYLE, "false", HUDI_DEFAULT)
    rb.pick(PRECOMBINE, None, fits=lambda v: not columns or all(f in columns for f in option_list(v)))


def _settings(rb: _Builder, schema_json: str | None) -> None:
    """The flags no read depends on, the timezone, the archive folder and the create schema."""
    for key in ("hoodie.datasource.write.partitionpath.urlencode", "hoodie.datasource.write.drop.partition.columns"):
        rb.pick(key, None, fits=lambda v: v in ("true", "false"))
        rb.set_default(key, "false", HUDI_DEFAULT)
    rb.pick("hoodie.table.timeline.timezone", None, fits=lambda v: v in ("UTC", "LOCAL"))
    rb.set("hoodie.archivelog.folder", rb.old.get("hoodie.archivelog.folder") or "archived", HUDI_DEFAULT)
    if schema_json:
        create = rb.old.get("hoodie.table.create.schema")
        rb.set(
            "hoodie.table.create.schema",
            create if create is not None and _schema_ok(create) else schema_json,
            "the schema",
        )


def _keygen(rb: _Builder, sample: list[pa.Table]) -> None:
    """The key generator: recorded, by type, as the surviving line names it (a time-based one the
    fields cannot imply), or as the key format and the fields imply it."""
    keys, parts = rb.values.get(KEY_FIELDS, ""), rb.values.get(PARTITION_FIELDS, "")
    typed = KEYGEN_TYPES.get(rb.recorded.get(KEYGEN_TYPE_KEY) or rb.old.get(KEYGEN_TYPE_KEY, ""))
    guess = typed or (
        COMPLEX_KEYGEN if _complex_keys(sample, keys) else default_keygen(option_list(keys), option_list(parts))
    )
    rb.pick("hoodie.table.keygenerator.class", guess if keys else None, "the key and partition fields",
            prefer_old=True, fits=lambda v: "." in v and (v == guess or v not in WRITABLE_KEYGENS))


_REQUIRED = {
    "hoodie.table.name": "no commit records it and the schema names no record",
    KEY_FIELDS: "no commit records it and the data files do not tell",
    PRECOMBINE: "no commit records it and nothing in the data tells it (pass an empty value for none)",
}
_EXTRA_KEY = re.compile(r"hoodie\.[A-Za-z0-9_.\-]+")  # other settings kept from a surviving line, never garbage
_KNOWN = {*RECORDED_KEYS, CHECKSUM_KEY, "hoodie.table.version", "hoodie.timeline.layout.version", "hoodie.table.type",
          "hoodie.populate.meta.fields", "hoodie.archivelog.folder", "hoodie.table.create.schema",
          "hoodie.record.merge.strategy.id", "hoodie.compaction.payload.class", LEGACY_PAYLOAD_KEY, TABLE_FORMAT_KEY}


class _Builder:
    """Each key's value from the first source that has one that fits: the user, the commit
    record, what the table shows, the surviving lines."""

    def __init__(self, user: Mapping[str, str], recorded: Mapping[str, str], old: Mapping[str, str]) -> None:
        self.user, self.recorded, self.old = user, recorded, old
        self.values: dict[str, str] = {}
        self.sources: dict[str, str] = {}

    def set(self, key: str, value: str, source: str) -> None:
        self.values[key], self.sources[key] = value, source

    def set_default(self, key: str, value: str, source: str) -> None:
        if key not in self.values:
            self.set(key, value, source)

    def pick(self, key: str, derived: str | None, source: str = "", fits: Callable[[str], bool] = bool,
             prefer_old: bool = False) -> None:
        """`prefer_old`: a surviving line that fits says more than what the table shows (a table
        name before sanitizing, a key generator the fields do not imply)."""
        old = self.old.get(key) if self.old.get(key) and fits(self.old[key]) else None
        if key in self.user:
            self.set(key, self.user[key], "--option")
        elif key in self.recorded:
            self.set(key, self.recorded[key], "the newest commit's record")
        elif old is not None and (prefer_old or derived is None):
            self.set(key, old, "the damaged file's own line")
        elif derived is not None:
            self.set(key, derived, source)


def _version(timeline: Timeline, old: Mapping[str, str], recorded: Mapping[str, str]) -> int:
    """The table version: layout 1 is 6 (or the older version a surviving line names); layout 2
    is 8 or 9, as a surviving line says, else 9 when the newest commit recorded Hudi 1.1's
    ordering fields key (ours write it at version 9 only), else 8."""
    if timeline.layout.version != 2:
        return _int(old.get("hoodie.table.version"), 6, range(0, 7))
    return _int(old.get("hoodie.table.version"), 9 if ORDERING_KEY in recorded else 8, range(8, 10))


def _version_8(rb: _Builder, version: int) -> None:
    """The properties Hudi 1.0 adds (TableConfig.as_version_8), from the values chosen so far."""
    mode = MergeMode.EVENT_TIME if rb.values.get(PRECOMBINE) else MergeMode.COMMIT_TIME
    rb.pick(MERGE_MODE, None, fits=lambda v: _merge_mode(v) is not None)
    rb.set_default(MERGE_MODE, mode.value, "the precombine field")
    chosen = MergeMode(rb.values[MERGE_MODE])
    rb.set("hoodie.record.merge.strategy.id", chosen.strategy_id, "the merge mode")
    rb.set("hoodie.compaction.payload.class", chosen.payload_class, "the merge mode")
    rb.pick("hoodie.table.initial.version", None, fits=str.isdigit)
    rb.set_default("hoodie.table.initial.version", str(version), "the timeline layout")
    rb.set(TIMELINE_PATH_KEY, rb.old.get(TIMELINE_PATH_KEY) or "timeline", "the timeline folder")
    rb.set("hoodie.timeline.history.path", rb.old.get("hoodie.timeline.history.path") or "history", HUDI_DEFAULT)
    keygen_type = next(
        (t for t, cls in KEYGEN_TYPES.items() if cls == rb.values.get("hoodie.table.keygenerator.class")), None
    )
    if keygen_type:
        rb.set(KEYGEN_TYPE_KEY, keygen_type, "the key generator")
        if int(rb.values["hoodie.table.initial.version"]) >= 8 and "hoodie.table.keygenerator.class" not in rb.recorded:
            del rb.values["hoodie.table.keygenerator.class"]  # Hudi 1.x names it by type only


def _version_9(rb: _Builder) -> None:
    """Hudi 1.1's changes on top of version 8's (TableConfig.as_version_9): no merge strategy id,
    the payload class kept as the legacy one by an upgraded table, the table format named by a new
    one (the ordering fields go under their own key at the end)."""
    for key in ("hoodie.record.merge.strategy.id", "hoodie.compaction.payload.class"):
        rb.sources.pop(key)
    del rb.values["hoodie.record.merge.strategy.id"]
    payload = rb.values.pop("hoodie.compaction.payload.class")
    if rb.values["hoodie.table.initial.version"] == "9":
        rb.set(TABLE_FORMAT_KEY, rb.old.get(TABLE_FORMAT_KEY) or NATIVE_FORMAT, HUDI_DEFAULT)
    else:
        rb.pick(LEGACY_PAYLOAD_KEY, payload, "the merge mode")


def _recorded(timeline: Timeline) -> dict[str, str] | None:
    """The settings the newest commit that recorded them did record."""
    for inst in reversed(timeline.completed_writes()):
        try:
            extra = timeline.commit_metadata(inst).extra_metadata
        except CorruptTableError:
            continue
        if extra.get(KEY_FIELDS):
            return {k: v for k, v in extra.items() if k in RECORDED_KEYS}
    return None


def _schema(timeline: Timeline, old: Mapping[str, str]) -> str | None:
    try:
        latest = timeline.latest_schema()
    except CorruptTableError:
        latest = None
    create = old.get("hoodie.table.create.schema")
    return latest or (create if _schema_ok(create) else None)


def _schema_ok(text: str | None) -> bool:
    try:
        return bool(text) and isinstance(json.loads(text or ""), dict)
    except ValueError:
        return False


def _columns(schema_json: str | None) -> list[str]:
    return [f["name"] for f in json.loads(schema_json).get("fields", [])] if schema_json else []


def _table_name(schema_json: str | None) -> str | None:
    """Hudi names a table's Avro record `<table>_record` in namespace `hoodie.<table>`."""
    if not schema_json:
        return None
    doc = json.loads(schema_json)
    name, namespace = doc.get("name", ""), doc.get("namespace", "")
    table = name.removesuffix("_record")
    return table if name.endswith("_record") and namespace == f"hoodie.{table}" else None


def _database(old: Mapping[str, str]) -> str | None:
    """The database name the surviving checksum was computed with, among the usual ones."""
    if not old.get(CHECKSUM_KEY) or not old.get("hoodie.table.name"):
        return None
    for database in ("default", ""):
        props = {"hoodie.database.name": database, "hoodie.table.name": old["hoodie.table.name"]}
        if str(properties_checksum(props)) == old[CHECKSUM_KEY].strip():
            return database
    return None


def _sample(storage: Storage, files: list[BaseFile]) -> list[pa.Table]:
    """The first rows of the newest committed file of a few partitions."""
    newest: dict[str, BaseFile] = {}
    for bf in files:
        if bf.partition_path not in newest or bf.instant_time > newest[bf.partition_path].instant_time:
            newest[bf.partition_path] = bf
    out = []
    for partition in sorted(newest)[:_SAMPLE_FILES]:
        try:
            batches = pq.ParquetFile(storage.full_path(newest[partition].path)).iter_batches(_SAMPLE_ROWS)
            batch = next(batches, None)
        except (OSError, pa.ArrowInvalid):
            continue
        if batch is not None and batch.num_rows:
            out.append(pa.Table.from_batches([batch]).append_column("__folder", pa.array([partition] * batch.num_rows)))
    return out


def _as_text(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    try:
        return pc.cast(column, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _equal(a: pa.ChunkedArray | None, b: pa.ChunkedArray) -> bool:
    return a is not None and bool(pc.all(pc.fill_null(pc.equal(a, b), False)).as_py())


def _key_fields(sample: list[pa.Table], columns: list[str]) -> str | None:
    """The record key fields the meta column `_hoodie_record_key` shows: `f1:v1,f2:v2` names them
    (ComplexKeyGenerator); a plain value is the one column always equal to it."""
    if not sample or RECORD_KEY not in sample[0].schema.names:
        return None
    first = sample[0].column(RECORD_KEY)[0].as_py()
    if first is None:
        return None  # a table without meta fields
    names = [part.split(":", 1)[0] for part in first.split(",")] if ":" in first else []
    if names and all(n in columns for n in names) and all(_complex_keys([t], ",".join(names)) for t in sample):
        return ",".join(names)
    found = [c for c in columns if all(
        c in t.schema.names and _equal(_as_text(t.column(c)), t.column(RECORD_KEY)) for t in sample)]
    if len(found) > 1:  # few rows: a float column may hold the same numbers; keys are text or integers
        found = [c for c in found if _key_like(sample[0].schema.field(c).type)]
    return found[0] if len(found) == 1 else None


def _key_like(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t))


def _complex_keys(sample: list[pa.Table], keys: str) -> bool:
    """Whether the stored record keys read `f1:v1,f2:v2` over these key fields."""
    names = option_list(keys)
    if not sample or not names:
        return False
    for t in sample:
        texts = [_as_text(t.column(n)) if n in t.schema.names else None for n in names]
        if RECORD_KEY not in t.schema.names or any(v is None for v in texts):
            return False
        parts = [pc.binary_join_element_wise(pa.scalar(f"{n}:"), v, "") for n, v in zip(names, texts)]
        if not _equal(pc.binary_join_element_wise(*parts, ","), t.column(RECORD_KEY)):
            return False
    return True


def _partition_layout(partitions: list[str]) -> tuple[str | None, str | None]:
    """(hive style, field names) the partition folders show: names only when every segment of every
    folder is `field=value` with the same fields."""
    folders = [p for p in partitions if p]
    if not folders:
        return None, None
    named = [[s.split("=", 1)[0] if "=" in s else None for s in p.split("/")] for p in folders]
    if all(None not in n for n in named) and len({tuple(n) for n in named}) == 1:
        return "true", ",".join(n for n in named[0] if n is not None)
    return "false", None


def _plain_partition_fields(sample: list[pa.Table], columns: list[str], old: str | None) -> str | None:
    """The columns whose values the plain folder names are, segment by segment; when several
    columns fit a segment, the surviving line decides if it names one of them."""
    depth = {len(t.column("__folder")[0].as_py().split("/")) for t in sample}
    if len(depth) != 1:
        return None  # values holding '/' (or uneven folders): the folders cannot tell
    chosen = []
    olds = option_list(old or "")
    for i in range(depth.pop()):
        fits = [c for c in columns if all(_segment_fits(t, c, i) for t in sample)]
        if len(fits) > 1 and len(olds) > i and olds[i] in fits:
            fits = [olds[i]]
        if len(fits) != 1:
            return None
        chosen.append(fits[0])
    return ",".join(chosen) or None


def _segment_fits(t: pa.Table, column: str, i: int) -> bool:
    segment = t.column("__folder")[0].as_py().split("/")[i]
    if segment == DEFAULT_PARTITION:
        return True
    if column not in t.schema.names:
        return False
    values = _as_text(t.column(column))
    return any(_equal(values, pa.chunked_array([pa.array([s] * t.num_rows)])) for s in {segment, unquote(segment)})


def _int(value: str | None, default: int, allowed: range) -> int:
    return int(value) if value and value.strip().isdigit() and int(value) in allowed else default


def _merge_mode(value: str | None) -> MergeMode | None:
    """The merge mode a property names; None for none or another."""
    try:
        return MergeMode(value)
    except ValueError:
        return None


def _bool(value: bool) -> str:
    return "true" if value else "false"
