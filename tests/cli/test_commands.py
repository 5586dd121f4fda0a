"""The `upsertlake` command, driven in a subprocess exactly as a user runs it: outputs, JSON and
exit codes, and that failures and dry runs leave the table byte for byte as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import pyproject, tree_digest

COMMANDS = ["demo", "create", "upsert", "insert", "bulk-insert", "delete", "explain",
            "show", "timeline", "commit", "files", "read", "stats", "simulate", "ingest",
            "clean", "cluster", "archive", "savepoint", "restore", "rollback", "doctor", "upgrade"]  # fmt: skip


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "upsertlake.cli", *map(str, args)], capture_output=True, text=True, env=env
    )


def ok(*args: str | Path) -> str:
    p = run(*args)
    assert p.returncode == 0, p.stderr
    return p.stdout


def js(*args: str | Path) -> object:
    return json.loads(ok(*args, "--json"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    pq.write_table(
        pa.table({"uuid": [f"k{i:02d}" for i in range(20)], "ts": list(range(20)),
                  "city": ["sf", "nyc"] * 10, "fare": [float(i) for i in range(20)]}),
        d / "first.parquet",
    )
    (d / "changes.csv").write_text("uuid,ts,city,fare\nk01,100,nyc,99.5\nk01,101,nyc,100.5\nk50,1,sf,3.0\n")
    (d / "gone.ndjson").write_text('{"uuid": "k02", "city": "sf"}\n')
    (d / "array.json").write_text(
        '[{"uuid": "k03", "ts": 200, "city": "nyc", "fare": 1.5}, {"uuid": "k99", "ts": 1, "city": "sf", "fare": 2.0}]'
    )
    (d / "bad.csv").write_text('uuid,ts\n"unterminated\n')
    (d / "data.txt").write_text("uuid\n")
    return d


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory, inputs: Path) -> tuple[Path, list[str]]:
    """A table written by the command: insert (parquet), upsert (CSV); returns its instants."""
    path = tmp_path_factory.mktemp("t") / "trips"
    out = ok(
        "create",
        path,
        "--name",
        "trips",
        "--record-key",
        "uuid",
        "--precombine-field",
        "ts",
        "--partition-fields",
        "city",
    )
    assert out == f"created table 'trips' at {path}\n"
    first = js("insert", path, inputs / "first.parquet")
    assert {k: first[k] for k in ("operation", "input_records", "inserts", "updates", "deletes", "files_written")} == {
        "operation": "insert", "input_records": 20, "inserts": 20, "updates": 0, "deletes": 0, "files_written": 2,
    }  # fmt: skip
    assert set(first["stage_seconds"]) == {"dedup", "tag", "profile", "write", "commit"}
    second = js("upsert", path, inputs / "changes.csv")
    assert (second["inserts"], second["updates"], second["deletes"], second["files_written"]) == (1, 1, 0, 2)
    return path, [first["instant_time"], second["instant_time"]]


def test_help_everywhere(capsys) -> None:
    """The top-level help in a process of its own; each command's in this process (the same parser,
    without 23 interpreter start-ups)."""
    from upsertlake.cli import main

    top = ok("--help")
    assert "usage: upsertlake [-h] [-v] [--debug] [-q] [--storage-option KEY=VALUE] [--version]" in " ".join(
        top.split()
    )
    # Both table types, in the help and the package's description (it said copy-on-write only).
    assert "Hudi-compatible upserts (copy-on-write and merge-on-read tables)" in top
    import upsertlake
    from upsertlake.table.table import Table

    project = pyproject()
    for said in (project["project"]["description"], upsertlake.__doc__, Table.__doc__):
        assert "copy-on-write" in said and "merge-on-read" in said, said
    for command in COMMANDS:
        capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: upsertlake {command} ")


def test_show_timeline_commit_files(table: tuple[Path, list[str]]) -> None:
    path, (t1, t2) = table
    show = js("show", path)
    assert show["config"]["hoodie.table.recordkey.fields"] == "uuid"
    assert [f["name"] for f in show["schema"]] == ["uuid", "ts", "city", "fare"]
    assert show["partitions"] == [{"partition": "nyc", "rows": 10}, {"partition": "sf", "rows": 11}]
    assert (show["rows"], show["file_groups"], show["base_files_on_storage"], show["completed_commits"]) == (
        21,
        2,
        4,
        2,
    )

    timeline = js("timeline", path)
    assert [(i["instant"], i["action"], i["state"], i["operation"]) for i in timeline] == [
        (t1, "commit", "completed", "INSERT"), (t2, "commit", "completed", "UPSERT"),
    ]  # fmt: skip
    assert [(i["batch"], i["inserts"], i["updates"], i["deletes"], i["rows_written"]) for i in timeline] == [
        (20, 20, 0, 0, 20), (2, 1, 1, 0, 21),
    ]  # fmt: skip
    assert all(i["completion"] >= i["instant"] and i["seconds"] >= 0 for i in timeline)
    text = ok("timeline", path).splitlines()
    assert text[0].split() == ["instant", "action", "state", "completion", "operation", "batch", "inserts",
                               "updates", "deletes", "rows_written", "bytes", "duration"]  # fmt: skip
    assert text[2].split()[:4] == [t2, "commit", "completed", timeline[1]["completion"]]

    commit = js("commit", path, t2)
    stats = [(s["partition"], s["writes"], s["inserts"], s["updates"], s["prev_commit"]) for s in commit["write_stats"]]
    assert (commit["operation"], stats) == ("UPSERT", [("nyc", 10, 0, 1, t1), ("sf", 11, 1, 0, t1)])

    files = js("files", path, "--partition", "nyc")
    assert [(f["instant"], f["latest"], f["committed"], f["rows"]) for f in files] == [
        (t1, False, True, 10),
        (t2, True, True, 10),
    ]
    assert len({f["file_id"] for f in files}) == 1
    assert all(f["bytes"] == (path / "nyc" / f["file"]).stat().st_size for f in files)
    assert ok("files", path, "--partition", "nyc").splitlines()[0] == (
        "1 file groups, as `show` counts them (the latest snapshot); also on storage: 0 replaced, "
        "0 with no committed file; 2 base files"
    )


def test_read(table: tuple[Path, list[str]]) -> None:
    path, (t1, t2) = table
    rows = js("read", path, "--where", "city = 'nyc' and ts >= 15", "--columns", "uuid,ts", "fare")
    assert sorted(rows, key=lambda r: r["uuid"]) == [
        {"uuid": "k01", "ts": 101, "fare": 100.5}, {"uuid": "k15", "ts": 15, "fare": 15.0},
        {"uuid": "k17", "ts": 17, "fare": 17.0}, {"uuid": "k19", "ts": 19, "fare": 19.0},
    ]  # fmt: skip
    assert ok("read", path, "--where", "uuid in (k01, 'k50')", "--columns", "uuid", "city", "--format", "csv",
              "--limit", "1").splitlines()[0] == '"uuid","city"'  # fmt: skip
    assert len(js("read", path, "--as-of", t1)) == 20
    since = js("read", path, "--since", t1, "--columns", "uuid")
    assert sorted(r["uuid"] for r in since) == ["k01", "k50"]
    assert js("read", path, "--since", t1, "--until", t2, "--where", "uuid = k50", "--columns", "uuid") == [
        {"uuid": "k50"}
    ]
    table_out = ok("read", path, "--where", "uuid = k50", "--columns", "uuid", "ts")
    assert table_out == "uuid  ts\nk50   1\n"
    # a list's items are stripped, as every option list's are: "uuid, ts" names the columns uuid and ts
    assert ok("read", path, "--where", "uuid = k50", "--columns", "uuid, ts,") == table_out


def test_explain_writes_nothing(table: tuple[Path, list[str]], inputs: Path) -> None:
    path, _ = table
    before = tree_digest(path)
    plan = js("explain", "upsert", path, inputs / "changes.csv", inputs / "array.json")
    assert tree_digest(path) == before
    groups = {f["partition"]: f for f in js("files", path) if f["latest"]}
    assert {k: v for k, v in plan.items() if k != "stage_seconds"} == {
        "operation": "upsert", "table_type": "COPY_ON_WRITE", "input_records": 5, "after_dedup": 4,
        "duplicates_combined": 1, "dropped_unknown_deletes": 0, "updates": 3, "deletes": 0, "inserts": 1,
        "updated_file_groups": [
            {"partition": "nyc", "file_id": groups["nyc"]["file_id"], "updates": 2, "bytes": groups["nyc"]["bytes"]},
            {"partition": "sf", "file_id": groups["sf"]["file_id"], "updates": 1, "bytes": groups["sf"]["bytes"]},
        ],
        "small_file_inserts": [
            {"partition": "sf", "file_id": groups["sf"]["file_id"], "inserts": 1, "bytes": groups["sf"]["bytes"]},
        ],
        "new_file_groups": [],
        "bytes_rewritten": groups["nyc"]["bytes"] + groups["sf"]["bytes"],
    }  # fmt: skip
    text = ok("explain", "upsert", path, inputs / "changes.csv")
    assert text.splitlines()[0] == (
        "upsert (dry run, nothing written): 3 input records, 1 duplicates combined, 0 deletes of unknown keys dropped"
    )
    assert tree_digest(path) == before


def test_explain_on_a_merge_on_read_table_tells_appends_from_rewrites(tmp_path: Path, inputs: Path) -> None:
    """nyc's file group has a log file: its updates go to a new one (nothing rewritten), with the
    log already pending reported; sf's slice is small and log-free in a partition taking an
    insert, so its update and the insert rewrite its base file, as the write will."""
    path = tmp_path / "mor"
    ok("create", path, "--name", "mor", "--record-key", "uuid", "--precombine-field", "ts",
       "--partition-fields", "city", "--table-type", "MERGE_ON_READ")  # fmt: skip
    ok("insert", path, inputs / "first.parquet")
    (tmp_path / "nyc.csv").write_text("uuid,ts,city,fare\nk01,100,nyc,99.5\n")
    ok("upsert", path, tmp_path / "nyc.csv")
    (tmp_path / "changes.csv").write_text(
        "uuid,ts,city,fare\nk03,200,nyc,1.5\nk05,200,nyc,2.5\nk00,200,sf,0.5\nk50,1,sf,3.0\n"
    )
    [log] = (path / "nyc").glob(".*.log.*")
    [sf] = (path / "sf").glob("*.parquet")
    nyc_id, sf_id, log_bytes, sf_bytes = (
        log.name[1:].split("_")[0],
        sf.name.split("_")[0],
        log.stat().st_size,
        sf.stat().st_size,
    )
    before = tree_digest(path)
    text = ok("explain", "upsert", path, tmp_path / "changes.csv")
    assert text == (
        "upsert (dry run, nothing written): 4 input records, 0 duplicates combined, 0 deletes of unknown keys dropped\n"
        "  updates 3, deletes 0, inserts 1\n"
        "\n"
        "file groups getting a new log file (updates and deletes appended): 1\n"
        "partition  file_id                                 updates  deletes  pending_log_files  pending_log_bytes\n"
        f"nyc        {nyc_id}  2        0        1                  {log_bytes}\n"
        "\n"
        "base files rewritten with their updates (small log-free slices in partitions taking inserts): 1\n"
        "partition  file_id                                 updates  bytes\n"
        f"sf         {sf_id}  1        {sf_bytes}\n"
        "\n"
        "small files receiving inserts: 1\n"
        "partition  file_id                                 inserts  bytes\n"
        f"sf         {sf_id}  1        {sf_bytes}\n"
        "\n"
        "new file groups: 0\n"
        "\n"
        f"bytes rewritten: {sf_bytes} ({sf_bytes / 1024:.1f} KiB)\n"
        f"compaction backlog of the file groups appended to: 1 log file(s), {log_bytes} bytes ({log_bytes} B) "
        "already pending\n"
    )
    (tmp_path / "gone.csv").write_text("uuid,ts,city,fare\nk01,300,nyc,0\nk09,300,nyc,0\nk98,1,sf,0\n")
    plan = js("explain", "delete", path, tmp_path / "gone.csv")
    assert {k: v for k, v in plan.items() if k != "stage_seconds"} == {
        "operation": "delete", "table_type": "MERGE_ON_READ", "input_records": 3, "after_dedup": 3,
        "duplicates_combined": 0, "dropped_unknown_deletes": 1, "updates": 0, "deletes": 2, "inserts": 0,
        "appended_file_groups": [
            {"partition": "nyc", "file_id": nyc_id, "updates": 0, "deletes": 2, "pending_log_files": 1,
             "pending_log_bytes": log_bytes},
        ],
        "compaction_backlog": {"log_files": 1, "log_bytes": log_bytes},
        "updated_file_groups": [], "small_file_inserts": [], "new_file_groups": [], "bytes_rewritten": 0,
    }  # fmt: skip
    assert tree_digest(path) == before
    assert js("upsert", path, tmp_path / "changes.csv")["files_written"] == 2  # as the dry run said:
    assert len(list((path / "nyc").glob(".*.log.*"))) == 2 and len(list((path / "nyc").glob("*.parquet"))) == 1
    assert len(list((path / "sf").glob("*.parquet"))) == 2 and not list((path / "sf").glob(".*.log.*"))


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["upsert", "{t}", "{i}/bad.csv"],
         'error: cannot read {i}/bad.csv as csv: CSV parse error: Expected 2 columns, got 1: "unterminated'),
        (["upsert", "{t}", "{i}/missing.csv"], "error: no such input file: {i}/missing.csv"),
        (["upsert", "{t}", "{i}/data.txt"],
         "error: cannot tell the format of {i}/data.txt from its extension; pass --format {{parquet,csv,json,ndjson}}"),
        (["upsert", "{t}", "{i}/gone.ndjson"],
         "error: SchemaError: precombine field 'ts' is missing from the batch (columns: ['uuid', 'city'])"),
        (["upsert", "{t}", "{i}/first.parquet", "--option", "hoodie.nope=1"], None),
        (["upsert", "{t}", "{i}/first.parquet", "--option", "novalue"],
         "error: --option expects key=value, got 'novalue'"),
        (["commit", "{t}", "123"], "error: no completed commit '123' on the timeline of {t}"),
        (["read", "{t}", "--where", "ts >= abc"], "error: --where: 'abc' is no int64 value for column 'ts'"),
        (["read", "{t}", "--where", "ts >= 1 or ts < 0"],
         "error: --where: expected 'and' between conditions in 'ts >= 1 or ts < 0' (only 'and' is supported)"),
        (["read", "{t}", "--where", "nope = 1"],
         "error: --where: unknown column 'nope' (columns: uuid, ts, city, fare)"),
        (["read", "{t}", "--until", "20200101000000000"], "error: --until needs --since"),
        (["create", "{t}", "--name", "x", "--record-key", "uuid"],
         "error: TableExistsError: a table already exists at {t}"),
        (["frobnicate"], None),
        (["read", "{t}", "--limit", "many"],
         "error: argument --limit: invalid int value: 'many' (see `upsertlake read --help`)"),
    ],
)  # fmt: skip
def test_bad_arguments_and_input(
    table: tuple[Path, list[str]], inputs: Path, args: list[str], error: str | None
) -> None:
    path, _ = table
    before = tree_digest(path)
    p = run(*[a.format(t=path, i=inputs) for a in args])
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in p.stderr
    if error is not None:
        assert lines[0] == error.format(t=path, i=inputs)
    assert tree_digest(path) == before


def test_debug_shows_traceback(table: tuple[Path, list[str]], inputs: Path) -> None:
    p = run("upsert", table[0], inputs / "gone.ndjson", "--debug")
    assert p.returncode == 2 and "Traceback (most recent call last)" in p.stderr
    assert p.stderr.splitlines()[-1].startswith("error: SchemaError: precombine field 'ts' is missing")


def test_write_logs_stage_timings_and_deletes(tmp_path: Path, inputs: Path) -> None:
    path = tmp_path / "t"
    ok(
        "create",
        path,
        "--name",
        "t",
        "--record-key",
        "uuid",
        "--precombine",
        "ts",
        "--partition",
        "city",
        "--hive-style",
    )
    p = run("bulk-insert", path, inputs / "first.parquet", "-v")
    assert p.returncode == 0, p.stderr
    assert (
        p.stdout.startswith("bulk_insert ")
        and ": 20 input, 20 inserted, 0 updated, 0 deleted, 2 files written in " in p.stdout
    )
    logged = [
        line.split(": ")[1].split()[0]
        for line in p.stderr.splitlines()
        if "upsertlake.progress: " in line and " done in " in line
    ]
    assert logged == ["read", "dedup", "tag", "profile", "write", "commit", "services"]
    assert sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) == ["city=nyc", "city=sf"]
    out = js("delete", path, inputs / "gone.ndjson", "--option", "hoodie.combine.before.delete=false")
    assert (out["deletes"], out["inserts"]) == (1, 0)
    assert js("show", path)["rows"] == 19


def test_stats_and_plot(table: tuple[Path, list[str]], tmp_path: Path) -> None:
    import matplotlib.image

    path, (t1, t2) = table
    out = tmp_path / "stats.png"
    info = js("stats", path, "--plot", out)
    assert [(p["partition"], p["files"], p["small_files"], p["rows"]) for p in info["partitions"]] == [
        ("nyc", 1, 1, 10),
        ("sf", 1, 1, 11),
    ]
    assert [c["instant"] for c in info["commits"]] == [t1, t2]
    assert info["small_file_limit"] == 314572800 and sum(info["file_sizes"]["histogram"]["counts"]) == 2
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(out).shape[:2] == (800, 1100)
    assert ok("stats", path).startswith("file sizes: 2 files, ")


def test_plot_without_matplotlib(table: tuple[Path, list[str]], tmp_path: Path) -> None:
    (tmp_path / "matplotlib").mkdir()
    (tmp_path / "matplotlib" / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    p = run("stats", table[0], "--plot", tmp_path / "x.png", env=env)
    assert (p.returncode, p.stderr) == (
        2,
        "error: --plot needs matplotlib: pip install matplotlib (or '.[plot]' from upsertlake's folder)\n",
    )


def test_demo(tmp_path: Path) -> None:
    out = ok("demo", "--path", tmp_path / "demo").splitlines()
    assert out[0] == f"created table 'trips' at {tmp_path / 'demo'}"
    assert "rows now: 9" in out
