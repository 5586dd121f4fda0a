"""`hoodie.properties`: the table's persistent configuration, as a frozen model.

Hudi writes it with `java.util.Properties.store`, so reading and writing follow Java's escaping
rules (values containing ':' appear as '\\:').

Table versions: 6 (timeline layout 1, Hudi 0.14/0.15) and 8 (timeline layout 2, Hudi 1.0) are read
and written; older versions with layout 1 are read. Version 8 adds the properties Hudi 1.0 writes
(`TableConfig.as_version_8`): the timeline paths, the initial version, the merge mode with its
strategy id and payload class, and the key generator type (new Hudi 1.x tables carry the type
only, not the class; `from_properties` derives the class from it).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from upsertlake.errors import (
    ConfigError,
    CorruptTableError,
    TableNotFoundError,
    UnsupportedTableError,
)
from upsertlake.storage import Storage

PROPERTIES_FILE = ".hoodie/hoodie.properties"
BACKUP_FILE = ".hoodie/hoodie.properties.backup"

SIMPLE_KEYGEN = "org.apache.hudi.keygen.SimpleKeyGenerator"
COMPLEX_KEYGEN = "org.apache.hudi.keygen.ComplexKeyGenerator"
NONPARTITIONED_KEYGEN = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
WRITABLE_KEYGENS = (SIMPLE_KEYGEN, COMPLEX_KEYGEN, NONPARTITIONED_KEYGEN)

READABLE_VERSIONS = (0, 1, 2, 3, 4, 5, 6, 8)  # 0-6: layout 1; 8: layout 2
WRITABLE_VERSIONS = (6, 8)

# hoodie.table.keygenerator.type (Hudi's KeyGeneratorType) -> the class it stands for.
KEYGEN_TYPES = {
    "SIMPLE": SIMPLE_KEYGEN,
    "COMPLEX": COMPLEX_KEYGEN,
    "NON_PARTITION": NONPARTITIONED_KEYGEN,
    "TIMESTAMP": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
    "CUSTOM": "org.apache.hudi.keygen.CustomKeyGenerator",
    "GLOBAL_DELETE": "org.apache.hudi.keygen.GlobalDeleteKeyGenerator",
}

# Merge mode -> (hoodie.record.merge.strategy.id, hoodie.compaction.payload.class), as Hudi 1.0
# writes them (HoodieTableConfig.inferCorrectMergingBehavior) and the upgrade 6 -> 8 infers them.
EVENT_TIME_ORDERING = "EVENT_TIME_ORDERING"
COMMIT_TIME_ORDERING = "COMMIT_TIME_ORDERING"
MERGE_MODES = {
    EVENT_TIME_ORDERING: ("eeb8d96f-b1e4-49fd-bbf8-28ac514178e5", "org.apache.hudi.common.model.DefaultHoodieRecordPayload"),
    COMMIT_TIME_ORDERING: ("ce9acb64-bde0-424c-9b91-f6ebba25356d", "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"),
}

# Keys this model owns; every other property is kept verbatim in `extra`.
_OWN_KEYS = {
    "hoodie.table.name",
    "hoodie.database.name",
    "hoodie.table.type",
    "hoodie.table.version",
    "hoodie.timeline.layout.version",
    "hoodie.table.recordkey.fields",
    "hoodie.table.precombine.field",
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
KEYGEN_TYPE_KEY = "hoodie.table.keygenerator.type"


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
    precombine_field: str | None = None
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
    table_type: str = "COPY_ON_WRITE"
    extra: dict[str, str] = field(default_factory=dict)
    keygen_class_stored: bool = True  # False: hoodie.properties names the key generator by type only

    def __post_init__(self) -> None:
        if not self.keygen_class:
            keygen = default_keygen(list(self.record_key_fields), list(self.partition_fields))
            object.__setattr__(self, "keygen_class", keygen)

    @property
    def checksum(self) -> int:
        """CRC32 of "<database>.<table>", as Hudi validates it."""
        return zlib.crc32(f"{self.database}.{self.name}".encode())

    @property
    def is_partitioned(self) -> bool:
        return bool(self.partition_fields)

    def with_schema(self, avro_json: str) -> TableConfig:
        return replace(self, create_schema=avro_json)

    @property
    def timeline_path(self) -> str:
        """Folder of the instant files under `.hoodie/` in timeline layout 2 (`hoodie.timeline.path`)."""
        return self.extra.get(TIMELINE_PATH_KEY) or "timeline"

    def check_readable(self) -> None:
        """Refuse versions and layouts this engine would misread (never read them as empty)."""
        version, layout = self.table_version, self.timeline_layout_version
        if version not in READABLE_VERSIONS:
            raise UnsupportedTableError(
                f"table version {version} is not supported: upsertlake reads table versions up to 6 "
                "(Apache Hudi 0.x) and 8 (Hudi 1.0); version 9 is written by Hudi 1.1"
            )
        expected = 2 if version >= 8 else 1
        if layout != expected:
            raise UnsupportedTableError(
                f"table version {version} with timeline layout version {layout} is not a valid "
                f"combination (version {version} uses timeline layout {expected})"
            )

    def check_write_version(self, requested: int) -> None:
        """A table keeps its version: asking for another one (hoodie.write.table.version) is an error."""
        if requested != self.table_version:
            raise ConfigError(
                f"hoodie.write.table.version={requested} but the table is at version {self.table_version}; "
                f"a table keeps its version (upgrade it with `upsertlake upgrade PATH --to {requested}`)"
                if requested > self.table_version
                else f"hoodie.write.table.version={requested} but the table is at version {self.table_version}; "
                "downgrades are not supported"
            )

    def check_writable(self) -> None:
        """Refuse, with the reason, tables whose layout this engine cannot write yet."""
        self.check_readable()
        if self.table_type != "COPY_ON_WRITE":
            raise UnsupportedTableError(f"table type {self.table_type} is not supported (COPY_ON_WRITE only)")
        if self.table_version not in WRITABLE_VERSIONS:
            raise UnsupportedTableError(
                f"writing table version {self.table_version} is not supported (6 and 8 only); "
                "upgrade it with `upsertlake upgrade PATH --to 8`"
            )
        if not self.populate_meta_fields:
            raise UnsupportedTableError("tables without meta fields (hoodie.populate.meta.fields=false) are read-only here")
        if self.keygen_class not in WRITABLE_KEYGENS:
            raise UnsupportedTableError(
                f"key generator {self.keygen_class} is not supported for writes; "
                f"supported: {', '.join(k.rsplit('.', 1)[1] for k in WRITABLE_KEYGENS)}"
            )

    def as_version_8(self, merge_mode: str, initial_version: int) -> TableConfig:
        """This table's settings at table version 8: layout 2 and the properties Hudi 1.0 adds.

        A table created at 8 carries the key generator type only, as Hudi 1.x writes; an upgraded
        one (`initial_version` 6) keeps its class beside the type, as Hudi's upgrade leaves it.
        """
        strategy, payload = MERGE_MODES[merge_mode]
        keygen_type = next((t for t, cls in KEYGEN_TYPES.items() if cls == self.keygen_class), None)
        extra = {
            **self.extra,
            "hoodie.table.initial.version": str(initial_version),
            TIMELINE_PATH_KEY: self.timeline_path,
            "hoodie.timeline.history.path": self.extra.get("hoodie.timeline.history.path") or "history",
            "hoodie.record.merge.mode": merge_mode,
            "hoodie.record.merge.strategy.id": strategy,
            "hoodie.compaction.payload.class": payload,
        }
        if keygen_type is not None:
            extra[KEYGEN_TYPE_KEY] = keygen_type
        return replace(
            self, table_version=8, timeline_layout_version=2, extra=extra, keygen_class_stored=initial_version < 8
        )

    def merge_mode_for_upgrade(self) -> str:
        """The merge mode version 8 states for this version 6 table, as Hudi's upgrade infers it:
        from the payload class; with none set, event time when there is a precombine field."""
        payload = self.extra.get("hoodie.compaction.payload.class")
        if payload is None:
            return EVENT_TIME_ORDERING if self.precombine_field else COMMIT_TIME_ORDERING
        for mode, (_, cls) in MERGE_MODES.items():
            if payload == cls:
                return mode
        raise UnsupportedTableError(f"payload class {payload} has no merge mode this engine supports (custom merging)")

    # -- hoodie.properties -------------------------------------------------------------------
    def to_properties(self) -> dict[str, str]:
        props = {
            "hoodie.table.name": self.name,
            "hoodie.database.name": self.database,
            "hoodie.table.type": self.table_type,
            "hoodie.table.version": str(self.table_version),
            "hoodie.timeline.layout.version": str(self.timeline_layout_version),
            "hoodie.table.recordkey.fields": ",".join(self.record_key_fields),
            "hoodie.datasource.write.hive_style_partitioning": _bool(self.hive_style_partitioning),
            "hoodie.datasource.write.partitionpath.urlencode": _bool(self.urlencode_partitions),
            "hoodie.datasource.write.drop.partition.columns": _bool(self.drop_partition_columns),
            "hoodie.archivelog.folder": "archived",
            "hoodie.table.timeline.timezone": self.timeline_timezone,
            "hoodie.populate.meta.fields": _bool(self.populate_meta_fields),
        }
        if self.keygen_class_stored or KEYGEN_TYPES.get(self.extra.get(KEYGEN_TYPE_KEY, "")) != self.keygen_class:
            props["hoodie.table.keygenerator.class"] = self.keygen_class
        if self.precombine_field:
            props["hoodie.table.precombine.field"] = self.precombine_field
        if self.partition_fields:
            props["hoodie.table.partition.fields"] = ",".join(self.partition_fields)
        if self.create_schema:
            props["hoodie.table.create.schema"] = self.create_schema
        props.update(self.extra)
        props["hoodie.table.checksum"] = str(self.checksum)
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = PROPERTIES_FILE) -> TableConfig:
        def need(key: str) -> str:
            if not props.get(key):
                raise CorruptTableError(f"{source} lacks {key}")
            return props[key]

        try:
            return cls(
                name=need("hoodie.table.name"),
                record_key_fields=_split(props.get("hoodie.table.recordkey.fields", "")),
                partition_fields=_split(props.get("hoodie.table.partition.fields", "")),
                precombine_field=props.get("hoodie.table.precombine.field") or None,
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
                table_type=props.get("hoodie.table.type", "COPY_ON_WRITE"),
                extra={k: v for k, v in props.items() if k not in _OWN_KEYS},
                keygen_class_stored="hoodie.table.keygenerator.class" in props or KEYGEN_TYPE_KEY not in props,
            )
        except ValueError as exc:
            raise CorruptTableError(f"{source}: {exc}") from exc

    # -- storage -----------------------------------------------------------------------------
    @classmethod
    def load(cls, storage: Storage) -> TableConfig:
        """The table's config; while a rewrite is under way (or crashed) the backup stands in."""
        if not storage.exists(PROPERTIES_FILE):
            if storage.exists(BACKUP_FILE):
                text = storage.read_bytes(BACKUP_FILE).decode("latin-1")
                return cls.from_properties(parse_java_properties(text), storage.full_path(BACKUP_FILE))
            raise TableNotFoundError(f"no Hudi table at {storage.base} (missing {PROPERTIES_FILE})")
        try:
            text = storage.read_bytes(PROPERTIES_FILE).decode("latin-1")
        except OSError as exc:
            raise CorruptTableError(f"cannot read {storage.full_path(PROPERTIES_FILE)}: {exc}") from exc
        return cls.from_properties(parse_java_properties(text), storage.full_path(PROPERTIES_FILE))

    def save(self, storage: Storage, create: bool = False) -> bool:
        """Write hoodie.properties; with `create`, only if absent (False if a table is there)."""
        now = datetime.now(timezone.utc)
        header = f"#Updated at {now.isoformat()}\n#{now.strftime('%a %b %d %H:%M:%S UTC %Y')}\n"
        data = (header + format_java_properties(self.to_properties())).encode("latin-1", "backslashreplace")
        if create:
            return storage.write_if_absent(PROPERTIES_FILE, data)
        storage.write_bytes(PROPERTIES_FILE, data)
        return True


def write_properties(storage: Storage, changes: dict[str, str | None]) -> dict[str, str]:
    """Change keys of `hoodie.properties` (None deletes a key) by Hudi's protocol
    (`HoodieTableConfig.modify`): finish a crashed rewrite; copy the file to
    `hoodie.properties.backup`; write the new one with its checksum; delete the backup. A crash
    after any step leaves a whole file to read: the old one or the new one, with the backup
    beside it until the next rewrite or `recover_properties` removes it. Deviation: Hudi deletes
    the file before writing the new one (a rename over it is not atomic on every store); here the
    new file replaces it atomically, so no reader (hudi-rs has no backup fallback) ever finds
    none. Call under the table lock.
    """
    recover_properties(storage)
    current = storage.read_bytes(PROPERTIES_FILE)
    props = parse_java_properties(current.decode("latin-1"))
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    new = TableConfig.from_properties(props)  # the result must be a valid table config
    storage.write_bytes(BACKUP_FILE, current)
    new.save(storage)  # written to a temporary file, then renamed over the old one
    storage.delete(BACKUP_FILE)
    return new.to_properties()


def recover_properties(storage: Storage) -> None:
    """After a rewrite crashed: a whole `hoodie.properties` wins, else the backup is put back."""
    if not storage.exists(BACKUP_FILE):
        return
    if not storage.exists(PROPERTIES_FILE) or not _is_whole(storage.read_bytes(PROPERTIES_FILE)):
        storage.write_bytes(PROPERTIES_FILE, storage.read_bytes(BACKUP_FILE))
    storage.delete(BACKUP_FILE)


def _is_whole(data: bytes) -> bool:
    """Whether a properties file was written to its end: it names the table and its checksum."""
    props = parse_java_properties(data.decode("latin-1"))
    return bool(props.get("hoodie.table.name")) and "hoodie.table.checksum" in props


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _parse_bool(value: str | None, default: bool = False) -> bool:
    return default if value is None else value.strip().lower() == "true"


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


# -- java.util.Properties text format -----------------------------------------------------------
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_java_properties(text: str) -> dict[str, str]:
    """Parse the `java.util.Properties` text format (comments, continuations, escapes)."""
    props: dict[str, str] = {}
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.lstrip()
        if not line or line[0] in "#!":
            continue
        while _ends_with_odd_backslashes(line):
            line = line[:-1] + next(lines, "").lstrip()
        key, value = _split_key_value(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            key, rest = line[:i], line[i:].lstrip(" \t\f")
            if rest[:1] in ("=", ":") and c in " \t\f" or c in "=:":
                rest = rest[1:].lstrip(" \t\f")
            return key, rest
        i += 1
    return line, ""


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _escape(text: str, is_key: bool) -> str:
    out: list[str] = []
    for i, c in enumerate(text):
        if c == "\\":
            out.append("\\\\")
        elif c in "=:#!":
            out.append("\\" + c)
        elif c == " " and (is_key or i == 0):
            out.append("\\ ")
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif ord(c) > 0x7E or ord(c) < 0x20:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def format_java_properties(props: dict[str, str]) -> str:
    return "".join(f"{_escape(k, True)}={_escape(v, False)}\n" for k, v in props.items())
