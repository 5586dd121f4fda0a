"""Interoperability with Apache Hudi's reader (hudi-rs, the PyPI `hudi` package).

Two directions, both exact:
1. tables we write, read by Hudi: for each layout a sequence of writes (insert, upsert with
   updates / inserts / in-batch duplicates, delete(), `_hoodie_is_deleted` rows, a new nullable
   column); after every commit the snapshot, time travel to every completed instant and several
   incremental windows must be the same through both readers, and equal an independent model;
2. tables written by Apache Hudi: our reads equal Hudi's, our upserts into them are read back by
   Hudi exactly as expected, and tables we cannot write are refused untouched.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import UnsupportedTableError, create_table, open_table

from helpers import completed_times, hudi_read, tree_digest
from hudi_compare import BEFORE_ALL, KEY, META, check_reads, completed_instants

UTC = dt.timezone.utc

# -- tables we write ----------------------------------------------------------------------------


def all_types_row(i: int, version: int) -> dict:
    """Every type a table can hold, values depending on the id and the write's version; some nulls."""
    v = version
    return {
        "flag": (i + v) % 2 == 0 if i % 7 != 3 else None,
        "i32": i * 1000 + v,
        "f32": float(i) + v / 4,
        "f64": i * 1.5 + v / 8 if i % 5 != 2 else None,
        "bin": f"bytes-{i}-{v}".encode(),
        "dec": Decimal(f"{i * 10 + v}.{(i * 7919 + v) % 100000:05d}"),
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i + v),
        "at": dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC) + dt.timedelta(seconds=i, microseconds=v),
        "items": [{"label": f"l{i}-{j}", "count": j * v} for j in range(i % 3)] if i % 4 != 1 else None,
        "attrs": {f"k{j}": {"score": float(i + j + v), "ok": j % 2 == 0} for j in range(i % 3)},
        "nested": {"a": f"n{i}", "b": v, "inner": {"x": i / 2, "y": i % 2 == 1}} if i % 6 != 5 else None,
    }


ALL_TYPES_SCHEMA = pa.schema(
    [
        ("flag", pa.bool_()),
        ("i32", pa.int32()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("bin", pa.binary()),
        ("dec", pa.decimal128(10, 5)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("items", pa.list_(pa.struct([("label", pa.string()), ("count", pa.int32())]))),
        ("attrs", pa.map_(pa.string(), pa.struct([("score", pa.float64()), ("ok", pa.bool_())]))),
        (
            "nested",
            pa.struct(
                [("a", pa.string()), ("b", pa.int64()), ("inner", pa.struct([("x", pa.float64()), ("y", pa.bool_())]))]
            ),
        ),
    ]
)

BASE_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("region", pa.string()),
        ("shard", pa.int32()),
        ("ts", pa.int64()),
        ("value", pa.string()),
        ("amount", pa.float64()),
    ]
)


@dataclass(frozen=True)
class Layout:
    name: str
    record_key: tuple[str, ...] = ("id",)
    partition_fields: tuple[str, ...] = ("region",)
    hive: bool = False
    options: dict = field(default_factory=dict)
    region: Callable[[int], str | None] = lambda i: ["eu", "us", "ap"][i % 3]
    all_types: bool = False

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([*BASE_SCHEMA, *(ALL_TYPES_SCHEMA if self.all_types else [])])

    def row(self, i: int, version: int, **changes: object) -> dict:
        row = {
            "id": i,
            "name": f"name-{i}",
            "region": self.region(i),
            "shard": i % 2,
            "ts": version,
            "value": f"v{version}-{i}",
            "amount": i * 1.25 + version,
        }
        if self.all_types:
            row.update(all_types_row(i, version))
        row.update(changes)
        return row


LAYOUTS = [
    Layout("simple_nonhive"),
    Layout("simple_hive", hive=True),
    Layout("complex_two_partitions", record_key=("id", "name"), partition_fields=("region", "shard")),
    Layout("nonpartitioned", partition_fields=()),
    Layout(
        "urlencoded",
        options={"hoodie.datasource.write.partitionpath.urlencode": True},
        region=lambda i: ["a/b", "c d", "e f/g+h%", "plain"][i % 4],
    ),
    Layout(
        "urlencoded_hive",
        hive=True,
        options={"hoodie.datasource.write.partitionpath.urlencode": True},
        region=lambda i: ["a/b", "c d", "x=y&z"][i % 3],
    ),
    Layout("null_partition", region=lambda i: None if i % 3 == 0 else ["eu", "us"][i % 2]),
    Layout(
        "null_partition_complex_hive",
        record_key=("id", "name"),
        partition_fields=("region", "shard"),
        hive=True,
        region=lambda i: None if i % 3 == 0 else "eu",
    ),
    Layout("all_types", all_types=True),
    Layout(
        "many_file_groups",  # several file groups per partition; small ones take inserts
        options={
            "hoodie.parquet.max.file.size": 40000,
            "hoodie.parquet.small.file.limit": 30000,
            "hoodie.copyonwrite.record.size.estimate": 8000,
            "hoodie.index.bloom.num_entries": 100,
        },
    ),
]


# Java's URLEncoder, as Hudi encodes partition values (written out, not computed).
URL_ENCODED = {"a/b": "a%2Fb", "c d": "c+d", "e f/g+h%": "e+f%2Fg%2Bh%25", "x=y&z": "x%3Dy%26z"}


def expected_key_and_partition(layout: Layout, row: dict) -> tuple[str, str]:
    """The record key and partition path Hudi's key generators give a row."""
    if len(layout.record_key) == 1:
        key = str(row["id"])
    else:
        key = f"id:{row['id']},name:{row['name']}"
    parts = []
    for name in layout.partition_fields:
        value = row[name]
        text = "__HIVE_DEFAULT_PARTITION__" if value is None else str(value)
        if layout.options.get("hoodie.datasource.write.partitionpath.urlencode"):
            text = URL_ENCODED.get(text, text)
        parts.append(f"{name}={text}" if layout.hive else text)
    return key, "/".join(parts)


class Model:
    """What the table must hold: one row per id, with the exact data values."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.rows: dict[int, dict] = {}
        self.columns = list(layout.schema.names)

    def add_column(self, name: str) -> None:
        self.columns.append(name)
        for row in self.rows.values():
            row.setdefault(name, None)

    def upsert(self, batch: list[dict]) -> None:
        winners: dict[int, dict] = {}
        for row in batch:  # the larger ts wins, ties go to the later record
            if row["id"] not in winners or row["ts"] >= winners[row["id"]]["ts"]:
                winners[row["id"]] = row
        for i, row in winners.items():
            if row.get("_hoodie_is_deleted"):
                self.rows.pop(i, None)
            elif i not in self.rows or row["ts"] >= self.rows[i]["ts"]:
                self.rows[i] = {c: row.get(c) for c in self.columns}

    def check(self, snapshot: pa.Table, path: Path) -> None:
        assert snapshot.column_names == META + self.columns
        located = sorted(
            zip(snapshot["id"].to_pylist(), snapshot[KEY].to_pylist(), snapshot["_hoodie_partition_path"].to_pylist())
        )
        assert located == [(i, *expected_key_and_partition(self.layout, self.rows[i])) for i in sorted(self.rows)]
        assert all((path / partition).is_dir() for _, _, partition in located)
        data = snapshot.select(self.columns)
        got = sorted(data.to_pylist(), key=lambda r: r["id"])
        # through Arrow, so that values compare as Arrow returns them (maps as lists of pairs)
        expected = pa.Table.from_pylist([self.rows[i] for i in sorted(self.rows)], schema=data.schema)
        assert got == expected.to_pylist()


def to_batch(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


@pytest.mark.usefixtures("table_version")
@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.name for layout in LAYOUTS])
def test_tables_we_write_read_the_same_through_hudi(tmp_path: Path, layout: Layout) -> None:
    path = tmp_path / layout.name
    table = create_table(
        path,
        layout.name,
        record_key=list(layout.record_key),
        precombine_field="ts",
        partition_fields=list(layout.partition_fields),
        hive_style_partitioning=layout.hive,
        options=layout.options,
    )
    model = Model(layout)
    schema = layout.schema

    def commit(operation: str, rows: list[dict], batch_schema: pa.Schema = schema) -> None:
        result = getattr(table, operation)(to_batch(rows, batch_schema))
        assert result.committed
        if operation != "delete":
            model.upsert(rows)
        snapshot = table.read()
        model.check(snapshot, path)
        check_reads(table, path)

    # 1. insert
    commit("insert", [layout.row(i, 1) for i in range(24)])
    # 2. upsert: updates, inserts, in-batch duplicates (larger ts wins; a tie goes to the later one)
    batch = [layout.row(i, 2) for i in range(0, 24, 3)] + [layout.row(i, 2) for i in range(24, 30)]
    batch += [layout.row(4, 3, value="dup-wins"), layout.row(4, 2, value="dup-loses")]
    batch += [layout.row(27, 2, value="tie-first"), layout.row(27, 2, value="tie-later")]
    commit("upsert", batch)
    # 3. delete(): three stored keys and one unknown key
    deleted = [layout.row(i, 0) for i in (1, 2, 25, 999)]
    key_columns = [*layout.record_key, *layout.partition_fields]
    table.delete(to_batch(deleted, schema).select(key_columns))
    for i in (1, 2, 25):
        model.rows.pop(i)
    model.check(table.read(), path)
    check_reads(table, path)
    # 4. an upsert carrying `_hoodie_is_deleted` rows (a new boolean column of the table)
    flagged = schema.append(pa.field("_hoodie_is_deleted", pa.bool_()))
    model.add_column("_hoodie_is_deleted")
    batch = [layout.row(i, 4, _hoodie_is_deleted=True) for i in (5, 6, 26)]
    batch += [layout.row(i, 4, _hoodie_is_deleted=False) for i in (7, 30, 31)]
    commit("upsert", batch, flagged)
    # 5. a batch that adds a new nullable column
    evolved = flagged.append(pa.field("note", pa.string()))
    model.add_column("note")
    batch = [layout.row(i, 5, _hoodie_is_deleted=False, note=f"note-{i}") for i in (0, 8, 32)]
    batch.append(layout.row(9, 5, _hoodie_is_deleted=False, note=None))
    commit("upsert", batch, evolved)

    assert len(completed_instants(table)) == 5
    assert sorted(model.rows) == sorted({*range(33)} - {1, 2, 25, 5, 6, 26})
    if layout.name == "many_file_groups":  # the layout did what it is there for
        snapshot = table.read()
        names = zip(snapshot["_hoodie_partition_path"].to_pylist(), snapshot["_hoodie_file_name"].to_pylist())
        groups = {(partition, name.split("_")[0]) for partition, name in names}
        assert len(groups) > len({p for p, _ in groups})


@pytest.mark.parametrize("table_version", [9], indirect=True, ids=["v9"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.name for layout in LAYOUTS])
def test_version_9_tables_we_write_read_the_same_through_hudi(
    tmp_path: Path, table_version: int, layout: Layout
) -> None:
    """The sequence of writes above (insert, upserts with duplicates, delete(), deleted flags, a
    new column) on tables created at version 9: after every commit our reads equal hudi-rs's and
    an independent model, at every instant and incrementally."""
    test_tables_we_write_read_the_same_through_hudi(tmp_path, layout)
    assert "hoodie.table.version=9" in (tmp_path / layout.name / ".hoodie" / "hoodie.properties").read_text("latin-1")


@pytest.mark.usefixtures("table_version")
@pytest.mark.parametrize("hive", [False, True])
def test_emptied_file_groups_disappear_for_both_readers(tmp_path: Path, hive: bool) -> None:
    """A file group whose last record is deleted gets an empty new version: Hudi sees it gone."""
    path = tmp_path / "emptied"
    layout = Layout("emptied", hive=hive, region=lambda i: ["keep", "drop", "flag"][i % 3])
    table = create_table(
        path, "emptied", record_key="id", precombine_field="ts", partition_fields="region", hive_style_partitioning=hive
    )
    schema = layout.schema
    table.insert(to_batch([layout.row(i, 1) for i in range(9)], schema))
    check_reads(table, path)
    table.delete(to_batch([layout.row(i, 1) for i in (1, 4, 7)], schema).select(["id", "region"]))
    check_reads(table, path)
    flagged = schema.append(pa.field("_hoodie_is_deleted", pa.bool_()))
    table.upsert(to_batch([layout.row(i, 2, _hoodie_is_deleted=True) for i in (2, 5, 8)], flagged))
    check_reads(table, path)
    assert sorted(table.read()["id"].to_pylist()) == [0, 3, 6]
    assert sorted(hudi_read(path)["id"].to_pylist()) == [0, 3, 6]
    assert sorted(hudi_read(path, as_of=completed_instants(table)[0])["id"].to_pylist()) == list(range(9))


# -- tables written by Apache Hudi --------------------------------------------------------------

V6_TABLES = [
    "v6_simplekeygen_nonhivestyle",
    "v6_complexkeygen_hivestyle",
    "v6_nonpartitioned",
    "v6_timebasedkeygen_nonhivestyle",
    "v6_simplekeygen_nonhivestyle_overwritetable",
    "v6_simplekeygen_hivestyle_no_metafields",
    "v6_empty",
]


V8_TABLES = [
    "v8_simplekeygen_nonhivestyle",
    "v8_complexkeygen_hivestyle",
    "v8_nonpartitioned",
    "v8_simplekeygen_hivestyle_no_metafields",
    "v8_empty",
]


@pytest.mark.parametrize("name", V6_TABLES + V8_TABLES)
def test_hudi_written_tables_read_as_hudi_reads_them(hudi_table, name: str) -> None:
    path = hudi_table(name)
    table = open_table(path)
    with_meta = table.table_config.populate_meta_fields
    check_reads(table, path, windows=with_meta)
    if not with_meta:
        # No commit times to select rows by: Apache Hudi refuses incremental queries there.
        with pytest.raises(UnsupportedTableError):
            table.read_incremental(BEFORE_ALL)


def test_v8_incremental_reads_select_commits_by_completion_time(hudi_table) -> None:
    """Hudi 1.x semantics on a real version 8 table: the window bounds are completion times and
    rows are those of the commits completed inside it (the HUDI-V8.md example), as hudi-rs reads."""
    path = hudi_table("v8_simplekeygen_nonhivestyle")
    table = open_table(path)
    (r1, c1), (r2, c2) = [(i.time, i.completion) for i in table.timeline() if i.is_completed]
    assert (r1, c1, r2, c2) == ("20250713011315930", "20250713011316231", "20250713011316909", "20250713011317225")

    def ids(t: pa.Table) -> list[tuple[int, str]]:
        return sorted(zip(t["id"].to_pylist(), t["_hoodie_commit_time"].to_pylist()))

    assert ids(table.read_incremental(c1, c2)) == [(1, r2), (4, r2)]
    assert ids(hudi_read(path, begin=c1, end=c2)) == [(1, r2), (4, r2)]
    # (r1, r2] holds commit 1's completion only: commit 2, requested at r2, completed later.
    assert ids(table.read_incremental(r1, r2)) == [(1, r1), (2, r1), (3, r1)]
    assert ids(table.read_incremental(c1, r2)) == []
    assert ids(table.read(as_of=c1)) == [(1, r1), (2, r1), (3, r1)]  # time travel: requested time


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hoodie.table.version": "10"}, "table version 10 is not supported"),
        ({"hoodie.timeline.layout.version": "1"}, "timeline layout version 1 is not a valid"),
        ({"hoodie.timeline.layout.version": "3"}, "timeline layout version 3 is not a valid"),
    ],
)
def test_unreadable_versions_raise_never_read_empty(hudi_table, changes: dict, message: str) -> None:
    path = hudi_table("v8_simplekeygen_nonhivestyle")
    props = path / ".hoodie" / "hoodie.properties"
    text = props.read_text("latin-1")
    for key, value in changes.items():
        text = "\n".join(f"{key}={value}" if line.startswith(key + "=") else line for line in text.splitlines())
    props.write_text(text + "\n", "latin-1")
    before = tree_digest(path)
    with pytest.raises(UnsupportedTableError, match=message):
        open_table(path).read()
    with pytest.raises(UnsupportedTableError, match=message):
        open_table(path).read_incremental(BEFORE_ALL)
    assert tree_digest(path) == before


def test_empty_hudi_table_reads_as_no_rows(hudi_table) -> None:
    path = hudi_table("v6_empty")
    table = open_table(path)
    snapshot = table.read()
    assert snapshot.num_rows == 0
    assert snapshot.column_names == [*META, "id", "name", "isActive"]  # hoodie.table.create.schema
    assert hudi_read(path).num_rows == 0
    assert completed_instants(table) == []


# Before our write: id -> (name, longField, intField, partition path) in the reference tables.
def _original(partitions: tuple[str, str, str, str]) -> dict[int, tuple]:
    return {
        1: ("Alice", 1234567890, 15000, partitions[0]),
        2: ("Bob", 9876543210, 25000, partitions[1]),
        3: ("Carol", 1928374650, 35000, partitions[2]),
        4: ("Diana", 987654321, 45000, partitions[3]),
    }


# After updating ids 1 and 3 (a larger longField wins) and inserting id 5 next to id 2.
def _expected(names: tuple[str, str], partitions: tuple[str, str, str, str]) -> dict[int, tuple]:
    return {
        1: (names[0], 1234567891, 11, partitions[0]),
        2: ("Bob", 9876543210, 25000, partitions[1]),
        3: (names[1], 1928374651, 33, partitions[2]),
        4: ("Diana", 987654321, 45000, partitions[3]),
        5: ("Eve", 5, 55, partitions[1]),
    }


SIMPLE_PARTITIONS = ("10", "20", "10", "30")
COMPLEX_PARTITIONS = (
    "byteField=10/shortField=300",
    "byteField=20/shortField=100",
    "byteField=10/shortField=300",
    "byteField=30/shortField=100",
)
NO_PARTITIONS = ("", "", "", "")


@pytest.mark.parametrize(
    ("name", "options", "original", "expected"),
    [
        (
            "v6_simplekeygen_nonhivestyle",
            None,
            _original(SIMPLE_PARTITIONS),
            _expected(("Alicia", "Caroline"), SIMPLE_PARTITIONS),
        ),
        (
            # Its footer bloom filters miss keys (see the README): only the simple index finds them.
            # The record key includes `name`, so names stay (a new name would be a new record).
            "v6_complexkeygen_hivestyle",
            {"hoodie.index.type": "SIMPLE"},
            _original(COMPLEX_PARTITIONS),
            _expected(("Alice", "Carol"), COMPLEX_PARTITIONS),
        ),
        (
            "v6_nonpartitioned",
            None,
            _original(NO_PARTITIONS),
            _expected(("Alicia", "Caroline"), NO_PARTITIONS),
        ),
        (
            "v8_simplekeygen_nonhivestyle",
            None,
            _original(SIMPLE_PARTITIONS),
            _expected(("Alicia", "Caroline"), SIMPLE_PARTITIONS),
        ),
        (
            "v8_complexkeygen_hivestyle",
            {"hoodie.index.type": "SIMPLE"},
            _original(COMPLEX_PARTITIONS),
            _expected(("Alice", "Carol"), COMPLEX_PARTITIONS),
        ),
        (
            "v8_nonpartitioned",
            None,
            _original(NO_PARTITIONS),
            _expected(("Alicia", "Caroline"), NO_PARTITIONS),
        ),
    ],
)
def test_upsert_into_hudi_written_table(
    hudi_table, name: str, options: dict | None, original: dict, expected: dict
) -> None:
    path = hudi_table(name)
    old_files = {p.relative_to(path) for p in path.rglob("*.parquet")}
    old_instants = completed_times(path)
    old_properties = (path / ".hoodie" / "hoodie.properties").read_bytes()
    table = open_table(path, options=options)
    current = table.read()
    assert summary(current) == original
    data = current.drop_columns(META)  # the batch has the table's own schema, nested types and all
    by_id = {r["id"]: r for r in data.to_pylist()}
    updates = [
        {**by_id[1], "name": expected[1][0], "longField": expected[1][1], "intField": expected[1][2]},
        {**by_id[3], "name": expected[3][0], "longField": expected[3][1], "intField": expected[3][2]},
        {**by_id[2], "id": 5, "name": "Eve", "longField": 5, "intField": 55},
    ]
    result = table.upsert(pa.Table.from_pylist(updates, schema=data.schema))
    assert (result.num_updates, result.num_inserts, result.num_deletes) == (2, 1, 0)

    theirs = hudi_read(path)
    assert summary(theirs) == expected
    # Every other column is carried over exactly, under the table's own schema.
    assert theirs.column_names == current.column_names
    assert str(theirs.drop_columns(META).schema) == str(data.schema)
    carried = {**by_id, 1: updates[0], 3: updates[1], 5: updates[2]}
    assert sorted(theirs.drop_columns(META).to_pylist(), key=lambda r: r["id"]) == [carried[i] for i in sorted(carried)]
    # Rows not touched keep their commit time and seqno; rewritten ones get the new instant.
    instants = completed_times(path)
    assert instants[:-1] == old_instants
    assert (path / ".hoodie" / "hoodie.properties").read_bytes() == old_properties  # version and all kept
    before = {r["id"]: (r["_hoodie_commit_time"], r["_hoodie_commit_seqno"]) for r in current.to_pylist()}
    after = {r["id"]: (r["_hoodie_commit_time"], r["_hoodie_commit_seqno"]) for r in theirs.to_pylist()}
    assert {after[i][0] for i in (1, 3, 5)} == {instants[-1]}
    assert after[2] == before[2] and after[4] == before[4]
    # The old file versions are still on disk, and Hudi still travels back to them.
    assert old_files < {p.relative_to(path) for p in path.rglob("*.parquet")}
    assert summary(hudi_read(path, as_of=old_instants[-1])) == original
    check_reads(open_table(path), path)


def summary(table: pa.Table) -> dict[int, tuple]:
    return {r["id"]: (r["name"], r["longField"], r["intField"], r["_hoodie_partition_path"]) for r in table.to_pylist()}


@pytest.mark.parametrize("name", ["v6_timebasedkeygen_nonhivestyle", "v6_simplekeygen_hivestyle_no_metafields"])
@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert", "delete"])
def test_unsupported_hudi_tables_are_refused_untouched(hudi_table, name: str, operation: str) -> None:
    path = hudi_table(name)
    before = tree_digest(path)
    table = open_table(path)
    batch = table.read().drop_columns([c for c in META if c in table.read().column_names])
    with pytest.raises(UnsupportedTableError):
        getattr(table, operation)(batch)
    assert tree_digest(path) == before
