"""One ingest checkpoint whatever mode wrote it: the one-shot `upsertlake ingest` and the
streaming `--once`/`--continuous` each skip what the other ingested (the commits record the files
every mode read, with their size and modification time), and files of the source that are not of
the format are reported by count and first names, not skipped silently."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake import open_table
from upsertlake.cli.ingest_checkpoint import INGESTED_KEY
from upsertlake.timeline.active import Timeline

from helpers import cli_in_process

pytestmark = pytest.mark.spark


def land(source: Path, name: str, keys: range, ts: int = 1) -> None:
    source.mkdir(exist_ok=True)
    pq.write_table(pa.table({"id": [f"k{i:03d}" for i in keys], "ts": [ts] * len(keys), "v": [f"v{i}" for i in keys]}),
                   source / name)


def recorded(table: Path) -> list[list[str]]:
    """The file names each completed commit recorded as ingested."""
    timeline = Timeline.load(open_table(table).storage)
    return [
        sorted(
            Path(e["path"]).name for e in json.loads(timeline.commit_metadata(i).extra_metadata.get(INGESTED_KEY, "[]"))
        )
        for i in timeline.completed_writes()
    ]


def test_every_mode_skips_what_another_ingested(spark, tmp_path: Path, capsys) -> None:
    source, table = tmp_path / "in", tmp_path / "t"
    args = [
        "ingest",
        "--source",
        source,
        "--format",
        "parquet",
        "--table",
        table,
        "--record-key",
        "id",
        "--precombine-field",
        "ts",
        "--json",
    ]
    land(source, "a.parquet", range(0, 3))
    land(source, "b.parquet", range(3, 5))
    code, out, err = cli_in_process(capsys, *args)
    assert code == 0, err
    assert json.loads(out)["new_files"] == 2 and recorded(table) == [["a.parquet", "b.parquet"]]

    # The streaming query's first batch holds a and b, which the one-shot run ingested: no commit.
    code, out, err = cli_in_process(capsys, *args, "--once")
    assert code == 0, err
    assert (json.loads(out)["batches"], json.loads(out)["skipped"]) == (0, 1)
    assert recorded(table) == [["a.parquet", "b.parquet"]]

    # A new file: the stream reads it alone (its own checkpoint knows a and b by path now).
    land(source, "c.parquet", range(5, 7))
    code, out, err = cli_in_process(capsys, *args, "--once")
    assert code == 0, err
    assert (json.loads(out)["batches"], json.loads(out)["inserts"]) == (1, 2)
    assert recorded(table) == [["a.parquet", "b.parquet"], ["c.parquet"]]

    # The one-shot run after the stream: c is ingested already.
    code, out, err = cli_in_process(capsys, *args)
    assert code == 0, err
    assert (json.loads(out)["new_files"], json.loads(out)["instant_time"]) == (0, None)
    assert sorted(open_table(table).read(columns=["id"]).column("id").to_pylist()) == [f"k{i:03d}" for i in range(7)]


def test_files_not_of_the_format_are_reported(spark, tmp_path: Path, capsys) -> None:
    source, table = tmp_path / "in", tmp_path / "t"
    land(source, "a.parquet", range(0, 2))
    for name in ("notes.csv", "z1.json", "z2.json", "z3.json"):
        (source / name).write_text("id\nx\n")
    args = [
        "ingest",
        "--source",
        source,
        "--format",
        "parquet",
        "--table",
        table,
        "--record-key",
        "id",
        "--precombine-field",
        "ts",
    ]
    code, out, err = cli_in_process(capsys, *args)
    assert code == 0, err
    assert (
        f"warning: 4 file(s) at {source} are not parquet (.parquet/.pq) and are not ingested: "
        "notes.csv, z1.json, z2.json and 1 more"
    ) in err.splitlines()
    assert out.startswith("ingested 1 files")
