"""The benchmark harness in a small configuration: every available peer (Spark ones excepted: a JVM
per run is too slow here) is verified on every workload with tiny data. Correctness only, no timing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))

import harness  # noqa: E402
import runner  # noqa: E402
from peers import make_peer  # noqa: E402
from report import write_report  # noqa: E402
from workloads import WORKLOADS, make_batch, verify  # noqa: E402

ROWS, BATCH = 20_000, 2_000
PEERS = ["upsertlake", "upsertlake:BLOOM", "upsertlake:INMEMORY", "delta-rs", "duckdb", "pyiceberg"]


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("peer", PEERS)
def test_peer_verified(peer: str, workload: str, tmp_path: Path) -> None:
    why = make_peer(peer).unavailable()
    if why:
        pytest.skip(why)
    r = runner.run({"peer": peer, "workload": workload, "rows": ROWS, "batch": BATCH, "work": str(tmp_path / "w")})
    assert r["status"] == "ok", r["errors"]
    assert r["bytes_written"] > 0


def test_verify_catches_a_wrong_table() -> None:
    batch, expected = make_batch("uniform", ROWS, BATCH)
    assert verify(expected, expected.rows + 1, batch.select(["key", "ts", "fare"]).slice(0, 0))


def test_harness_process_timeout_and_report(tmp_path: Path) -> None:
    spec = {"peer": "upsertlake", "workload": "uniform", "rows": ROWS, "batch": BATCH, "work": str(tmp_path / "w")}
    assert harness.run_once(spec, timeout=0.01)["status"] == "timeout"
    ok = harness.run_once(spec, timeout=120)
    assert ok["status"] == "ok", ok["errors"]
    entry = {"peer": "upsertlake", "workload": "uniform", "rows": ROWS, "batch": BATCH, "runs": [ok]}
    doc = {"size": "tiny", "repeat": 1, "timeout": 120, "cpus": 2, "started": "now", "skipped": {"x": "why"}, "peers": [entry]}
    (tmp_path / "results-peers-tiny.json").write_text(json.dumps(doc))
    text = write_report(tmp_path).read_text()
    assert "| uniform | 20,000 + 2,000 | upsertlake |" in text and (tmp_path / "peers-tiny-peers.png").exists()
