"""Table.to_pyarrow_dataset: exactly the snapshot's base files, on the table's own file system
(local or the S3 test server, no engine configured for it), each fragment's partition expression
holding what its statistics guarantee, so that pyarrow, DuckDB and Polars skip files themselves.
Files that must be skipped are destroyed: the rows still come out exact."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from upsertlake import MergeOnReadError, create_table, open_table

from helpers import clustered, destroy_all_but, file_of, unzip_mor_table


def test_the_dataset_is_the_snapshots_files_with_their_guarantees(tmp_path: Path) -> None:
    table = clustered(tmp_path)
    table.upsert(pa.table({"id": ["key-0003"], "ts": [2], "p": ["a"], "v": [3], "note": ["changed"]}))
    dataset = table.to_pyarrow_dataset()
    assert isinstance(dataset, ds.FileSystemDataset)
    scan = table.scan()
    assert sorted(f.path for f in dataset.get_fragments()) == sorted(bf.path for bf in scan.plan.files)
    assert dataset.schema == scan.schema
    assert sorted(dataset.to_table().to_pylist(), key=lambda r: r["id"]) == sorted(table.read().to_pylist(),
                                                                                   key=lambda r: r["id"])
    guarantees = {f.path: str(f.partition_expression) for f in dataset.get_fragments()}
    assert "(v >= 40) and (v <= 59)" in guarantees[file_of(table, 45)]
    assert "(p == \"a\")" not in guarantees[file_of(table, 45)]  # p's range is "a".."a":
    assert "(p >= \"a\") and (p <= \"a\")" in guarantees[file_of(table, 45)]
    # note has a null in each file: its range is or'ed with is_null, which pyarrow cannot skip by
    assert "is_null(note" in guarantees[file_of(table, 45)]
    kept = [f.path for f in dataset.get_fragments(filter=(pc.field("v") >= 45) & (pc.field("v") < 50))]
    assert kept == [file_of(table, 45)]
    # Time travel: the files as of the first commit (key-0003's first version).
    first = next(i.time for i in table.timeline() if i.is_completed)
    old = table.to_pyarrow_dataset(as_of=first)
    assert old.to_table(filter=pc.field("id") == "key-0003", columns=["note"]).to_pylist() == [{"note": "n0003"}]


def test_duckdb_polars_and_pyarrow_skip_the_files_the_guarantees_rule_out(tmp_path: Path) -> None:
    import duckdb  # no dependency of ours: the test extra brings it
    import polars as pl

    table = clustered(tmp_path)
    dataset = table.to_pyarrow_dataset()
    destroy_all_but(table, {file_of(table, 45)})
    expected = [(f"key-{i:04d}", i) for i in range(45, 50)]
    got = dataset.to_table(columns=["id", "v"], filter=(pc.field("v") >= 45) & (pc.field("v") < 50))
    assert sorted(zip(got["id"].to_pylist(), got["v"].to_pylist())) == expected
    assert duckdb.sql("select id, v from dataset where v >= 45 and v < 50 order by id").fetchall() == expected
    frame = pl.scan_pyarrow_dataset(dataset).filter((pl.col("v") >= 45) & (pl.col("v") < 50)).select("id", "v")
    assert sorted(frame.collect().rows()) == expected
    with pytest.raises(Exception):  # noqa: B017 - the others are destroyed: a whole read opens them
        dataset.to_table()


def test_a_mor_snapshot_with_log_files_points_to_scan(tmp_path: Path) -> None:
    path = unzip_mor_table("mor_v8_trips_8i3u1d", tmp_path)
    table = open_table(path)
    with pytest.raises(MergeOnReadError, match=r"read it with `Table.scan\(\)`"):
        table.to_pyarrow_dataset()
    base_files = table.to_pyarrow_dataset(query_type="read_optimized")
    assert sorted(base_files.to_table()["_hoodie_record_key"].to_pylist()) == sorted(
        table.read(query_type="read_optimized")["_hoodie_record_key"].to_pylist()
    )


def test_on_s3_engines_read_the_dataset_through_the_tables_storage_options(s3_server) -> None:
    """DuckDB reads the dataset of a table on the S3 test server with no S3 setting of its own
    (no httpfs, no secret, no endpoint): the table's storage reads the files, one GET each,
    only those the filter keeps."""
    uri = f"s3://{s3_server.new_bucket()}/t"
    n = 400
    data = pa.table({"id": [f"k{i:04d}" for i in range(n)], "ts": [1] * n, "v": list(range(n))})
    create_table(uri, "t", "id", "ts", storage_options=s3_server.options).bulk_insert(
        data, {"hoodie.parquet.max.file.size": 150, "hoodie.index.bloom.num_entries": 10,
               "hoodie.bulkinsert.sort.mode": "GLOBAL_SORT"})
    code = f"""
import duckdb, upsertlake
table = upsertlake.open_table({uri!r}, storage_options={s3_server.options!r})
dataset = table.to_pyarrow_dataset()
print(len(list(dataset.get_fragments())))
print(duckdb.sql("select count(*), sum(v) from dataset where v >= 200 and v < 203").fetchall())
"""
    with urllib.request.urlopen(f"{s3_server.endpoint}/__requests") as reply:
        json.loads(reply.read())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    with urllib.request.urlopen(f"{s3_server.endpoint}/__requests") as reply:
        counted = json.loads(reply.read())
    files, rows = out.stdout.splitlines()
    assert int(files) >= 20
    assert rows == "[(3, 603)]"
    # The table check, properties, timeline and listing, the commit; then the one or two files.
    # LIST: the table check, the timeline, the table; GET: hoodie.properties (twice: opening the
    # table and loading the timeline), the commit, the one file holding the rows. No HEAD.
    assert set(counted) == {"LIST", "GET"} and counted["LIST"] <= 3 and counted["GET"] <= 4, counted
