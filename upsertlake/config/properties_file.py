"""`hoodie.properties` on storage: its validation, and Hudi's backup protocol for reading and rewriting it.

Hudi validates the file by the checksum of database and table name (`HoodieTableConfig`); we add
the keys its table version requires. A file that fails is never rewritten: readers fall back to a
valid `hoodie.properties.backup`, as Hudi's do, and otherwise the properties are marked damaged so
that every write is refused. Every rewrite goes through Hudi's backup protocol (`write_properties`),
so a crash at any step leaves one valid file to read.

Its own room, apart from the model of the settings (`upsertlake.config.table_config`): this module
knows files, bytes and crashes, the model knows what the keys mean.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache

from upsertlake.config.java_properties import format_java_properties, parse_java_properties
from upsertlake.errors import CorruptTableError, TableNotFoundError
from upsertlake.storage import Storage

log = logging.getLogger(__name__)

PROPERTIES_FILE = ".hoodie/hoodie.properties"
BACKUP_FILE = ".hoodie/hoodie.properties.backup"
CHECKSUM_KEY = "hoodie.table.checksum"

# -- validation, as Hudi's HoodieTableConfig does it, plus the keys each version requires -------
_REQUIRED_KEYS = (
    "hoodie.table.name",
    "hoodie.table.type",
    "hoodie.table.version",
    "hoodie.timeline.layout.version",
)
_REQUIRED_BY_VERSION = {
    6: ("hoodie.table.keygenerator.class",),
    8: ("hoodie.table.initial.version", "hoodie.timeline.path", "hoodie.record.merge.mode"),
    9: ("hoodie.table.initial.version", "hoodie.timeline.path", "hoodie.record.merge.mode"),
}
_LAYOUT_OF_VERSION = {6: "1", 8: "2", 9: "2"}


def properties_checksum(props: Mapping[str, str]) -> int:
    """Hudi's table checksum: CRC32 of "<database>.<table>" (database "" when absent)."""
    return zlib.crc32(f"{props.get('hoodie.database.name', '')}.{props['hoodie.table.name']}".encode())


def validate_properties(props: Mapping[str, str]) -> list[str]:
    """Why these properties cannot be trusted (empty when they can): Hudi's checksum check, then
    the keys the table version requires. Lost optional lines (partition fields, precombine field)
    pass here; only the table itself can tell (see `upsertlake.services.write_guard`)."""
    problems = [f"lacks {key}" for key in _REQUIRED_KEYS if not props.get(key)]
    checksum = props.get(CHECKSUM_KEY)
    if not checksum:
        problems.append(f"lacks {CHECKSUM_KEY}")
    elif props.get("hoodie.table.name"):
        expected = properties_checksum(props)
        if checksum.strip() != str(expected):
            problems.append(
                f"{CHECKSUM_KEY}={checksum} does not match its database and table name (expected {expected})"
            )
    version = props.get("hoodie.table.version", "")
    if version and not version.strip().isdigit():
        problems.append(f"hoodie.table.version={version} is not a number")
    elif version:
        number = int(version)
        problems += [
            f"lacks {key} (required by table version {number})"
            for key in _REQUIRED_BY_VERSION.get(number, ())
            if not props.get(key)
        ]
        if number >= 8 and not (
            props.get("hoodie.table.keygenerator.type") or props.get("hoodie.table.keygenerator.class")
        ):
            problems.append(f"lacks hoodie.table.keygenerator.type (required by table version {number})")
        layout = props.get("hoodie.timeline.layout.version")
        if number in _LAYOUT_OF_VERSION and layout and layout.strip() != _LAYOUT_OF_VERSION[number]:
            problems.append(f"hoodie.timeline.layout.version={layout} does not go with table version {number}")
    return problems


@dataclass(frozen=True)
class PropertiesFile:
    """One properties file as found on storage: its exact bytes, what they parse to, and why it
    is not valid (None when it is). `props` is None when the file is missing or unreadable."""

    path: str
    raw: bytes | None
    props: dict[str, str] | None
    reason: str | None

    @property
    def missing(self) -> bool:
        return self.raw is None and self.reason == "missing"

    @property
    def valid(self) -> bool:
        return self.reason is None

    @classmethod
    def read(cls, storage: Storage, rel: str) -> PropertiesFile:
        path = storage.full_path(rel)
        try:
            raw = storage.read_bytes(rel)
        except FileNotFoundError:
            return cls(path, None, None, "missing")
        except OSError as exc:
            return cls(path, None, None, f"cannot be read: {exc}")
        return cls.parse(path, raw)

    @classmethod
    def parse(cls, path: str, raw: bytes) -> PropertiesFile:
        props, problem = _parsed(raw)
        return cls(path, raw, None if props is None else dict(props), problem)


@lru_cache(maxsize=16)
def _parsed(raw: bytes) -> tuple[dict[str, str] | None, str | None]:
    """The properties of a hoodie.properties text and what is wrong with them. A write loads the
    file about ten times (every timeline load checks it): the same bytes are parsed once."""
    try:
        props = parse_java_properties(raw.decode("latin-1"))
    except (ValueError, StopIteration) as exc:
        return None, f"cannot be parsed: {exc}"
    problems = validate_properties(props)
    return props, "; ".join(problems) if problems else None


# -- reading: the file, else its backup (as Hudi's readers fall back to it) ----------------------
@dataclass(frozen=True)
class TableProperties:
    """The properties a reader takes for the table: from `source` (PROPERTIES_FILE, or BACKUP_FILE
    standing in for a damaged or missing one) at `path`, and, when the file was damaged with no
    valid backup, why every write is refused (`damage`)."""

    props: dict[str, str]
    path: str
    source: str
    damage: str | None = None


def read_properties(storage: Storage) -> TableProperties:
    """The properties of a valid `hoodie.properties`, else of a valid backup, else of the damaged
    file as read, with the damage that refuses writes. TableNotFoundError when neither file is
    there; CorruptTableError when nothing can be read."""
    main = PropertiesFile.read(storage, PROPERTIES_FILE)
    if main.valid:
        return TableProperties(main.props or {}, main.path, PROPERTIES_FILE)
    backup = PropertiesFile.read(storage, BACKUP_FILE)
    if main.missing and backup.missing:
        lost = any(e.name.endswith((".commit", ".replacecommit")) for e in storage.list(".hoodie")) or (
            storage.exists(".hoodie/timeline"))
        hint = f"; .hoodie/ holds a timeline: to rebuild the lost file, run `upsertlake doctor {storage.base} --fix`"
        raise TableNotFoundError(f"no Hudi table at {storage.base} (missing {PROPERTIES_FILE}){hint if lost else ''}")
    if backup.valid:
        log.warning("%s: %s; reading %s instead, as Hudi does", main.path, main.reason, backup.path)
        return TableProperties(backup.props or {}, backup.path, BACKUP_FILE)
    hint = f"run `upsertlake doctor {storage.base}`"
    if main.missing:
        raise CorruptTableError(f"{main.path} is missing and {backup.path} is not valid ({backup.reason}); {hint}")
    damage = (
        f"{main.path} is damaged ({main.reason}) and there is no valid {BACKUP_FILE.rsplit('/', 1)[1]}: "
        f"every write is refused so that the damage cannot spread (reads proceed with the properties "
        f"as read, without partition pruning); {hint}"
    )
    if main.props is None:
        raise CorruptTableError(damage)
    return TableProperties(main.props, main.path, PROPERTIES_FILE, damage)


# -- Hudi's backup protocol (HoodieTableConfig.modify / recover) --------------------------------
def create_properties(storage: Storage, props: Mapping[str, str]) -> bool:
    """Write the first `hoodie.properties`; False (nothing written) if a table is there."""
    if storage.exists(BACKUP_FILE):  # a table in the middle of a rewrite
        return False
    return storage.write_if_absent(PROPERTIES_FILE, _properties_bytes(props))


def write_properties(storage: Storage, changes: Mapping[str, str | None]) -> dict[str, str]:
    """Change keys of `hoodie.properties` (a None value deletes the key) by Hudi's protocol.

    0. finish or undo an earlier rewrite that crashed (`recover_properties`);
    1. read the current file, which must be valid: a file we could not fully read is never
       rewritten (we would write its lost keys away for good);
    2. copy its exact bytes to `hoodie.properties.backup` and read them back;
    3. write the new file with its checksum and read it back;
    4. delete the backup.
    A crash after any step leaves a valid file to read: the old one or the new one, with the backup
    beside it until the next rewrite recovers. Deviation from Hudi, which deletes the file before
    writing the new one: the new file replaces the old one atomically (temporary file + rename),
    so no reader ever finds none (hudi-rs has no fallback to the backup).
    Call under the table lock. Returns the properties now on disk.
    """
    recover_properties(storage)
    current = PropertiesFile.read(storage, PROPERTIES_FILE)
    if not current.valid or current.raw is None or current.props is None:
        raise CorruptTableError(
            f"refusing to rewrite {current.path}: it is not valid ({current.reason}); "
            f"run `upsertlake doctor {storage.base}`"
        )
    props = {k: v for k, v in current.props.items() if k != CHECKSUM_KEY}
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    props[CHECKSUM_KEY] = str(properties_checksum(props))
    problems = validate_properties(props)
    if problems:
        raise CorruptTableError(
            f"refusing to write {current.path}: the new properties would be invalid ({'; '.join(problems)})"
        )
    new = _properties_bytes(props)
    storage.write_bytes(BACKUP_FILE, current.raw)
    if storage.read_bytes(BACKUP_FILE) != current.raw:
        storage.delete(BACKUP_FILE)
        raise CorruptTableError(
            f"{storage.full_path(BACKUP_FILE)} did not read back as written; {current.path} is unchanged"
        )
    storage.write_bytes(PROPERTIES_FILE, new)
    if storage.read_bytes(PROPERTIES_FILE) != new:
        storage.delete(PROPERTIES_FILE)  # readers use the backup; the next rewrite recovers it
        raise CorruptTableError(f"{current.path} did not read back as written; its backup stands in for it")
    storage.delete(BACKUP_FILE)
    return props


def recover_properties(storage: Storage) -> str | None:
    """Finish or undo a rewrite that crashed (Hudi's recoverIfNeeded); says what it did, or None.

    A valid `hoodie.properties` wins and the leftover backup goes; otherwise a valid backup is
    copied back. When neither is valid nothing is touched. Callers that use the backup for writes
    first check that it agrees with the table (`upsertlake.services.doctor`).
    """
    if not storage.exists(BACKUP_FILE):
        return None
    main = PropertiesFile.read(storage, PROPERTIES_FILE)
    if main.valid:
        storage.delete(BACKUP_FILE)
        return f"deleted {BACKUP_FILE}, left by an interrupted rewrite ({PROPERTIES_FILE} is valid)"
    backup = PropertiesFile.read(storage, BACKUP_FILE)
    if not backup.valid or backup.raw is None:
        raise CorruptTableError(
            f"neither {main.path} ({main.reason}) nor {backup.path} ({backup.reason}) is valid; "
            f"run `upsertlake doctor {storage.base}`"
        )
    storage.write_bytes(PROPERTIES_FILE, backup.raw)
    if storage.read_bytes(PROPERTIES_FILE) != backup.raw:
        raise CorruptTableError(f"{main.path} did not read back as written; {backup.path} is kept")
    storage.delete(BACKUP_FILE)
    return f"restored {PROPERTIES_FILE} from {BACKUP_FILE} ({PROPERTIES_FILE} {main.reason})"


def replace_properties(storage: Storage, props: Mapping[str, str]) -> None:
    """Write rebuilt properties in place of a damaged or missing `hoodie.properties` (the doctor's
    fix, under the table lock; `write_properties` refuses to start from a damaged file):
    atomically, read back, then the backup goes, since it was not valid or did not agree."""
    problems = validate_properties(props)
    if problems:
        raise CorruptTableError(f"refusing to write {storage.full_path(PROPERTIES_FILE)}: {'; '.join(problems)}")
    data = _properties_bytes(props)
    storage.write_bytes(PROPERTIES_FILE, data)
    if storage.read_bytes(PROPERTIES_FILE) != data:
        raise CorruptTableError(f"{storage.full_path(PROPERTIES_FILE)} did not read back as written")
    storage.delete(BACKUP_FILE)


def _properties_bytes(props: Mapping[str, str]) -> bytes:
    """The file as Java's Properties.store writes it: a dated comment, then escaped lines."""
    now = datetime.now(timezone.utc)
    header = f"#Updated at {now.isoformat()}\n#{now.strftime('%a %b %d %H:%M:%S UTC %Y')}\n"
    return (header + format_java_properties(dict(props))).encode("latin-1", "backslashreplace")
