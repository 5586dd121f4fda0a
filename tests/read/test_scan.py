"""Table.scan: one planned read handed to pyarrow (a Table, a stream of batches in bounded memory,
the Arrow PyCapsule stream), DuckDB, Polars and pandas; its count and its planned file slices;
named errors for bad columns, badly typed filters and files that vanish before they are read.

Expected rows come from a plain-Python model of the writes, never from reading a second way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from upsertlake import FilterError, MissingFileError, SchemaError, create_table, open_table

SMALL = {"hoodie.parquet.max.file.size": 4000, "hoodie.parquet.small.file.limit": 0,
         "hoodie.copyonwrite.record.size.estimate": 400, "hoodie.index.bloom.num_entries": 100}
MOR = {**SMALL, "hoodie.table.type": "MERGE_ON_READ"}


def batch(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": [f"k{i:03d}" for i in ids], "ts": [ts] * len(ids), "p": [f"p{i % 3}" for i in ids],
                     "v": [i * 10 + ts for i in ids]})


def model(writes: list[tuple[list[int], int]], deletes: list[int] = ()) -> dict[str, dict]:
    state: dict[str, dict] = {}
    for ids, ts in writes:
        for r in batch(ids, ts).to_pylist():
            state[r["id"]] = r
    for i in deletes:
        state.pop(f"k{i:03d}", None)
    return state


def data(table: pa.Table) -> list[dict]:
    return sorted(table.select(["id", "ts", "p", "v"]).to_pylist(), key=lambda r: r["id"])


WRITES = [(list(range(60)), 1), (list(range(0, 80, 3)), 2), (list(range(100, 110)), 3)]
DELETES = [5, 7, 100]


@pytest.fixture(params=["cow", "mor"])
def table(tmp_path: Path, request):
    """A table of several files per partition (copy-on-write, or merge-on-read with log files)."""
    create_table(tmp_path / "t", "t", "id", "ts", "p", options=MOR if request.param == "mor" else None)
    t = open_table(tmp_path / "t", SMALL)
    for ids, ts in WRITES:
        t.upsert(batch(ids, ts))
    t.delete(pa.table({"id": [f"k{i:03d}" for i in DELETES], "p": [f"p{i % 3}" for i in DELETES]}))
    return t


EXPECTED = sorted(model(WRITES, DELETES).values(), key=lambda r: r["id"])


def test_to_batches_streams_every_row_one_unit_at_a_time(table) -> None:
    scan = table.scan()
    assert len(scan.plan.files) + len(scan.plan.slices) > 3
    if table.table_config.is_merge_on_read:
        assert scan.plan.slices  # the updates and deletes are in log files
    reader = scan.to_batches()
    assert isinstance(reader, pa.RecordBatchReader) and reader.schema == scan.schema
    batches = list(reader)
    assert len(batches) >= len(scan.plan.files) + len(scan.plan.slices)  # no unit's rows merged with another's
    assert data(pa.Table.from_batches(batches, scan.schema)) == EXPECTED
    assert data(scan.to_arrow()) == EXPECTED == data(table.read())
    assert scan.to_arrow().column_names == table.read().column_names
    assert sorted(scan.to_pandas()["id"]) == [r["id"] for r in EXPECTED]


def test_columns_and_filters_narrow_every_form(table) -> None:
    scan = table.scan(columns=["v", "id"], filters=[("p", "!=", "p1"), ("v", ">=", 100)])
    expected = sorted(
        ({"v": r["v"], "id": r["id"]} for r in EXPECTED if r["p"] != "p1" and r["v"] >= 100), key=lambda r: r["id"]
    )
    assert expected and len(expected) < len(EXPECTED)
    assert scan.schema.names == ["v", "id"]
    assert sorted(scan.to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    assert sorted(pa.Table.from_batches(scan.to_batches()).to_pylist(), key=lambda r: r["id"]) == expected
    assert scan.count() == len(expected)
    expression = table.scan(columns=["id"], filters=(pc.field("v") < 50) | (pc.field("id") == "k105"))
    wanted = [r["id"] for r in EXPECTED if r["v"] < 50 or r["id"] == "k105"]
    assert sorted(expression.to_arrow()["id"].to_pylist()) == wanted


def test_the_arrow_stream_is_read_by_pyarrow_duckdb_and_polars(table) -> None:
    import duckdb  # no dependency of ours: the test extra brings it
    import polars as pl

    scan = table.scan(columns=["id", "v"], filters=[("p", "=", "p2")])
    expected = sorted((r["id"], r["v"]) for r in EXPECTED if r["p"] == "p2")
    via_pyarrow = pa.RecordBatchReader.from_stream(scan).read_all()
    assert sorted(zip(via_pyarrow["id"].to_pylist(), via_pyarrow["v"].to_pylist())) == expected
    assert duckdb.sql("select id, v from scan order by id").fetchall() == expected
    frame = pl.DataFrame(scan)
    assert sorted(zip(frame["id"].to_list(), frame["v"].to_list())) == expected
    # Each consumer asks for a stream of its own: the scan is read again, whole, every time.
    assert duckdb.sql("select count(*) from scan").fetchall() == [(len(expected),)]


def test_to_duckdb_registers_a_view_each_query_reads_again(table) -> None:
    import duckdb  # no dependency of ours: the test extra brings it
    con = duckdb.connect()
    assert table.scan().to_duckdb("trips", con) is con
    assert con.sql("select count(*), sum(v) from trips").fetchall() == [(len(EXPECTED), sum(r["v"] for r in EXPECTED))]
    assert con.sql("select id from trips where v > 1000 order by id").fetchall() == [
        (r["id"],) for r in EXPECTED if r["v"] > 1000
    ]
    own = table.scan(columns=["id"]).to_duckdb("ids")
    assert own.sql("select min(id), max(id) from ids").fetchall() == [(EXPECTED[0]["id"], EXPECTED[-1]["id"])]


def test_to_polars_is_lazy_with_projection_filter_and_head(table) -> None:
    import polars as pl

    frame = table.scan().to_polars()
    assert isinstance(frame, pl.LazyFrame)
    picked = frame.filter(pl.col("v") > 500).select("id", "v").collect()
    assert picked.columns == ["id", "v"]
    assert sorted(zip(picked["id"].to_list(), picked["v"].to_list())) == sorted(
        (r["id"], r["v"]) for r in EXPECTED if r["v"] > 500
    )
    assert frame.head(7).collect().height == 7
    assert frame.select(pl.len()).collect().item() == len(EXPECTED)


def test_count_takes_rows_from_the_write_stats_without_opening_a_file(tmp_path: Path) -> None:
    create_table(tmp_path / "t", "t", "id", "ts", "p")
    table = open_table(tmp_path / "t", SMALL)
    for ids, ts in WRITES:
        table.upsert(batch(ids, ts))
    live = model(WRITES)
    scan = table.scan()
    assert scan.count() == len(live)
    for f in scan.plan.files:  # same size, no parquet left: only the write stats can tell the rows
        p = Path(table.storage.full_path(f.path))
        p.write_bytes(b"\0" * p.stat().st_size)
    assert table.scan().count() == len(live)
    assert sum(f.rows for f in table.scan().plan_files()) == len(live)
    # Filters every row of a file passes (by its recorded statistics) need no data either.
    for filters, holds in ([("p", "=", "p1")], lambda r: r["p"] == "p1"), ([("v", ">=", 0), ("p", "!=", "p0")],
                                                                          lambda r: r["p"] != "p0"):
        assert table.scan(filters=filters).count() == sum(holds(r) for r in live.values())
    with pytest.raises(pa.ArrowInvalid, match="magic bytes"):  # a filter that splits files needs the data
        table.scan(filters=[("v", ">", 3)]).count()


def test_count_with_filters_and_merges(table) -> None:
    assert table.scan().count() == len(EXPECTED)
    assert table.scan(filters=[("p", "=", "p0")]).count() == sum(r["p"] == "p0" for r in EXPECTED)
    assert table.scan(filters=pc.field("ts") == 2).count() == sum(r["ts"] == 2 for r in EXPECTED)
    assert table.scan(query_type="read_optimized").count() == table.read(query_type="read_optimized").num_rows


def test_plan_files_lists_the_pruned_slices_with_bytes_and_rows(table) -> None:
    everything = table.scan().plan_files()
    on_disk = {str(p) for p in Path(table.path).rglob("*") if p.is_file() and ".hoodie" not in p.parts}
    assert {f.base_file for f in everything if f.base_file} <= on_disk
    assert {log for f in everything for log in f.log_files} <= on_disk
    for f in everything:
        assert f.bytes == sum(Path(x).stat().st_size for x in (f.base_file, *f.log_files) if x)
        if not f.log_files:
            assert f.rows == pq.read_metadata(f.base_file).num_rows
        assert f.partition_path in str(f) and f.file_id in str(f)
    p2 = table.scan(filters=[("p", "=", "p2")]).plan_files()
    assert p2 and {f.partition_path for f in p2} == {"p2"}
    assert sorted(p2, key=str) == sorted((f for f in everything if f.partition_path == "p2"), key=str)
    if table.table_config.is_merge_on_read:
        assert any(f.log_files and f.rows is None for f in everything)


def test_incremental_scans(table) -> None:
    times = [i.time for i in table.timeline() if i.is_completed]
    scan = table.scan(columns=["id", "_hoodie_commit_time"], begin=times[1])
    expected = sorted(r["id"] for r in EXPECTED if r["ts"] == 3)  # the 3rd commit's; the delete writes no row
    got = pa.Table.from_batches(scan.to_batches(), scan.schema)
    assert sorted(got["id"].to_pylist()) == expected == sorted(table.read_incremental(times[1])["id"].to_pylist())
    assert all(t > times[1] for t in got["_hoodie_commit_time"].to_pylist())
    narrowed = table.scan(columns=["id"], begin=times[0], end=times[1], filters=[("p", "=", "p0")])
    assert sorted(narrowed.to_arrow()["id"].to_pylist()) == sorted(
        r["id"] for r in EXPECTED if r["ts"] == 2 and r["p"] == "p0"
    )
    assert narrowed.count() == narrowed.to_arrow().num_rows


def test_bad_columns_and_filters_are_named_before_any_row(table) -> None:
    with pytest.raises(SchemaError, match=r"unknown column\(s\) \['nope'\]"):
        table.scan(columns=["id", "nope"])
    with pytest.raises(SchemaError, match="filter on unknown column 'nope'"):
        table.scan(filters=[("nope", "=", 1)])
    with pytest.raises(SchemaError, match="names a column the table lacks"):
        table.scan(filters=pc.field("nope") == 1)
    with pytest.raises(FilterError, match=r"filter \('v', '>', 'ten'\) on a int64 column"):
        table.scan(filters=[("v", ">", "ten")])
    with pytest.raises(FilterError, match=r"filter \('p', 'in', \['p0', 3\]\) on a string column"):
        table.scan(filters=[("p", "in", ["p0", 3])])
    with pytest.raises(FilterError, match="cannot be compared"):
        table.scan(filters=pc.field("id") > 5)


def test_a_file_that_vanishes_before_or_while_streaming_is_named(tmp_path: Path) -> None:
    create_table(tmp_path / "t", "t", "id", "ts", "p")
    table = open_table(tmp_path / "t", SMALL)
    table.upsert(batch(list(range(90)), 1))
    scan = table.scan()
    assert len(scan.plan.files) >= 4
    first = scan.plan.files[0]
    (tmp_path / "t" / first.path).unlink()
    with pytest.raises(MissingFileError, match=f"{first.path}, written by instant {first.instant_time}"):
        scan.to_arrow()
    with pytest.raises(MissingFileError, match=first.path):
        scan.to_batches().read_all()
    create_table(tmp_path / "u", "u", "id", "ts", "p")
    other = open_table(tmp_path / "u", SMALL)
    other.upsert(batch(list(range(90)), 1))
    stream = other.scan()
    files = stream.plan.files
    reader = stream.to_batches()
    got = reader.read_next_batch()  # the first file is read; the last is not begun (2 in flight)
    (tmp_path / "u" / files[-1].path).unlink()
    with pytest.raises(MissingFileError, match=files[-1].path):
        for b in reader:
            got = b
    assert got.num_rows > 0


def test_to_batches_peak_memory_does_not_grow_with_the_table(tmp_path: Path) -> None:
    """400K rows in 28 files: to_arrow holds them all, to_batches one file or two (read ahead).
    Measured by pyarrow's memory pool in fresh processes, so a reader that materialised the
    table before streaming it would fail here."""
    import numpy as np

    n = 400_000
    ids = np.arange(n)
    rows = pa.table({
        "id": pc.binary_join_element_wise("k", pc.utf8_lpad(pc.cast(pa.array(ids), pa.string()), 8, "0"), ""),
        "ts": pa.array(np.ones(n, np.int64)),
        "p": pa.array([f"p{i}" for i in range(4)] * (n // 4)),
        "v": pa.array(ids.astype(np.float64)),
        "note": pc.binary_join_element_wise("note-", pc.cast(pa.array(ids % 977), pa.string()), ""),
    })
    path = tmp_path / "big"
    create_table(path, "t", "id", "ts", "p").bulk_insert(rows, {"hoodie.parquet.max.file.size": 150_000})
    assert len(open_table(path).scan().plan.files) >= 20
    code = """
import sys, pyarrow as pa, upsertlake
scan = upsertlake.open_table(sys.argv[1]).scan()
if sys.argv[2] == "arrow":
    n = scan.to_arrow().num_rows
else:
    n = sum(b.num_rows for b in scan.to_batches())
print(n, pa.default_memory_pool().max_memory())
"""
    peaks = {}
    for mode in ("arrow", "batches"):
        out = subprocess.run([sys.executable, "-c", code, str(path), mode], capture_output=True, text=True, check=True,
                             timeout=300).stdout.split()
        assert int(out[0]) == n
        peaks[mode] = int(out[1])
    assert peaks["arrow"] > 30_000_000  # the whole table decoded (the meta columns of a value per file as dictionaries)
    assert peaks["batches"] < peaks["arrow"] / 4, peaks
    # `upsertlake read` streams too: to a parquet file, and printed.
    cli = "import sys, pyarrow as pa; from upsertlake.cli import main; code = main(sys.argv[1:]); " \
          "print(pa.default_memory_pool().max_memory(), file=sys.stderr); sys.exit(code)"
    out = tmp_path / "out.parquet"
    run = subprocess.run([sys.executable, "-c", cli, "read", str(path), "--output", str(out)], capture_output=True,
                         text=True, check=True, timeout=300)
    assert run.stdout == f"{n} row(s) written to {out} (parquet)\n"
    assert pq.read_metadata(out).num_rows == n and int(run.stderr.split()[-1]) < peaks["arrow"] / 4
    run = subprocess.run([sys.executable, "-c", cli, "read", str(path), "--format", "csv", "--columns", "id", "v"],
                         capture_output=True, text=True, check=True, timeout=300)
    lines = run.stdout.splitlines()
    assert lines[0] == '"id","v"' and len(lines) == n + 1
    assert sorted(lines[1:])[:2] == ['"k00000000",0', '"k00000001",1']
    assert int(run.stderr.split()[-1]) < peaks["arrow"] / 4


def test_reading_imports_no_write_side(table) -> None:
    """A fresh process reading (a scan in every form, a merge-on-read table's slices merged)
    imports neither the write engine nor the table services, indexes, partitioner or locks."""
    code = """
import sys
import upsertlake
table = upsertlake.open_table(sys.argv[1])
scan = table.scan(filters=[("v", ">", 3)])
scan.to_arrow(), scan.to_batches().read_all(), scan.count(), table.read(), table.scan().count()
table.to_pyarrow_dataset(query_type="read_optimized").to_table()
loaded = sorted(m for m in sys.modules if m.split(".")[:2][-1] in
                ("engine", "services", "index", "partitioner", "concurrency") and m.startswith("upsertlake."))
print(loaded, "upsertlake.read.scan" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code, table.path], capture_output=True, text=True, check=True,
                         timeout=300)
    assert out.stdout.split("\n")[0] == "[] True", out.stdout + out.stderr


def test_an_s3_scan_streams_the_files_it_fetches_ahead(s3_server) -> None:
    """On an object store the stream fetches files ahead of their decoding (at most one GET each
    for files under 8 MB) and returns the same rows as to_arrow; a stream stopped early leaves no
    worker behind that fails or hangs."""
    import json
    import urllib.request

    uri = f"s3://{s3_server.new_bucket()}/t"
    create_table(uri, "t", "id", "ts", "p", storage_options=s3_server.options)
    table = open_table(uri, SMALL, storage_options=s3_server.options)
    for ids, ts in WRITES:
        table.upsert(batch(ids, ts))
    scan = table.scan()
    assert len(scan.plan.files) > 8

    def counted() -> dict[str, int]:
        with urllib.request.urlopen(f"{s3_server.endpoint}/__requests") as reply:
            return json.loads(reply.read())

    counted()
    streamed = pa.Table.from_batches(scan.to_batches(), scan.schema)
    got = counted()  # (files this process read whole lately come from its cache)
    assert set(got) <= {"GET"} and got.get("GET", 0) <= len(scan.plan.files), got
    assert data(streamed) == data(scan.to_arrow()) == sorted(model(WRITES).values(), key=lambda r: r["id"])
    reader = scan.to_batches()
    assert reader.read_next_batch().num_rows > 0
    reader.close()  # the prefetch and the decoding stop


DICTIONARY_META = ["_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name"]


def test_the_meta_columns_of_a_value_per_file_come_dictionary_encoded(table, tmp_path: Path) -> None:
    """Commit time, partition path and file name repeat one value (or a few) per file: every form
    of a scan returns them as dictionaries of strings (base files and merged slices alike, with
    and without a filter on them), pandas as plain strings; the values are those of the files."""
    dictionary = pa.dictionary(pa.int32(), pa.string())
    scan = table.scan()
    assert [scan.schema.field(c).type for c in DICTIONARY_META] == [dictionary] * 3
    assert scan.schema.field("_hoodie_record_key").type == pa.string()
    whole = scan.to_arrow()
    assert whole.schema == scan.schema and pa.Table.from_batches(list(scan.to_batches())).schema == scan.schema
    newest = max(whole["_hoodie_commit_time"].to_pylist())
    recent = table.scan(filters=[("_hoodie_commit_time", ">=", newest)]).to_arrow()
    assert recent.schema == scan.schema and set(recent["_hoodie_commit_time"].to_pylist()) == {newest}
    assert recent.num_rows == sum(1 for t in whole["_hoodie_commit_time"].to_pylist() if t == newest) > 0
    groups = {u.file_id for u in [*scan.plan.files, *scan.plan.slices]}  # a base file's name, or a log record's group
    for row in whole.select(["_hoodie_partition_path", "_hoodie_file_name", "p"]).to_pylist():
        assert row["_hoodie_partition_path"] == row["p"] and row["_hoodie_file_name"].split("_")[0] in groups
    frame = scan.to_pandas()
    assert frame["_hoodie_commit_time"].dtype == object and sorted(frame["_hoodie_commit_time"]) == sorted(
        whole["_hoodie_commit_time"].to_pylist())
    assert data(whole) == EXPECTED


def test_meta_columns_pyarrow_cannot_decode_as_dictionaries_read_all_the_same(tmp_path: Path) -> None:
    """A base file whose commit time pages are delta-encoded (another writer's choice) cannot be
    decoded into a dictionary by pyarrow: it is decoded plain, then dictionary-encoded."""
    t = create_table(tmp_path / "t", "t", "id", "ts", "p")
    t.upsert(batch(list(range(20)), 1))
    [bf] = [f for f in t.scan().plan.files if f.partition_path == "p0"]
    path = tmp_path / "t" / bf.path
    pf = pq.ParquetFile(path)
    rows = pf.read()
    footer = {k: v for k, v in pf.metadata.metadata.items()}
    with pq.ParquetWriter(path, rows.schema, use_dictionary=False, store_schema=False,
                          column_encoding={"_hoodie_commit_time": "DELTA_BYTE_ARRAY"}) as w:
        w.write_table(rows)
        w.add_key_value_metadata(footer)
    assert "DELTA_BYTE_ARRAY" in pq.ParquetFile(path).metadata.row_group(0).column(0).encodings
    read = open_table(tmp_path / "t").read(filters=[("p", "=", "p0")])
    assert read.schema.field("_hoodie_commit_time").type == pa.dictionary(pa.int32(), pa.string())
    assert read["_hoodie_commit_time"].to_pylist() == rows["_hoodie_commit_time"].to_pylist()
    written = sorted(batch(list(range(20)), 1).to_pylist(), key=lambda r: r["id"])
    assert data(read) == [r for r in written if r["p"] == "p0"]
