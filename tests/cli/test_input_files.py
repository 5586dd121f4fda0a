"""Input files named on the command line and ingested files are read with the table's types: a
string column stays text exactly as written, and `ingest` sees a source file again when it
changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake import open_table

from helpers import REPO, cli_in_process

STRINGS = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("zip", pa.string())])


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "upsertlake.cli", *map(str, args)], capture_output=True, text=True, env=env, timeout=600
    )


def ok(*args: str | Path) -> str:
    p = cli(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def rows(path: Path) -> dict[str, tuple]:
    t = open_table(path).read(columns=["_hoodie_record_key", "id", "ts", "v", "zip"])
    return {r["_hoodie_record_key"]: (r["id"], r["ts"], r["v"], r["zip"]) for r in t.to_pylist()}


def string_keyed_table(tmp_path: Path) -> Path:
    """A table whose string keys are "001", "002" and "1", with a string zip code column."""
    path, first = tmp_path / "t", tmp_path / "first.parquet"
    pq.write_table(
        pa.table({"id": ["001", "002", "1"], "ts": [1, 1, 1], "v": ["a", "b", "c"], "zip": ["10001", "10002", "10003"]},
                 schema=STRINGS),
        first,
    )
    ok("create", path, "--name", "t", "--record-key", "id", "--precombine-field", "ts")
    ok("insert", path, first)
    return path


EXPECTED = {
    "001": ("001", 2, "2024-05-01 12:00:00", "00501"),
    "002": ("002", 3, "2024-05-02", "02134"),
    "1": ("1", 1, "c", "10003"),
    "003": ("003", 1, "2024-05-03T00:00:00", "00999"),
}


@pytest.mark.parametrize("suffix", ["csv", "ndjson"])
def test_text_inputs_keep_leading_zeros(tmp_path: Path, suffix: str) -> None:
    """`001,2,...` updates key "001", not "1"; a new "003" is stored as "003"; a quoted "002" stays
    "002"; a zip code "00501" and a date-like text in string columns are taken as written."""
    path = string_keyed_table(tmp_path)
    changes = tmp_path / f"b.{suffix}"
    if suffix == "csv":
        changes.write_text(
            'id,ts,v,zip\n001,2,2024-05-01 12:00:00,00501\n"002",3,2024-05-02,"02134"\n'
            "003,1,2024-05-03T00:00:00,00999\n"
        )
    else:
        changes.write_text("".join(
            json.dumps({"id": i, "ts": ts, "v": v, "zip": z}) + "\n"
            for i, ts, v, z in [("001", 2, "2024-05-01 12:00:00", "00501"), ("002", 3, "2024-05-02", "02134"),
                                ("003", 1, "2024-05-03T00:00:00", "00999")]
        ))
    summary = json.loads(ok("upsert", path, changes, "--json"))
    assert (summary["inserts"], summary["updates"]) == (1, 2)
    assert rows(path) == EXPECTED
    assert open_table(path).schema() == STRINGS


def test_delete_and_explain_read_keys_as_text(tmp_path: Path) -> None:
    path = string_keyed_table(tmp_path)
    gone = tmp_path / "gone.csv"
    gone.write_text("id\n001\n")
    plan = json.loads(ok("explain", "delete", path, gone, "--json"))
    assert (plan["deletes"], plan["dropped_unknown_deletes"]) == (1, 0)
    ok("delete", path, gone)
    assert sorted(rows(path)) == ["002", "1"]


def test_new_table_reads_key_and_partition_fields_as_text(tmp_path: Path) -> None:
    """A table with no schema yet: the record key and partition fields are read as text (keys
    "001" and "1" are two records, the partition "01" is "01"); other columns are inferred."""
    path, first = tmp_path / "t", tmp_path / "first.csv"
    first.write_text("id,ts,month\n001,1,01\n1,1,02\n")
    ok("create", path, "--name", "t", "--record-key", "id", "--precombine-field", "ts", "--partition-fields", "month")
    summary = json.loads(ok("upsert", path, first, "--json"))
    assert summary["inserts"] == 2
    t = open_table(path)
    assert t.schema() == pa.schema([("id", pa.string()), ("ts", pa.int64()), ("month", pa.string())])
    got = t.read(columns=["_hoodie_record_key", "_hoodie_partition_path", "id", "month"]).to_pylist()
    assert sorted(tuple(r.values()) for r in got) == [("001", "01", "001", "01"), ("1", "02", "1", "02")]


def test_a_json_number_for_a_string_column_is_refused_by_name(tmp_path: Path) -> None:
    path = string_keyed_table(tmp_path)
    changes = tmp_path / "b.ndjson"
    changes.write_text('{"id": "001", "ts": 2, "v": "A", "zip": 501}\n')
    p = cli("upsert", path, changes)
    assert p.returncode == 2 and f"cannot read {changes} as ndjson" in p.stderr
    assert rows(path)["001"] == ("001", 1, "a", "10001")


def ingest(capsys, source: Path, table: Path, fmt: str) -> dict:
    """An `ingest` run in this process, on the test session's Spark (the command line in a process
    of its own is tested once, in test_spark.py)."""
    code, out, err = cli_in_process(capsys, "ingest", "--source", source, "--format", fmt, "--table", table,
                                    "--record-key", "id", "--precombine-field", "ts", "--json")
    assert code == 0, err[-3000:]
    return json.loads(out)


@pytest.mark.spark
def test_ingest_keeps_leading_zeros(spark, capsys, tmp_path: Path) -> None:
    """`ingest` reads CSV and JSON with the table's types, as the write commands do."""
    table, source = string_keyed_table(tmp_path), tmp_path / "in"
    source.mkdir()
    (source / "b.csv").write_text('id,ts,v,zip\n001,2,2024-05-01 12:00:00,00501\n"002",3,2024-05-02,"02134"\n')
    first = ingest(capsys, source, table, "csv")
    assert (first["inserts"], first["updates"]) == (0, 2)
    (source / "c.json").write_text(
        json.dumps({"id": "003", "ts": 1, "v": "2024-05-03T00:00:00", "zip": "00999"}) + "\n"
    )
    assert ingest(capsys, source, table, "json")["inserts"] == 1
    assert rows(table) == EXPECTED
    assert open_table(table).schema() == STRINGS


def commit_with(table_path: Path, extra: dict[str, str]) -> str:
    """An upsert committed in process with this extraMetadata (as an ingest run records it)."""
    client = open_table(table_path).write_client()
    instant = client.start_commit("upsert")
    result = client.upsert(pa.table({"id": ["x"], "ts": [1], "v": ["x"], "zip": ["x"]}, schema=STRINGS), instant)
    client.commit(instant, result, extra)
    return instant


def test_path_only_checkpoints_of_earlier_versions_still_count(tmp_path: Path) -> None:
    """A commit of an earlier version recorded bare paths: such a file counts as ingested unless it
    was modified after that commit's instant time; new checkpoints need path, size and mtime."""
    from upsertlake.cli.ingest_checkpoint import INGESTED_KEY, SourceFile, checkpoint
    from upsertlake.cli.input_files import find
    from upsertlake.timeline.instant_time import parse_instant_time

    def stat(p: Path) -> SourceFile:
        return SourceFile.of(*find(str(p)))

    path = string_keyed_table(tmp_path)
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    old.write_text("id\n1\n")
    new.write_text("id\n2\n")
    instant = commit_with(path, {INGESTED_KEY: json.dumps([str(old)])})
    at = parse_instant_time(instant).timestamp()
    os.utime(old, (at - 60, at - 60))
    commit_with(path, {INGESTED_KEY: json.dumps([stat(new).to_json()])})
    done = checkpoint(str(path))
    assert done.has(stat(old)) and done.has(stat(new))
    os.utime(old, (at + 60, at + 60))  # rewritten after the old commit read it
    new.write_text("id\n3\n")  # same size, so only the modification time tells
    os.utime(new, ns=(0, stat(new).mtime_ns + 1_000_000_000))
    assert not done.has(stat(old)) and not done.has(stat(new))
    assert done.seen_paths() == {str(old), str(new)}


@pytest.mark.spark
def test_ingest_reads_a_file_rewritten_in_place_again(spark, capsys, tmp_path: Path) -> None:
    """A source file rewritten in place with more rows (same path) is ingested again: its new rows
    appear, none doubles; an unchanged file is not read again."""
    table, source = tmp_path / "t", tmp_path / "in"
    source.mkdir()
    a, b = source / "a.csv", source / "b.csv"
    a.write_text("id,ts,v,zip\n001,1,a1,1\n002,1,a2,2\n")
    b.write_text("id,ts,v,zip\n101,1,b1,1\n")
    first = ingest(capsys, source, table, "csv")
    assert (first["input_files"], first["new_files"], first["inserts"]) == (2, 2, 3)
    mtime = a.stat().st_mtime_ns
    a.write_text("id,ts,v,zip\n001,1,a1,1\n002,1,a2,2\n003,1,a3,3\n004,1,a4,4\n")
    os.utime(a, ns=(mtime + 10**9, mtime + 10**9))  # a file system with coarse times must see it too
    second = ingest(capsys, source, table, "csv")
    got = open_table(table).read(columns=["id", "v"])
    assert sorted(zip(got["id"].to_pylist(), got["v"].to_pylist())) == [
        ("001", "a1"), ("002", "a2"), ("003", "a3"), ("004", "a4"), ("101", "b1"),
    ]
    assert (second["input_files"], second["new_files"], second["changed_files"]) == (2, 0, 1)
    assert (second["inserts"], second["updates"]) == (2, 2)  # b.csv not read again
    assert first["changed_files"] == 0
    third = ingest(capsys, source, table, "csv")
    assert (third["new_files"], third["changed_files"], third["instant_time"]) == (0, 0, None)
    assert [i.time for i in open_table(table).timeline()] == [first["instant_time"], second["instant_time"]]


@pytest.mark.spark
def test_ingest_refuses_malformed_csv_rows(spark, capsys, tmp_path: Path) -> None:
    """Spark's default would drop a row's extra field and fill a short row with nulls, silently;
    the write commands refuse such a file (pyarrow), and so does `ingest`, with the reason."""
    table, source = tmp_path / "t", tmp_path / "in"
    source.mkdir()
    (source / "a.csv").write_text("id,ts,v\n1,1,a\n2,1,b,extra\n3,1\n")
    code, _, err = cli_in_process(capsys, "ingest", "--source", source, "--format", "csv", "--table", table,
                                  "--record-key", "id")
    assert code == 2
    reason = "[MALFORMED_CSV_RECORD] Malformed CSV record: 2,1,b,extra"
    assert err.splitlines()[-1] == f"error: ingest of 1 file(s) failed: {reason}"
    assert not table.exists() or open_table(table).timeline() == []


def test_a_json_array_keeps_fields_its_first_object_lacks(tmp_path: Path) -> None:
    """A JSON array file is read as NDJSON is: every object's fields (Arrow's from_pylist kept the
    first object's only, so "v" and "zip" of the second record were silently dropped)."""
    path = string_keyed_table(tmp_path)
    changes = tmp_path / "b.json"
    second = {"id": "003", "ts": 1, "v": "2024-05-03T00:00:00", "zip": "00999"}
    changes.write_text(json.dumps([{"id": "001", "ts": 2}, second]))
    ok("upsert", path, changes)
    got = rows(path)
    assert got["003"] == EXPECTED["003"]
    assert got["001"] == ("001", 2, None, None)  # fields absent from a record are null, as in NDJSON
    fresh, first = tmp_path / "fresh", tmp_path / "first.json"
    first.write_text(json.dumps([{"id": "1", "ts": 1}, {"id": "2", "ts": 1, "note": "kept"}]))
    ok("create", fresh, "--name", "fresh", "--record-key", "id")
    ok("insert", fresh, first)
    got = open_table(fresh).read(columns=["id", "note"]).to_pylist()
    assert sorted(got, key=lambda r: r["id"]) == [{"id": "1", "note": None}, {"id": "2", "note": "kept"}]
