"""Spark sessions for upsertlake: workers that run the interpreter holding our packages.

PySpark starts its Python workers with PYSPARK_PYTHON (SQL workers may also take
`spark.pyspark.python`), else plain `python3`, which for a venv used without activation has no
pyarrow. Sessions the project starts
(ingest, benchmarks, tests) use `build_session`; every distributed write first checks, once per
Spark application, that the workers can import pyarrow and upsertlake.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from upsertlake.errors import ConfigError
from upsertlake.layout.base_files import is_lance, open_base_file
from upsertlake.storage import Storage

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext, StatusTracker
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


_CHECKED: set[str] = set()
F = TypeVar("F", bound=Callable[..., object])
T = TypeVar("T")
R = TypeVar("R")

# PySpark 4.x warns (FutureWarning) that it does not fully support pandas 3 wherever it checks
# pandas, including inside mapInArrow (which builds a pandas_udf object) and at some imports.
# Our Spark paths hand Spark Arrow batches, never pandas objects, so that warning says nothing
# about them: they silence it, and only it, while they run. A user's own pandas calls into
# PySpark still get it. (The extras do not cap pandas below 3: installing them must not
# downgrade the user's pandas.)
PANDAS3_WARNING = "PySpark does not yet fully support pandas >= 3.0.0"


def arrow_only(func: F) -> F:
    """Run `func` with PySpark's pandas-3 FutureWarning silenced (see PANDAS3_WARNING)."""

    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=re.escape(PANDAS3_WARNING), category=FutureWarning)
            return func(*args, **kwargs)

    return cast(F, wrapper)


@arrow_only
def build_session(master: str = "local[2]", app: str = "upsertlake", **conf: str) -> SparkSession:
    """A session whose workers (and driver) run this interpreter; `conf`: more Spark settings."""
    from pyspark.sql import SparkSession

    # PySpark's RDD jobs take the workers' interpreter from PYSPARK_PYTHON (else `python3` on the
    # PATH), not from spark.pyspark.python: set both.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@arrow_only
def check_workers(spark: SparkSession) -> None:
    """Raise ConfigError naming the workers' interpreter when it cannot import pyarrow or
    upsertlake (checked once per application: one tiny job). When the workers run this very
    interpreter (local mode, `build_session`), the check is a SQL Arrow job, which starts the same
    Python worker pool the write then uses (an RDD job would start a second one, about a second in
    a fresh process); otherwise an RDD job, which needs no pyarrow in the workers, so that our
    error, not a failed task's Java trace, is the first thing printed."""
    sc = spark.sparkContext
    if sc.applicationId in _CHECKED:
        return

    # Defined here, so that they are shipped by value and need nothing of ours in the workers.
    def missing_modules() -> list[str]:
        import importlib

        missing = []
        for name in ("pyarrow", "upsertlake"):
            try:
                importlib.import_module(name)
            except ImportError as exc:
                missing.append(f"{name} ({exc})")
        return missing

    def arrow_probe(batches: Iterator[object]) -> Iterator[object]:
        import sys as worker_sys

        import pyarrow as worker_pa

        for _ in batches:
            pass
        missing = "; ".join(missing_modules())
        yield worker_pa.RecordBatch.from_pydict({"python": [worker_sys.executable], "missing": [missing]})

    def rdd_probe(_: object) -> list[list[str]]:
        import sys as worker_sys

        return [[worker_sys.executable, *missing_modules()]]

    if _runs_this_interpreter(sc):
        # The workers are this process's interpreter, which has pyarrow: the Arrow probe cannot
        # fail on an import, and it starts the worker pool the write then uses.
        executable, missing = (
            spark.range(1, numPartitions=1).mapInArrow(arrow_probe, "python string, missing string").collect()[0]
        )
        missing_list = [m for m in missing.split("; ") if m]
    else:
        # An RDD job needs no pyarrow in the workers, so a missing module is reported by us
        # first, not by Spark's log of a failed task (80 lines of Java trace).
        executable, *missing_list = sc.parallelize([0], 1).mapPartitions(rdd_probe).collect()[0]
    if missing_list:
        raise ConfigError(
            f"Spark's Python workers run {executable}, which cannot import {', '.join(missing_list)}. "
            f"Build the session with upsertlake.spark.build_session(master) (its workers run this "
            f"interpreter, {sys.executable}), or set PYSPARK_PYTHON (and spark.pyspark.python) to an "
            f"interpreter that has upsertlake before the session starts"
        )
    _CHECKED.add(sc.applicationId)


def _runs_this_interpreter(sc: SparkContext) -> bool:
    """Whether the Python workers are local processes of the interpreter running this code (by
    path, not resolved: a venv's python is a symlink to a system interpreter without its packages)."""
    if not str(sc.master).startswith("local"):
        return False
    names = {sc.pythonExec or "python3", sc.getConf().get("spark.pyspark.python") or sc.pythonExec or "python3"}
    paths = {os.path.abspath(shutil.which(n) or n) for n in names}
    return paths == {os.path.abspath(sys.executable)}


# What a distributed write changes in its session while it runs (spark.sql.shuffle.partitions is
# set per write to its number of tasks):
# - the write caches its prepared and tagged batch, and Spark's in-memory cache dictionary-encodes
#   each column by default: that cost a fifth of the JVM's samples of a late-arriving upsert, for
#   data read twice and then dropped;
# - every shuffle is partitioned explicitly, so adaptive execution only adds a re-planning round
#   per stage (a fifth of a small upsert's time);
# - no automatic broadcast: a broadcast passes through the driver, and both sides of the tagging
#   join grow with the records (the file listing is broadcast by an explicit hint);
# - Arrow batches to the Python tasks are bounded by rows only (maxRecordsPerBatch): Spark 4's
#   byte bound measures the batch being built after every row, and each task holds its whole
#   input in Python anyway.
WRITE_SETTINGS = {
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),  # Int.MaxValue: no byte bound
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}


@contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL settings of the session for the duration of a write, then restore them."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


# Up to this many files named to Spark's parquet reader are looked up (one status call each) by
# the driver itself; above, Spark lists them in a job (from 33 files by default). Our storage is
# a local file system, where a status call takes microseconds and a listing job a large part of a
# second.
FILES_LISTED_ON_DRIVER = 10_000


FILE_NAME = "__upsertlake_file_name"


def scan_files(
    spark: SparkSession,
    schema: StructType,
    storage: Storage,
    paths: Sequence[str],
    file_names: bool = False,
    in_tasks: bool = False,
) -> DataFrame:
    """A DataFrame over these parquet files (table-relative paths our file-system view listed) with
    `schema`, and with `file_names` a column FILE_NAME naming each row's file. A file that is gone
    when a task opens it fails the task, whatever `spark.sql.files.ignoreMissingFiles` says:
    skipping a committed file would return a snapshot without its rows.

    On a local table through Spark's own reader (its file index is made when the DataFrame is). On
    an object store, which a JVM without the store's Hadoop connector cannot read, one task per
    file reads it through our storage layer (the Storage, with its settings, travels with it); so
    are Lance base files, which Spark's readers do not know, and files the caller asks to be read
    so (`in_tasks`: their types need a conversion Spark's reader does not make)."""
    if in_tasks or storage.os_path() is None or any(is_lance(p) for p in paths):
        from pyspark.sql.types import StringType, StructField, StructType

        from upsertlake.spark.types import arrow_schema_of

        out = StructType([*schema.fields, *([StructField(FILE_NAME, StringType())] if file_names else [])])
        files = spark.createDataFrame([(p,) for p in paths], "path string").repartition(max(1, len(paths)))
        return files.mapInArrow(functools.partial(_read_files, storage, arrow_schema_of(out), file_names), out)
    threshold = {"spark.sql.sources.parallelPartitionDiscovery.threshold": str(FILES_LISTED_ON_DRIVER)}
    with session_settings(spark, threshold):
        frame = spark.read.schema(schema).option("ignoreMissingFiles", "false").parquet(
            *[storage.full_path(p) for p in paths]
        )
    if file_names:
        from pyspark.sql import functions

        frame = frame.select("*", functions.col("_metadata.file_name").alias(FILE_NAME))
    return frame


def _read_files(storage: Storage, target: Any, file_names: bool, batches: Iterator[Any]) -> Iterator[Any]:
    """Task: read the files named in `batches` (one path a row) into the `target` Arrow schema; a
    column a file lacks (written before it was added) is null, as Spark's reader gives it."""
    import pyarrow as pa

    for batch in batches:
        for path in batch.column(0).to_pylist():
            parquet = open_base_file(storage, path)
            data = parquet.read(columns=[n for n in target.names if n in parquet.schema_arrow.names])
            cols = [data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
                    for f in target if f.name != FILE_NAME]
            if file_names:
                cols.append(pa.array([path.rsplit("/", 1)[-1]] * data.num_rows, pa.string()))
            yield from pa.Table.from_arrays(cols, schema=target).to_batches()


SETTLE_SECONDS = 60.0


def each_in_task(spark: SparkSession, fn: Callable[[T], R], items: list[T]) -> list[R]:
    """`fn` of each item, each item a Spark task (a file a task writes or reads), the results
    collected in order (`collect_settled`)."""
    return collect_settled(spark, spark.sparkContext.parallelize(items, max(1, len(items))).map(fn))


def collect_settled(spark: SparkSession, frame: DataFrame | RDD[Any]) -> list[Any]:
    """`frame.collect()` for a job whose tasks write files. When the job fails, Spark raises at
    once while its other tasks may still be running and about to write theirs; a rollback then
    would miss those files and leave them behind. So on failure, wait (up to SETTLE_SECONDS) until
    no task of the job is active any more, then raise."""
    import time
    import uuid

    sc = spark.sparkContext
    group = f"upsertlake-write-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "upsertlake: write files", interruptOnCancel=True)
    try:
        return frame.collect()
    except BaseException:
        tracker, deadline = sc.statusTracker(), time.monotonic() + SETTLE_SECONDS
        sc.cancelJobGroup(group)
        while time.monotonic() < deadline and _active_tasks(tracker, group):
            time.sleep(0.05)
        raise
    finally:
        # None clears a local property (SparkContext.setLocalProperty); PySpark's stub types only str.
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def _active_tasks(tracker: StatusTracker, group: str) -> int:
    """Tasks of the group's jobs that are still running."""
    active = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            active += stage.numActiveTasks if stage is not None else 0
    return active
