"""The README's Python examples run as written: every ```python block outside the Spark section,
in order, in one namespace, from a temporary working folder (the examples make their own table
folder with tempfile)."""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import pytest

from helpers import REPO

README = REPO / "README.md"


def python_blocks() -> list[str]:
    """The blocks outside the Spark section; the DuckDB one only where duckdb is installed (it is
    no dependency of ours, and too large a download for the test extra)."""
    text = README.read_text("utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "upsertlake.spark" not in b]
    return [b for b in blocks if "import duckdb" not in b or importlib.util.find_spec("duckdb") is not None]


def test_the_readme_has_the_examples() -> None:
    text = README.read_text("utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "upsertlake.spark" not in b]
    assert len(blocks) == 4
    assert "create_table" in blocks[0] and "t.scan(" in blocks[1] and "t.cluster()" in blocks[2]
    assert "s3://lake/trips" in blocks[3]


def use_the_test_s3_server(s3_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The object-storage example's environment: the test server, an empty bucket `lake`."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    client = s3_server.client
    if "lake" not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket="lake")
    for key in s3_server.keys("lake"):
        client.delete_object(Bucket="lake", Key=key)


def test_readme_python_examples_run(s3_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pandas")  # the example calls .to_pandas(), as the README says
    use_the_test_s3_server(s3_server, monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    namespace: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the examples use today's names: no deprecation, no warning
        for block in python_blocks():
            exec(compile(block, str(README), "exec"), namespace)
    t = namespace["t"]
    assert Path(str(namespace["path"])).is_relative_to(tmp_path)
    # read_incremental(begin=r.instant_time) returns what its comment says: b with its new fare.
    assert namespace["changed"].select(["uuid", "fare"]).to_pylist() == [{"uuid": "b", "fare": 4.0}]
    if "fares" in namespace:  # the DuckDB example ran: the snapshot's rows only, not old versions
        assert namespace["fares"] == [("b", 5.0)]
        assert namespace["cheap"] == [("b",)] and namespace["viewed"] == [(1,)]
    assert namespace["res"].reason.startswith("no partition has two file groups below")  # one group each
    actions = [i.action.value for i in t.timeline()]
    assert actions == [
        "commit",
        "commit",
        "commit",
        "savepoint",
        "rollback",
        "restore",
        "replacecommit",
        "replacecommit",
    ]
    assert sorted(t.read().column("city").to_pylist()) == ["nyc"]  # sf was retired last
    assert namespace["same"].read().num_rows == 2
    assert all(f.startswith("s3://lake/trips/") for f in namespace["same"].files())


@pytest.mark.spark
def test_readme_spark_example_runs_after_the_others(spark, s3_server, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The Spark block continues the Use example (its `batch` and `path`), on the tests' session."""
    use_the_test_s3_server(s3_server, monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    text = README.read_text("utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    spark_blocks = [b for b in blocks if "upsertlake.spark" in b and "writeStream" not in b]
    assert len(spark_blocks) == 1  # the streaming one runs in tests/spark/test_streaming.py
    namespace: dict[str, object] = {}
    for block in python_blocks() + spark_blocks:
        exec(compile(block, str(README), "exec"), namespace)
    t = namespace["t"]
    assert sorted(t.read().column("uuid").to_pylist()) == ["a", "b"]  # upserted, one deleted, both saved again
    assert namespace["i"] in [x.time for x in t.timeline()]
