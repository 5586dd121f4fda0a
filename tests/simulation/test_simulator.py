"""The conflict simulator, driven as users run it (`upsertlake simulate` in a subprocess), and its
checker shown to catch violations on a table broken on purpose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake import open_table
from upsertlake.simulation.invariants import check_table

from helpers import REPO


def simulate(table: Path, *args: str) -> tuple[int, dict]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "upsertlake.cli", "simulate", "--table", str(table), "--json", *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_disjoint_writers_all_commit(tmp_path: Path) -> None:
    code, report = simulate(tmp_path / "t", "--writers", "3", "--commits", "3", "--overlap", "0")
    assert code == 0, report["violations"]
    assert (report["attempted"], report["committed"], report["conflicted"], report["killed"]) == (9, 9, 0, 0)
    assert report["hudi_reader"] == "agrees" and report["ok"] is True


@pytest.mark.parametrize("version", ["6", "8"])
def test_writers_on_disjoint_keys_of_shared_file_groups_never_conflict(tmp_path: Path, version: str) -> None:
    """Every write touches the one file group of the shared partition, on records of its own: each
    later commit merges again onto the other's version (or moves to a new instant), none fails."""
    # Six commits each: with four, how often two writers overlap depends on timing, and some runs
    # re-merged nothing (kills land at storage writes, so a killed writer leaves the race early).
    code, report = simulate(
        tmp_path / "t", "--writers", "3", "--commits", "6", "--overlap", "0.5", "--disjoint-keys",
        "--kill-rate", "0.2", "--seed", "3", "--table-version", version,
    )
    assert code == 0, report["violations"]
    assert (report["attempted"], report["conflicted"], report["failed"]) == (18, 0, 0)
    assert report["committed"] + report["committed_unacknowledged"] + report["killed"] >= 18
    assert report["remerged"] >= 1 and report["commit_seconds_remerged"] > 0
    assert report["hudi_reader"] == "agrees" and report["ok"] is True


@pytest.mark.parametrize("version", ["6", "8"])
def test_overlapping_writers_with_kills_keep_every_invariant(tmp_path: Path, version: str) -> None:
    code, report = simulate(
        tmp_path / "t", "--writers", "3", "--commits", "4", "--overlap", "0.5", "--kill-rate", "0.3", "--seed", "7",
        "--table-version", version,
    )
    assert code == 0, report["violations"]
    assert report["violations"] == [] and report["attempted"] == 12
    # every attempt ends one way: acknowledged, conflicted, killed (before or after its commit)
    outcomes = report["committed"] + report["conflicted"] + report["killed"]
    assert outcomes >= 12 and report["committed"] >= 1


@pytest.mark.parametrize("version", ["6", "8"])
def test_writers_on_a_merge_on_read_table_with_kills_keep_every_invariant(tmp_path: Path, version: str) -> None:
    """Appends to shared slices, conflicts on records, kills, inline compactions (every 3
    deltacommits, when no other write is pending unannounced), then a last compaction: checked
    before and after it. On version 6 two writers that planned the same slice took the same log
    file name and the second failed; it rolls over to the next version now."""
    code, report = simulate(
        tmp_path / "t", "--writers", "3", "--commits", "6", "--overlap", "0.5", "--kill-rate", "0.3", "--seed", "7",
        "--table-version", version, "--table-type", "MERGE_ON_READ",
    )
    assert code == 0, report["violations"]
    assert report["violations"] == [] and report["attempted"] == 18 and report["failed"] == 0
    assert report["committed"] + report["conflicted"] + report["killed"] >= 18 and report["committed"] >= 1
    assert report["hudi_reader"] == "agrees" and report["ok"] is True
    table = open_table(tmp_path / "t")
    assert table.table_config.is_merge_on_read
    assert {i.action.value for i in table.timeline()} >= {"deltacommit", "commit"}  # the compactions'


def test_checker_catches_a_lost_commit_and_a_duplicate(tmp_path: Path) -> None:
    table = tmp_path / "t"
    code, _ = simulate(table, "--writers", "2", "--commits", "2", "--overlap", "0")
    assert code == 0
    journal = Path(f"{table}.simulate")
    assert check_table(str(table), journal)["violations"] == []

    broken = tmp_path / "broken"
    shutil.copytree(table, broken)
    shutil.copytree(journal, Path(f"{broken}.simulate"))
    acked = (Path(f"{broken}.simulate") / "acked-w0.txt").read_text().split()
    (broken / ".hoodie" / f"{acked[-1]}.commit").unlink()  # an acknowledged commit disappears
    violations = check_table(str(broken), Path(f"{broken}.simulate"))["violations"]
    assert f"acknowledged commit {acked[-1]} is not on the timeline" in violations
    assert any(v.startswith("data file of an uncommitted write left behind") for v in violations)
    assert any(v.startswith("instants left pending after cleanup") for v in violations)

    # the table holds other values than the writer sent
    first = max(Path(f"{table}.simulate").glob("batch-*.parquet"))
    sent = pq.read_table(first)
    pq.write_table(sent.set_column(2, "v", pa.array(["tampered"] * sent.num_rows)), first)
    violations = check_table(str(table), journal)["violations"]
    assert len(violations) == 1 and violations[0].startswith("snapshot differs from the serial application")
    pq.write_table(sent, first)

    # a key written twice by a plain insert (as two writers inserting it concurrently would)
    t = open_table(table)
    dup = t.read(columns=["id", "ts", "v", "p"]).slice(0, 1)
    t.insert(dup.append_column("_hoodie_is_deleted", pa.array([False])), {"hoodie.parquet.small.file.limit": 0})
    violations = check_table(str(table), journal)["violations"]
    assert "1 keys appear more than once" in violations
    assert any(v.startswith("commit ") and "was not written by any simulated writer" in v for v in violations)


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "upsertlake.cli", "simulate", "--table", str(tmp_path / "t"), "--overlap", "1.5"],
        env=env, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == "error: --overlap must be between 0 and 1\n"
    assert not (tmp_path / "t").exists()
