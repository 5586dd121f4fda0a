"""The engine on Spark: the distributed writer and the data source give the snapshots and file
layouts the in-process engine gives, tables move freely between them and Apache Hudi's reader,
and a failed Spark job leaves nothing behind. One shared local session (conftest `spark`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import upsertlake.spark as uls
from upsertlake import create_table, open_table
from upsertlake.errors import ConfigError, WriteConflictError
from upsertlake.spark.options import write_options
from upsertlake.spark.source import plan_scan
from upsertlake.timeline.instant import State

from helpers import (
    REPO,
    SCRIPTS,
    TESTS,
    cli_in_process,
    hudi_read,
    spark_write_started,
    storage_failing_write_tasks,
)

OPTS = {"table": "t", "record_key": "id", "precombine_field": "ts", "partition_fields": "p"}
SMALL_FILES = {"hoodie.parquet.max.file.size": 64 * 1024, "hoodie.parquet.small.file.limit": 32 * 1024}


def rows(ids: range, ts: int, tag: str, deleted: bool = False) -> pa.Table:
    return pa.table({
        "id": [f"k{i:05d}" for i in ids],
        "ts": pa.array([ts] * len(ids), pa.int64()),
        "v": [f"{tag}-{i}" for i in ids],
        "p": [f"p{i % 3}" for i in ids],
        "_hoodie_is_deleted": [deleted] * len(ids),
    })


BATCHES = [
    ("upsert", rows(range(600), 1, "one")),
    ("upsert", pa.concat_tables([rows(range(300, 900), 2, "two"), rows(range(300, 350), 1, "stale")])),
    ("delete", rows(range(100), 0, "gone").select(["id", "p"])),
    ("upsert", rows(range(500, 550), 3, "del", deleted=True)),
    ("insert", rows(range(900, 1000), 1, "ins")),
]


def data(path: Path, **read: str) -> list[tuple]:
    t = open_table(path).read(columns=["_hoodie_record_key", "_hoodie_partition_path", "id", "ts", "v", "p"], **read)
    return sorted(tuple(r.values()) for r in t.to_pylist())


def layout(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """Each latest base file as (partition, its sorted keys): file ids differ, grouping must not."""
    t = open_table(path).read(columns=["_hoodie_partition_path", "_hoodie_file_name", "id"])
    groups: dict[str, list] = {}
    for r in t.to_pylist():
        groups.setdefault(r["_hoodie_file_name"], [r["_hoodie_partition_path"]]).append(r["id"])
    return sorted((g[0], tuple(sorted(g[1:]))) for g in groups.values())


# How a Spark write tags: a small input in one task by the in-process index (the default for
# these tests' batches), or by the distributed join (what larger inputs take).
TAG_PATHS = {"in-one-task": {}, "distributed": {"upsertlake.small.batch.bytes": 0}}


@pytest.fixture
def in_task(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The operations Spark writes tagged in one task (`tag_in_task`), as they run."""
    import upsertlake.spark.write as spark_write

    calls: list[str] = []
    original = spark_write.tag_in_task

    def recorded(frame, records, operation, *args):
        calls.append(operation)
        return original(frame, records, operation, *args)

    monkeypatch.setattr(spark_write, "tag_in_task", recorded)
    return calls


@pytest.fixture(params=list(TAG_PATHS))
def tag_path(request, in_task: list[str]) -> tuple[str, dict[str, int], list[str]]:
    """(the tag path, the options that choose it, the operations tagged in one task so far)."""
    return request.param, TAG_PATHS[request.param], in_task


def test_distributed_writes_match_the_in_process_engine(spark, tmp_path: Path, tag_path: tuple) -> None:
    path, chosen, in_task = tag_path
    local, dist = tmp_path / "local", tmp_path / "spark"
    create_table(local, "t", record_key="id", precombine_field="ts", partition_fields="p", options=SMALL_FILES)
    for i, (op, batch) in enumerate(BATCHES):
        getattr(open_table(local, SMALL_FILES), op)(batch)
        r = getattr(uls, op)(spark.createDataFrame(batch), str(dist), **OPTS, **SMALL_FILES, **chosen)
        assert r.committed and r.operation == op
        assert data(dist) == data(local), f"after batch {i} ({op})"
        assert layout(dist) == layout(local), f"after batch {i} ({op})"
    assert len(layout(dist)) > 6  # small files: several file groups per partition, packed alike
    # the first upsert found no table files and tagged in one task all the same; a small insert
    # looks nothing up and is staged and written in one task too
    assert in_task == (["upsert", "upsert", "delete", "upsert", "insert"] if path == "in-one-task" else [])
    hudi = hudi_read(dist).select(["_hoodie_record_key", "_hoodie_partition_path", "id", "ts", "v", "p"])
    assert sorted(tuple(r.values()) for r in hudi.to_pylist()) == data(dist)


MOVES = [
    ("bulk_insert", rows(range(300), 1, "one")),
    ("upsert", pa.concat_tables([rows(range(200, 400), 2, "two"), rows(range(250, 260), 1, "stale")])),
    # keys 0..59 change partition (p_i -> p(i+1)); 0..9 with an older ordering value stay put
    ("upsert", pa.concat_tables([
        rows(range(10, 60), 3, "moved").set_column(3, "p", pa.array([f"p{(i + 1) % 3}" for i in range(10, 60)])),
        rows(range(10), 0, "older").set_column(3, "p", pa.array([f"p{(i + 1) % 3}" for i in range(10)])),
    ])),
    ("delete", rows(range(50, 70), 0, "gone").select(["id", "p"])),
]


def test_bucket_expression_assigns_as_the_in_process_partitioner(spark) -> None:
    """The SQL form of Hudi's getPartition gives every record the bucket UpsertPartitioner.assign
    gives: updates by file group, inserts by MD5 against cumulative weights, small files first."""
    from upsertlake.partitioner import PartitionerConfig, SmallFile, UpsertPartitioner, WorkloadProfile
    from upsertlake.spark.assign import bucket_column

    b = "it's\\b"  # SQL text must carry quotes and backslashes as they are
    profile = WorkloadProfile.from_counts(
        ["a", "a", "a", b, "c"], ["f1", "f2", None, None, "f3"], [5, 7, 3000, 1, 9],
        ["001", "001", None, None, "002"], "UPSERT",
    )
    small = {"a": [SmallFile("f2", 200), SmallFile("f4", 900)], b: [SmallFile("f5", 100)]}
    partitioner = UpsertPartitioner(profile, small, 10, PartitionerConfig(max_file_size=4000, small_file_limit=1000))
    assert len(partitioner.insert_buckets("a")) > 2  # small files and new buckets share the inserts
    records = pa.table({
        "partition": ["a"] * 3000 + [b, "a", "a", "c"],
        "key": [f"key-{i}" for i in range(3000)] + ["only", "x", "y", "z"],
        "file_id": [None] * 3001 + ["f1", "f2", "f3"],
    })
    expected = partitioner.assign(records["partition"], records["key"], records["file_id"]).tolist()
    df = spark.createDataFrame(records.to_pandas()).coalesce(1)
    got = df.select(bucket_column(partitioner, "partition", "key", "file_id").alias("b")).collect()
    assert [r[0] for r in got] == expected
    assert expected[3000] == partitioner.insert_buckets(b)[0][0]


def test_sql_literals_are_the_values_and_types_f_lit_gives(spark) -> None:
    """The SQL text the write's expressions are built from means what PySpark's literals mean,
    whatever the parser's escaping settings."""
    from pyspark.sql import functions as F

    from upsertlake.spark.literals import sql_array, sql_literal, sql_map

    values = [
        "plain", "it's", "back\\slash\\'", "ünï ✓", "",
        0, -5, 2**31 - 1, 2**31, -(2**63), 0.1 + 0.2, 1e-05, 1.0, True, None,
    ]
    quoted = "it's"
    keyed = sql_map({"x": sql_literal(1), quoted: sql_literal(2)})
    listed = sql_array(["a", "b\\"])
    row = spark.range(1).select(
        *[F.expr(sql_literal(v)).alias(f"s{i}") for i, v in enumerate(values)],
        *[F.lit(v).alias(f"l{i}") for i, v in enumerate(values)],
        F.expr(f"element_at({keyed}, {sql_literal(quoted)})").alias("m"),
        F.expr(f"element_at({listed}, 2)").alias("a"),
    )
    fields = {f.name: f.dataType for f in row.schema}
    got = row.collect()[0]
    for i, v in enumerate(values):
        assert got[f"s{i}"] == got[f"l{i}"] == v
        assert fields[f"s{i}"] == fields[f"l{i}"], v
    assert (got["m"], got["a"]) == (2, "b\\")
    spark.conf.set("spark.sql.parser.escapedStringLiterals", "true")
    try:
        assert spark.range(1).select(F.expr(sql_literal("it's\\"))).collect()[0][0] == "it's\\"
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")


def test_files_we_list_are_scanned_without_a_spark_listing_job(spark, tmp_path: Path) -> None:
    """Spark lists more than 32 named files in a job of its own; our scans name files the driver
    has listed already, so the driver looks them up itself (and the session keeps its setting)."""
    import pyarrow.parquet as pq
    from pyspark.sql.types import LongType, StructField, StructType

    from upsertlake.spark.session import scan_files
    from upsertlake.storage import Storage

    paths = []
    for i in range(40):
        pq.write_table(pa.table({"x": [i, i + 100]}), tmp_path / f"f{i}.parquet")
        paths.append(f"f{i}.parquet")
    threshold = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(threshold)
    sc = spark.sparkContext
    sc.setJobGroup("scan-files", "listing")
    try:
        df = scan_files(spark, StructType([StructField("x", LongType())]), Storage(tmp_path), paths)
        assert sc.statusTracker().getJobIdsForGroup("scan-files") == []
    finally:
        sc.setJobGroup("", "")
    assert spark.conf.get(threshold) == before
    assert sorted(r[0] for r in df.collect()) == sorted([*range(40), *range(100, 140)])


@pytest.mark.parametrize("index", ["BLOOM", "GLOBAL_SIMPLE", "INMEMORY"])
def test_indexes_tag_on_executors_as_in_process(spark, tmp_path: Path, index: str, caplog, tag_path: tuple) -> None:
    """Each index tags on the executors as it does in process, a global one moving keys between
    partitions (delete in the old file group, insert in the new partition) unless the stored
    record orders after the incoming one; bulk_insert fills files as in process. The in-memory
    index lives in one process: Spark tags with SIMPLE instead, says so, and gives its result.
    A small batch is tagged in one task, unless the index is global (it reads every partition)."""
    path, chosen, in_task = tag_path
    opts = {**SMALL_FILES, "hoodie.index.type": index}
    local, dist = tmp_path / "local", tmp_path / "spark"
    create_table(local, "t", record_key="id", precombine_field="ts", partition_fields="p", options=opts)
    for i, (op, batch) in enumerate(MOVES):
        getattr(open_table(local, opts), op)(batch)
        getattr(uls, op)(spark.createDataFrame(batch), str(dist), **OPTS, **opts, **chosen)
        assert data(dist) == data(local), f"after batch {i} ({op})"
        assert layout(dist) == layout(local), f"after batch {i} ({op})"
    assert in_task == (["upsert", "upsert", "delete"] if path == "in-one-task" and index != "GLOBAL_SIMPLE" else [])
    stored = [(r[2], r[1], r[4]) for r in data(dist)]
    fallback = [r.getMessage() for r in caplog.records if "single-process" in r.getMessage()]
    assert fallback == (
        ["hoodie.index.type INMEMORY is single-process: this Spark write tags with SIMPLE"] * len(MOVES)
        if index == "INMEMORY"
        else []
    )
    if index.startswith("GLOBAL_"):
        assert ("k00011", "p0", "moved-11") in stored and ("k00001", "p1", "one-1") in stored
        assert len(stored) == len({r[0] for r in stored}) == 380
    else:  # a non-global index keeps the key in both partitions
        assert {("k00001", "p1", "one-1"), ("k00001", "p2", "older-1")} <= set(stored) and len(stored) == 440


def test_duplicates_with_equal_ordering_values_keep_the_later_record(spark, tmp_path: Path) -> None:
    """Ties in the precombine field go to the record later in the input, as in process, however
    Spark shuffles the rows: four copies of every key with one ordering value, in 8 partitions."""
    copies = [rows(range(40), 5, f"copy{c}") for c in range(4)]
    df = spark.createDataFrame(copies[0])
    for copy in copies[1:]:
        df = df.union(spark.createDataFrame(copy))
    local = tmp_path / "local"
    create_table(local, "t", record_key="id", precombine_field="ts", partition_fields="p").upsert(
        pa.concat_tables(copies)
    )
    uls.upsert(df, str(tmp_path / "spark"), **OPTS)
    assert data(tmp_path / "spark") == data(local)
    assert sorted(r[4] for r in data(local)) == sorted(f"copy3-{i}" for i in range(40))


@pytest.mark.parametrize("index", ["SIMPLE", "GLOBAL_SIMPLE"])
def test_duplicates_across_input_partitions_keep_the_largest_ordering_value(spark, tmp_path: Path, index: str) -> None:
    """Dedup runs in each input partition, then across them in the tagging join's shuffle: the
    largest ordering value wins wherever it sits in the input, ties go to the later record, and a
    global index dedups by key alone (copy1 holds the keys in another partition), as in process."""
    copies = [rows(range(40), ts, f"copy{c}") for c, ts in enumerate([7, 8, 7, 3])]
    copies[1] = copies[1].set_column(3, "p", pa.array(["p9"] * 20 + ["p0"] * 20)).slice(10, 20)
    df = spark.createDataFrame(copies[0])
    for copy in copies[1:]:
        df = df.union(spark.createDataFrame(copy))
    opts = {"hoodie.index.type": index}
    local = tmp_path / "local"
    create_table(local, "t", record_key="id", precombine_field="ts", partition_fields="p", options=opts).upsert(
        pa.concat_tables(copies)
    )
    uls.upsert(df, str(tmp_path / "spark"), **OPTS, **opts)
    assert data(tmp_path / "spark") == data(local)
    winners = {(r[2], r[5]): r[4] for r in data(local)}
    assert winners[("k00000", "p0")] == "copy2-0" and winners[("k00015", "p9")] == "copy1-15"
    if index == "GLOBAL_SIMPLE":  # one record a key: copy1 (ts 8) wins keys 10..29 in its partition
        assert len(winners) == 40 and ("k00015", "p0") not in winners
    else:
        assert len(winners) == 57 and winners[("k00015", "p0")] == "copy2-15"  # 40 + 10 in p9 + 7 new in p0


def test_tables_move_between_spark_and_in_process(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    uls.upsert(spark.createDataFrame(rows(range(50), 1, "a")), str(path), **OPTS)
    open_table(path).upsert(rows(range(25, 75), 2, "b"))
    uls.upsert(spark.createDataFrame(rows(range(60, 80), 3, "c")), str(path))
    got = {r[2]: r[4] for r in data(path)}
    assert len(got) == 80 and got["k00000"] == "a-0" and got["k00030"] == "b-30" and got["k00070"] == "c-70"
    assert [i.state for i in open_table(path).timeline()] == [State.COMPLETED] * 3


def test_data_source_writes_with_hudi_option_names(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "trips")

    def save(batch: pa.Table, operation: str) -> None:
        (spark.createDataFrame(batch).write.format("upsertlake")
         .option("hoodie.table.name", "trips")
         .option("hoodie.datasource.write.recordkey.field", "id")
         .option("hoodie.datasource.write.precombine.field", "ts")
         .option("hoodie.datasource.write.partitionpath.field", "p")
         .option("hoodie.datasource.write.operation", operation)
         .mode("append").save(path))

    save(rows(range(30), 1, "one"), "upsert")  # creates the table
    # staging of jobs whose drivers died: one untouched for a day and an hour, one just written
    temp = Path(path, ".hoodie", ".temp")
    for job, age_hours in (("dead", 25), ("recent", 0)):
        (temp / f"spark-staging-{job}").mkdir(parents=True)
        pq.write_table(rows(range(3), 7, job), temp / f"spark-staging-{job}" / "part.parquet")
        stamp = time.time() - age_hours * 3600
        for p in (temp / f"spark-staging-{job}" / "part.parquet", temp / f"spark-staging-{job}"):
            os.utime(p, (stamp, stamp))
    save(pa.concat_tables([rows(range(10, 20), 2, "two"), rows(range(10, 20), 1, "old")]), "upsert")
    assert sorted(p.name for p in temp.glob("spark-staging-*")) == ["spark-staging-recent"]
    shutil.rmtree(temp / "spark-staging-recent")
    save(rows(range(5), 0, "x").select(["id", "p"]), "delete")
    got = {r[2]: (r[3], r[4]) for r in data(Path(path))}
    assert len(got) == 25 and got["k00010"] == (2, "two-10") and got["k00025"] == (1, "one-25")
    assert not list(Path(path, ".hoodie", ".temp").glob("spark-staging-*"))
    with pytest.raises(Exception, match="mode\\('overwrite'\\)"):
        spark.createDataFrame(rows(range(3), 5, "o")).write.format("upsertlake").mode("overwrite").save(path)
    assert len(data(Path(path))) == 25
    before = sorted(p.name for p in Path(path).rglob("*"))
    with pytest.raises(
        Exception, match=r"at most 10 rows \(upsertlake.save.max.records\); this batch has 30.*upsertlake.spark.upsert"
    ):
        (spark.createDataFrame(rows(range(30), 9, "big")).write.format("upsertlake")
         .option("upsertlake.save.max.records", "10").mode("append").save(path))
    assert sorted(p.name for p in Path(path).rglob("*")) == before


def test_services_run_after_a_spark_commit_as_in_process(spark, tmp_path: Path) -> None:
    """Inline clustering (as Spark tasks), automatic clean and archival follow each Spark commit
    exactly as they follow an in-process one: same snapshot, same files left on disk."""
    opts = {"hoodie.parquet.small.file.limit": 0, "hoodie.clustering.inline": "true",
            "hoodie.clustering.inline.max.commits": 2, "hoodie.cleaner.commits.retained": 1,
            "hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3}
    local, dist = tmp_path / "local", tmp_path / "spark"
    create_table(local, "t", record_key="id", precombine_field="ts", partition_fields="p", options=opts)
    for b in range(4):
        batch = rows(range(10 * b, 10 * b + 15), b + 1, f"b{b}")
        open_table(local, opts).upsert(batch)
        uls.upsert(spark.createDataFrame(batch), str(dist), **OPTS, **opts)
    assert data(dist) == data(local) and layout(dist) == layout(local)

    def actions(path: Path) -> list[str]:
        return [i.action.value for i in open_table(path).timeline()]

    assert actions(dist) == actions(local) and "replacecommit" in actions(dist) and "clean" in actions(dist)
    assert len(list(dist.rglob("*.parquet"))) == len(list(local.rglob("*.parquet")))
    assert len(list((dist / ".hoodie" / "archived").iterdir())) > 0


def test_workers_without_pyarrow_get_a_clear_error(spark, tmp_path: Path) -> None:
    """A session whose Python workers run an interpreter without pyarrow fails before any write."""
    from upsertlake.spark import session

    sc = spark.sparkContext
    python, checked = sc.pythonExec, set(session._CHECKED)
    sc.pythonExec, session._CHECKED = "/usr/bin/python3", set()  # has no pyarrow (checked below)
    try:
        probe = subprocess.run(["/usr/bin/python3", "-c", "import pyarrow"], capture_output=True, check=False)
        assert probe.returncode != 0
        with pytest.raises(
            ConfigError, match=r"workers run /usr/bin/python3, which cannot import pyarrow.*spark.pyspark.python"
        ):
            uls.upsert(spark.createDataFrame(rows(range(3), 1, "a")), str(tmp_path / "t"), **OPTS)
    finally:
        sc.pythonExec, session._CHECKED = python, checked
    assert not (tmp_path / "t").exists()


def test_data_source_reads_snapshot_time_travel_and_incremental(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p")
    first = t.upsert(rows(range(30), 1, "one")).instant_time
    second = t.upsert(rows(range(20, 40), 2, "two")).instant_time
    t.upsert(rows(range(5), 3, "three"))

    def load(**options: str):
        reader = spark.read.format("upsertlake")
        for k, v in options.items():
            reader = reader.option(k, v)
        return sorted((r.id, r.ts, r.v) for r in reader.load(str(path)).collect())

    assert load() == sorted((r[2], r[3], r[4]) for r in data(path))
    assert load(**{"as.of.instant": first}) == sorted((r[2], r[3], r[4]) for r in data(path, as_of=first))
    incremental = load(**{"hoodie.datasource.query.type": "incremental",
                          "hoodie.datasource.read.begin.instanttime": first,
                          "hoodie.datasource.read.end.instanttime": second})
    assert incremental == [(f"k{i:05d}", 2, f"two-{i}") for i in range(20, 40)]
    sf = spark.read.format("upsertlake").load(str(path)).where("p = 'p1' and ts >= 2")
    assert sorted(r.id for r in sf.collect()) == sorted(f"k{i:05d}" for i in [*range(1, 5, 3), *range(22, 40, 3)])
    via_parquet = uls.read(spark, str(path), columns=["id", "v"])
    assert sorted((r.id, r.v) for r in via_parquet.collect()) == sorted((r[2], r[4]) for r in data(path))
    since = uls.read(spark, str(path), begin=second)
    assert sorted(r.id for r in since.collect()) == [f"k{i:05d}" for i in range(5)]
    narrowed = uls.read(spark, str(path), columns=["id", "v"], filters=[("p", "=", "p1"), ("id", "not in", ["k00001"])])
    assert sorted(r.id for r in narrowed.collect()) == sorted(
        r[2] for r in data(path) if r[2] != "k00001" and int(r[2][1:]) % 3 == 1
    )


def test_pushed_filters_prune_partitions(tmp_path: Path) -> None:
    path = tmp_path / "t"
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p").upsert(
        rows(range(30), 1, "a")
    )
    assert len(plan_scan(str(path), {}).files) == 3
    assert [bf.partition_path for bf in plan_scan(str(path), {}, [("p", "=", "p2")]).files] == ["p2"]
    assert len(plan_scan(str(path), {}, [("p", "in", ["p0", "p1"])]).files) == 2


def test_pushed_filters_skip_files_by_their_statistics_before_tasks_are_made(tmp_path: Path) -> None:
    """The data source plans with the filters Spark pushes: files whose recorded statistics rule
    them out make no task (as in process), on a column that is no partition field."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from upsertlake.spark.source import UpsertlakeDataSource

    path = tmp_path / "t"
    table = create_table(path, "t", record_key="id", precombine_field="ts")
    table.bulk_insert(rows(range(200), 1, "a"), {"hoodie.parquet.max.file.size": 400,
                                                 "hoodie.bulkinsert.sort.mode": "GLOBAL_SORT"})
    files = plan_scan(str(path), {}).files
    assert len(files) >= 5  # several files, one of which holds the range
    wanted = plan_scan(str(path), {}, [("id", ">=", "k00050"), ("id", "<", "k00053")]).files
    assert len(wanted) == 1 and wanted == table.scan(filters=[("id", ">=", "k00050"), ("id", "<", "k00053")]).plan.files
    source = UpsertlakeDataSource({"path": str(path)})
    reader = source.reader(source.schema())
    handed_back = list(reader.pushFilters([GreaterThanOrEqual(("id",), "k00050"), LessThan(("id",), "k00053")]))
    assert len(handed_back) == 2  # Spark still filters the rows
    assert [p.file for p in reader.partitions()] == wanted


def test_bad_batch_on_spark_raises_the_in_process_error(spark, tmp_path: Path) -> None:
    """A null record key found by a Spark task reaches the caller as the SchemaError the in-process
    engine raises (not as PySpark's PythonException), and the table is as it was."""
    from upsertlake.errors import SchemaError

    path = tmp_path / "t"
    uls.upsert(spark.createDataFrame(rows(range(10), 1, "one")), str(path), **OPTS)
    before = data(path)
    bad = rows(range(10, 13), 2, "two")
    bad = bad.set_column(0, "id", pa.array(["k1", None, "k3"]))
    with pytest.raises(SchemaError, match="'id'"):
        uls.upsert(spark.createDataFrame(bad.to_pandas()), str(path))
    assert data(path) == before
    assert [i.state for i in open_table(path).timeline()] == [State.COMPLETED]


def test_failed_spark_job_leaves_nothing(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    path = tmp_path / "t"
    uls.upsert(spark.createDataFrame(rows(range(30), 1, "one")), str(path), **OPTS)
    before = data(path)

    @F.udf("string")
    def explode(v: str) -> str:
        if v.endswith("-7"):
            raise ValueError("bad record")
        return v

    bad = spark.createDataFrame(rows(range(30), 2, "two")).withColumn("v", explode("v"))
    with pytest.raises(Exception, match="bad record"):
        uls.upsert(bad, str(path))
    # a write that fails after going inflight: the folder of a new partition is taken by a file
    (path / "p9").write_text("not a folder")
    blocked = spark.createDataFrame(rows(range(30), 2, "two")).withColumn("p", F.lit("p9"))
    with pytest.raises(OSError):
        uls.upsert(blocked, str(path))
    assert data(path) == before
    assert [i.state for i in open_table(path).timeline()] == [State.COMPLETED]
    (path / "p9").unlink()
    r = uls.upsert(spark.createDataFrame(rows(range(30, 40), 1, "three")), str(path))
    names = {p.name for p in path.rglob("*.parquet")}
    committed = {i.time for i in open_table(path).timeline()}
    assert {n.rsplit("_", 1)[1].removesuffix(".parquet") for n in names} <= committed
    assert len(data(path)) == 40 and r.num_inserts == 10


@pytest.fixture(scope="module")
def retries_probe(tmp_path_factory) -> tuple[Path, dict]:
    """tests/scripts/spark_retries_probe.py, run once in a process of its own (Spark's driver settings and
    task retries, local[2,3], are fixed per application): its work folder and its JSON."""
    work = tmp_path_factory.mktemp("retries")
    path = os.pathsep.join([str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")])  # the probe imports helpers
    env = dict(os.environ, PYTHONPATH=path)
    cmd = [sys.executable, str(SCRIPTS / "spark_retries_probe.py"), str(work), "300000"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    return work, json.loads(p.stdout.strip().splitlines()[-1])


def test_driver_stays_small_and_failed_task_attempts_leave_nothing(retries_probe) -> None:
    """spark.driver.maxResultSize=1m and 300,000 keys (about 4 MB of keys alone) upsert fine on
    the distributed path, so nothing per record is collected; the Python process's peak RSS after
    that write is within 25% of its peak after a write ten times smaller; every write task fails
    once after writing its file and its retry succeeds (local[2,3]), and the commit deleted the
    failed attempts' files (marker reconciliation). The same holds for the one task that tags and
    writes every file group of a small batch."""
    work, probe = retries_probe
    path, got = work / "driver" / "t", probe["driver"]
    assert (
        len(list((work / "driver" / "failures").iterdir())) >= 4
    )  # one injected failure per write task (4 partitions)
    assert got["on_disk"] == got["files_written"] and len(got["files_written"]) >= 4
    assert (got["updates"], got["inserts"]) == (30_000, 270_000)
    assert got["peak_mb_large"] <= 1.25 * got["peak_mb_small"], got
    small = got["one_task"]
    assert len(list((work / "driver" / "one_task_failures").iterdir())) == 1  # one task wrote every group
    assert small["on_disk"] == small["files_written"] and len(small["files_written"]) >= 4
    assert (small["updates"], small["inserts"]) == (100, 100)
    t = open_table(path).read(columns=["id", "ts"])
    assert t.num_rows == 300_100 and sorted(t.column("ts").to_pylist()) == [3] * 299_900 + [4] * 200
    assert len(set(t.column("id").to_pylist())) == 300_100


def test_bad_options_fail_before_any_job(spark, tmp_path: Path) -> None:
    df = spark.createDataFrame(rows(range(3), 1, "a"))
    with pytest.raises(ConfigError, match=r"creating one needs hoodie.table.name"):
        uls.upsert(df, str(tmp_path / "t"), record_key="id")
    with pytest.raises(ConfigError, match=r"invalid value 'merge' for hoodie.datasource.write.operation"):
        write_options({"operation": "merge"}, str(tmp_path / "t"))
    with pytest.raises(ConfigError, match=r"hoodie.no.such.key"):
        uls.upsert(df, str(tmp_path / "t"), **OPTS, **{"hoodie.no.such.key": "1"})
    with pytest.raises(ConfigError, match=r"upsertlake.small.batch.bytes='-1': give a number of bytes \(0 or more\)"):
        uls.upsert(df, str(tmp_path / "t"), **OPTS, **{"upsertlake.small.batch.bytes": -1})
    with pytest.raises(ConfigError, match=r"upsertlake.small.batch.force='yes': give true or false"):
        uls.upsert(df, str(tmp_path / "t"), **OPTS, **{"upsertlake.small.batch.force": "yes"})
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


@pytest.mark.parametrize("source", ["small", "unknown size", "over the limit", "unknown size, forced"])
def test_only_inputs_spark_knows_to_be_small_are_tagged_in_one_task(
    spark, tmp_path: Path, in_task: list, source: str
) -> None:
    """The choice reads Spark's size estimate (no job): an input it cannot size (an RDD's rows)
    or one over upsertlake.small.batch.bytes takes the distributed join, unless
    upsertlake.small.batch.force says it is small; either way the result is the in-process
    engine's."""
    batch = rows(range(200), 2, "two")
    local = create_table(tmp_path / "local", "t", record_key="id", precombine_field="ts", partition_fields="p")
    local.upsert(rows(range(300), 1, "one"))
    local.upsert(batch)
    dist = tmp_path / "spark"
    uls.bulk_insert(spark.createDataFrame(rows(range(300), 1, "one")), str(dist), **OPTS)
    df = spark.createDataFrame(batch)
    limit = {}
    if source.startswith("unknown size"):
        df = spark.createDataFrame(df.rdd, df.schema)
    if source == "over the limit":
        limit = {"upsertlake.small.batch.bytes": 1000}
    elif source.endswith("forced"):
        limit = {"upsertlake.small.batch.force": "true"}
    uls.upsert(df, str(dist), **OPTS, **limit)
    assert in_task == (["upsert"] if source in ("small", "unknown size, forced") else [])
    assert data(dist) == data(tmp_path / "local")


def test_ingest_command_ingests_each_file_once(spark, capsys, tmp_path: Path) -> None:
    """The first run is the command line in a process of its own (its own Spark session, workers
    running this interpreter); the later runs reuse the test session's Spark, in this process."""
    source, table = tmp_path / "in", tmp_path / "t"
    source.mkdir()
    pq.write_table(rows(range(20), 1, "one").drop_columns(["_hoodie_is_deleted"]), source / "a.parquet")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["ingest", "--source", str(source), "--format", "parquet", "--table", str(table), "--record-key", "id",
            "--precombine-field", "ts", "--partition-fields", "p", "--json"]
    p = subprocess.run([sys.executable, "-m", "upsertlake.cli", *args], env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    first = json.loads(p.stdout)
    assert (first["input_files"], first["new_files"], first["inserts"]) == (1, 1, 20)
    code, out, err = cli_in_process(capsys, *args)  # stderr is no terminal here: no progress lines
    assert (code, err, json.loads(out)["new_files"]) == (0, "", 0)
    pq.write_table(rows(range(10, 30), 2, "two").drop_columns(["_hoodie_is_deleted"]), source / "b.parquet")
    code, out, err = cli_in_process(capsys, *args)
    assert code == 0, err[-2000:]
    third = json.loads(out)
    assert (third["input_files"], third["new_files"], third["inserts"], third["updates"]) == (2, 1, 10, 10)
    got = {r[2]: r[4] for r in data(table)}
    assert len(got) == 30 and got["k00005"] == "one-5" and got["k00015"] == "two-15"
    assert len(open_table(table).timeline()) == 2  # the run with nothing new committed nothing


def test_clustering_on_spark_writes_each_group_as_a_task(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p",
                     options={"hoodie.parquet.small.file.limit": 0})
    for b in range(4):
        t.upsert(rows(range(10 * b, 10 * b + 10), 1, f"b{b}"))
    before = data(path)
    result = uls.cluster(spark, str(path), **{"hoodie.clustering.plan.strategy.sort.columns": "id"})
    assert result is not None and len(result.files_written) == 3 and sum(map(len, result.replaced.values())) == 12
    assert data(path) == before
    hudi = hudi_read(path).select(["_hoodie_record_key", "_hoodie_partition_path", "id", "ts", "v", "p"])
    assert sorted(tuple(r.values()) for r in hudi.to_pylist()) == before


def test_version_8_table_on_spark(spark, tmp_path: Path) -> None:
    """A version 8 table written through Spark and in process: hudi-rs and the data source agree,
    and incremental reads on Spark select commits by completion time, rows by their times."""
    path = tmp_path / "t"
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p",
                 options={"hoodie.write.table.version": 8})
    uls.upsert(spark.createDataFrame(rows(range(30), 1, "a")), str(path))
    open_table(path).upsert(rows(range(20, 40), 2, "b"))
    uls.upsert(spark.createDataFrame(rows(range(35, 45), 3, "c")), str(path))
    table = open_table(path)
    assert table.table_config.table_version == 8
    (r1, c1), (r2, c2), _ = [(i.time, i.completion) for i in table.timeline()]
    snapshot = sorted((r.id, r.v) for r in spark.read.format("upsertlake").load(str(path)).collect())
    hudi = hudi_read(path)
    assert snapshot == sorted(zip(hudi["id"].to_pylist(), hudi["v"].to_pylist())) and len(snapshot) == 45
    expected = sorted((f"k{i:05d}", f"b-{i}") for i in range(20, 40))  # as the second commit wrote them
    assert sorted((r.id, r.v) for r in uls.read(spark, str(path), begin=c1, end=c2).collect()) == expected
    theirs = hudi_read(path, begin=c1, end=c2)
    assert sorted(zip(theirs["id"].to_pylist(), theirs["v"].to_pylist())) == expected
    incremental = spark.read.format("upsertlake").option("hoodie.datasource.query.type", "incremental") \
        .option("hoodie.datasource.read.begin.instanttime", c1).option("hoodie.datasource.read.end.instanttime", c2)
    assert sorted((r.id, r.v) for r in incremental.load(str(path)).collect()) == expected
    assert r1 < c1 < r2 < c2


# -- concurrent writers on Spark: re-merge and retry ---------------------------------------------
OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control", "hoodie.parquet.small.file.limit": 0}
RETRY = {"hoodie.write.num.retries.on.conflict.failures": 2}


def occ_table(path: Path) -> None:
    """30 keys, one file group in each of p0, p1, p2."""
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=OCC)
    open_table(path, OCC).upsert(rows(range(30), 1, "one"))


def spark_started(spark, path: Path, batch: pa.Table, storage=None, **opts: object):
    """A Spark write of `batch` under OCC, started and written, not committed yet (`spark_write_started`)."""
    return spark_write_started(spark, path, batch, {**OCC, **opts}, storage)


def local_started(path: Path, batch: pa.Table, **opts: object):
    client = open_table(path, {**OCC, **opts}).write_client()
    instant = client.start_commit()
    return client, instant, client.upsert(batch, instant)


def held(spark, path: Path) -> int:
    """What Spark writes hold for their commits: the RDDs Spark holds persisted (a cached
    DataFrame's, once computed), and the folders small batches staged their tagged records in."""
    staged = list((path / ".hoodie" / ".temp").glob("*.staging"))
    return spark.sparkContext._jsc.getPersistentRDDs().size() + len(staged)


def assert_clean(path: Path) -> None:
    """Nothing pending, no markers, every base file of a completed instant, the latest file of
    each group the one its commit names."""
    timeline = open_table(path).timeline()
    assert [i for i in timeline if i.state is not State.COMPLETED] == []
    done = {i.time for i in timeline}
    names = [p.name for p in path.rglob("*.parquet") if ".hoodie" not in p.parts]
    assert {n.rsplit("_", 1)[1].removesuffix(".parquet") for n in names} <= done, names
    temp = path / ".hoodie" / ".temp"
    assert not temp.exists() or not [p for p in temp.rglob("*") if ".marker." in p.name or p.name.startswith("MARKERS")]
    assert not temp.exists() or not list(temp.glob("*.staging"))  # staged records went with the write


def snapshot(path: Path) -> list[tuple]:
    got = data(path)
    hudi = hudi_read(path).select(["_hoodie_record_key", "_hoodie_partition_path", "id", "ts", "v", "p"])
    assert sorted(tuple(r.values()) for r in hudi.to_pylist()) == got  # Hudi's reader agrees
    return got


def expected_rows(*writes: tuple[range, int, str]) -> list[tuple]:
    """The table's rows after upserts (ids, ts, tag) applied in order onto occ_table's."""
    latest = {i: (1, f"one-{i}") for i in range(30)}
    for ids, ts, tag in writes:
        latest.update({i: (ts, f"{tag}-{i}") for i in ids})
    return sorted((f"k{i:05d}", f"p{i % 3}", f"k{i:05d}", ts, v, f"p{i % 3}") for i, (ts, v) in latest.items())


@pytest.mark.usefixtures("table_version")
@pytest.mark.parametrize("case", ["spark-then-spark", "spark-then-spark-moved", "local-then-spark"])
def test_a_spark_write_sharing_file_groups_but_no_record_re_merges(spark, tmp_path: Path, case: str) -> None:
    """Two writes of different records of the same three file groups, both started before either
    commits: the later to commit merges its buckets again as one Spark job over its cached,
    bucket-assigned frame (in place, or under a new instant when the other's version is named by
    a later instant), and the table holds both writes, as Hudi's reader agrees."""
    path = tmp_path / "t"
    occ_table(path)
    before = held(spark, path)
    first, second = rows(range(0, 6), 2, "a"), rows(range(10, 16), 2, "b")
    if case == "local-then-spark":
        c1, t1, r1 = local_started(path, first)
        c2, t2, r2 = spark_started(spark, path, second)
    elif case == "spark-then-spark":
        c1, t1, r1 = spark_started(spark, path, first)
        c2, t2, r2 = spark_started(spark, path, second)
    else:  # the write started first commits last: its versions would sort before the other's
        c2, t2, r2 = spark_started(spark, path, second)
        c1, t1, r1 = spark_started(spark, path, first)
    assert held(spark, path) > before  # the Spark writes hold their records until their commits
    c1.commit(t1, r1)
    done = c2.commit(t2, r2)
    assert held(spark, path) == before  # released at the commit
    assert (done.remerges, done.retries, done.num_updates, done.num_inserts) == (1, 0, 6, 0)
    assert (done.instant_time == t2) == (case != "spark-then-spark-moved")
    assert done.instant_time > t1
    assert snapshot(path) == expected_rows((range(0, 6), 2, "a"), (range(10, 16), 2, "b"))
    assert {s.prevCommit for s in done.write_stats} == {t1}  # merged onto the other's versions
    assert len(done.write_stats) == 3 and all((path / s.path).exists() for s in done.write_stats)
    assert not any((path / s.path).exists() for s in r2.write_stats)  # the replaced files are gone
    assert len(list(path.rglob("*.parquet"))) == 9  # three groups, three versions each
    assert_clean(path)


def test_a_true_conflict_on_spark_fails_and_leaves_nothing(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    occ_table(path)
    before = held(spark, path)
    c1, t1, r1 = local_started(path, rows(range(0, 6), 2, "a"))
    c2, t2, r2 = spark_started(spark, path, rows(range(5, 11), 3, "b"))  # k00005 in both
    c1.commit(t1, r1)
    with pytest.raises(WriteConflictError, match=rf"write {t2} conflicts with commit {t1} .*k00005"):
        c2.commit(t2, r2)
    assert held(spark, path) == before
    assert snapshot(path) == expected_rows((range(0, 6), 2, "a"))
    assert t2 not in {i.time for i in open_table(path).timeline()}
    assert_clean(path)


@pytest.mark.parametrize("first", ["local", "spark"])
def test_a_true_conflict_on_spark_is_retried_when_configured(spark, tmp_path: Path, first: str) -> None:
    """hoodie.write.num.retries.on.conflict.failures: the Spark write tags, partitions and writes
    its cached prepared frame again against the table with the other commit, and commits; under
    event-time ordering k00005 keeps the larger ordering value (the retried write's)."""
    path = tmp_path / "t"
    occ_table(path)
    before = held(spark, path)
    a = rows(range(0, 6), 2, "a")
    c1, t1, r1 = local_started(path, a) if first == "local" else spark_started(spark, path, a)
    c2, t2, r2 = spark_started(spark, path, rows(range(5, 11), 3, "b"), **RETRY)
    c1.commit(t1, r1)
    done = c2.commit(t2, r2)
    assert held(spark, path) == before
    assert (done.instant_time > t2, done.retries, done.remerges) == (True, 1, 0)  # a new instant, as Hudi
    assert t2 not in {i.time for i in open_table(path).timeline()}
    assert (done.num_updates, done.num_inserts) == (6, 0)
    assert snapshot(path) == expected_rows((range(0, 6), 2, "a"), (range(5, 11), 3, "b"))
    assert {s.prevCommit for s in done.write_stats} == {t1}
    assert not any((path / s.path).exists() for s in r2.write_stats)  # the first attempt's files are gone
    assert len(list(path.rglob("*.parquet"))) == 9
    assert_clean(path)


def test_a_spark_write_retried_onto_a_later_instants_version_commits_under_a_newer_instant(
    spark, tmp_path: Path
) -> None:
    """The Spark write started first, the other commit (a later instant) wrote its keys;
    the retry merges onto that version, so it must commit under an instant newer than it (readers
    would hide the retried files under the first instant), and the public result names it."""
    path = tmp_path / "t"
    occ_table(path)
    c2, t2, r2 = spark_started(spark, path, rows(range(5, 11), 3, "b"), **RETRY)
    c1, t1, r1 = local_started(path, rows(range(0, 6), 2, "a"))
    c1.commit(t1, r1)
    done = c2.commit(t2, r2)
    assert done.retries == 1 and done.instant_time > t1 > t2
    assert [i.time for i in open_table(path).timeline()][-2:] == [t1, done.instant_time]
    assert snapshot(path) == expected_rows((range(0, 6), 2, "a"), (range(5, 11), 3, "b"))
    assert {s.prevCommit for s in done.write_stats} == {t1}
    assert_clean(path)


@pytest.mark.parametrize("moved", [False, True])
def test_a_failed_spark_re_merge_leaves_nothing(spark, tmp_path: Path, moved: bool) -> None:
    """The re-merge job fails (every task raises after writing its file): the commit raises, the
    rollback leaves the table as the other commit left it, and what the write held is released."""
    path = tmp_path / "t"
    occ_table(path)
    before = held(spark, path)
    armed = tmp_path / "armed"
    faulty = storage_failing_write_tasks(path, tmp_path / "failures", armed, "injected failure of a re-merge task")
    first, second = rows(range(0, 6), 2, "a"), rows(range(10, 16), 2, "b")
    if moved:
        c2, t2, r2 = spark_started(spark, path, second, faulty)
        c1, t1, r1 = local_started(path, first)
    else:
        c1, t1, r1 = local_started(path, first)
        c2, t2, r2 = spark_started(spark, path, second, faulty)
    c1.commit(t1, r1)
    armed.touch()  # the re-merge's tasks fail (local mode runs each task once)
    with pytest.raises(Exception, match="injected failure of a re-merge task"):
        c2.commit(t2, r2)
    c2.rollback(t2)  # as write_dataframe does on any failure
    assert held(spark, path) == before
    assert snapshot(path) == expected_rows((range(0, 6), 2, "a"))
    assert [i.time for i in open_table(path).timeline()][-1] == t1
    assert len(list(path.rglob("*.parquet"))) == 6
    assert_clean(path)


@pytest.mark.parametrize(("scenario", "tasks"), [("remerge", 1), ("remerge_distributed", 3)])
def test_failed_task_attempts_of_a_re_merge_leave_nothing(retries_probe, scenario: str, tasks: int) -> None:
    """Every task of the re-merge job fails once after writing its files and its retry succeeds
    (local[2,3]); the commit names the retries' files and deleted the failed attempts' (marker
    reconciliation after the re-merge). A small batch's one task re-merges all 3 groups; the
    distributed path re-merges each in a task of its own."""
    work, probe = retries_probe
    path, got = work / scenario / "t", probe[scenario]
    assert len(list((work / scenario / "failures").iterdir())) == tasks  # one injected failure per task
    assert got["remerges"] == 1 and len(got["files_written"]) == 3 and got["moved_to"] > got["instant"]
    assert got["on_disk"] == got["files_written"]
    assert not set(got["first_files"]) & set(got["on_disk"])  # the replaced files are gone too
    assert snapshot(path) == expected_rows((range(10, 16), 2, "spark"), (range(0, 6), 2, "local"))
    assert_clean(path)


def test_bulk_insert_on_spark_fills_files_up_to_the_max_file_size(spark, tmp_path: Path) -> None:
    """Bulk insert measures its records on an executor (a sample of the largest partition, in
    file order) as in process: 120K records at a max file size of 400 KB make 3 full files and
    a small fourth (row groups of about 20K records, each with its dictionary pages), whatever
    the 1024-byte estimate (which would make 308 files) says."""
    from helpers import data_bytes, trips

    path = tmp_path / "t"
    opts = {"table": "t", "record_key": "key", "precombine_field": "ts", "partition_fields": "day",
            "hoodie.parquet.max.file.size": 400_000, "hoodie.bulkinsert.sort.mode": "GLOBAL_SORT"}
    r = uls.bulk_insert(spark.createDataFrame(trips(120_000)), str(path), **opts)
    files = sorted((path / f for f in r.files_written), key=lambda f: pq.read_metadata(f).num_rows, reverse=True)
    assert len(files) == 4
    assert sum(pq.read_metadata(f).num_rows for f in files) == 120_000
    for f in files[:3]:
        assert abs(data_bytes(f) - 400_000) <= 0.05 * 400_000, (f.name, data_bytes(f))
    assert data_bytes(files[3]) < 0.95 * 400_000
    keys = [pq.read_table(f, columns=["key"]).column(0).to_pylist() for f in files]
    assert all(k == sorted(k) for k in keys)  # each file a sorted run of keys
    assert hudi_read(path).num_rows == 120_000
    local = create_table(tmp_path / "local", "t", record_key="key", precombine_field="ts", partition_fields="day")
    written = local.bulk_insert(trips(120_000), {k: v for k, v in opts.items() if k.startswith("hoodie.")})
    assert layout_of(tmp_path / "local", written.files_written) == layout_of(path, r.files_written)


def layout_of(root: Path, files: tuple[str, ...]) -> list[tuple[str, str, int]]:
    """Each file as (first key, last key, records): the same records measured, the same layout."""
    out = []
    for f in files:
        keys = pq.read_table(root / f, columns=["key"]).column(0).to_pylist()
        out.append((keys[0], keys[-1], len(keys)))
    return sorted(out)


@pytest.mark.spark
def test_spark_reads_never_skip_a_missing_committed_file(spark, tmp_path: Path) -> None:
    """A committed file that is gone fails the read (its rows are never left out)."""
    from upsertlake.errors import MissingFileError

    path = tmp_path / "t"
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(rows(range(30), 1, "one"))
    latest = t.upsert(rows(range(3), 2, "two")).instant_time
    (gone,) = path.glob(f"p0/*_{latest}.parquet")
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    try:
        planned = uls.read(spark, str(path))  # the file index is built: the file goes after planning
        source = spark.read.format("upsertlake").load(str(path))
        gone.rename(gone.with_suffix(".away"))
        with pytest.raises(Exception, match=gone.name):
            planned.collect()
        with pytest.raises(Exception, match="MissingFileError"):
            source.collect()
        with pytest.raises(MissingFileError, match=str(gone)):
            uls.read(spark, str(path))
    finally:
        spark.conf.unset("spark.sql.files.ignoreMissingFiles")


@pytest.mark.spark
def test_spark_upserts_onto_a_missing_committed_file_are_refused(spark, tmp_path: Path) -> None:
    """Never merged onto the previous version of the group."""
    from upsertlake.errors import MissingFileError

    from helpers import tree_digest

    path = tmp_path / "t"
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(rows(range(30), 1, "one"))
    latest = t.upsert(rows(range(3), 2, "two")).instant_time
    (gone,) = path.glob(f"p0/*_{latest}.parquet")
    gone.unlink()
    before = tree_digest(path)
    for index in ("SIMPLE", "BLOOM"):
        with pytest.raises(MissingFileError, match=str(gone)):
            uls.upsert(spark.createDataFrame(rows(range(3), 3, "three").to_pandas()), str(path),
                       **{"hoodie.index.type": index})
        assert tree_digest(path) == before
