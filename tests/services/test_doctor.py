"""`upsertlake doctor`: each finding names its file; `--fix` does only what is safe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table
from upsertlake.config.java_properties import parse_java_properties
from upsertlake.services.doctor import Finding, diagnose
from upsertlake.storage import Storage

OLD = time.time() - 3600  # an hour ago: far past the heartbeat window (2 x 60 s)


def batch(ids, p=None, ts=1) -> pa.Table:
    return pa.table({"id": list(ids), "ts": [ts] * len(ids), "v": list(ids), "p": list(p or ["x"] * len(ids))})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    t = create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(batch(["a", "b"], ["x", "y"]))
    t.upsert(batch(["a", "c"], ["x", "x"], ts=2))
    t.upsert(batch(["a"], ["x"], ts=3))
    return tmp_path / "t"


def doctor(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "upsertlake.cli", "doctor", str(root), *args],
                          capture_output=True, text=True)


def findings(root: Path) -> list[tuple[str, str, bool, str | None]]:
    return [(f.check, f.path, f.problem, f.fix) for f in diagnose(Storage(root)).findings]


def whole_table_listings(monkeypatch, root: Path) -> int:
    """How many times one diagnosis lists the whole table (one request per 1,000 objects on a
    store): the listing is made once and handed to every check."""
    calls = []
    listing = Storage.list_outside
    monkeypatch.setattr(Storage, "list_outside", lambda self, folder: calls.append(folder) or listing(self, folder))
    diagnose(Storage(root))
    monkeypatch.setattr(Storage, "list_outside", listing)
    return len(calls)


def commits(root: Path) -> list[Path]:
    return sorted((root / ".hoodie").glob("*.commit"))


def age(paths) -> None:
    for p in paths:
        os.utime(p, (OLD, OLD))


def test_a_healthy_table_after_clean_cluster_and_rollback(root: Path) -> None:
    table = open_table(root)
    table.clean(retained=1)
    table.cluster({"hoodie.clustering.plan.strategy.small.file.limit": "1000000"})
    table.upsert(batch(["z"]))
    table.rollback()
    assert findings(root) == []
    run = doctor(root)
    assert (run.returncode, run.stdout) == (0, f"no problems found in {root}\n")


@pytest.mark.parametrize("name", ["v6_simplekeygen_nonhivestyle", "v6_complexkeygen_hivestyle", "v6_nonpartitioned",
                                  "v6_simplekeygen_nonhivestyle_overwritetable", "v6_empty"])
def test_tables_written_by_hudi_are_healthy(hudi_table, name: str) -> None:
    assert findings(hudi_table(name)) == []


def test_damaged_properties_without_backup_are_rebuilt_from_the_table(root: Path) -> None:
    """Not "0 fixable" with nothing done: the commits record every setting the rebuild needs."""
    props = root / ".hoodie/hoodie.properties"
    good = parse_java_properties(props.read_text())
    props.write_text("".join(props.read_text().splitlines(keepends=True)[:9]))
    run = doctor(root, "--fix", "--json")
    report = json.loads(run.stdout)
    assert run.returncode == 0 and report["ok"] and report["findings"] == []
    assert report["fixed"][0].startswith("rebuilt .hoodie/hoodie.properties from the table (")
    assert parse_java_properties(props.read_text()) == good


def test_fix_restores_properties_from_a_backup_that_agrees(root: Path) -> None:
    props = root / ".hoodie/hoodie.properties"
    good = props.read_bytes()
    (root / ".hoodie/hoodie.properties.backup").write_bytes(good)
    props.write_text("".join(props.read_text().splitlines(keepends=True)[:9]))
    assert findings(root) == [("properties", ".hoodie/hoodie.properties", True,
                               "restore hoodie.properties from hoodie.properties.backup")]
    run = doctor(root, "--fix")
    assert run.returncode == 0, run.stdout
    assert run.stdout.splitlines()[0] == (
        "fixed: restored .hoodie/hoodie.properties from .hoodie/hoodie.properties.backup "
        "(.hoodie/hoodie.properties lacks hoodie.table.checksum)"
    )
    assert props.read_bytes() == good and not (root / ".hoodie/hoodie.properties.backup").exists()


def test_a_stray_file_in_a_partition_folder_is_not_a_finding(root: Path) -> None:
    """A parquet file whose name is not a base file's is neither data nor damage to the table:
    readers skip it, and the doctor neither reports it nor trips on its name."""
    (root / "x" / "notes.parquet").write_bytes(b"not a base file")
    assert findings(root) == []


def test_properties_that_disagree_with_the_data(root: Path, monkeypatch) -> None:
    props = root / ".hoodie/hoodie.properties"
    props.write_text("".join(line for line in props.read_text().splitlines(keepends=True)
                             if not line.startswith("hoodie.table.partition.fields")))
    assert diagnose(Storage(root)).findings == [Finding(
        "properties", ".hoodie/hoodie.properties",
        "disagrees with the table: it names no partition fields, but a data folder holds partition 'x' (depth 1)",
        fix="rebuild hoodie.properties from the table",
    )]
    assert whole_table_listings(monkeypatch, root) == 1  # the disagreement and the rebuild's check share it
    run = doctor(root)
    assert run.returncode == 1
    assert ".hoodie/hoodie.properties: disagrees with the table" in run.stdout


def test_failed_write_its_files_and_fix_rolls_it_back(root: Path, monkeypatch) -> None:
    rows = open_table(root).read().num_rows
    client = open_table(root).write_client()
    instant = client.start_commit()
    client.upsert(batch(["a", "n"], ["x", "y"], ts=9), instant)  # files written, never committed
    client.writes.get(instant).heartbeat.stop()  # the writer dies: no heartbeat (as Hudi's single writer)
    written = sorted(p.relative_to(root).as_posix() for p in root.glob(f"*/*_{instant}.parquet"))
    assert len(written) == 2
    # a fresh pending write may be running: a note, not a problem
    assert [(f[0], f[2]) for f in findings(root)] == [("pending", False)]
    assert doctor(root).returncode == 0
    # a data file still being written keeps the write alive, though its instant files are old
    age([*root.glob(f".hoodie/{instant}*"), *(root / ".hoodie/.temp").rglob("*"), *(root / ".hoodie/.keys").rglob("*")])
    assert [(f[0], f[2]) for f in findings(root)] == [("pending", False)]
    age(root.glob(f"*/*_{instant}.parquet"))
    assert findings(root) == [
        ("pending", f".hoodie/{instant}.inflight", True, f"roll back {instant}"),
        *[("orphan", path, True, f"roll back {instant}") for path in written],
    ]
    assert whole_table_listings(monkeypatch, root) == 1  # the failed-write check and the orphan check share it
    run = doctor(root, "--fix", "--json")
    report = json.loads(run.stdout)
    assert run.returncode == 0 and report["ok"] and report["findings"] == []
    assert report["fixed"] == [f"rolled back failed write .hoodie/{instant}.inflight (2 data file(s) deleted)"]
    assert not any(root.glob(f"*/*_{instant}.parquet")) and not any(root.glob(f".hoodie/{instant}*"))
    assert open_table(root).read().num_rows == rows


def test_orphans_of_unknown_instants_newer_than_the_timeline_only(root: Path) -> None:
    first, _, last = commits(root)
    source = next(root.glob(f"x/*_{last.stem}.parquet"))
    newer = source.with_name(source.name.replace(last.stem, str(int(last.stem) + 5)))
    older = source.with_name(source.name.replace(last.stem, str(int(first.stem) - 5)))
    shutil.copy(source, newer)
    shutil.copy(source, older)  # before the active timeline: maybe archived by Hudi, never touched
    orphan = newer.relative_to(root).as_posix()
    assert findings(root) == [("orphan", orphan, True, "delete the file")]
    run = doctor(root, "--fix")
    assert run.stdout.splitlines() == [f"fixed: deleted orphaned file {orphan}", f"no problems found in {root}"]
    assert not newer.exists() and older.exists()


def test_missing_committed_files_but_not_those_a_clean_removed(root: Path) -> None:
    open_table(root).clean(retained=1)  # removes older versions: not missing
    assert findings(root) == []
    latest = commits(root)[-1]
    gone = next(root.glob(f"x/*_{latest.stem}.parquet"))
    gone.unlink()
    rel = gone.relative_to(root).as_posix()
    assert diagnose(Storage(root)).findings == [Finding(
        "missing", rel, f"committed by .hoodie/{latest.name} but gone, and no completed clean removed it")]
    assert doctor(root, "--fix").returncode == 1  # nothing safe to do about it


def test_corrupt_instant_and_partition_without_metadata(root: Path) -> None:
    first = commits(root)[0]
    first.write_bytes(first.read_bytes()[:50])
    (root / "y/.hoodie_partition_metadata").unlink()
    report = diagnose(Storage(root))
    assert [(f.check, f.path) for f in report.findings] == [
        ("instant", f".hoodie/{first.name}"), ("partition", "y/.hoodie_partition_metadata")]
    assert report.findings[0].message.startswith(f"cannot parse {first}: ")
    assert "Every write and table service is refused" in report.findings[0].message
    assert report.findings[1].message == "missing: readers skip the 1 data file(s) of y"
    run = doctor(root)
    assert run.returncode == 1
    assert run.stdout.splitlines()[-1] == f"2 problem(s) in {root}, 0 fixable with --fix"


def test_expired_heartbeat_of_a_finished_write_is_a_note(root: Path) -> None:
    beat = root / ".hoodie/.heartbeat/20200101000000000"
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.write_bytes(b"")
    age([beat])
    assert findings(root) == [("heartbeat", ".hoodie/.heartbeat/20200101000000000", False, None)]
    assert doctor(root).returncode == 0


def test_not_a_table(tmp_path: Path) -> None:
    run = doctor(tmp_path)
    assert run.returncode == 2 and "TableNotFoundError" in run.stderr


def test_an_unreadable_archive_is_reported(root: Path) -> None:
    open_table(root).archive({"hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "2",
                              "hoodie.cleaner.commits.retained": "1"})
    archived = list((root / ".hoodie/archived").glob(".commits_.archive.*"))
    assert len(archived) == 1
    data = archived[0].read_bytes()
    at = data.index(b"COMPLETED") - 60  # inside an entry, the blocks' framing intact
    archived[0].write_bytes(data[:at] + b"\xff" * 40 + data[at + 40:])
    report = diagnose(Storage(root))
    assert [(f.check, f.path, f.problem) for f in report.findings] == [("instant", ".hoodie/archived", True)]
    assert report.findings[0].message.startswith(f"cannot parse archived timeline file {archived[0]}")


def test_leftover_backup_is_deleted_only_when_the_properties_agree(root: Path) -> None:
    props = root / ".hoodie/hoodie.properties"
    backup = root / ".hoodie/hoodie.properties.backup"
    backup.write_bytes(props.read_bytes())
    backup_text = backup.read_text()
    assert findings(root) == [("properties", ".hoodie/hoodie.properties.backup", False, "delete the leftover backup")]
    props.write_text("".join(line for line in props.read_text().splitlines(keepends=True)
                             if not line.startswith("hoodie.table.partition.fields")))
    assert findings(root) == [
        ("properties", ".hoodie/hoodie.properties.backup", False, None),
        ("properties", ".hoodie/hoodie.properties", True, "rebuild hoodie.properties from the table"),
    ]
    run = doctor(root, "--fix")
    assert run.returncode == 0 and not backup.exists()
    assert parse_java_properties(props.read_text()) == parse_java_properties(backup_text)
    backup.write_text(backup_text)
    run = doctor(root, "--fix")
    assert run.stdout.splitlines()[0] == (
        "fixed: deleted .hoodie/hoodie.properties.backup, left by an interrupted rewrite (.hoodie/hoodie.properties "
        "is valid)"
    )
    assert run.returncode == 0 and not backup.exists()
