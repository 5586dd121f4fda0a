"""Shared fixtures: real Hudi tables unzipped per test, and a snapshot helper for exact comparisons."""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

import pytest

HUDI_TABLES = Path(__file__).resolve().parent / "hudi_tables"


def unzip_hudi_table(name: str, dest: Path) -> Path:
    """Unzip `<name>.zip` from tests/hudi_tables into dest; returns the table's folder."""
    with zipfile.ZipFile(HUDI_TABLES / f"{name}.zip") as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX")]
        zf.extractall(dest, members)
    return dest / name


@pytest.fixture
def hudi_table(tmp_path: Path):
    """A function that unzips a reference table into this test's temporary folder."""
    return lambda name: unzip_hudi_table(name, tmp_path)


@pytest.fixture(params=[6, 8], ids=["v6", "v8"])
def table_version(request, monkeypatch) -> int:
    """Runs a test once per writable table version: tables it creates without naming
    hoodie.write.table.version get this version (the option's default is patched for the test)."""
    from dataclasses import replace

    from upsertlake.config import options as opt

    monkeypatch.setattr(opt, "WRITE_TABLE_VERSION", replace(opt.WRITE_TABLE_VERSION, default=request.param))
    return request.param


def tree_digest(root: Path) -> dict[str, str]:
    """Every file below root with the SHA-256 of its bytes: 'the table is exactly as it was'."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (start-up costs seconds)."""
    from pyspark.sql import SparkSession

    import upsertlake.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable  # RDD jobs read this, not spark.pyspark.python
    session = (
        SparkSession.builder.master("local[2]")
        .appName("upsertlake-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)  # workers run the interpreter with our packages
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    upsertlake.spark.register(session)
    yield session
    session.stop()
