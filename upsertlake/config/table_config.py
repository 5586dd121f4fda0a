"""`hoodie.properties` as a model: the table's persistent settings, frozen, and what they mean.

What the keys say (table type, version, key generator, merge mode) and which tables this engine
reads and writes. The file itself, its validation and Hudi's backup protocol are
`upsertlake.config.properties_file`; the model reads it through there (`TableConfig.load`).

Table versions: 6 (timeline layout 1, Hudi 0.14/0.15), 8 (timeline layout 2, Hudi 1.0) and 9
(layout 2, Hudi 1.1) are read and written; older versions with layout 1 are read. Version 8 adds
the properties Hudi 1.0 writes (`TableConfig.as_version_8`): the timeline paths, the initial
version, the merge mode with its strategy id and payload class, and the key generator type (new
Hudi 1.x tables carry the type only, not the class; `from_properties` derives the class from it).
Version 9 (`TableConfig.as_version_9`, Hudi's EightToNineUpgradeHandler) names the ordering fields
`hoodie.table.ordering.fields` instead of the precombine field, drops the strategy id and keeps a
built-in payload class as `hoodie.table.legacy.payload.class` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import cast

from upsertlake.config.enums import MergeMode, TableType
from upsertlake.config.option import option_list
from upsertlake.config.properties_file import (
    PROPERTIES_FILE,
    PropertiesFile,
    create_properties,
    properties_checksum,
    read_properties,
)
from upsertlake.errors import ConfigError, CorruptTableError, UnsupportedTableError
from upsertlake.storage import FileEntry, Storage

SIMPLE_KEYGEN = "org.apache.hudi.keygen.SimpleKeyGenerator"
COMPLEX_KEYGEN = "org.apache.hudi.keygen.ComplexKeyGenerator"
NONPARTITIONED_KEYGEN = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
WRITABLE_KEYGENS = (SIMPLE_KEYGEN, COMPLEX_KEYGEN, NONPARTITIONED_KEYGEN)

READABLE_VERSIONS = (0, 1, 2, 3, 4, 5, 6, 8, 9)  # 0-6: layout 1; 8, 9: layout 2
WRITABLE_VERSIONS = (6, 8, 9)
LATEST_VERSION = 9

# hoodie.table.keygenerator.type (Hudi's KeyGeneratorType) -> the class it stands for.
KEYGEN_TYPES = {
    "SIMPLE": SIMPLE_KEYGEN,
    "COMPLEX": COMPLEX_KEYGEN,
    "NON_PARTITION": NONPARTITIONED_KEYGEN,
    "TIMESTAMP": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
    "CUSTOM": "org.apache.hudi.keygen.CustomKeyGenerator",
    "GLOBAL_DELETE": "org.apache.hudi.keygen.GlobalDeleteKeyGenerator",
}

# The payload classes Hudi 1.1 moves to hoodie.table.legacy.payload.class on the way to version 9
# (UpgradeDowngradeUtils.PAYLOAD_CLASSES_TO_HANDLE): their merging is the merge mode's.
LEGACY_PAYLOAD_KEY = "hoodie.table.legacy.payload.class"
PARTIAL_UPDATE_KEY = "hoodie.table.partial.update.mode"  # version 9 only
LEGACY_PAYLOADS = frozenset({
    "org.apache.hudi.common.model.AWSDmsAvroPayload",
    "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
    "org.apache.hudi.common.model.EventTimeAvroPayload",
    "org.apache.hudi.common.model.debezium.MySqlDebeziumAvroPayload",
    "org.apache.hudi.common.model.OverwriteNonDefaultsWithLatestAvroPayload",
    "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
    "org.apache.hudi.common.model.PartialUpdateAvroPayload",
    "org.apache.hudi.common.model.debezium.PostgresDebeziumAvroPayload",
})

# hoodie.table.format: "native" is Hudi's own timeline; another name is a pluggable table format
# (Hudi 1.1's HoodieTableFormat) whose timeline this engine does not know.
TABLE_FORMAT_KEY = "hoodie.table.format"
NATIVE_FORMAT = "native"
# hoodie.table.base.file.format: the formats read here (Lance through the optional `lance` extra);
# only parquet is written.
BASE_FORMAT_KEY = "hoodie.table.base.file.format"
READABLE_BASE_FORMATS = ("PARQUET", "LANCE")

# Keys this model owns; every other property is kept verbatim in `extra`.
_OWN_KEYS = {
    "hoodie.table.name",
    "hoodie.database.name",
    "hoodie.table.type",
    "hoodie.table.version",
    "hoodie.timeline.layout.version",
    "hoodie.table.recordkey.fields",
    "hoodie.table.precombine.field",
    "hoodie.table.ordering.fields",
    "hoodie.table.partition.fields",
    "hoodie.table.keygenerator.class",
    "hoodie.datasource.write.hive_style_partitioning",
    "hoodie.datasource.write.partitionpath.urlencode",
    "hoodie.datasource.write.drop.partition.columns",
    "hoodie.table.create.schema",
    "hoodie.archivelog.folder",
    "hoodie.table.timeline.timezone",
    "hoodie.populate.meta.fields",
    "hoodie.table.checksum",
}
TIMELINE_PATH_KEY = "hoodie.timeline.path"
PRECOMBINE_KEY = "hoodie.table.precombine.field"  # versions up to 8
ORDERING_KEY = "hoodie.table.ordering.fields"  # version 9 (Hudi 1.1 reads either)
KEYGEN_TYPE_KEY = "hoodie.table.keygenerator.type"

# The settings every commit of ours records in its extraMetadata (beside the schema), under these
# keys, so that a lost or damaged hoodie.properties can be rebuilt from the table (`upsertlake
# doctor --fix`): nothing in the data files tells the precombine field, for one. A key left out
# of a record that has the record key fields is not set.
RECORDED_KEYS = (
    "hoodie.table.name",
    "hoodie.database.name",
    "hoodie.table.recordkey.fields",
    "hoodie.table.partition.fields",
    PRECOMBINE_KEY,
    ORDERING_KEY,
    "hoodie.table.keygenerator.class",
    KEYGEN_TYPE_KEY,
    "hoodie.datasource.write.hive_style_partitioning",
    "hoodie.datasource.write.partitionpath.urlencode",
    "hoodie.datasource.write.drop.partition.columns",
    "hoodie.table.timeline.timezone",
    "hoodie.record.merge.mode",
    "hoodie.table.initial.version",
)


def table_type_of(value: str, what: str) -> TableType:
    """The table type `value` names; UnsupportedTableError for a value that is not one of Hudi's."""
    try:
        return TableType(value)
    except ValueError:
        types = " or ".join(t.value for t in TableType)
        raise UnsupportedTableError(f"{what} of table type {value!r}, not a Hudi table type ({types})") from None


def merge_on_read_payload(merge_mode: MergeMode) -> dict[str, str]:
    """The payload class a version 6 merge-on-read table declares for its merge mode, so that
    Hudi's readers merge its log records as we do: Hudi 0.x merges by the payload class, and
    Hudi 1.x and hudi-rs infer a version 6 table's merge mode from it
    (HoodieTableConfig.inferCorrectMergingBehavior): DefaultHoodieRecordPayload for event time,
    OverwriteWithLatestAvroPayload for commit time."""
    return {"hoodie.compaction.payload.class": merge_mode.payload_class}


def default_keygen(record_key_fields: list[str], partition_fields: list[str]) -> str:
    """Hudi's choice: non-partitioned, simple (one key, ≤ one partition field) or complex."""
    if not partition_fields:
        return NONPARTITIONED_KEYGEN if len(record_key_fields) == 1 else COMPLEX_KEYGEN
    if len(record_key_fields) == 1 and len(partition_fields) == 1:
        return SIMPLE_KEYGEN
    return COMPLEX_KEYGEN


@dataclass(frozen=True)
class TableConfig:
    """The table-level settings persisted in `hoodie.properties`."""

    name: str
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...] = ()
    ordering_fields: tuple[str, ...] = ()  # compared in order: the first, then the next on a tie
    database: str = "default"
    keygen_class: str = ""
    hive_style_partitioning: bool = False
    urlencode_partitions: bool = False
    drop_partition_columns: bool = False
    create_schema: str | None = None
    table_version: int = 6
    timeline_layout_version: int = 1
    timeline_timezone: str = "UTC"
    populate_meta_fields: bool = True
    table_type: TableType = TableType.COPY_ON_WRITE
    extra: dict[str, str] = field(default_factory=dict)
    # Where it was read from (PROPERTIES_FILE, or BACKUP_FILE as Hudi's fallback) and, when that
    # file was damaged with no valid backup, why every write is refused.
    source: str = field(default=PROPERTIES_FILE, compare=False, repr=False)
    damage: str | None = field(default=None, compare=False, repr=False)
    keygen_class_stored: bool = True  # False: hoodie.properties names the key generator by type only
    # How a complex key generator spells a single key field: `field:value` (True) or the bare value
    # (False: Hudi 0.14.1 to 1.0.2, HUDI-7001). Not a property: read from the stored keys by
    # `layout.keygen.stored_key_spelling`; None (no stored key seen) goes by the table version.
    single_key_named: bool | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.keygen_class:
            keygen = default_keygen(list(self.record_key_fields), list(self.partition_fields))
            object.__setattr__(self, "keygen_class", keygen)

    @property
    def names_single_key(self) -> bool:
        """Whether a complex key generator with one key field writes `field:value`: as the stored
        keys do; on a table without any, as the Hudi of its version (0.14/0.15 at 6 and 1.0 at 8
        write the bare value, 1.1 at 9 `field:value`)."""
        return self.single_key_named if self.single_key_named is not None else self.table_version >= 9

    @property
    def checksum(self) -> int:
        """CRC32 of "<database>.<table>", as Hudi validates it."""
        return properties_checksum({"hoodie.database.name": self.database, "hoodie.table.name": self.name})

    @property
    def precombine_field(self) -> str | None:
        """The ordering fields as Hudi spells them in one value (comma-separated; None: none)."""
        return ",".join(self.ordering_fields) or None

    def with_schema(self, avro_json: str) -> TableConfig:
        return replace(self, create_schema=avro_json)

    @property
    def timeline_path(self) -> str:
        """Folder of the instant files under `.hoodie/` in timeline layout 2 (`hoodie.timeline.path`)."""
        return self.extra.get(TIMELINE_PATH_KEY) or "timeline"

    def check_readable(self) -> None:
        """Refuse versions, layouts and base file formats this engine would misread (never read
        them as empty); a table type it would misread is refused where the properties are read."""
        if self.base_file_format not in READABLE_BASE_FORMATS:
            raise UnsupportedTableError(
                f"{BASE_FORMAT_KEY}={self.base_file_format}: upsertlake reads parquet and Lance base files only"
            )
        self.check_timeline_readable()

    def check_timeline_readable(self) -> None:
        """Refuse versions and layouts whose timeline this engine would misread (the metadata
        table's too, whose base files are HFiles its own reader reads)."""
        version, layout = self.table_version, self.timeline_layout_version
        if version not in READABLE_VERSIONS:
            raise UnsupportedTableError(
                f"table version {version} is not supported: upsertlake reads table versions up to 6 "
                "(Apache Hudi 0.x), 8 (Hudi 1.0) and 9 (Hudi 1.1)"
            )
        table_format = self.extra.get(TABLE_FORMAT_KEY, NATIVE_FORMAT)
        if table_format != NATIVE_FORMAT:
            raise UnsupportedTableError(
                f"{TABLE_FORMAT_KEY}={table_format}: the table keeps its timeline in another table format; "
                f"upsertlake reads Hudi's own ({TABLE_FORMAT_KEY}={NATIVE_FORMAT})"
            )
        expected = 2 if version >= 8 else 1
        if layout != expected:
            raise UnsupportedTableError(
                f"table version {version} with timeline layout version {layout} is not a valid "
                f"combination (version {version} uses timeline layout {expected})"
            )

    def check_write_version(self, requested: int, key: str = "hoodie.write.table.version") -> None:
        """A table keeps its version within a write: asking for another one (by `key`) is an
        error (a write's options at opening upgrade it first: `table_options.upgrade_before_writing`)."""
        if requested != self.table_version:
            raise ConfigError(
                f"{key}={requested} but the table is at version {self.table_version}; "
                f"a table keeps its version (upgrade it with `upsertlake upgrade PATH --to {requested}`, or name "
                "the version among the options the table is opened with, which upgrades it before the first write)"
                if requested > self.table_version
                else f"{key}={requested} but the table is at version {self.table_version}; "
                "downgrades are not supported"
            )

    def check_writable(self) -> None:
        """Refuse, with the reason, damaged properties and tables this engine cannot write yet."""
        if self.damage:
            raise CorruptTableError(self.damage)
        self.check_readable()
        if self.table_version not in WRITABLE_VERSIONS:
            raise UnsupportedTableError(
                f"writing table version {self.table_version} is not supported (6, 8 and 9 only); "
                f"upgrade it with `upsertlake upgrade PATH --to {LATEST_VERSION}`"
            )
        if self.base_file_format != "PARQUET":
            raise UnsupportedTableError(
                f"{BASE_FORMAT_KEY}={self.base_file_format}: this table is read-only here (upsertlake writes "
                "parquet base files only)"
            )
        if not self.populate_meta_fields:
            raise UnsupportedTableError(
                "tables without meta fields (hoodie.populate.meta.fields=false) are read-only here"
            )
        if self.keygen_class not in WRITABLE_KEYGENS:
            raise UnsupportedTableError(
                f"key generator {self.keygen_class} is not supported for writes; "
                f"supported: {', '.join(k.rsplit('.', 1)[1] for k in WRITABLE_KEYGENS)}"
            )

    def as_version_8(self, merge_mode: MergeMode, initial_version: int) -> TableConfig:
        """This table's settings at table version 8: layout 2 and the properties Hudi 1.0 adds.

        A table created at 8 carries the key generator type only, as Hudi 1.x writes; an upgraded
        one (`initial_version` 6) keeps its class beside the type, as Hudi's upgrade leaves it.
        """
        keygen_type = next((t for t, cls in KEYGEN_TYPES.items() if cls == self.keygen_class), None)
        extra = {
            **self.extra,
            "hoodie.table.initial.version": str(initial_version),
            TIMELINE_PATH_KEY: self.timeline_path,
            "hoodie.timeline.history.path": self.extra.get("hoodie.timeline.history.path") or "history",
            "hoodie.record.merge.mode": merge_mode.value,
            "hoodie.record.merge.strategy.id": merge_mode.strategy_id,
            "hoodie.compaction.payload.class": merge_mode.payload_class,
        }
        if keygen_type is not None:
            extra[KEYGEN_TYPE_KEY] = keygen_type
        return replace(
            self, table_version=8, timeline_layout_version=2, extra=extra, keygen_class_stored=initial_version < 8
        )

    def as_version_9(self, merge_mode: MergeMode, initial_version: int) -> TableConfig:
        """This table's settings at table version 9, as Hudi 1.1 writes them: a new table's (with
        `hoodie.table.format`), or a version 6 or 8 table's as Hudi's upgrade leaves them
        (EightToNineUpgradeHandler): the ordering fields under `hoodie.table.ordering.fields`, no
        merge strategy id for a built-in merge mode, and a built-in payload class kept as
        `hoodie.table.legacy.payload.class` only."""
        at_8 = self if self.table_version == 8 else self.as_version_8(merge_mode, initial_version)
        extra = dict(at_8.extra)
        extra.pop(PRECOMBINE_KEY, None)
        extra.pop("hoodie.record.merge.strategy.id", None)
        payload = extra.pop("hoodie.compaction.payload.class", None)
        if payload is not None and payload not in LEGACY_PAYLOADS:
            extra["hoodie.compaction.payload.class"] = payload
        elif payload is not None and initial_version < 9:
            extra[LEGACY_PAYLOAD_KEY] = payload
        if initial_version == 9:
            extra[TABLE_FORMAT_KEY] = NATIVE_FORMAT
        return replace(at_8, table_version=9, extra=extra)

    def down_to_version_8(self) -> TableConfig:
        """A version 9 table's settings at version 8, as Hudi's NineToEightDowngradeHandler leaves
        them: the ordering field as the precombine field, the merge strategy id of its merge mode,
        the payload class back from the legacy key (`services.upgrade.downgrade_blockers` says
        when version 8 cannot say the same)."""
        mode = self.merge_mode
        extra = {k: v for k, v in self.extra.items() if k not in (LEGACY_PAYLOAD_KEY, PARTIAL_UPDATE_KEY)}
        extra["hoodie.record.merge.strategy.id"] = mode.strategy_id
        extra["hoodie.compaction.payload.class"] = self.extra.get(LEGACY_PAYLOAD_KEY, mode.payload_class)
        return replace(self, table_version=8, extra=extra)

    def down_to_version_6(self) -> TableConfig:
        """A version 8 table's settings at version 6, as Hudi's EightToSevenDowngradeHandler leaves
        them: timeline layout 1, the properties Hudi 1.x added unset (initial version, timeline
        paths, merge mode and strategy id, key generator type: its class stays) and the payload
        class of the merge mode, from which version 6 readers merge."""
        dropped = {
            "hoodie.table.initial.version", TIMELINE_PATH_KEY, "hoodie.timeline.history.path",
            "hoodie.record.merge.mode", "hoodie.record.merge.strategy.id", KEYGEN_TYPE_KEY, TABLE_FORMAT_KEY,
        }
        extra = {k: v for k, v in self.extra.items() if k not in dropped}
        extra["hoodie.compaction.payload.class"] = self.merge_mode.payload_class
        return replace(self, table_version=6, timeline_layout_version=1, extra=extra, keygen_class_stored=True)

    @property
    def base_file_format(self) -> str:
        """`hoodie.table.base.file.format`, upper case (PARQUET when absent, as Hudi defaults)."""
        return self.extra.get(BASE_FORMAT_KEY, "PARQUET").upper()

    @property
    def is_merge_on_read(self) -> bool:
        return self.table_type is TableType.MERGE_ON_READ

    @property
    def merge_mode(self) -> MergeMode:
        """How records of one key merge: version 8 states it (`hoodie.record.merge.mode`); version
        6 implies it by its payload class, as Hudi's readers take it."""
        stated = self.extra.get("hoodie.record.merge.mode")
        if not stated:
            return self.merge_mode_for_upgrade()
        try:
            return MergeMode(stated)
        except ValueError:
            modes = ", ".join(m.value for m in MergeMode)
            raise ConfigError(f"merge mode {stated!r} is not one upsertlake merges by ({modes})") from None

    def merge_mode_for_upgrade(self) -> MergeMode:
        """The merge mode version 8 states for this version 6 table, as Hudi's upgrade infers it:
        from the payload class; with none set, event time when there is a precombine field."""
        payload = self.extra.get("hoodie.compaction.payload.class") or self.extra.get(LEGACY_PAYLOAD_KEY)
        if payload is None:
            return MergeMode.EVENT_TIME if self.ordering_fields else MergeMode.COMMIT_TIME
        mode = MergeMode.of_payload(payload)
        if mode is not None:
            return mode
        raise UnsupportedTableError(f"payload class {payload} has no merge mode this engine supports (custom merging)")

    # -- hoodie.properties -------------------------------------------------------------------
    def to_properties(self) -> dict[str, str]:
        props = {
            "hoodie.table.name": self.name,
            "hoodie.database.name": self.database,
            "hoodie.table.type": self.table_type.value,
            "hoodie.table.version": str(self.table_version),
            "hoodie.timeline.layout.version": str(self.timeline_layout_version),
            "hoodie.table.recordkey.fields": ",".join(self.record_key_fields),
            "hoodie.table.keygenerator.class": self.keygen_class,
            "hoodie.datasource.write.hive_style_partitioning": _bool(self.hive_style_partitioning),
            "hoodie.datasource.write.partitionpath.urlencode": _bool(self.urlencode_partitions),
            "hoodie.datasource.write.drop.partition.columns": _bool(self.drop_partition_columns),
            "hoodie.archivelog.folder": "archived",
            "hoodie.table.timeline.timezone": self.timeline_timezone,
            "hoodie.populate.meta.fields": _bool(self.populate_meta_fields),
        }
        if not self.keygen_class_stored and KEYGEN_TYPES.get(self.extra.get(KEYGEN_TYPE_KEY, "")) == self.keygen_class:
            del props["hoodie.table.keygenerator.class"]  # Hudi 1.x names it by type only
        if self.ordering_fields:
            props[ORDERING_KEY if self.table_version >= 9 else PRECOMBINE_KEY] = ",".join(self.ordering_fields)
        if self.partition_fields:
            props["hoodie.table.partition.fields"] = ",".join(self.partition_fields)
        if self.create_schema:
            props["hoodie.table.create.schema"] = self.create_schema
        props.update(self.extra)
        props["hoodie.table.checksum"] = str(self.checksum)
        return props

    def recorded_properties(self) -> dict[str, str]:
        """What a commit records of this config (RECORDED_KEYS), as hoodie.properties states it."""
        props = self.to_properties()
        return {key: props[key] for key in RECORDED_KEYS if key in props}

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = PROPERTIES_FILE) -> TableConfig:
        def need(key: str) -> str:
            if not props.get(key):
                raise CorruptTableError(f"{source} lacks {key}")
            return props[key]

        name = need("hoodie.table.name")
        table_type = table_type_of(props.get("hoodie.table.type", TableType.COPY_ON_WRITE.value), f"table {name!r} is")
        try:
            return cls(
                name=name,
                record_key_fields=tuple(option_list(props.get("hoodie.table.recordkey.fields", ""))),
                partition_fields=tuple(option_list(props.get("hoodie.table.partition.fields", ""))),
                ordering_fields=tuple(option_list(props.get(ORDERING_KEY) or props.get(PRECOMBINE_KEY) or "")),
                database=props.get("hoodie.database.name") or "default",
                keygen_class=props.get("hoodie.table.keygenerator.class")
                or KEYGEN_TYPES.get(props.get(KEYGEN_TYPE_KEY, ""), ""),
                hive_style_partitioning=_parse_bool(props.get("hoodie.datasource.write.hive_style_partitioning")),
                urlencode_partitions=_parse_bool(props.get("hoodie.datasource.write.partitionpath.urlencode")),
                drop_partition_columns=_parse_bool(props.get("hoodie.datasource.write.drop.partition.columns")),
                create_schema=props.get("hoodie.table.create.schema") or None,
                table_version=int(props.get("hoodie.table.version", "6")),
                timeline_layout_version=int(props.get("hoodie.timeline.layout.version", "1")),
                timeline_timezone=props.get("hoodie.table.timeline.timezone", "LOCAL"),
                populate_meta_fields=_parse_bool(props.get("hoodie.populate.meta.fields"), default=True),
                table_type=table_type,
                extra={k: v for k, v in props.items() if k not in _OWN_KEYS},
                keygen_class_stored="hoodie.table.keygenerator.class" in props or KEYGEN_TYPE_KEY not in props,
            )
        except ValueError as exc:
            raise CorruptTableError(f"{source}: {exc}") from exc

    # -- storage -----------------------------------------------------------------------------
    @classmethod
    def load(cls, storage: Storage) -> TableConfig:
        """The table's config from a valid `hoodie.properties`, else from a valid backup (as Hudi's
        readers fall back to it), else from the damaged file as read, marked so writes refuse it
        (`upsertlake.config.properties_file.read_properties` decides which).

        A config read from the backup must still agree with the table before a write uses it
        (the checksum cannot see lost lines): `upsertlake.services.write_guard` checks that.
        """
        found = read_properties(storage)
        try:
            table_config = cls.from_properties(found.props, found.path)
        except CorruptTableError as exc:
            if found.damage is None:
                raise
            raise CorruptTableError(f"{exc}; {found.damage}") from exc
        if found.source == PROPERTIES_FILE and found.damage is None:
            return table_config
        return replace(table_config, source=found.source, damage=found.damage)

    @classmethod
    def load_listed(cls, storage: Storage, listed: FileEntry) -> TableConfig:
        """The config of `hoodie.properties` as a listing of `.hoodie/` found it. On an object
        store the listing names the file's version (ETag): a version read before is not read
        again, so the timeline loads of one operation share one GET of the file (they list
        `.hoodie/` anyway). A version never changes its bytes, so the cache cannot be stale."""
        if listed.version is None:
            return cls.load(storage)
        by_version = storage.cache("table config", VERSIONS_KEPT)
        cached = by_version.get(listed.version)
        if cached is not None:
            return cast(TableConfig, cached)
        got = storage.read_versioned(PROPERTIES_FILE)
        if got is None:
            return cls.load(storage)  # gone since the listing: the backup protocol decides
        raw, version = got
        main = PropertiesFile.parse(storage.full_path(PROPERTIES_FILE), raw)
        if not main.valid:
            return cls.load(storage)  # damaged: the backup and the refusals as ever
        table_config = cls.from_properties(main.props or {}, main.path)
        by_version.put(version, table_config)  # under the version read, maybe newer than listed
        return table_config

    def create(self, storage: Storage) -> bool:
        """Write the first `hoodie.properties`; False (nothing written) if a table is there."""
        return create_properties(storage, self.to_properties())


# (storage, version) -> the config of that version of hoodie.properties (see TableConfig.load_listed)
VERSIONS_KEPT = 64  # versions of hoodie.properties a storage keeps, parsed


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _parse_bool(value: str | None, default: bool = False) -> bool:
    return default if value is None else value.strip().lower() == "true"

