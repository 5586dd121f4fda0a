"""A user's own Spark session whose Python workers lack pyarrow: our error, naming the interpreter
and `upsertlake.spark.build_session` (as the README does), is the first thing printed after the
session's start-up lines, not below Spark's log of a failed task and its Java trace."""

from __future__ import annotations

import os
import site
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


def bare_python(folder: Path) -> str:
    """An interpreter without pyarrow: a fresh venv of our own Python, no site packages shared."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    assert subprocess.run([python, "-c", "import pyarrow"], capture_output=True, check=False).returncode == 1
    return python


def test_workers_without_pyarrow_print_our_error_first(tmp_path: Path) -> None:
    python = bare_python(tmp_path / "bare")
    env = {**os.environ, "PYSPARK_PYTHON": python}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "t")], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 1
    after = proc.stderr.split("=== upsert ===\n", 1)[1]
    assert after.startswith("Traceback (most recent call last):"), after[:2000]
    assert "\tat org.apache" not in after and "ERROR" not in after.split("upsertlake.errors.ConfigError")[0]
    error = next(line for line in after.splitlines() if line.startswith("upsertlake.errors.ConfigError"))
    assert f"workers run {python}, which cannot import pyarrow" in error
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


def with_pandas_3(folder: Path) -> str:
    """An interpreter seeing what ours sees, but pandas 3 (the test extra pins pandas 2): a venv
    over our site packages, pandas 3 installed into it from PyPI."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    own = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                         text=True, check=True).stdout.strip()
    Path(own, "ours.pth").write_text("\n".join(site.getsitepackages()) + "\n")  # after its own packages
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "pandas>=3"], check=True)
    return python


@pytest.mark.slow
def test_our_spark_paths_do_not_warn_about_pandas_3(tmp_path: Path) -> None:
    """The extras no longer cap pandas below 3 (no silent downgrade); PySpark's warning that it
    does not fully support pandas 3 is about pandas objects, which our Arrow-only paths never
    hand it, so they do not print it."""
    python = with_pandas_3(tmp_path / "pandas3")
    proc = subprocess.run(
        [python, "-c", PANDAS3_SCRIPT, str(tmp_path / "t")], capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1].startswith("3.")
    assert "does not yet fully support pandas" not in proc.stderr


@pytest.mark.spark
def test_ingest_reads_object_store_files_without_the_pandas_3_warning(spark, s3_server, monkeypatch) -> None:
    """`ingest` reads files on an object store with Python tasks (mapInArrow), where PySpark checks
    the pandas version: with pandas 3 it printed PySpark's FutureWarning about pandas objects,
    which those tasks never hand it. PySpark's check is made to see pandas 3 here, whatever is
    installed: it warns for a mapInArrow of the test's own, not for ingest's reading."""
    import warnings

    import pandas

    from upsertlake.cli.ingest import source_files
    from upsertlake.cli.ingest_read import read_sources
    from upsertlake.cli.input_files import FileFormat
    from upsertlake.cli.inputs import InputTypes
    from upsertlake.spark.session import PANDAS3_WARNING

    monkeypatch.setattr(pandas, "__version__", "3.0.0")
    bucket = s3_server.new_bucket()
    s3_server.client.put_object(Bucket=bucket, Key="src/a.csv", Body=b"uuid,ts,city\na,1,sf\nb,2,nyc\n")
    files = source_files(f"s3://{bucket}/src/", FileFormat.CSV, s3_server.options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = read_sources(spark, files, FileFormat.CSV, InputTypes(text_fields=("uuid", "city"))).collect()
        ours = [str(w.message) for w in caught]
        spark.range(1).mapInArrow(lambda batches: batches, "id long").collect()  # the check does warn
    assert sorted((r.uuid, r.ts, r.city) for r in rows) == [("a", 1, "sf"), ("b", 2, "nyc")]
    assert not any(PANDAS3_WARNING in m for m in ours), ours
    assert any(PANDAS3_WARNING in str(w.message) for w in caught[len(ours):])
