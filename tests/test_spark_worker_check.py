"""A user's own Spark session whose Python workers lack pyarrow: our error, naming the interpreter
and `upsertlake.spark.build_session` (as the README does), is the first thing printed after the
session's start-up lines, not below Spark's log of a failed task and its Java trace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    import upsertlake.spark as uls

    spark = SparkSession.builder.master("local[1]").config("spark.ui.showConsoleProgress", "false").getOrCreate()
    df = spark.createDataFrame([("a", 1, "x")], "id string, ts long, p string")
    print("=== upsert ===", file=sys.stderr, flush=True)
    uls.upsert(df, sys.argv[1], table="t", record_key="id", precombine_field="ts", partition_fields="p")
    """
)


def test_workers_without_pyarrow_print_our_error_first(tmp_path: Path) -> None:
    probe = subprocess.run(["/usr/bin/python3", "-c", "import pyarrow"], capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip("/usr/bin/python3 has pyarrow here")
    env = {**os.environ, "PYSPARK_PYTHON": "/usr/bin/python3"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "t")], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 1
    after = proc.stderr.split("=== upsert ===\n", 1)[1]
    assert after.startswith("Traceback (most recent call last):"), after[:2000]
    assert "\tat org.apache" not in after and "ERROR" not in after.split("upsertlake.errors.ConfigError")[0]
    error = next(line for line in after.splitlines() if line.startswith("upsertlake.errors.ConfigError"))
    assert "workers run /usr/bin/python3, which cannot import pyarrow" in error
    assert "upsertlake.spark.build_session(master)" in error
    assert not (tmp_path / "t").exists()


PANDAS3_SCRIPT = textwrap.dedent(
    """
    import sys, warnings
    warnings.simplefilter("default")
    import pandas
    import upsertlake.spark as uls

    spark = uls.build_session("local[1]")
    uls.register(spark)
    df = spark.createDataFrame([("a", 1, "x"), ("b", 2, "y")], "id string, ts long, p string")
    uls.upsert(df, sys.argv[1], table="t", record_key="id", precombine_field="ts", partition_fields="p")
    assert uls.read(spark, sys.argv[1]).count() == 2
    uls.cluster(spark, sys.argv[1])
    print(pandas.__version__)
    """
)


def test_our_spark_paths_do_not_warn_about_pandas_3(tmp_path: Path) -> None:
    """The extras no longer cap pandas below 3 (no silent downgrade); PySpark's warning that it
    does not fully support pandas 3 is about pandas objects, which our Arrow-only paths never
    hand it, so they do not print it. Runs where pandas 3 is installed."""
    pandas = pytest.importorskip("pandas")
    if int(pandas.__version__.split(".")[0]) < 3:
        pytest.skip(f"pandas {pandas.__version__} is installed; this checks pandas 3")
    proc = subprocess.run(
        [sys.executable, "-c", PANDAS3_SCRIPT, str(tmp_path / "t")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "does not yet fully support pandas" not in proc.stderr
