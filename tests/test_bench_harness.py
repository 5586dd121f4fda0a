"""The benchmark harness in a small configuration (20K rows + 2K batch): every available in-process
peer is verified on every workload, the Spark peers on the late-arriving one. Correctness only, no
timing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import harness
import runner
import spark_bench
from peers import make_peer
from report import write_report
from workloads import WORKLOADS, first_id_of_day, make_base, make_batch, verify

ROWS, BATCH, DAYS = 20_000, 2_000, 10  # late: the newest 2 of 10 days hold 4,000 rows for 1,900 updates
PEERS = ["upsertlake", "upsertlake:BLOOM", "upsertlake:INMEMORY", "delta-rs", "duckdb", "pyiceberg"]
MATRIX = [(p, w) for p in PEERS for w in WORKLOADS] + [
    (p, w) for p in ("pyarrow-limit", "delta-rs+part") for w in ("uniform", "late")
]


def _spec(peer: str, workload: str, tmp_path: Path, **extra: object) -> dict:
    days = {"days": DAYS} if workload == "late" else {}
    return {
        "peer": peer,
        "workload": workload,
        "rows": ROWS,
        "batch": BATCH,
        "work": str(tmp_path / "w"),
        **days,
        **extra,
    }


@pytest.mark.parametrize(("peer", "workload"), MATRIX)
def test_peer_verified(peer: str, workload: str, tmp_path: Path) -> None:
    assert make_peer(peer).unavailable() is None  # the test extra brings every peer's library
    r = runner.run(_spec(peer, workload, tmp_path))
    assert r["status"] == "ok", r["errors"]
    assert r["bytes_written"] > 0


def test_late_arriving_batch_shape() -> None:
    """95% updates of stored keys in the newest 2 days, 5% new keys on the newest day, no duplicates."""
    batch, expected = make_batch("late", ROWS, BATCH, days=DAYS)
    ids = pc.cast(pc.utf8_slice_codeunits(batch["key"], 1), "int64").to_numpy()
    updates, inserts = ids[ids < ROWS], ids[ids >= ROWS]
    assert (len(updates), len(inserts), len(np.unique(ids))) == (1_900, 100, 2_000)
    assert updates.min() >= first_id_of_day(DAYS - 2, ROWS, DAYS) == 16_000
    assert set(batch["part"].to_pylist()) == {"08", "09"}
    assert set(
        batch.filter(pc.greater_equal(pc.cast(pc.utf8_slice_codeunits(batch["key"], 1), "int64"), ROWS))[
            "part"
        ].to_pylist()
    ) == {"09"}
    base = make_base(ROWS, DAYS)
    assert base["part"].to_pylist()[15_999:16_001] == ["07", "08"]
    assert (expected.rows, expected.ts_sum) == (ROWS + 100, 2 * BATCH)
    with pytest.raises(ValueError, match="do not fit"):
        make_batch("late", ROWS, 5_000, days=DAYS)


def test_verify_catches_a_wrong_table() -> None:
    batch, expected = make_batch("uniform", ROWS, BATCH)
    probes = batch.select(["key", "ts", "fare"]).slice(0, 0)
    assert verify(expected, expected.rows + 1, expected.ts_sum, probes)
    assert any("sum of ts" in e for e in verify(expected, expected.rows, expected.ts_sum - 2, probes))


def test_physical_limit_writes_what_upsertlake_writes(tmp_path: Path) -> None:
    """The pyarrow-limit peer reads the files our upsert replaced and writes the same files."""
    hoodie = {"hoodie.parquet.max.file.size": 200_000}
    ours = runner.run(_spec("upsertlake", "late", tmp_path, hoodie=hoodie))
    limit = runner.run(_spec("pyarrow-limit", "late", tmp_path, hoodie=hoodie))
    assert ours["status"] == limit["status"] == "ok", (ours["errors"], limit["errors"])
    assert limit["files_written"] == ours["files_written"] > limit["files_read"] > 1
    assert abs(limit["bytes_written"] - ours["bytes_written"]) < 0.02 * ours["bytes_written"]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("peer", ["spark-overwrite", "spark-rewrite", "upsertlake-spark"])
def test_spark_peer_verified(spark: object, peer: str, tmp_path: Path) -> None:
    assert make_peer(peer).unavailable() is None  # the test extra brings every peer's library
    r = runner.run(_spec(peer, "late", tmp_path))
    assert r["status"] == "ok", r["errors"]
    assert spark.sparkContext._jsc is not None  # the test's session was borrowed, not stopped


def test_harness_process_timeout_and_report(tmp_path: Path) -> None:
    spec = _spec("upsertlake", "uniform", tmp_path)
    assert harness.run_once(spec, timeout=0.01)["status"] == "timeout"
    ok = harness.run_once(spec, timeout=120)
    assert ok["status"] == "ok", ok["errors"]
    entry = {"peer": "upsertlake", "workload": "uniform", "rows": ROWS, "batch": BATCH, "runs": [ok]}
    doc = {
        "size": "tiny",
        "repeat": 1,
        "timeout": 120,
        "cpus": 2,
        "started": "now",
        "skipped": {"x": "why"},
        "peers": [entry],
    }
    (tmp_path / "results-peers-tiny.json").write_text(json.dumps(doc))
    text = write_report(tmp_path).read_text()
    assert "| uniform | 20,000 + 2,000 | upsertlake |" in text and (tmp_path / "peers-tiny-peers.png").exists()


def test_the_results_readme_is_what_the_report_makes_of_the_results_folder(tmp_path: Path) -> None:
    """benchmarks/results/README.md lists every current result file, each by its heading (a result
    file renamed or removed without the README regenerated left it linking a missing file)."""
    results = REPO / "benchmarks" / "results"
    for f in [*results.glob("*.json"), *results.glob("*.md")]:
        if f.name != "README.md":
            (tmp_path / f.name).write_bytes(f.read_bytes())
    assert write_report(tmp_path).read_text() == (results / "README.md").read_text()


def test_event_log_counts_result_bytes_and_stages_since_the_last_call(tmp_path: Path) -> None:
    log_file = tmp_path / "events" / "local-1"
    log_file.parent.mkdir()
    task = {"Event": "SparkListenerTaskEnd", "Task Metrics": {"Result Size": 1000}}
    stage = {
        "Event": "SparkListenerStageCompleted",
        "Stage Info": {
            "Stage Name": "toArrow at /some/where/write.py:74",
            "Number of Tasks": 2,
            "Submission Time": 1000,
            "Completion Time": 3500,
        },
    }
    log_file.write_text(json.dumps(task) + "\n")
    log = spark_bench.EventLog(log_file.parent)
    log.skip()
    with log_file.open("a") as f:
        f.write("\n".join(json.dumps(e) for e in (task, task, stage)) + "\n" + '{"Event": "half a li')
    assert log.since() == {
        "result_bytes": 2000,
        "spark_stages": [{"stage": "toArrow at write.py:74", "tasks": 2, "seconds": 2.5}],
    }
    assert log.since() == {"result_bytes": 0, "spark_stages": []}


def test_clone_tree_links_data_files_and_copies_the_rest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / ".hoodie").mkdir(parents=True)
    (src / "09").mkdir()
    (src / ".hoodie" / "hoodie.properties").write_text("a=1")
    (src / "09" / "f.parquet").write_bytes(b"PAR1")
    spark_bench.clone_tree(src, tmp_path / "dst")
    assert (tmp_path / "dst" / "09" / "f.parquet").stat().st_ino == (src / "09" / "f.parquet").stat().st_ino
    (tmp_path / "dst" / ".hoodie" / "hoodie.properties").write_text("a=2")
    assert (src / ".hoodie" / "hoodie.properties").read_text() == "a=1"
