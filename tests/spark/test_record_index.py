"""The metadata table's record index on Spark: a Spark write keeps it (its changes staged by the
write tasks, shuffled by record-index file group and written by a task per group), builds it when
asked with a Spark job, tags by it on the executors, and a write that fails after its tasks wrote
the record index's log files leaves it as readers saw it (also one moved to a new instant, whose
staged keys go with it, and a driver killed with -9, which the next writer rolls back). Keys that
live only in log files (the bucket index appends new keys) are kept too. The driver never reads a
key: the in-process runner, which would, fails if called."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake.spark as uls
from upsertlake import create_table, open_table
from upsertlake.simulation.invariants import metadata_violations
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline

from helpers import FAST_HEARTBEAT, spark_write_started, storage_failing_record_index_logs, table_on
from metadata_checks import holds, initializations, log_reads

V8 = {"hoodie.write.table.version": "8", "hoodie.metadata.enable": "true"}
RI = {"hoodie.metadata.record.index.enable": "true"}
DISTRIBUTED = {"upsertlake.small.batch.bytes": 0, "hoodie.parquet.small.file.limit": 0}  # tagged by the join


def rows(ids, ts: int, tag: str, part: str | None = None) -> pa.Table:
    ids = list(ids)
    return pa.table({
        "id": [f"k{i:05d}" for i in ids],
        "ts": pa.array([ts] * len(ids), pa.int64()),
        "v": [f"{tag}-{i}" for i in ids],
        "p": [part or f"p{i % 3}" for i in ids],
    })


def new_table(path: Path, table_type: str = "COPY_ON_WRITE") -> None:
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", table_type=table_type,
                 options=V8)


def refuse_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, the record index's in-process runner (which reads every key in one process) fails."""
    import upsertlake.services.metadata_table as metadata_table

    class Refused:
        def __call__(self, *args, **kwargs):
            raise AssertionError("the driver read the record index's keys")

        each = __call__

    monkeypatch.setattr(metadata_table, "in_process", Refused())


@pytest.fixture
def driver_reads_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_in_process(monkeypatch)


def where(path: Path) -> dict[str, tuple[str, str]]:
    """Each key's (partition, file id), as the table's rows hold it."""
    t = open_table(path).read(columns=["id", "_hoodie_partition_path", "_hoodie_file_name"])
    return {k: (p, n.split("_")[0]) for k, p, n in zip(*(t.column(c).to_pylist() for c in t.column_names))}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_spark_writes_build_and_keep_the_record_index(
    spark, tmp_path: Path, table_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t"
    new_table(path, table_type)
    open_table(path, V8).upsert(rows(range(60), 1, "one"))  # a metadata table without the record index
    open_table(path, V8).delete(rows(range(30, 35), 0, "gone").select(["id", "p"]))  # merge-on-read: a log's deletes
    refuse_in_process(monkeypatch)  # the Spark writes that follow
    assert "record_index" not in holds(path).partitions
    df = spark.createDataFrame
    uls.upsert(df(rows(range(40, 80), 2, "two")), str(path), **RI, **DISTRIBUTED)  # built by a Spark job, then kept
    assert "record_index" in holds(path).partitions
    built = initializations(path)
    uls.delete(df(rows(range(0, 10), 0, "gone").select(["id", "p"])), str(path), **DISTRIBUTED)
    uls.insert(df(rows(range(80, 90), 3, "ins")), str(path))
    moved = {"hoodie.index.type": "GLOBAL_SIMPLE", "hoodie.simple.index.update.partition.path": "true"}
    uls.upsert(df(rows([20, 21], 4, "moved", part="p9")), str(path), **moved, **DISTRIBUTED)
    uls.upsert(df(rows(range(85, 95), 5, "small")), str(path))  # a small batch: tagged and written in one task
    holds(path)
    assert uls.cluster(spark, str(path)).clustered  # its keys moved to the new file groups by Spark tasks
    assert initializations(path) == built  # kept, never built again
    assert sorted(where(path)) == [f"k{i:05d}" for i in range(10, 95) if not 30 <= i < 35]
    assert where(path)["k00020"][0] == "p9"  # moved by the global index, the record index with it


def test_a_spark_upsert_by_record_index_updates_in_place(
    spark, tmp_path: Path, driver_reads_no_key: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RECORD_INDEX tags on the executors: updates land in the file groups that hold their keys,
    a key arriving under another partition stays where it is (global; Hudi's default). No data
    file's keys are read: the record index alone finds them."""
    import upsertlake.spark.tagging as tagging

    for scan in ("_simple_located", "_bloom_located"):
        monkeypatch.setattr(tagging, scan, lambda *args: pytest.fail("data files were scanned for keys"))
    path = tmp_path / "t"
    new_table(path)
    uls.upsert(spark.createDataFrame(rows(range(60), 1, "one")), str(path), **RI)
    before = where(path)
    by_index = {"hoodie.index.type": "RECORD_INDEX", **DISTRIBUTED}
    batch = pa.concat_tables([rows(range(30, 60), 2, "two"), rows([5, 6], 2, "elsewhere", part="p1")])
    result = uls.upsert(spark.createDataFrame(batch), str(path), **by_index)
    assert (result.num_updates, result.num_inserts) == (32, 0)
    after = where(path)
    assert after == before  # every key in the file group (and partition) it was in
    t = open_table(path).read(columns=["id", "v"])
    values = dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))
    assert (values["k00005"], values["k00031"], values["k00001"]) == ("elsewhere-5", "two-31", "one-1")
    holds(path)


def test_spark_builds_the_metadata_table_of_a_table_with_logs_and_compacts_its_record_index_in_tasks(
    spark, tmp_path: Path, driver_reads_no_key: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge-on-read table written without a metadata table: a Spark compaction builds one, its
    log files' statistics and keys read by tasks; the metadata compactions that Spark writes and
    compactions make due compact the record index's file groups in tasks. The driver reads no log
    file and no record-index file."""
    path = tmp_path / "t"
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", table_type="MERGE_ON_READ",
                 options={"hoodie.write.table.version": "8"})
    plain = {"hoodie.metadata.enable": "false"}
    open_table(path, plain).upsert(rows(range(60), 1, "one"))
    open_table(path, plain).upsert(rows(range(0, 60, 2), 2, "two"))  # log files
    open_table(path, plain).delete(rows(range(50, 55), 0, "gone").select(["id", "p"]))
    assert list(path.glob("p*/.*.log.*"))
    read = log_reads(monkeypatch)
    for method in ("read_bytes", "open_input"):
        real = getattr(Storage, method)

        def reading(self: Storage, rel: str, *args, _real=real, **kwargs):
            assert "/metadata/record_index/" not in self.full_path(rel), "the driver read a record-index file"
            return _real(self, rel, *args, **kwargs)

        monkeypatch.setattr(Storage, method, reading)
    due = {**V8, **RI, "hoodie.metadata.compact.max.delta.commits": 2}
    df = spark.createDataFrame
    assert uls.compact(spark, str(path), **due).compacted  # builds it (its plan asks), then compacts
    uls.upsert(df(rows(range(55, 70), 3, "three")), str(path), **due, **DISTRIBUTED)
    uls.upsert(df(rows(range(65, 80), 4, "four")), str(path), **due, **DISTRIBUTED)
    uls.upsert(df(rows(range(0, 60, 3), 5, "five")), str(path), **due, **DISTRIBUTED)  # logs again
    assert read == []
    metadata = Timeline.load(Storage(path / ".hoodie" / "metadata"))
    compactions = [i.time for i in metadata.instants if i.action.value == "commit" and i.is_completed]
    assert len(compactions) >= 2
    ri = path / ".hoodie" / "metadata" / "record_index"
    assert {p.name.rpartition("_")[2] for p in ri.glob("*.hfile")} >= {f"{compactions[-1]}.hfile"}
    monkeypatch.undo()
    holds(path)
    assert sorted(where(path)) == [f"k{i:05d}" for i in range(80) if not 50 <= i < 55 or i % 3 == 0]  # 51, 54 back


def test_a_spark_write_failing_after_its_record_index_logs_leaves_the_index_as_it_was(spark, tmp_path: Path) -> None:
    """A task writing the record index's log file fails right after writing it: the write rolls
    back with its metadata deltacommit and those log files, and readers see the index as before."""
    from upsertlake.spark.options import write_options
    from upsertlake.spark.write import write_dataframe

    path = tmp_path / "t"
    new_table(path)
    uls.upsert(spark.createDataFrame(rows(range(60), 1, "one")), str(path), **RI)
    before, mdt = where(path), Timeline.load(Storage(path / ".hoodie" / "metadata")).instants
    ri = path / ".hoodie" / "metadata" / "record_index"
    files = sorted(p.name for p in ri.iterdir())
    options = write_options(DISTRIBUTED, str(path), "upsert")
    table = table_on(storage_failing_record_index_logs(path), options.hoodie)
    with pytest.raises(Exception, match="injected failure after a record index log"):
        write_dataframe(spark.createDataFrame(rows(range(50, 70), 2, "two")), options, table=table)
    assert where(path) == before
    holds(path)
    assert Timeline.load(Storage(path / ".hoodie" / "metadata")).instants == mdt
    assert sorted(p.name for p in ri.iterdir()) == files  # its log files went with it


def test_a_spark_write_re_merged_onto_a_concurrent_commit_keeps_the_record_index(
    spark, tmp_path: Path, driver_reads_no_key: None
) -> None:
    """Two writes of different keys of the same file groups, both written before either commits:
    the Spark one, committing second, merges its buckets again (its tasks stage their keys anew),
    and the record index it keeps is the table's."""
    occ = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control", **RI}
    path = tmp_path / "t"
    new_table(path)
    uls.upsert(spark.createDataFrame(rows(range(30), 1, "one")), str(path), **occ, **DISTRIBUTED)
    batch = pa.concat_tables([rows(range(15, 30), 2, "spark"), rows(range(40, 45), 2, "new")])
    client, instant, result = spark_write_started(spark, path, batch, {**occ, **DISTRIBUTED})
    open_table(path, occ).upsert(rows(range(0, 15), 3, "local"))
    done = client.commit(instant, result)
    assert done.remerges == 1
    holds(path)
    t = open_table(path).read(columns=["id", "v"])
    assert sorted(t.column("v").to_pylist()) == sorted(
        [f"local-{i}" for i in range(15)] + [f"spark-{i}" for i in range(15, 30)] + [f"new-{i}" for i in range(40, 45)]
    )


def test_a_spark_bucket_index_write_into_logs_keeps_the_record_index(
    spark, tmp_path: Path, driver_reads_no_key: None
) -> None:
    """On a merge-on-read table the bucket index appends new keys to their buckets' file groups
    (keys that live only in log files there): the write tasks stage them for the record index,
    on both tag paths, as in process."""
    path = tmp_path / "t"
    new_table(path, "MERGE_ON_READ")
    buckets = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 2, **RI}
    df = spark.createDataFrame
    uls.upsert(df(rows(range(30), 1, "one")), str(path), **buckets)
    bases = sorted(p.name for p in path.glob("p*/*.parquet"))
    uls.upsert(df(rows(range(20, 50), 2, "two")), str(path), **buckets, **DISTRIBUTED)
    uls.upsert(df(rows(range(45, 60), 3, "three")), str(path), **buckets)  # a small batch: one task
    assert sorted(p.name for p in path.glob("p*/*.parquet")) == bases  # the new keys went to logs
    assert len(holds(path).scan("record_index")) == 60  # and the record index has each where its row is


def test_a_spark_write_moved_to_a_new_instant_then_failing_leaves_no_staged_keys(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A concurrent commit, later than the Spark write, rewrote its file groups: the write moves
    to a new instant (its tasks stage their keys there anew), then fails writing the record
    index. The rollback takes the keys staged under both instants with it, as it takes markers:
    nothing is left under .hoodie/.temp, and the table and its metadata table are as before."""
    import upsertlake.spark.write as spark_write
    from upsertlake.spark.options import write_options

    occ = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control", **RI}
    path = tmp_path / "t"
    new_table(path)
    uls.upsert(spark.createDataFrame(rows(range(30), 1, "one")), str(path), **occ, **DISTRIBUTED)
    real = spark_write.reconcile_markers

    def concurrent_commit_first(*args):  # after the Spark write's tasks, before its commit
        open_table(path, occ).upsert(rows(range(0, 15), 3, "local"))
        return real(*args)

    monkeypatch.setattr(spark_write, "reconcile_markers", concurrent_commit_first)
    options = write_options({**occ, **DISTRIBUTED}, str(path), "upsert")
    table = table_on(storage_failing_record_index_logs(path), options.hoodie)
    batch = pa.concat_tables([rows(range(15, 30), 2, "spark"), rows(range(40, 45), 2, "new")])
    with pytest.raises(Exception, match="injected failure after a record index log"):
        spark_write.write_dataframe(spark.createDataFrame(batch), options, table=table)
    monkeypatch.undo()
    timeline = Timeline.load(Storage(path))
    assert [i.time for i in timeline.instants if not i.is_completed] == []
    assert list((path / ".hoodie" / ".temp").rglob("*")) == []
    t = open_table(path).read(columns=["id", "v"])
    want = [f"local-{i}" for i in range(15)] + [f"one-{i}" for i in range(15, 30)]
    assert sorted(t.column("v").to_pylist()) == sorted(want)
    holds(path)


KILLED_IN_ITS_RECORD_INDEX_WRITE = """
import os, signal, sys
import pyarrow as pa
from pyspark.sql import SparkSession
import upsertlake.services.metadata_table as metadata_table
import upsertlake.spark as uls
real = metadata_table._write_record_index
def write_then_die(*args, **kwargs):
    real(*args, **kwargs)  # the record index's log files, written by Spark tasks; its deltacommit inflight
    os.killpg(0, signal.SIGKILL)  # the driver, its JVM and its Python workers
metadata_table._write_record_index = write_then_die
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.pyspark.python", sys.executable).getOrCreate())
uls.upsert(spark.createDataFrame(pa.table({rows!r})), {path!r}, **{options!r})
"""


def test_a_spark_driver_killed_in_its_record_index_write_is_rolled_back_by_the_next_writer(tmp_path: Path) -> None:
    """kill -9 of a Spark driver (with its JVM and workers) after its tasks wrote the record
    index's log files, before its metadata deltacommit and data instant completed: readers see
    the table as before, and the next writer rolls the write back with its metadata deltacommit
    and staged keys; the metadata table agrees with the data (`metadata_violations`)."""
    path = tmp_path / "t"
    new_table(path)
    open_table(path, {**V8, **RI}).upsert(rows(range(60), 1, "one"))
    before = where(path)
    options = {**RI, **DISTRIBUTED, **FAST_HEARTBEAT}
    script = KILLED_IN_ITS_RECORD_INDEX_WRITE.format(
        rows=rows(range(40, 80), 2, "two").to_pydict(), path=str(path), options=options
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), PYSPARK_PYTHON=sys.executable)
    driver = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    try:
        assert driver.wait(timeout=600) == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # whatever of its group outlived it
    mdt = Timeline.load(Storage(path / ".hoodie" / "metadata"))
    failed = [i for i in Timeline.load(Storage(path)).instants if not i.is_completed]
    assert [i.action.value for i in failed] == ["commit"]
    assert mdt.get(failed[0].time) is not None and not mdt.get(failed[0].time).is_completed  # killed inside it
    assert list(path.glob(f".hoodie/metadata/record_index/*{failed[0].time}*"))  # its record index logs
    assert where(path) == before
    assert metadata_violations(Storage(path)) == []
    time.sleep(0.5)  # its heartbeat expires
    open_table(path, {**RI, **FAST_HEARTBEAT}).upsert(rows(range(80, 85), 3, "three"))
    timeline = Timeline.load(Storage(path))
    assert [i.time for i in timeline.instants if not i.is_completed] == []
    assert timeline.get(failed[0].time) is None  # rolled back
    assert Timeline.load(Storage(path / ".hoodie" / "metadata")).get(failed[0].time) is None  # and its deltacommit
    assert not list(path.glob(f".hoodie/metadata/record_index/*{failed[0].time}*"))
    assert list((path / ".hoodie" / ".temp").rglob("*")) == []  # markers and staged keys went with it
    after = where(path)
    assert {k: after[k] for k in before} == before
    assert sorted(after) == sorted([*before, *(f"k{i:05d}" for i in range(80, 85))])
    t = open_table(path).read(columns=["id", "v"])
    want = {f"k{i:05d}": f"one-{i}" for i in range(60)} | {f"k{i:05d}": f"three-{i}" for i in range(80, 85)}
    assert dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist())) == want
    assert metadata_violations(Storage(path)) == []
    holds(path)
