"""Reads: snapshot columns, time travel, incremental windows, filters, pruning, evolved schemas.

Every expected result is written out here or computed from a plain-Python model of the writes,
never by reading through upsertlake a second way.
"""

from __future__ import annotations

import operator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from upsertlake import create_table, open_table
from upsertlake.errors import InstantTimeError
from upsertlake.timeline.instant_time import parse_instant_time

from helpers import record_bytes, rows

META = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
]
DATA = ["id", "ts", "p", "v", "name", "score"]
SCHEMA = pa.schema(
    [("id", pa.string()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.int64()), ("name", pa.string()),
     ("score", pa.float64())]
)
SMALL = {"hoodie.parquet.max.file.size": 4000, "hoodie.parquet.small.file.limit": 0,
         "hoodie.copyonwrite.record.size.estimate": 400, "hoodie.index.bloom.num_entries": 100}


def record(i: int, ts: int) -> dict:
    return {"id": f"id-{i:03d}", "ts": ts, "p": f"p{i % 3}", "v": i * 10 + ts, "name": f"n{(i * 7) % 11}",
            "score": round(i * 1.5 - ts, 2)}


def to_table(records: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(records, schema=SCHEMA)


class Model:
    """What the table must hold after each commit: id -> row with its `_hoodie_commit_time`."""

    def __init__(self) -> None:
        self.state: dict[str, dict] = {}
        self.history: list[tuple[str, dict[str, dict]]] = []  # (instant, state after it)

    def write(self, instant: str, upserts: list[dict] = (), deletes: list[str] = ()) -> None:
        for r in upserts:
            self.state[r["id"]] = {**r, "_hoodie_commit_time": instant}
        for key in deletes:
            self.state.pop(key, None)
        self.history.append((instant, dict(self.state)))

    def at(self, instant: str) -> list[dict]:
        """The snapshot as of `instant`: the state after the last commit <= it."""
        state: dict[str, dict] = {}
        for time, s in self.history:
            if time <= instant:
                state = s
        return sorted(state.values(), key=lambda r: r["id"])


@pytest.fixture
def history(tmp_path: Path):
    """A table written by five commits (inserts, updates, deletes over 3 partitions) and its model."""
    path = tmp_path / "t"
    create_table(path, "t", "id", "ts", "p")
    table = open_table(path, SMALL)
    model = Model()

    def upsert(recs: list[dict], op: str = "upsert") -> None:
        result = getattr(table, op)(to_table(recs))
        model.write(result.instant_time, upserts=recs)

    upsert([record(i, 1) for i in range(30)])
    upsert([record(i, 2) for i in range(0, 40, 4)])  # updates and new keys
    upsert([record(i, 3) for i in range(40, 50)], op="insert")
    gone = [f"id-{i:03d}" for i in range(1, 45, 5)]
    model.write(
        table.delete(pa.table({"id": gone, "p": [f"p{int(g[3:]) % 3}" for g in gone]})).instant_time, deletes=gone
    )
    upsert([record(i, 5) for i in (2, 3, 41, 60)])
    return table, model


def data_rows(table: pa.Table) -> list[dict]:
    return rows(table, ["_hoodie_commit_time", *DATA], "id")


def expected_rows(model_rows: list[dict]) -> list[dict]:
    return [{c: r[c] for c in ["_hoodie_commit_time", *DATA]} for r in model_rows]


# --- columns -------------------------------------------------------------------------------------
def test_snapshot_columns_are_meta_then_data_in_schema_order(history) -> None:
    table, model = history
    snap = table.read()
    assert snap.column_names == META + DATA
    assert snap.schema.field("v").type == pa.int64() and snap.schema.field("score").type == pa.float64()
    assert data_rows(snap) == expected_rows(model.at("99999999999999999"))
    # A later batch with its columns in another order changes nothing.
    table.upsert(to_table([record(70, 6)]).select(["score", "name", "v", "p", "ts", "id"]))
    assert table.read().column_names == META + DATA
    picked = table.read(columns=["score", "_hoodie_record_key", "id"])
    assert picked.column_names == ["score", "_hoodie_record_key", "id"]
    assert picked.num_rows == len(model.state) + 1
    assert pc.all(pc.equal(picked.column("_hoodie_record_key"), picked.column("id"))).as_py()
    # Filtering on a column that is not returned.
    only = table.read(columns=["id"], filters=[("p", "=", "p2"), ("ts", ">=", 5)])
    assert only.column_names == ["id"]
    assert sorted(only.column("id").to_pylist()) == ["id-002", "id-041"]


# --- time travel ---------------------------------------------------------------------------------
def test_time_travel_to_every_instant(history) -> None:
    table, model = history
    instants = [t for t, _ in model.history]
    assert [i.time for i in table.timeline() if i.state.value == "completed"] == instants
    for time in instants:
        expected = expected_rows(model.at(time))
        assert data_rows(table.read(as_of=time)) == expected, time
        when = parse_instant_time(time)
        assert data_rows(table.read(as_of=when)) == expected  # aware UTC datetime
        assert data_rows(table.read(as_of=when.replace(tzinfo=None))) == expected  # naive = UTC
        tz = timezone(timedelta(hours=5, minutes=30))
        assert data_rows(table.read(as_of=when.astimezone(tz))) == expected
        # A 14-digit time names its whole second: every commit started within it is in.
        assert data_rows(table.read(as_of=time[:14])) == expected_rows(model.at(time[:14] + "999"))
    # Between two commits: the earlier one.
    first, second = instants[0], instants[1]
    if int(second) - int(first) > 1:
        assert data_rows(table.read(as_of=str(int(first) + 1))) == expected_rows(model.at(first))


def test_time_travel_before_the_first_commit_names_the_first_instant(history) -> None:
    """Nothing was there to read: an empty answer would look like an empty table."""
    table, model = history
    first = model.history[0][0]
    for before in ("20000101000000000", "20000101000000", datetime(2000, 1, 1, tzinfo=timezone.utc)):
        with pytest.raises(InstantTimeError, match=f"before the table's first instant, {first}"):
            table.read(as_of=before)


# --- incremental ---------------------------------------------------------------------------------
def test_incremental_windows_return_the_latest_state_of_records_written_in_them(history) -> None:
    table, model = history
    instants = [t for t, _ in model.history]
    starts = ["00000000000000000", *instants]
    for i, begin in enumerate(starts):
        for end in [*instants[i:], None]:
            last = end or instants[-1]
            expected = [r for r in model.at(last) if begin < r["_hoodie_commit_time"] <= last]
            got = table.read_incremental(begin, end)
            assert got.column_names == META + DATA
            assert data_rows(got) == expected_rows(expected), (begin, end)
    # (t, t] is empty; datetimes and 14-digit times name the same windows.
    assert table.read_incremental(instants[2], instants[2]).num_rows == 0
    begin, end = instants[0], instants[2]
    expected = expected_rows([r for r in model.at(end) if begin < r["_hoodie_commit_time"] <= end])
    assert data_rows(table.read_incremental(parse_instant_time(begin), parse_instant_time(end))) == expected
    narrowed = table.read_incremental(begin, end, columns=["id", "_hoodie_commit_time"])
    assert narrowed.column_names == ["id", "_hoodie_commit_time"]
    assert sorted(narrowed.column("id").to_pylist()) == [r["id"] for r in expected]


# --- filters -------------------------------------------------------------------------------------
_PY_OPS = {
    "=": operator.eq, "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}
FILTERS = [
    [("p", "=", "p1")],
    [("p", "==", "p1"), ("ts", ">", 1)],
    [("p", "!=", "p0")],
    [("p", "in", ["p0", "p2"])],
    [("p", "not in", ["p0", "p2"])],
    [("p", "in", ["nope"])],
    [("p", "<", "p1")],
    [("p", ">=", "p1"), ("v", "<=", 200)],
    [("v", "<", 100)],
    [("v", ">=", 300)],
    [("score", ">", 10.5)],
    [("name", "in", ["n1", "n2", "n3"])],
    [("name", "not in", ["n1", "n2", "n3"]), ("p", "!=", "p2")],
    [("id", "=", "id-012")],
    [("id", ">=", "id-040")],
    [("id", "<", "id-010"), ("p", "=", "p0")],
    [("id", "in", ["id-002", "id-041", "id-999"])],
    [("ts", "=", 5), ("id", "<=", "id-041")],
    [],
]


@pytest.mark.parametrize("filters", FILTERS, ids=[str(f) for f in FILTERS])
def test_tuple_filters_return_exactly_the_matching_rows(history, filters) -> None:
    table, model = history
    expected = [r for r in model.at("99999999999999999") if all(_PY_OPS[op](r[c], v) for c, op, v in filters)]
    assert data_rows(table.read(filters=filters)) == expected_rows(expected)
    as_of = model.history[1][0]
    expected = [r for r in model.at(as_of) if all(_PY_OPS[op](r[c], v) for c, op, v in filters)]
    assert data_rows(table.read(filters=filters, as_of=as_of)) == expected_rows(expected)


def test_expression_filters_return_exactly_the_matching_rows(history) -> None:
    table, model = history
    current = model.at("99999999999999999")
    cases = [
        (pc.field("p") == "p2", lambda r: r["p"] == "p2"),
        ((pc.field("v") > 100) & (pc.field("name") != "n3"), lambda r: r["v"] > 100 and r["name"] != "n3"),
        ((pc.field("p") == "p0") | (pc.field("ts") == 5), lambda r: r["p"] == "p0" or r["ts"] == 5),
        (pc.field("id").isin(["id-003", "id-040"]), lambda r: r["id"] in ("id-003", "id-040")),
        (~pc.field("p").isin(["p1"]) & (pc.field("score") <= 3.0), lambda r: r["p"] != "p1" and r["score"] <= 3.0),
        (
            pc.field("_hoodie_commit_time") == model.history[2][0],
            lambda r: r["_hoodie_commit_time"] == model.history[2][0],
        ),
    ]
    for expression, holds in cases:
        assert data_rows(table.read(filters=expression)) == expected_rows([r for r in current if holds(r)]), expression
        assert table.read(columns=["id"], filters=expression).column_names == ["id"]


# --- pruning -------------------------------------------------------------------------------------
def _files(path: Path, partition: str | None = None) -> list[Path]:
    root = path / partition if partition else path
    return [f for f in root.rglob("*.parquet") if ".hoodie" not in f.parts]


def _corrupt_data_pages(f: Path) -> None:
    """Zero the column chunks, keeping the footer (key range, bloom filter) readable."""
    data = bytearray(f.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    data[4 : len(data) - 8 - footer_len] = bytes(len(data) - 12 - footer_len)
    f.write_bytes(bytes(data))
    pq.ParquetFile(f).metadata  # noqa: B018 - the footer still reads
    with pytest.raises(Exception):  # noqa: B017 - whatever pyarrow raises for garbage pages
        pq.read_table(f)


def test_partition_filters_do_not_open_other_partitions(history) -> None:
    table, model = history
    path = Path(table.path)
    current = model.at("99999999999999999")
    for f in _files(path, "p2"):  # every version of every file group of p2
        f.write_bytes(b"PAR1 not a parquet file at all PAR1")
    with pytest.raises(Exception):  # noqa: B017
        table.read()
    for filters, holds in [
        ([("p", "=", "p0")], lambda r: r["p"] == "p0"),
        ([("p", "!=", "p2")], lambda r: r["p"] != "p2"),
        ([("p", "in", ["p0", "p1"]), ("v", ">", 50)], lambda r: r["p"] in ("p0", "p1") and r["v"] > 50),
        ([("p", "not in", ["p2"])], lambda r: r["p"] != "p2"),
        ([("p", "<", "p2")], lambda r: r["p"] < "p2"),
    ]:
        assert data_rows(table.read(filters=filters)) == expected_rows([r for r in current if holds(r)]), filters
        as_of = model.history[1][0]
        expected = [r for r in model.at(as_of) if holds(r)]
        assert data_rows(table.read(filters=filters, as_of=as_of)) == expected_rows(expected)


@pytest.mark.parametrize("hive_style", [False, True])
def test_partition_pruning_compares_typed_values(tmp_path: Path, hive_style: bool) -> None:
    """An int partition column: `bucket < 10` must not compare the path text ("10" < "9")."""
    path = tmp_path / "t"
    create_table(path, "t", "id", "ts", "bucket", hive_style_partitioning=hive_style)
    table = open_table(path, SMALL)
    buckets = [1, 2, 9, 10, 11, None]
    table.upsert(pa.table({"id": [f"k{b}" for b in buckets], "ts": [1] * 6, "bucket": pa.array(buckets, pa.int32())}))
    for name in ("11", "__HIVE_DEFAULT_PARTITION__"):  # a null int is only ever null: pruned too
        for f in _files(path, (f"bucket={name}" if hive_style else name)):
            f.write_bytes(b"garbage")
    got = table.read(filters=[("bucket", "<", 11)])
    assert sorted(got.column("bucket").to_pylist()) == [1, 2, 9, 10]
    assert sorted(table.read(filters=[("bucket", "in", [2, 10])]).column("id").to_pylist()) == ["k10", "k2"]
    assert table.read(filters=[("bucket", "=", 9)]).column("id").to_pylist() == ["k9"]
    with pytest.raises(Exception):  # noqa: B017
        table.read(filters=[("bucket", ">", 9)])


def test_the_default_partition_holds_nulls_and_empty_strings(tmp_path: Path) -> None:
    path = tmp_path / "t"
    create_table(path, "t", "id", "ts", "p")
    table = open_table(path, SMALL)
    table.upsert(pa.table({"id": ["a", "b", "c"], "ts": [1, 1, 1], "p": ["", None, "x"]}))
    assert sorted(table.read(columns=["_hoodie_partition_path"]).column(0).to_pylist()) == [
        "__HIVE_DEFAULT_PARTITION__", "__HIVE_DEFAULT_PARTITION__", "x"
    ]
    ids = lambda filters: sorted(table.read(columns=["id"], filters=filters).column("id").to_pylist())  # noqa: E731
    assert ids([("p", "=", "")]) == ["a"]
    assert ids([("p", "in", ["", "x"])]) == ["a", "c"]
    assert ids([("p", "<", "b")]) == ["a"]
    assert ids([("p", "!=", "x")]) == ["a"]
    assert ids([("p", "=", "x")]) == ["c"]
    assert ids(pc.field("p").is_null()) == ["b"]


def test_key_range_filters_do_not_read_files_outside_the_range(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ids = [f"key-{i:04d}" for i in range(200)]  # ordered keys: 10 files of 20 consecutive keys
    data = pa.table({"id": ids, "ts": [1] * 200, "p": ["a"] * 200, "v": list(range(200))})
    per_record = record_bytes(create_table(tmp_path / "probe", "t", "id", "ts", "p"), data)
    create_table(path, "t", "id", "ts", "p")
    table = open_table(path, {**SMALL, "hoodie.parquet.max.file.size": int(20.5 * per_record)})
    table.bulk_insert(data)
    files = _files(path)
    assert len(files) == 10
    ranges = {f: pq.read_metadata(f).metadata for f in files}
    keep = next(f for f, m in ranges.items() if m[b"hoodie_min_record_key"] == b"key-0100")
    for f in files:
        if f != keep:
            _corrupt_data_pages(f)
    with pytest.raises(Exception):  # noqa: B017
        table.read()
    assert table.read(filters=[("id", "=", "key-0107")]).column("v").to_pylist() == [107]
    got = table.read(filters=[("id", ">=", "key-0100"), ("id", "<=", "key-0119")])
    assert sorted(got.column("v").to_pylist()) == list(range(100, 120))
    got = table.read(filters=[("id", "in", ["key-0105", "key-0111", "zzz"]), ("p", "=", "a")])
    assert sorted(got.column("v").to_pylist()) == [105, 111]
    assert table.read(filters=[("id", "=", "key-0100x")]).num_rows == 0


def test_key_range_pruning_with_a_complex_key_generator(tmp_path: Path) -> None:
    """Record keys read `id:<value>` under ComplexKeyGenerator (at version 9, as Hudi 1.1 spells a
    single key field): a filter on `id` must still match."""
    path = tmp_path / "t"
    create_table(path, "t", "id", "ts", ["p", "q"], options={"hoodie.write.table.version": 9})
    table = open_table(path, SMALL)
    table.upsert(pa.table({"id": ["a", "b", "c"], "ts": [1, 1, 1], "p": ["x", "x", "y"], "q": ["1", "1", "2"]}))
    assert sorted(table.read(columns=["_hoodie_record_key"]).column(0).to_pylist()) == ["id:a", "id:b", "id:c"]
    assert table.read(filters=[("id", "=", "b")]).column("id").to_pylist() == ["b"]
    assert sorted(table.read(filters=[("id", ">=", "b")]).column("id").to_pylist()) == ["b", "c"]
    assert table.read(filters=[("id", "in", ["c", "z"])]).column("id").to_pylist() == ["c"]


# --- evolved schemas -----------------------------------------------------------------------------
def test_a_file_written_before_a_column_was_added_reads_nulls(tmp_path: Path) -> None:
    path = tmp_path / "t"
    create_table(path, "t", "id", "ts", "p")
    table = open_table(path, SMALL)
    first = table.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1], "p": ["old", "old"], "v": [1, 2]})).instant_time
    table.upsert(pa.table({"id": ["c"], "ts": [2], "p": ["new"], "v": [3], "note": ["hello"]}))
    old_file = _files(path, "old")
    assert len(old_file) == 1 and "note" not in pq.read_schema(old_file[0]).names  # not rewritten
    snap = table.read()
    assert snap.column_names == [*META, "id", "ts", "p", "v", "note"]
    assert snap.schema.field("note").type == pa.string()
    assert rows(snap, ["id", "v", "note"], "id") == [
        {"id": "a", "v": 1, "note": None}, {"id": "b", "v": 2, "note": None}, {"id": "c", "v": 3, "note": "hello"}
    ]
    assert rows(table.read(columns=["note", "id"], filters=[("p", "=", "old")]), ["id", "note"], "id") == [
        {"id": "a", "note": None}, {"id": "b", "note": None}
    ]
    assert table.read(filters=[("note", "=", "hello")]).column("id").to_pylist() == ["c"]
    assert table.read(filters=pc.field("note").is_null()).column("id").to_pylist() == ["a", "b"]
    # As of the first commit the column did not exist yet.
    assert table.read(as_of=first).column_names == [*META, "id", "ts", "p", "v"]
    assert rows(table.read_incremental("00000000000000000"), ["id", "note"], "id")[0] == {"id": "a", "note": None}


def test_int_widened_to_long_reads_every_file_as_long(tmp_path: Path) -> None:
    path = tmp_path / "t"
    create_table(path, "t", "id", "ts", "p")
    table = open_table(path, SMALL)
    table.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1], "p": ["old", "old"], "v": pa.array([1, -2], pa.int32())}))
    assert table.schema().field("v").type == pa.int32()
    big = 2**40
    table.upsert(pa.table({"id": ["c"], "ts": [2], "p": ["new"], "v": pa.array([big], pa.int64())}))
    assert pq.read_schema(_files(path, "old")[0]).field("v").type == pa.int32()  # not rewritten
    snap = table.read()
    assert table.schema().field("v").type == pa.int64()
    assert snap.schema.field("v").type == pa.int64()
    assert rows(snap, ["id", "v"], "id") == [{"id": "a", "v": 1}, {"id": "b", "v": -2}, {"id": "c", "v": big}]
    assert table.read(filters=[("v", ">", 2**31)]).column("id").to_pylist() == ["c"]
    assert table.read(filters=[("v", "<", 0)], columns=["v"]).column("v").to_pylist() == [-2]
    # An int32 batch after the widening is taken as long, and updates the old file in place.
    table.upsert(pa.table({"id": ["a"], "ts": [3], "p": ["old"], "v": pa.array([7], pa.int32())}))
    assert rows(table.read(), ["id", "v"], "id") == [{"id": "a", "v": 7}, {"id": "b", "v": -2}, {"id": "c", "v": big}]
