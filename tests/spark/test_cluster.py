"""Spark on a real cluster: a standalone master and one worker, started as processes of their own
on loopback from the pip pyspark, and a driver (tests/scripts/spark_cluster_probe.py) in a third process,
in a working folder the executors do not share. The same writes and reads on an `s3://` table
(the JVM has no S3 connector: tasks go through our storage layer) and on a relative local path.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, SCRIPTS

PROBE = SCRIPTS / "spark_cluster_probe.py"
ROWS = 200_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def wait_for_port(port: int, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one 2-core worker; the master's REST server is off."""
    work = tmp_path_factory.mktemp("cluster")
    master_port, worker_port = free_port(), free_port()
    env = {**os.environ, "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "worker")}
    with open(work / "master.log", "w") as log:  # the process keeps its own copy of the handle
        master = subprocess.Popen([spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(master_port), "--webui-port", str(free_port())],
                                  env=env, stdout=subprocess.DEVNULL, stderr=log)
    procs = [master]
    try:
        wait_for_port(master_port, master)
        url = f"spark://127.0.0.1:{master_port}"
        with open(work / "worker.log", "w") as log:
            worker = subprocess.Popen([spark_class(), "org.apache.spark.deploy.worker.Worker", url, "--host",
                                       "127.0.0.1", "--port", str(worker_port), "--webui-port", str(free_port()),
                                       "--cores", "2", "--memory", "2g", "--work-dir", str(work / "worker")],
                                      env=env, stdout=subprocess.DEVNULL, stderr=log)
        procs.append(worker)
        wait_for_port(worker_port, worker)
        yield url
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def expected(rows: int) -> list[dict]:
    """What the probe's steps leave: the model of its batches."""
    fares = {i: float(i) for i in range(rows)}
    steps = []
    for first, last, ts in ((0, rows // 10, 2), (rows // 20, rows // 20 + rows // 10, 3)):
        steps.append(dict(fares))
        fares.update({i: float(i * ts) for i in range(first, last)})
    after_upserts = dict(fares)
    for i in range(100):
        fares.pop(i, None)
    after_delete = dict(fares)
    fares.update({i: float(i * 4) for i in range(rows, rows + 10)})
    out = []
    for model in (steps[0], steps[1], after_upserts, after_delete, fares):
        total = sum(model.values())
        out.append({"rows": len(model), "fare": total, "source_rows": len(model), "source_fare": total})
    return out


def run_probe(cluster: str, tables: list[tuple[str, dict]], cwd: Path) -> dict:
    """One driver process (in `cwd`) running the probe's steps on each (table, storage options)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # no store settings in the env
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYSPARK_PYTHON"] = sys.executable  # RDD jobs take their workers' interpreter from it
    args = [sys.executable, str(PROBE), cluster, str(ROWS), json.dumps(tables)]
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.spark
@pytest.mark.slow
def test_a_standalone_cluster_writes_and_reads_s3_and_relative_local_tables(cluster, s3_server, s3_table,
                                                                            tmp_path: Path) -> None:
    want = expected(ROWS)
    driver_folder = tmp_path / "driver"
    driver_folder.mkdir()
    done = run_probe(cluster, [(s3_table, s3_server.options), ("tables/t", {})], driver_folder)
    assert list(done[s3_table]["steps"].values()) == want
    assert list(done["tables/t"]["steps"].values()) == want
    assert (driver_folder / "tables" / "t" / ".hoodie" / "hoodie.properties").exists()
    assert not list(driver_folder.rglob("*spark-staging*"))  # staging cleaned where it was made
    assert not list(driver_folder.rglob("*.staging"))
    bucket, _, prefix = s3_table[len("s3://"):].partition("/")
    assert not [k for k in s3_server.keys(bucket, prefix) if "spark-staging" in k or ".staging/" in k]
