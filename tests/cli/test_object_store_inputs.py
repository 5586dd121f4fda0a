"""Input files on object storage: `ingest --source s3://...` and `upsert TABLE s3://...`
read through the storage layer, against the session's loopback S3 server (tests/scripts/s3_server.py).

- ingest from an s3 folder into an s3 table and into a local table; re-runs pick up only new and
  rewritten files (the checkpoint keeps the listing's size and last-modified time);
- CSV keys stay text as written, on object stores as on disk;
- the source's store takes --input-storage-option, else the table's --storage-option;
- a missing source bucket is a named error, and nothing is written.
"""

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
from upsertlake.cli.ingest_checkpoint import SourceFile, checkpoint
from upsertlake.cli.input_files import find

from helpers import REPO, cli_in_process

CLOSED_PORT_ENDPOINT = "http://127.0.0.1:9"  # discard: nothing listens there


def storage_option_args(store: dict) -> list[str]:
    return [a for k, v in store.items() for a in ("--storage-option", f"{k}={v}")]


def cli(s3_server, *args: str, store: dict | None = None) -> subprocess.CompletedProcess[str]:
    """The command line in its own process, store settings by --storage-option only (no AWS_ env)."""
    opts = storage_option_args(s3_server.options if store is None else store)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "upsertlake.cli", *args, *opts], capture_output=True, text=True,
                          env=env, timeout=600)


def ok(s3_server, *args: str, **kw) -> str:
    p = cli(s3_server, *args, **kw)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def ingest_in_process(capsys, s3_server, *args: str) -> tuple[int, str, str]:
    """`ingest` run in this process, on the test session's Spark, store settings by --storage-option
    only (this process's environment names neither the server nor its keys; Spark's workers inherit it)."""
    assert not set(s3_server.env) & set(os.environ)
    return cli_in_process(capsys, "ingest", *args, *storage_option_args(s3_server.options))


def ingested(capsys, s3_server, *args: str) -> dict:
    code, out, err = ingest_in_process(capsys, s3_server, *args, "--json")
    assert code == 0, err[-3000:]
    return json.loads(out)


def put(s3_server, uri: str, data: bytes) -> None:
    bucket, _, key = uri[len("s3://"):].partition("/")
    s3_server.client.put_object(Bucket=bucket, Key=key, Body=data)


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def by_key(path: str, store: dict | None) -> dict[str, tuple]:
    t = open_table(path, storage_options=store).read(columns=["id", "ts", "v"])
    return {r["id"]: (r["ts"], r["v"]) for r in t.to_pylist()}


def test_find_lists_files_folders_and_globs_with_the_listings_size_and_time(s3_server) -> None:
    bucket = s3_server.new_bucket()
    for key, body in [("in/a.csv", b"id\n1\n"), ("in/sub/b.csv", b"id\n22\n"), ("in/c.json", b"{}"),
                      ("in/_SUCCESS", b""), ("in/.a.csv.crc", b"x"), ("other.csv", b"id\n3\n")]:
        put(s3_server, f"s3://{bucket}/{key}", body)
    store = s3_server.options
    listed = {o["Key"]: o for o in s3_server.client.list_objects_v2(Bucket=bucket)["Contents"]}

    def uris(source: str) -> list[str]:
        return [f.uri for f in find(source, store)]

    assert uris(f"s3://{bucket}/in") == [f"s3://{bucket}/in/{k}" for k in ("a.csv", "c.json", "sub/b.csv")]
    assert uris(f"s3://{bucket}/in/") == uris(f"s3://{bucket}/in")
    assert uris(f"s3://{bucket}/in/*.csv") == [f"s3://{bucket}/in/a.csv"]
    assert uris(f"s3://{bucket}/in/**/*.csv") == [f"s3://{bucket}/in/a.csv", f"s3://{bucket}/in/sub/b.csv"]
    assert uris(f"s3://{bucket}/*.csv") == [f"s3://{bucket}/other.csv"]
    [one] = find(f"s3://{bucket}/in/sub/b.csv", store)
    assert (one.uri, one.size) == (f"s3://{bucket}/in/sub/b.csv", 6)
    by_folder = {f.uri: f for f in find(f"s3://{bucket}/in", store)}
    a = by_folder[f"s3://{bucket}/in/a.csv"]
    assert (a.size, a.mtime_ns // 10**9) == (5, int(listed["in/a.csv"]["LastModified"].timestamp()))
    assert find(f"s3://{bucket}/nothing-here", store) == []


def test_upsert_reads_input_files_from_s3_with_text_keys(s3_server, s3_table) -> None:
    """`upsert TABLE s3://...csv` and a folder of them: keys "001" stay text."""
    bucket = s3_server.new_bucket()
    put(s3_server, f"s3://{bucket}/in/a.csv", b"id,ts,v\n001,1,a\n002,1,b\n")
    put(s3_server, f"s3://{bucket}/in/more/b.ndjson", b'{"id": "010", "ts": 1, "v": "c"}\n')
    put(s3_server, f"s3://{bucket}/changes.csv", b"id,ts,v\n002,2,B\n")
    ok(s3_server, "create", s3_table, "--name", "t", "--record-key", "id", "--precombine-field", "ts")
    ok(s3_server, "upsert", s3_table, f"s3://{bucket}/in")
    out = json.loads(ok(s3_server, "upsert", s3_table, f"s3://{bucket}/changes.csv", "--json"))
    assert (out["inserts"], out["updates"]) == (0, 1)
    assert by_key(s3_table, s3_server.options) == {"001": (1, "a"), "002": (2, "B"), "010": (1, "c")}
    missing = cli(s3_server, "upsert", s3_table, f"s3://{bucket}/in/nope.csv")
    assert missing.returncode == 2 and missing.stderr == f"error: no such input file: s3://{bucket}/in/nope.csv\n"


def test_inputs_take_their_own_store_options_else_the_tables(s3_server, s3_table, tmp_path: Path) -> None:
    """--input-storage-option replaces the table's settings for the inputs only: pointed at a port
    nothing listens on, the input cannot be read (a named error) while the table still opens."""
    bucket = s3_server.new_bucket()
    put(s3_server, f"s3://{bucket}/a.csv", b"id,ts,v\n1,1,a\n")
    ok(s3_server, "create", s3_table, "--name", "t", "--record-key", "id", "--precombine-field", "ts")
    before = s3_server.keys(s3_table.split("/")[2])
    elsewhere = {**s3_server.options, "aws_endpoint": CLOSED_PORT_ENDPOINT}
    bad = cli(s3_server, "upsert", s3_table, f"s3://{bucket}/a.csv",
              *[a for k, v in elsewhere.items() for a in ("--input-storage-option", f"{k}={v}")])
    assert bad.returncode == 2 and bad.stderr.startswith(f"error: StorageError: stat s3://{bucket}/a.csv failed: "), (
        bad.stderr
    )
    assert s3_server.keys(s3_table.split("/")[2]) == before
    # the other way round: the table on a local disk, the input's settings given for it alone
    local = tmp_path / "t"
    ok(s3_server, "create", str(local), "--name", "t", "--record-key", "id", "--precombine-field", "ts", store={})
    inputs = [a for k, v in s3_server.options.items() for a in ("--input-storage-option", f"{k}={v}")]
    ok(s3_server, "upsert", str(local), f"s3://{bucket}/a.csv", *inputs, store={})
    assert by_key(str(local), None) == {"1": (1, "a")}


def test_ingest_from_a_missing_bucket_is_a_named_error_and_writes_nothing(s3_server, s3_table, tmp_path: Path) -> None:
    for table in (s3_table, str(tmp_path / "t")):
        p = cli(s3_server, "ingest", "--source", "s3://no-such-source-bucket/in", "--format", "csv", "--table", table,
                "--record-key", "id")
        assert p.returncode == 2
        assert p.stderr.startswith("error: StorageError: list s3://no-such-source-bucket/in failed: "), p.stderr
        assert "NoSuchBucket" in p.stderr
    assert s3_server.keys(s3_table.split("/")[2]) == {}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.spark
def test_ingest_from_s3_into_an_s3_table_picks_up_only_new_and_rewritten_files(
    spark, capsys, s3_server, s3_table
) -> None:
    src = f"s3://{s3_server.new_bucket()}/landing"
    put(s3_server, f"{src}/a.csv", b"id,ts,v\n001,1,a1\n002,1,a2\n")
    put(s3_server, f"{src}/day=2/b.csv", b"id,ts,v\n101,1,b1\n")
    put(s3_server, f"{src}/_SUCCESS", b"")

    def ingest() -> dict:
        return ingested(
            capsys,
            s3_server,
            "--source",
            src,
            "--format",
            "csv",
            "--table",
            s3_table,
            "--record-key",
            "id",
            "--precombine-field",
            "ts",
        )

    first = ingest()
    assert (first["input_files"], first["new_files"], first["changed_files"], first["inserts"]) == (2, 2, 0, 3)
    assert by_key(s3_table, s3_server.options) == {"001": (1, "a1"), "002": (1, "a2"), "101": (1, "b1")}
    assert open_table(s3_table, storage_options=s3_server.options).schema().field("id").type == pa.string()
    again = ingest()
    assert (again["new_files"], again["changed_files"], again["instant_time"]) == (0, 0, None)
    put(s3_server, f"{src}/a.csv", b"id,ts,v\n001,1,a1\n002,2,A2\n003,1,a3\n")  # rewritten in place
    put(s3_server, f"{src}/c.csv", b"id,ts,v\n0201,1,c1\n")
    third = ingest()
    assert (third["input_files"], third["new_files"], third["changed_files"]) == (3, 1, 1)
    assert (third["inserts"], third["updates"]) == (2, 2)  # b.csv not read again
    assert by_key(s3_table, s3_server.options) == {
        "001": (1, "a1"), "002": (2, "A2"), "003": (1, "a3"), "101": (1, "b1"), "0201": (1, "c1"),
    }
    table = open_table(s3_table, storage_options=s3_server.options)
    assert [i.time for i in table.timeline()] == [first["instant_time"], third["instant_time"]]
    # what the commits recorded: each file as listed (URI, size, last-modified), a.csv twice
    done = checkpoint(s3_table, s3_server.options)
    assert {SourceFile.of(f) for f in find(src, s3_server.options)} < done.files and len(done.files) == 4


@pytest.mark.spark
def test_ingest_parquet_from_s3_into_a_local_table(spark, capsys, s3_server, tmp_path: Path) -> None:
    """Files of different columns: unified by name, a column a file lacks is null."""
    src = f"s3://{s3_server.new_bucket()}/in"
    put(s3_server, f"{src}/a.parquet", parquet_bytes(pa.table({"id": ["1", "2"], "ts": [1, 1], "v": ["a", "b"]})))
    put(s3_server, f"{src}/b.parquet", parquet_bytes(pa.table({"id": ["3"], "ts": [1]})))
    table = str(tmp_path / "t")
    out = ingested(capsys, s3_server, "--source", f"{src}/*.parquet", "--format", "parquet", "--table", table,
                   "--record-key", "id", "--precombine-field", "ts")
    assert (out["input_files"], out["new_files"], out["inserts"]) == (2, 2, 3)
    assert by_key(table, None) == {"1": (1, "a"), "2": (1, "b"), "3": (1, None)}


@pytest.mark.spark
def test_ingest_of_a_malformed_csv_on_s3_names_the_file_and_writes_nothing(spark, capsys, s3_server, s3_table) -> None:
    """A row with an extra field fails the run (pyarrow's reader in the task, as `upsert FILE`),
    with the file and the reason in one line, not a Python worker's traceback."""
    src = f"s3://{s3_server.new_bucket()}/in"
    put(s3_server, f"{src}/a.csv", b"id,ts,v\n1,1,a\n2,1,b,extra\n")
    code, _, err = ingest_in_process(capsys, s3_server, "--source", src, "--format", "csv", "--table", s3_table,
                                     "--record-key", "id")
    assert code == 2
    assert err.splitlines()[-1] == (
        f"error: ingest of 1 file(s) failed: cannot read {src}/a.csv as csv: CSV parse error: Expected 3 columns, "
        "got 4: "
        "2,1,b,extra"
    )
    assert s3_server.keys(s3_table.split("/")[2]) == {}
