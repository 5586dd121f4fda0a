"""hoodie.properties: Java properties format, Hudi's checksum, and the table model."""

from __future__ import annotations

from pathlib import Path

import pytest

from upsertlake.config.table_config import (
    COMPLEX_KEYGEN,
    NONPARTITIONED_KEYGEN,
    SIMPLE_KEYGEN,
    TableConfig,
    format_java_properties,
    parse_java_properties,
)
from upsertlake.errors import CorruptTableError, TableNotFoundError, UnsupportedTableError
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
    config = TableConfig("trips", ("uuid",), ("city",), "ts", create_schema='{"type":"record"}')
    assert config.save(storage, create=True)
    assert not config.save(storage, create=True)
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
    with pytest.raises(CorruptTableError, match="hoodie.table.name"):
        TableConfig.load(Storage(tmp_path))
    timebased = TableConfig.load(Storage(hudi_table("v6_timebasedkeygen_nonhivestyle")))
    with pytest.raises(UnsupportedTableError, match="TimestampBasedKeyGenerator"):
        timebased.check_writable()
    no_meta = TableConfig.load(Storage(hudi_table("v6_simplekeygen_hivestyle_no_metafields")))
    with pytest.raises(UnsupportedTableError, match="populate.meta.fields"):
        no_meta.check_writable()
