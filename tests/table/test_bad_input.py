"""Bad input fails with the right error class, a message naming the culprit, and leaves every file
of the table byte-identical (`tree_digest`)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake
from upsertlake import (
    ConfigError,
    CorruptTableError,
    SchemaError,
    TableExistsError,
    TableNotFoundError,
    UpsertlakeError,
    create_table,
    open_table,
)

from helpers import tree_digest


def good(ids=("a", "b"), ts=(1, 1), v=("x1", "x2"), p=("x", "y")) -> pa.Table:
    return pa.table({"id": list(ids), "ts": list(ts), "v": list(v), "p": list(p)})


@pytest.fixture
def table(tmp_path: Path):
    """A partitioned table with one commit (and a second one, so there is a rewrite history)."""
    t = create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(good())
    t.upsert(good(ids=("a", "c"), ts=(2, 1), v=("x3", "x4"), p=("x", "x")))
    return t


def assert_fails_cleanly(t, error: type[UpsertlakeError], culprit: str, call) -> None:
    root = Path(t.path)
    before = tree_digest(root)
    rows_before = t.read().sort_by("_hoodie_record_key")
    with pytest.raises(error, match=re.escape(culprit)) as info:
        call()
    assert isinstance(info.value, UpsertlakeError)
    assert tree_digest(root) == before
    assert open_table(root).read().sort_by("_hoodie_record_key").equals(rows_before)


# -- the batch -----------------------------------------------------------------------------------
@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert", "delete"])
def test_missing_record_key_column(table, operation: str) -> None:
    data = good().drop_columns(["id"])
    assert_fails_cleanly(table, SchemaError, "'id'", lambda: getattr(table, operation)(data))


@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert"])
def test_missing_precombine_column(table, operation: str) -> None:
    data = good().drop_columns(["ts"])
    assert_fails_cleanly(table, SchemaError, "'ts'", lambda: getattr(table, operation)(data))


@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert", "delete"])
def test_missing_partition_column(table, operation: str) -> None:
    data = good().drop_columns(["p"])
    assert_fails_cleanly(table, SchemaError, "'p'", lambda: getattr(table, operation)(data))


@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert", "delete"])
def test_null_record_key(table, operation: str) -> None:
    data = good(ids=("a", None))
    assert_fails_cleanly(table, SchemaError, "'id'", lambda: getattr(table, operation)(data))


def test_empty_record_key(table) -> None:
    assert_fails_cleanly(table, SchemaError, "'id'", lambda: table.upsert(good(ids=("", "b"))))


@pytest.mark.parametrize(
    "column, values",
    [
        ("ts", pa.array(["one", "two"])),  # the table's ts is a long
        ("v", pa.array([1.5, 2.5])),  # the table's v is a string
        ("v", pa.array([[1], [2]])),
    ],
)
@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert"])
def test_incompatible_column_type(table, column: str, values: pa.Array, operation: str) -> None:
    data = good()
    data = data.set_column(data.schema.get_field_index(column), column, values)
    assert_fails_cleanly(table, SchemaError, f"'{column}'", lambda: getattr(table, operation)(data))


def test_missing_data_column(table) -> None:
    data = good().drop_columns(["v"])
    assert_fails_cleanly(table, SchemaError, "'v'", lambda: table.upsert(data))


def test_is_deleted_must_be_boolean(table) -> None:
    data = good().append_column("_hoodie_is_deleted", pa.array(["yes", "no"]))
    assert_fails_cleanly(table, SchemaError, "'_hoodie_is_deleted'", lambda: table.upsert(data))


def test_unconvertible_rows_name_the_column(table) -> None:
    rows = [{"id": "a", "ts": 1, "v": "x", "p": "x"}, {"id": "b", "ts": "late", "v": "y", "p": "x"}]
    assert_fails_cleanly(table, SchemaError, "'ts'", lambda: table.upsert(rows))
    import pandas as pd
    frame = pd.DataFrame({"id": ["a", 1], "ts": [1, 2], "v": ["x", "y"], "p": ["x", "x"]})
    assert_fails_cleanly(table, SchemaError, "'id'", lambda: table.upsert(frame))


def test_not_a_batch(table) -> None:
    assert_fails_cleanly(table, SchemaError, "int", lambda: table.upsert(42))


# -- options -------------------------------------------------------------------------------------
@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert", "delete"])
def test_unknown_option_key_in_a_write(table, operation: str) -> None:
    opts = {"hoodie.parquet.max.file.sise": "1024"}
    assert_fails_cleanly(
        table, ConfigError, "hoodie.parquet.max.file.sise", lambda: getattr(table, operation)(good(), opts)
    )


def test_unknown_option_key_not_hoodie(table) -> None:
    assert_fails_cleanly(table, ConfigError, "max_file_size", lambda: table.upsert(good(), {"max_file_size": 1}))


def test_bad_option_value(table) -> None:
    opts = {"hoodie.index.type": "FANCY"}
    assert_fails_cleanly(table, ConfigError, "hoodie.index.type", lambda: table.upsert(good(), opts))
    opts = {"hoodie.parquet.max.file.size": "big"}
    assert_fails_cleanly(table, ConfigError, "hoodie.parquet.max.file.size", lambda: table.upsert(good(), opts))


def test_unknown_option_key_when_opening(table) -> None:
    assert_fails_cleanly(
        table, ConfigError, "hoodie.upsert.shufle.parallelism",
        lambda: open_table(table.path, {"hoodie.upsert.shufle.parallelism": 2}),
    )


def test_unknown_option_key_when_creating(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("hoodie.index.typ")):
        create_table(tmp_path / "n", "n", record_key="id", options={"hoodie.index.typ": "BLOOM"})
    assert not (tmp_path / "n" / ".hoodie" / "hoodie.properties").exists()


# -- the table itself ----------------------------------------------------------------------------
def test_not_a_table(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "some.txt").write_text("hello")
    before = tree_digest(tmp_path)
    for path in (tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(TableNotFoundError, match=re.escape(str(path))):
            open_table(path)
    assert tree_digest(tmp_path) == before
    assert not (tmp_path / "missing").exists()


def test_table_exists(table) -> None:
    assert_fails_cleanly(
        table, TableExistsError, str(Path(table.path)),
        lambda: create_table(table.path, "other", record_key="id", precombine_field="ts"),
    )


def test_corrupt_commit_file(table) -> None:
    root = Path(table.path)
    last = sorted((root / ".hoodie").glob("*.commit"))[-1]
    last.write_bytes(last.read_bytes()[: len(last.read_bytes()) // 2])  # truncated JSON
    with pytest.raises(CorruptTableError, match=re.escape(last.name)):
        open_table(root).read()
    with pytest.raises(CorruptTableError, match=re.escape(last.name)):
        open_table(root).schema()
    # a write does not paper over it either, and changes nothing
    assert_fails_cleanly_without_read(root, CorruptTableError, last.name, lambda: open_table(root).upsert(good()))


def test_corrupt_properties_file(table) -> None:
    root = Path(table.path)
    props = root / ".hoodie" / "hoodie.properties"
    text = props.read_text("latin-1")
    props.write_text("\n".join(line for line in text.splitlines() if not line.startswith("hoodie.table.name")))
    before = tree_digest(root)
    with pytest.raises(CorruptTableError, match=r"hoodie.table.name"):
        open_table(root)
    assert tree_digest(root) == before


def assert_fails_cleanly_without_read(root: Path, error: type[UpsertlakeError], culprit: str, call) -> None:
    before = tree_digest(root)
    with pytest.raises(error, match=re.escape(culprit)):
        call()
    assert tree_digest(root) == before


def test_errors_are_exported() -> None:
    for name in ("SchemaError", "ConfigError", "TableNotFoundError", "TableExistsError", "CorruptTableError"):
        assert issubclass(getattr(upsertlake, name), upsertlake.UpsertlakeError)
