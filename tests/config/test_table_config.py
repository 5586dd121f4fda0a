"""hoodie.properties: Java properties format, Hudi's checksum, and the table model."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upsertlake.config.enums import MergeMode
from upsertlake.config.java_properties import format_java_properties, parse_java_properties
from upsertlake.config.properties_file import (
    BACKUP_FILE,
    CHECKSUM_KEY,
    PROPERTIES_FILE,
    recover_properties,
    validate_properties,
    write_properties,
)
from upsertlake.config.table_config import (
    COMPLEX_KEYGEN,
    NONPARTITIONED_KEYGEN,
    SIMPLE_KEYGEN,
    TableConfig,
)
from upsertlake.errors import ConfigError, CorruptTableError, TableNotFoundError, UnsupportedTableError
from upsertlake.storage import Storage

TABLES = [
    "v6_simplekeygen_nonhivestyle",
    "v6_complexkeygen_hivestyle",
    "v6_nonpartitioned",
    "v6_timebasedkeygen_nonhivestyle",
]


@pytest.mark.parametrize("name", TABLES)
def test_real_properties_load_and_checksum_matches(hudi_table, name: str) -> None:
    config = TableConfig.load(Storage(hudi_table(name)))
    props = parse_java_properties((hudi_table(name) / ".hoodie/hoodie.properties").read_text("latin-1"))
    assert config.name == name
    assert str(config.checksum) == props["hoodie.table.checksum"]
    assert config.create_schema == props["hoodie.table.create.schema"]
    assert config.create_schema.startswith('{"type":"record"')



def test_properties_round_trip_escapes() -> None:
    props = {"a.b": 'x:y=z #!', "schema": '{"type":"record"}', "sp ace": " lead", "uni": "é\u20ac"}
    assert parse_java_properties(format_java_properties(props)) == props
    assert "\\:" in format_java_properties({"k": "a:b"})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1), st.text(), max_size=5))
def test_properties_round_trip_any_text(props: dict[str, str]) -> None:
    """Every key and value comes back as written: separators, escapes, line breaks, leading
    spaces, characters beyond the Basic Multilingual Plane (Java writes their UTF-16 halves)."""
    assert parse_java_properties(format_java_properties(props)) == props


def test_parse_java_continuations_and_comments() -> None:
    text = "# comment\n! other\nkey1 = value1\nkey2:value2\nkey3 long \\\n    continued\nkey4\n"
    assert parse_java_properties(text) == {"key1": "value1", "key2": "value2", "key3": "long continued", "key4": ""}


def test_default_key_generators() -> None:
    assert TableConfig("t", ("id",), ("p",)).keygen_class == SIMPLE_KEYGEN
    assert TableConfig("t", ("id", "name"), ("p",)).keygen_class == COMPLEX_KEYGEN
    assert TableConfig("t", ("id",), ("a", "b")).keygen_class == COMPLEX_KEYGEN
    assert TableConfig("t", ("id",)).keygen_class == NONPARTITIONED_KEYGEN


def test_save_and_load(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    config = TableConfig("trips", ("uuid",), ("city",), ("ts",), create_schema='{"type":"record"}')
    assert config.create(storage)
    assert not config.create(storage)
    loaded = TableConfig.load(storage)
    assert loaded == config
    props = parse_java_properties((tmp_path / ".hoodie/hoodie.properties").read_text())
    assert props["hoodie.table.version"] == "6"
    assert props["hoodie.table.timeline.timezone"] == "UTC"
    assert props["hoodie.table.partition.fields"] == "city"
    assert "hoodie.table.metadata.partitions" not in props


def test_errors(tmp_path: Path, hudi_table) -> None:
    with pytest.raises(TableNotFoundError, match="no Hudi table"):
        TableConfig.load(Storage(tmp_path))
    (tmp_path / ".hoodie").mkdir()
    (tmp_path / ".hoodie/hoodie.properties").write_text("hoodie.table.type=COPY_ON_WRITE\n")
    with pytest.raises(CorruptTableError, match=r"hoodie.table.name"):
        TableConfig.load(Storage(tmp_path))
    timebased = TableConfig.load(Storage(hudi_table("v6_timebasedkeygen_nonhivestyle")))
    with pytest.raises(UnsupportedTableError, match="TimestampBasedKeyGenerator"):
        timebased.check_writable()
    no_meta = TableConfig.load(Storage(hudi_table("v6_simplekeygen_hivestyle_no_metafields")))
    with pytest.raises(UnsupportedTableError, match=r"populate.meta.fields"):
        no_meta.check_writable()


# -- validation as Hudi does it, fallback to the backup, and the backup protocol ----------------
@pytest.mark.parametrize("name", [*TABLES, "v6_empty", "v8_empty", "v8_nonpartitioned", "v8_complexkeygen_hivestyle"])
def test_real_properties_are_valid(hudi_table, name: str) -> None:
    raw = (hudi_table(name) / ".hoodie/hoodie.properties").read_text("latin-1")
    assert validate_properties(parse_java_properties(raw)) == []


def test_validate_checksum_and_required_keys_per_version(hudi_table) -> None:
    v6 = parse_java_properties((hudi_table("v6_nonpartitioned") / ".hoodie/hoodie.properties").read_text("latin-1"))
    v8 = parse_java_properties((hudi_table("v8_nonpartitioned") / ".hoodie/hoodie.properties").read_text("latin-1"))
    assert validate_properties({k: v for k, v in v6.items() if k != CHECKSUM_KEY}) == [f"lacks {CHECKSUM_KEY}"]
    assert validate_properties({**v6, "hoodie.table.name": "other"}) == [
        f"{CHECKSUM_KEY}=1363530505 does not match its database and table name (expected "
        f"{zlib.crc32(b'default.other')})"
    ]
    assert validate_properties({k: v for k, v in v6.items() if k != "hoodie.table.keygenerator.class"}) == [
        "lacks hoodie.table.keygenerator.class (required by table version 6)"
    ]
    assert validate_properties({k: v for k, v in v8.items() if k != "hoodie.timeline.path"}) == [
        "lacks hoodie.timeline.path (required by table version 8)"
    ]
    assert validate_properties({k: v for k, v in v8.items() if k != "hoodie.table.keygenerator.type"}) == [
        "lacks hoodie.table.keygenerator.type (required by table version 8)"
    ]
    assert validate_properties({**v8, "hoodie.timeline.layout.version": "1"}) == [
        "hoodie.timeline.layout.version=1 does not go with table version 8"
    ]
    assert validate_properties({**v6, "hoodie.table.version": ""}) == ["lacks hoodie.table.version"]


def _new_table(tmp_path: Path) -> Storage:
    storage = Storage(tmp_path)
    assert TableConfig("trips", ("uuid",), ("city",), ("ts",), create_schema='{"type":"record"}').create(storage)
    return storage


def _cut(path: Path, keep_lines: int) -> None:
    """Keep only the first lines of a file, as a half-written or truncated copy would."""
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:keep_lines]))


def test_damaged_properties_without_backup_refuse_writes_and_name_the_file(tmp_path: Path) -> None:
    storage = _new_table(tmp_path)
    main = tmp_path / ".hoodie/hoodie.properties"
    _cut(main, 12)  # checksum, schema and the last keys gone
    config = TableConfig.load(storage)
    assert config.name == "trips" and config.damage is not None
    with pytest.raises(CorruptTableError, match=rf"{main}.*lacks hoodie.table.checksum.*upsertlake doctor {tmp_path}"):
        config.check_writable()


def test_damaged_properties_fall_back_to_a_valid_backup(tmp_path: Path) -> None:
    storage = _new_table(tmp_path)
    main = tmp_path / ".hoodie/hoodie.properties"
    (tmp_path / ".hoodie/hoodie.properties.backup").write_bytes(main.read_bytes())
    _cut(main, 5)
    config = TableConfig.load(storage)
    assert (config.source, config.damage, config.partition_fields, config.precombine_field) == (
        BACKUP_FILE, None, ("city",), "ts"
    )
    main.unlink()  # a crash between "delete the original" and "write the new one"
    assert TableConfig.load(storage).source == BACKUP_FILE


def test_neither_file_valid_is_an_error_naming_both(tmp_path: Path) -> None:
    storage = _new_table(tmp_path)
    main = tmp_path / ".hoodie/hoodie.properties"
    backup = tmp_path / ".hoodie/hoodie.properties.backup"
    backup.write_bytes(main.read_bytes())
    _cut(backup, 4)
    main.unlink()
    with pytest.raises(CorruptTableError, match=rf"{main} is missing and {backup} is not valid"):
        TableConfig.load(storage)
    before = backup.read_bytes()
    with pytest.raises(CorruptTableError, match="neither"):
        recover_properties(storage)
    assert backup.read_bytes() == before and not main.exists()


def test_write_properties_changes_keys_keeps_the_rest_and_leaves_no_backup(tmp_path: Path) -> None:
    storage = _new_table(tmp_path)
    main = tmp_path / ".hoodie/hoodie.properties"
    before = parse_java_properties(main.read_text())
    written = write_properties(
        storage, {"hoodie.table.create.schema": '{"type":"x"}', "hoodie.populate.meta.fields": None, "new.key": "v"}
    )
    after = parse_java_properties(main.read_text())
    assert after == written
    assert list(after) == [k for k in before if k not in ("hoodie.populate.meta.fields", CHECKSUM_KEY)] + [
        "new.key",
        CHECKSUM_KEY,
    ]
    assert after["hoodie.table.create.schema"] == '{"type":"x"}' and after[CHECKSUM_KEY] == before[CHECKSUM_KEY]
    assert not (tmp_path / ".hoodie/hoodie.properties.backup").exists()
    assert TableConfig.load(storage).create_schema == '{"type":"x"}'


def test_write_properties_never_rewrites_a_file_it_could_not_fully_read(tmp_path: Path) -> None:
    storage = _new_table(tmp_path)
    main = tmp_path / ".hoodie/hoodie.properties"
    _cut(main, 12)
    before = main.read_bytes()
    with pytest.raises(
        CorruptTableError, match=rf"refusing to rewrite {main}: it is not valid \(lacks hoodie.table.checksum\)"
    ):
        write_properties(storage, {"hoodie.table.create.schema": "{}"})
    assert main.read_bytes() == before
    assert not (tmp_path / ".hoodie/hoodie.properties.backup").exists()


class Crash(Exception):
    pass


# The protocol's storage calls, in order; a crash replaces the n-th one.
STEPS = [
    ("write_bytes", BACKUP_FILE),
    ("write_bytes", PROPERTIES_FILE),
    ("delete", BACKUP_FILE),
]


@pytest.mark.parametrize("step", STEPS, ids=[f"{m}-{p.rsplit('/', 1)[1]}" for m, p in STEPS])
def test_a_crash_at_any_step_leaves_a_valid_file(tmp_path: Path, monkeypatch, step: tuple[str, str]) -> None:
    storage = Storage(tmp_path)
    _new_table(tmp_path)
    method, target = step
    real = getattr(storage, method)

    def crashing(rel: str, *args, **kwargs):
        if rel == target:
            raise Crash(f"{method} {rel}")
        return real(rel, *args, **kwargs)

    monkeypatch.setattr(storage, method, crashing)
    with pytest.raises(Crash):
        write_properties(storage, {"hoodie.table.create.schema": '{"type":"new"}'})
    monkeypatch.undo()

    # Readers see a valid config, old or new, never a damaged one.
    seen = TableConfig.load(storage)
    assert seen.damage is None
    assert seen.create_schema == ('{"type":"new"}' if step == STEPS[2] else '{"type":"record"}')
    assert seen.source == PROPERTIES_FILE  # replaced atomically: never missing, never torn
    # The next rewrite recovers first, then completes; no backup is left behind.
    write_properties(storage, {"hoodie.table.create.schema": '{"type":"again"}'})
    assert TableConfig.load(storage).create_schema == '{"type":"again"}'
    assert not (tmp_path / ".hoodie/hoodie.properties.backup").exists()


def test_a_torn_new_file_falls_back_to_the_backup_and_recovers(tmp_path: Path) -> None:
    """A writer that dies while writing the new file in place (as Hudi's storage.create may)."""
    storage = _new_table(tmp_path)
    main = tmp_path / ".hoodie/hoodie.properties"
    original = main.read_bytes()
    (tmp_path / ".hoodie/hoodie.properties.backup").write_bytes(original)
    main.write_bytes(original[: len(original) // 2])
    assert TableConfig.load(storage).source == BACKUP_FILE
    assert recover_properties(storage) == (
        f"restored {PROPERTIES_FILE} from {BACKUP_FILE} ({PROPERTIES_FILE} lacks hoodie.table.checksum)"
    )
    assert main.read_bytes() == original
    assert not (tmp_path / ".hoodie/hoodie.properties.backup").exists()


def test_hoodie_table_version_names_the_version_of_a_new_table(tmp_path: Path, capsys) -> None:
    """`hoodie.table.version` at create_table only warned (a Hudi key we do not implement) and made
    a version 6 table. Hudi's table builder takes it as the version of the table it creates; so
    does create_table (and the command line). An existing table must be at it; a version we do not
    write, or one that disagrees with hoodie.write.table.version, is refused naming the key."""
    import warnings

    from upsertlake import ConfigError, create_table, open_table

    from helpers import cli_in_process

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = create_table(tmp_path / "t", "t", "id", options={"hoodie.table.version": "8"})
        assert (table.table_config.table_version, table.table_config.timeline_layout_version) == (8, 2)
        assert open_table(tmp_path / "t", options={"hoodie.table.version": 8}).table_config.table_version == 8
    assert (tmp_path / "t" / ".hoodie" / "timeline").is_dir()
    with pytest.raises(ConfigError, match=r"hoodie.table.version=6 but the table is at version 8; downgrades"):
        open_table(tmp_path / "t", options={"hoodie.table.version": "6"})
    for options, refusal in (
        ({"hoodie.table.version": "5"}, "hoodie.table.version=5: upsertlake creates tables at version 6, 8 or 9"),
        ({"hoodie.table.version": "eight"}, "hoodie.table.version='eight' is not a table version"),
        ({"hoodie.table.version": "8", "hoodie.write.table.version": "6"},
         "hoodie.table.version=8 and hoodie.write.table.version=6 disagree"),
    ):
        with pytest.raises(ConfigError, match=refusal):
            create_table(tmp_path / "u", "u", "id", options=options)
        assert not (tmp_path / "u").exists()
    code, _, err = cli_in_process(capsys, "create", tmp_path / "c", "--name", "c", "--record-key", "id",
                                  "--option", "hoodie.table.version=8")
    assert (code, err) == (0, "")
    assert open_table(tmp_path / "c").table_config.table_version == 8


def test_a_merge_mode_upsertlake_does_not_merge_by_is_refused_by_name() -> None:
    """Hudi 1.x's CUSTOM merge mode (a merger class of the user's) is not read as another one."""
    table_config = TableConfig("t", ("id",), ordering_fields=("ts",), table_version=8, timeline_layout_version=2,
                               extra={"hoodie.record.merge.mode": "CUSTOM"})
    with pytest.raises(ConfigError, match="merge mode 'CUSTOM' is not one upsertlake merges by"):
        _ = table_config.merge_mode
    assert TableConfig("t", ("id",), ordering_fields=("ts",), table_version=8, timeline_layout_version=2,
                       extra={"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"}).merge_mode is MergeMode.COMMIT_TIME
