"""A table keeps its type: merge-on-read tables open, read, take writes, are compacted, cleaned and
clustered, from Python, the command line and Spark, and their upgrade to version 8 raises
MergeOnReadError and changes nothing (never run as if the table were copy-on-write). The reads
against Hudi's reader are in tests/read/, the writes in tests/engine/, the services in
tests/services/."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import ConfigError, MergeOnReadError, UnsupportedTableError, create_table, open_table, upgrade_table
from upsertlake.config.enums import TableType

from helpers import HUDI_TABLES, REPO, tree_digest

REFUSED = "keep it at version 6"


def mor_table(dest: Path) -> Path:
    """Hudi's MOR table (v6, non-partitioned): ids 1-3 inserted, then id 1 updated (isActive
    true -> false) in a log file beside its base file, and id 4 inserted."""
    with zipfile.ZipFile(HUDI_TABLES / "mor" / "mor_v6_nonpartitioned.zip") as zf:
        zf.extractall(dest, [m for m in zf.namelist() if not m.startswith("__MACOSX")])
    path = dest / "v6_nonpartitioned"
    assert any(".log." in p.name for p in path.iterdir())
    return path


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "upsertlake.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_a_merge_on_read_table_is_written_and_clustered_but_not_upgraded(tmp_path: Path) -> None:
    path = mor_table(tmp_path)
    table = open_table(path)
    assert table.read(columns=["id", "isActive"]).sort_by("id").to_pylist() == [
        {"id": 1, "isActive": False},
        {"id": 2, "isActive": False},
        {"id": 3, "isActive": True},
        {"id": 4, "isActive": True},
    ]  # id 1's isActive=False is in a log file: the base file alone said True
    row = table.read(filters=[("id", "=", 1)])
    row = row.drop_columns([c for c in row.column_names if c.startswith("_hoodie")])
    result = table.upsert(row.set_column(row.schema.get_field_index("isActive"), "isActive", pa.array([True])))
    assert result.num_updates == 1 and any(".log." in f for f in result.files_written)
    assert table.read(columns=["id", "isActive"]).sort_by("id").column("isActive").to_pylist() == [
        True,
        False,
        True,
        True,
    ]
    clustered = table.cluster()  # Hudi's two file groups, logs merged, into one base file
    assert clustered.clustered and len(clustered.replaced[""]) == 2 and len(clustered.files_written) == 1
    assert table.read(columns=["id", "isActive"]).sort_by("id").column("isActive").to_pylist() == [
        True,
        False,
        True,
        True,
    ]
    before = tree_digest(path)
    assert issubclass(MergeOnReadError, UnsupportedTableError)
    with pytest.raises(MergeOnReadError, match=REFUSED):
        upgrade_table(path)
    assert tree_digest(path) == before


def test_deltacommits_are_refused_whatever_the_properties_say(tmp_path: Path) -> None:
    """hoodie.properties edited (or damaged) to say COPY_ON_WRITE: the deltacommits on the timeline
    still say merge-on-read, so reads and writes refuse rather than read the base files alone."""
    path = mor_table(tmp_path)
    props = path / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text("latin-1").replace("=MERGE_ON_READ", "=COPY_ON_WRITE"), "latin-1")
    before = tree_digest(path)
    table = open_table(path)
    message = ("holds deltacommits \\(the first at 20250117083125837\\), which only merge-on-read tables write, "
               "but hoodie.table.type is not MERGE_ON_READ")
    with pytest.raises(MergeOnReadError, match=message):
        table.read()
    with pytest.raises(MergeOnReadError, match=message):
        table.upsert(pa.table({"id": pa.array([5], pa.int32()), "longField": [1]}))
    doctor = cli("doctor", path)
    assert (
        doctor.returncode == 1
        and "which only merge-on-read tables write, but hoodie.table.type is not MERGE_ON_READ" in doctor.stdout
    )
    assert tree_digest(path) == before


def test_the_cli_writes_a_merge_on_read_table(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t")
    (tmp_path / "b.csv").write_text("id,longField\n5,1\n")
    p = cli("upsert", path, tmp_path / "b.csv", "--option", "hoodie.write.set.null.for.missing.columns=true")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert sorted(open_table(path).read(columns=["id"]).column("id").to_pylist()) == [1, 2, 3, 4, 5]


def test_upgrading_a_merge_on_read_table_is_refused_by_the_cli(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t")
    before = tree_digest(path)
    p = cli("upgrade", path, "--to", "8")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.startswith("error: MergeOnReadError: ") and REFUSED in p.stderr
    assert tree_digest(path) == before


def test_the_cli_clusters_a_merge_on_read_table(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t")
    before = open_table(path).read(columns=["id", "isActive"]).sort_by("id")
    p = cli("cluster", path)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout.startswith("replacecommit ") and p.stdout.endswith(": 2 file groups clustered into 1\n")
    assert open_table(path).read(columns=["id", "isActive"]).sort_by("id").equals(before)


@pytest.mark.parametrize("command", ["read", "timeline", "files", "stats", "show", "doctor"])
def test_the_cli_reads_a_merge_on_read_table(tmp_path: Path, command: str) -> None:
    path = mor_table(tmp_path)
    before = tree_digest(path)
    p = cli(command, path)
    assert p.returncode == 0, (p.stdout, p.stderr)
    if command == "doctor":
        assert p.stdout.startswith("no problems found")
    if command == "show":
        assert "  hoodie.table.type = MERGE_ON_READ" in p.stdout and "rows 4" in p.stdout
    assert tree_digest(path) == before


@pytest.mark.parametrize("key", ["hoodie.table.type", "hoodie.datasource.write.table.type"])
@pytest.mark.parametrize("value", ["MERGE_ON_READ", "merge_on_read"])
def test_creating_a_merge_on_read_table_by_option(tmp_path: Path, key: str, value: str) -> None:
    table = create_table(tmp_path / "t", "t", record_key="id", options={key: value})
    assert table.table_config.table_type is TableType.MERGE_ON_READ
    p = cli("create", tmp_path / "c", "--name", "c", "--record-key", "id", "--option", f"{key}={value}")
    assert p.returncode == 0, p.stderr
    assert open_table(tmp_path / "c").table_config.table_type is TableType.MERGE_ON_READ
    with pytest.raises(ConfigError, match=r"invalid value 'MERGE_ON_WRITE' for hoodie.table.type"):
        create_table(tmp_path / "x", "x", record_key="id", table_type="MERGE_ON_WRITE")
    assert not (tmp_path / "x").exists()


def test_a_table_keeps_its_type(tmp_path: Path) -> None:
    """A copy-on-write table opened, or written, asking for merge-on-read: a config conflict,
    the table unchanged."""
    path = tmp_path / "t"
    table = create_table(path, "t", record_key="id", precombine_field="ts")
    table.upsert(pa.table({"id": ["a"], "ts": [1]}))
    before = tree_digest(path)
    mor = {"hoodie.datasource.write.table.type": "MERGE_ON_READ"}
    conflict = "hoodie.table.type='MERGE_ON_READ' but the table has hoodie.table.type='COPY_ON_WRITE'"
    with pytest.raises(ConfigError, match=conflict):
        open_table(path, mor)
    with pytest.raises(ConfigError, match=conflict):
        table.upsert(pa.table({"id": ["b"], "ts": [1]}), options=mor)
    assert tree_digest(path) == before
    cow = open_table(path, {"hoodie.table.type": "COPY_ON_WRITE"})
    assert cow.read(columns=["id"]).column("id").to_pylist() == ["a"]


@pytest.mark.spark
def test_spark_reads_and_writes_a_merge_on_read_table(spark, tmp_path: Path) -> None:
    import upsertlake.spark as uls

    path = mor_table(tmp_path)
    expected = [(1, False), (2, False), (3, True), (4, True)]
    rows = spark.read.format("upsertlake").load(str(path)).select("id", "isActive").orderBy("id").collect()
    assert [tuple(r) for r in rows] == expected
    assert [tuple(r) for r in uls.read(spark, str(path)).select("id", "isActive").orderBy("id").collect()] == expected
    optimized = uls.read(spark, str(path), query_type="read_optimized").select("id", "isActive").orderBy("id").collect()
    assert [tuple(r) for r in optimized] == [(1, True), (2, False), (3, True), (4, True)]
    df = spark.createDataFrame([(5, 1)], "id int, longField long")
    uls.upsert(df, str(path), **{"hoodie.write.set.null.for.missing.columns": "true"})
    assert sorted(open_table(path).read(columns=["id"]).column("id").to_pylist()) == [1, 2, 3, 4, 5]
    uls.upsert(df, str(tmp_path / "new"), table="new", record_key="id", table_type="MERGE_ON_READ")
    assert open_table(tmp_path / "new").table_config.table_type is TableType.MERGE_ON_READ
