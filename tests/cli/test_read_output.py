"""`upsertlake read --output FILE` writes the format asked for: `--format` when given, else the
one the file's extension names; streamed (the same writers print to the screen), and a file whose
format cannot be told is refused before anything is read."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import upsertlake

ROWS = [{"id": "a", "v": 1.5}, {"id": "b", "v": None}]


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "upsertlake.cli", *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def table(tmp_path: Path) -> Path:
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts")
    t.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1], "v": [1.5, None]}))
    return tmp_path / "t"


def read_back(path: Path, fmt: str) -> list[dict]:
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    text = path.read_text()
    if fmt == "csv":
        return [{"id": r["id"], "v": float(r["v"]) if r["v"] else None} for r in csv.DictReader(text.splitlines())]
    if fmt == "json":
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize(
    ("name", "options", "fmt"),
    [("o.parquet", [], "parquet"), ("o.csv", [], "csv"), ("o.json", [], "json"), ("o.ndjson", [], "ndjson"),
     ("o.jsonl", [], "ndjson"), ("o2.csv", ["--format", "csv"], "csv"), ("o.out", ["--format", "json"], "json"),
     ("o.csv", ["--format", "parquet"], "parquet")],
)  # fmt: skip
def test_output_is_written_in_the_format_asked(
    table: Path, tmp_path: Path, name: str, options: list[str], fmt: str
) -> None:
    out = tmp_path / name
    p = cli("read", table, "--columns", "id", "v", "--output", out, *options)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"2 row(s) written to {out} ({fmt})\n"
    assert sorted(read_back(out, fmt), key=lambda r: r["id"]) == ROWS
    if fmt != "parquet":
        assert not out.read_bytes().startswith(b"PAR1")


def test_an_output_whose_format_cannot_be_told_is_refused(table: Path, tmp_path: Path) -> None:
    p = cli("read", table, "--output", tmp_path / "rows.dat")
    assert p.returncode == 2 and "cannot tell the format from its extension" in p.stderr
    assert not (tmp_path / "rows.dat").exists()
    p = cli("read", table, "--format", "parquet")
    assert p.returncode == 2 and "--format parquet writes a file: give --output FILE.parquet" in p.stderr


def test_the_screen_takes_every_text_format(table: Path) -> None:
    p = cli("read", table, "--columns", "id", "v", "--format", "ndjson")
    assert [json.loads(line) for line in p.stdout.splitlines()] == ROWS
    p = cli("read", table, "--columns", "id", "v", "--json")
    assert json.loads(p.stdout) == ROWS
