"""`doctor --fix` rebuilds a damaged or lost hoodie.properties from what the table holds, or names
the values it cannot recover and how to pass them; `show` warns about damaged properties."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table
from upsertlake.config.java_properties import parse_java_properties

from helpers import cli_in_process, hudi_read, tree_digest

DAMAGES = ["truncated", "garbage", "missing", "missing_with_backup", "lost_line"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "upsertlake.cli", *map(str, args)], capture_output=True, text=True)


def damage(root: Path, how: str) -> None:
    props = root / ".hoodie/hoodie.properties"
    data = props.read_bytes()
    if how == "truncated":
        props.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        props.write_bytes(random.Random(25).randbytes(400))
    elif how == "missing":
        props.unlink()
    elif how == "missing_with_backup":
        (root / ".hoodie/hoodie.properties.backup").write_bytes(data)
        props.unlink()
    elif how == "lost_line":  # the checksum still matches: only the table can tell
        props.write_bytes(
            b"".join(line for line in data.splitlines(True) if not line.startswith(b"hoodie.table.partition"))
        )


def snapshot(root: Path) -> list[dict]:
    return sorted(open_table(root).read().to_pylist(), key=lambda r: r["_hoodie_record_key"])


def properties(root: Path) -> dict[str, str]:
    return parse_java_properties((root / ".hoodie/hoodie.properties").read_text("latin-1"))


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("hive", [False, True], ids=["plain", "hive"])
@pytest.mark.parametrize("table_version", [6, 8, 9], indirect=True, ids=["v6", "v8", "v9"])
def test_fix_rebuilds_the_properties_of_our_tables(
    capsys, tmp_path: Path, table_version: int, hive: bool, how: str
) -> None:
    """The doctor runs in this process (20 cases; the command line's own process is tested below)."""
    root = tmp_path / "t"
    t = create_table(root, "t", record_key="id", precombine_field="ts", partition_fields="p",
                     hive_style_partitioning=hive)
    t.upsert(pa.table({"id": ["a", "b", "c"], "ts": [1, 1, 1], "v": ["a1", "b1", "c1"], "p": ["x", "x", "y"]}))
    t.upsert(pa.table({"id": ["a"], "ts": [2], "v": ["a2"], "p": ["x"]}))
    rows, good, by_hudi = snapshot(root), properties(root), hudi_read(root).num_rows
    damage(root, how)
    code, out, _ = cli_in_process(capsys, "doctor", root)
    assert code == 1
    assert "--fix: restore" in out if how == "missing_with_backup" else "--fix: rebuild hoodie.properties" in out
    code, out, _ = cli_in_process(capsys, "doctor", root, "--fix")
    assert code == 0, out
    assert out.splitlines()[-1] == f"no problems found in {root}"
    assert properties(root) == good
    assert not (root / ".hoodie/hoodie.properties.backup").exists()
    assert snapshot(root) == rows
    assert hudi_read(root).num_rows == by_hudi == 3
    open_table(root).upsert(pa.table({"id": ["d"], "ts": [1], "v": ["d1"], "p": ["y"]}))  # writable again
    assert len(snapshot(root)) == 4


@pytest.mark.parametrize("name", ["v6_simplekeygen_nonhivestyle", "v8_complexkeygen_hivestyle"])
def test_a_hudi_table_without_recorded_settings_names_what_it_needs(hudi_table, name: str) -> None:
    """Hudi's commits record no settings: nothing tells the precombine field. The doctor says so,
    changes nothing, and rebuilds once it is given."""
    root = hudi_table(name)
    rows, good = snapshot(root), properties(root)
    (root / ".hoodie/hoodie.properties").unlink()
    before = tree_digest(root)
    run = cli("doctor", root, "--fix", "--json")
    report = json.loads(run.stdout)
    assert run.returncode == 1 and report["fixed"] == []
    (finding,) = report["findings"]
    assert finding["fix"] is None and finding["message"].startswith("missing; the backup is not usable (missing); ")
    assert "could not recover hoodie.table.precombine.field (no commit records it" in finding["message"]
    assert f"upsertlake doctor {root} --fix --option hoodie.table.precombine.field=..." in finding["message"]
    assert tree_digest(root) == before
    run = cli("doctor", root, "--fix", "--option", "hoodie.table.precombine.field=longField")
    assert run.returncode == 0, run.stdout
    rebuilt = properties(root)
    same = {"hoodie.table.name", "hoodie.table.recordkey.fields", "hoodie.table.partition.fields",
            "hoodie.table.precombine.field", "hoodie.datasource.write.hive_style_partitioning", "hoodie.table.version",
            "hoodie.timeline.layout.version", "hoodie.table.checksum", "hoodie.table.type", "hoodie.database.name"}
    assert {k: rebuilt.get(k) for k in same} == {k: good.get(k) for k in same}
    assert (rebuilt.get("hoodie.table.keygenerator.class") or rebuilt["hoodie.table.keygenerator.type"]) == (
        good.get("hoodie.table.keygenerator.class") or good["hoodie.table.keygenerator.type"])
    assert snapshot(root) == rows
    assert hudi_read(root).num_rows == len(rows)


def test_the_data_tells_the_fields_of_a_cut_hudi_file(hudi_table) -> None:
    """A file cut short keeps its first lines; the key and partition fields come from the data."""
    root = hudi_table("v6_complexkeygen_hivestyle")
    rows, good = snapshot(root), properties(root)
    props = root / ".hoodie/hoodie.properties"
    props.write_bytes(b"".join(line for line in props.read_bytes().splitlines(True)
                               if not line.startswith((b"hoodie.table.recordkey", b"hoodie.table.partition",
                                                       b"hoodie.table.checksum"))))
    assert cli("doctor", root, "--fix").returncode == 0
    assert properties(root) == {**good, "hoodie.populate.meta.fields": "true"}
    assert snapshot(root) == rows


def test_show_warns_about_damaged_properties(tmp_path: Path) -> None:
    root = tmp_path / "t"
    create_table(root, "t", record_key="id", partition_fields="p").upsert(pa.table({"id": ["a"], "p": ["x"]}))
    damage(root, "lost_line")
    run = cli("show", root)
    assert run.returncode == 0
    assert run.stderr.startswith(f"warning: {root}/.hoodie/hoodie.properties disagrees with the table: it names no "
                                 "partition fields")
    assert f"run `upsertlake doctor {root} --fix`" in run.stderr
    damage(root, "truncated")
    run = cli("show", root, "--json")
    assert run.returncode == 0 and "is damaged" in run.stderr
    assert json.loads(run.stdout)["warnings"][0].startswith(f"{root}/.hoodie/hoodie.properties is damaged")


def test_a_lost_file_is_pointed_to_the_doctor(tmp_path: Path) -> None:
    root = tmp_path / "t"
    create_table(root, "t", record_key="id").upsert(pa.table({"id": ["a"]}))
    os.remove(root / ".hoodie/hoodie.properties")
    run = cli("read", root)
    assert run.returncode != 0
    assert f"holds a timeline: to rebuild the lost file, run `upsertlake doctor {root} --fix`" in run.stderr
