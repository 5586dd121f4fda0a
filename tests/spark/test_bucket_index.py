"""Hudi's simple bucket index (hoodie.index.type=BUCKET) on Spark: the distributed writer gives the
tables the in-process writer gives, row for row and file for file (the same buckets' file groups,
the same base and log files, the same write stats), on both of its tag paths; Apache Hudi and
upsertlake's Spark writer take turns on one bucket-indexed table, each writing into the other's
buckets, and Hudi's reader, ours and hudi-rs read the same rows; the record index finds the keys
of Hudi's log-only bucket groups. One shared local session (conftest `spark`)."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake.spark as uls
from upsertlake import create_table, open_table
from upsertlake.errors import ConfigError, UnsupportedTableError
from upsertlake.layout.bucket_id import bucket_ids, bucket_of
from upsertlake.simulation.invariants import metadata_violations
from upsertlake.storage import Storage
from upsertlake.timeline.instant import State

from helpers import cli_in_process, hudi_read

NUM_BUCKETS = 4
BUCKETS = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": NUM_BUCKETS}
# The two ways a Spark write tags: a small input in one task, or the distributed jobs.
IN_TASK, DISTRIBUTED = {}, {"upsertlake.small.batch.bytes": 0}
SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.string()),
                    ("_hoodie_is_deleted", pa.bool_())])


def create(path: Path, table_type: str, version: int) -> None:
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields=["p"], table_type=table_type,
                 options={**BUCKETS, "hoodie.write.table.version": version,
                          "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator"})


def row(key: int, ts: int, deleted: bool = False) -> dict:
    return {"id": f"k{key:03d}", "ts": ts, "p": f"p{key % 3}", "v": f"v{ts}-{key}", "_hoodie_is_deleted": deleted}


def batch(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def rows_of(path: Path) -> list[tuple]:
    """The snapshot with the key, partition and the bucket of the file group each row is in."""
    t = open_table(path).read(
        columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name", "id", "ts", "v"]
    )
    return sorted(
        (
            r["_hoodie_record_key"],
            r["_hoodie_partition_path"],
            bucket_of(r["_hoodie_file_name"].lstrip(".")),
            r["ts"],
            r["v"],
        )
        for r in t.to_pylist()
    )


def files_of(path: Path) -> Counter:
    """Every data file on disk as (partition, bucket, base or log): file ids differ between two
    tables (random after the bucket number), their buckets and files must not."""
    out: Counter = Counter()
    for f in path.glob("p*/*"):
        if f.name.endswith(".parquet"):
            out[(f.parent.name, bucket_of(f.name), "base")] += 1
        elif ".log." in f.name:
            out[(f.parent.name, bucket_of(f.name[1:]), "log")] += 1
    return out


def stats_of(result) -> list[tuple]:
    return sorted(
        (
            s.partitionPath,
            bucket_of(s.fileId),
            s.path.endswith(".parquet"),
            s.numWrites,
            s.numInserts,
            s.numUpdateWrites,
            s.numDeletes,
        )
        for s in result.write_stats
    )


def assert_bucketed(path: Path) -> None:
    """Each row is in its key's bucket, and each bucket of a partition is one file group."""
    t = open_table(path).read(columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"])
    want = bucket_ids(t.column("_hoodie_record_key"), ["id"], NUM_BUCKETS).tolist()
    groups: dict[tuple[str, int], set[str]] = {}
    for p, name, bucket in zip(t.column(1).to_pylist(), t.column(2).to_pylist(), want):
        assert bucket_of(name.lstrip(".")) == bucket, (name, bucket)
        groups.setdefault((p, bucket), set()).add(name.lstrip(".").split("_")[0])
    assert all(len(g) == 1 for g in groups.values()), groups


class Steps:
    """A random sequence of writes: upserts (updates, new keys, in-batch duplicates), inserts,
    bulk inserts, deletes (some of keys never stored), `_hoodie_is_deleted` rows and upserts of
    keys a delete removed (on merge-on-read, their slices are rewritten merged)."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)
        self.live: set[int] = set()
        self.dead: set[int] = set()
        self.next_key = 0
        self.ts = 1

    def new(self, n: int) -> list[int]:
        keys = list(range(self.next_key, self.next_key + n))
        self.next_key += n
        return keys

    def some(self, keys: set[int], lo: int, hi: int) -> list[int]:
        return self.rng.sample(sorted(keys), min(len(keys), self.rng.randint(lo, hi)))

    def take(self, op: str) -> tuple[str, pa.Table]:
        self.ts += 1
        ts, rng = self.ts, self.rng
        if op == "upsert":
            keys = self.some(self.live, 3, 12) + self.new(rng.randint(2, 10))
            rows = [row(k, ts + rng.choice([-2, 0, 1])) for k in keys]
            rows += [row(k, ts - 1) for k in keys[:2]]  # duplicates in the batch: the larger ts wins
            self.live |= set(keys)
        elif op in ("insert", "bulk_insert"):
            keys = self.new(rng.randint(3, 10))
            rows = [row(k, ts) for k in keys]
            self.live |= set(keys)
        elif op == "delete":
            keys = self.some(self.live, 2, 5)
            rows = [row(k, 0) for k in keys] + [row(900 + ts, 0)]  # a key never stored
            self.live -= set(keys)
            self.dead |= set(keys)
        elif op == "is_deleted":
            keys = self.some(self.live, 2, 4)
            rows = [row(k, ts, deleted=True) for k in keys]
            op = "upsert"
            self.live -= set(keys)
            self.dead |= set(keys)
        elif op == "revive":
            keys = self.some(self.dead, 1, 4)
            rows = [row(k, ts + rng.choice([-ts, 0])) for k in keys]
            op = "upsert"
            self.dead -= set(keys)
            self.live |= set(keys)
        else:
            raise AssertionError(op)
        return op, batch(rows)


SEQUENCE = ["upsert", "upsert", "delete", "revive", "is_deleted", "insert", "revive", "bulk_insert", "upsert", "delete"]


@pytest.mark.parametrize("version", [6, 8])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_random_writes_on_spark_give_the_in_process_tables(
    spark, tmp_path: Path, table_type: str, version: int
) -> None:
    local, dist = tmp_path / "local", tmp_path / "spark"
    for path in (local, dist):
        create(path, table_type, version)
    steps = Steps(f"{table_type}-{version}")
    rewritten = 0
    for i, name in enumerate(SEQUENCE):
        op, data = steps.take(name)
        path_options = DISTRIBUTED if i % 2 else IN_TASK  # both tag paths, each revive on both
        before = {(f.parent.name, f.name[:8]) for f in dist.glob("p*/*.parquet")}
        ours = getattr(open_table(local, BUCKETS), op)(data)
        theirs = getattr(uls, op)(spark.createDataFrame(data), str(dist), **BUCKETS, **path_options)
        what = f"step {i} ({name}, {'distributed' if path_options else 'in one task'})"
        assert rows_of(dist) == rows_of(local), what
        assert files_of(dist) == files_of(local), what
        assert stats_of(theirs) == stats_of(ours), what
        assert_bucketed(dist)
        if name == "revive" and table_type == "MERGE_ON_READ":
            # a revived key's slice is rewritten: a new base file in a group that had one
            rewritten += sum(
                1
                for s in theirs.write_stats
                if s.path.endswith(".parquet") and (s.partitionPath, s.fileId[:8]) in before
            )
    assert steps.live and rows_of(dist)
    if table_type == "MERGE_ON_READ":
        assert rewritten >= 2
    hudi = hudi_read(dist).select(["_hoodie_record_key", "ts", "v"])
    assert sorted(tuple(r.values()) for r in hudi.to_pylist()) == sorted((r[0], r[3], r[4]) for r in rows_of(dist))


def test_the_bucket_expression_assigns_as_the_in_process_partitioner(spark) -> None:
    from upsertlake.partitioner import BucketPartitioner, WorkloadProfile
    from upsertlake.spark.assign import bucket_index_column

    keys = pa.array([f"k{i:03d}" for i in range(60)])
    partitions = pa.array(["a", "b", "c'd"] * 20)
    file_ids = pa.array([None if i % 4 else f"0000000{i % 3}-f-{i % 3}" for i in range(60)], pa.string())
    profile = WorkloadProfile.build(partitions, file_ids, "upsert")
    chosen, assignment = BucketPartitioner.for_records(profile, partitions, keys, file_ids, ["id"], 8)
    assert chosen.assign(partitions, keys, file_ids).tolist() == assignment.tolist()
    frame = spark.createDataFrame(
        pa.table({"p": partitions, "b": pa.array(bucket_ids(keys, ["id"], 8), pa.int32()), "f": file_ids})
    )
    got = [r[0] for r in frame.select(bucket_index_column(chosen, "p", "b", "f")).collect()]
    assert got == assignment.tolist()
    assert [b.file_id[:8] for b in chosen.buckets[3:]] == [
        f"{b:08d}"
        for _, b in sorted(
            {
                (p, b)
                for p, b, f in zip(partitions.to_pylist(), bucket_ids(keys, ["id"], 8).tolist(), file_ids.to_pylist())
                if f is None
            }
        )
    ]


def test_streams_and_the_data_source_write_buckets_as_in_process(spark, tmp_path: Path) -> None:
    """foreachBatch's write (exactly once by batch id) and the data source's save()."""
    local, dist = tmp_path / "local", tmp_path / "spark"
    for path in (local, dist):
        create(path, "MERGE_ON_READ", 8)
    first, second = batch([row(k, 1) for k in range(12)]), batch([row(k, 2) for k in range(6, 20)])
    stream = {**BUCKETS, "hoodie.datasource.write.streaming.checkpoint.identifier": "s"}
    assert uls.upsert(spark.createDataFrame(first), str(dist), batch_id=0, **stream).committed
    assert uls.upsert(spark.createDataFrame(first), str(dist), batch_id=0, **stream) is None  # run again: skipped
    spark.createDataFrame(second).write.format("upsertlake").options(**{k: str(v) for k, v in BUCKETS.items()}).mode(
        "append"
    ).save(str(dist))
    for data in (first, second):
        open_table(local, BUCKETS).upsert(data)
    assert rows_of(dist) == rows_of(local) and files_of(dist) == files_of(local)
    assert_bucketed(dist)


def test_ingest_on_spark_writes_buckets_as_in_process(spark, capsys, tmp_path: Path) -> None:
    """`upsertlake ingest` (in this process, on the test session's Spark) into a bucket table."""
    import pyarrow.parquet as pq

    source, table, local = tmp_path / "in", tmp_path / "t", tmp_path / "local"
    source.mkdir()
    for path in (table, local):
        create(path, "MERGE_ON_READ", 8)
    first, second = batch([row(k, 1) for k in range(15)]), batch([row(k, 2) for k in range(10, 25)])
    args = [
        "ingest",
        "--source",
        str(source),
        "--format",
        "parquet",
        "--table",
        str(table),
        "--record-key",
        "id",
        "--precombine-field",
        "ts",
        "--partition-fields",
        "p",
        "--json",
        *[a for k, v in BUCKETS.items() for a in ("--option", f"{k}={v}")],
    ]
    for name, data in (("a", first), ("b", second)):
        pq.write_table(data.drop_columns(["_hoodie_is_deleted"]), source / f"{name}.parquet")
        code, _, err = cli_in_process(capsys, *args)
        assert code == 0, err[-2000:]
        open_table(local, BUCKETS).upsert(data.drop_columns(["_hoodie_is_deleted"]))
    assert rows_of(table) == rows_of(local) and files_of(table) == files_of(local)
    assert_bucketed(table)


def test_bad_bucket_options_and_tables_fail_on_spark_before_anything_is_written(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    create(path, "COPY_ON_WRITE", 8)
    uls.upsert(spark.createDataFrame(batch([row(k, 1) for k in range(8)])), str(path), **BUCKETS)
    before, files = rows_of(path), files_of(path)
    data = spark.createDataFrame(batch([row(k, 2) for k in range(4)]))
    with pytest.raises(ConfigError, match=r"hoodie.bucket.index.hash.field names v, which are not record key fields"):
        uls.upsert(data, str(path), **BUCKETS, **{"hoodie.bucket.index.hash.field": "v"})
    for tag_path in (IN_TASK, DISTRIBUTED):
        with pytest.raises(
            UnsupportedTableError, match=r"of partition .p\d. is none of the 2 buckets' \(its name gives bucket [23]\)"
        ):
            uls.upsert(data, str(path), **{**BUCKETS, "hoodie.bucket.index.num.buckets": 2}, **tag_path)
    assert rows_of(path) == before and files_of(path) == files
    assert [i.state for i in open_table(path).timeline()] == [State.COMPLETED]
    other = tmp_path / "simple"
    uls.upsert(
        spark.createDataFrame(batch([row(k, 1) for k in range(8)])),
        str(other),
        table="t",
        record_key="id",
        precombine_field="ts",
        partition_fields="p",
    )
    with pytest.raises(UnsupportedTableError, match=r"the table was written without hoodie.index.type=BUCKET"):
        uls.upsert(data, str(other), **BUCKETS)


# -- Apache Hudi and upsertlake on Spark, taking turns on one table ---------------------------------


def hudi_options(table_type: str, version: int, operation: str) -> dict[str, str]:
    options = {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.table.type": table_type,
        "hoodie.datasource.write.operation": operation,
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": "p",
        "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
        "hoodie.datasource.write.hive_style_partitioning": "false",
        "hoodie.combine.before.insert": "true",
        "hoodie.metadata.enable": "false",
        "hoodie.index.type": "BUCKET",
        "hoodie.index.bucket.engine": "SIMPLE",
        "hoodie.bucket.index.num.buckets": str(NUM_BUCKETS),
        "hoodie.bucket.index.hash.field": "id",
    }
    if version == 6:
        options["hoodie.datasource.write.payload.class"] = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
    else:
        options |= {
            "hoodie.write.table.version": str(version),
            "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
            "hoodie.write.auto.upgrade": "false",
        }
    return options


def keys_in(buckets: set[int], n: int, start: int) -> list[int]:
    """`n` keys from `start` on whose bucket (in partition p0: keys divisible by 3) is one of `buckets`."""
    found, key = [], start - start % 3
    while len(found) < n:
        if bucket_ids(pa.array([f"k{key:03d}"]), ["id"], NUM_BUCKETS)[0] in buckets:
            found.append(key)
        key += 3
    return found


@pytest.mark.hudi
@pytest.mark.parametrize("version", [6, 8])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_hudi_and_spark_write_into_each_others_buckets(
    spark, hudi_references, tmp_path: Path, table_type: str, version: int
) -> None:
    """Spark creates buckets 0 and 1 of partition p0; Hudi updates them and adds keys to them and
    to bucket 2; Spark writes into Hudi's bucket (on merge-on-read a log-only group) and creates
    bucket 3, deletes, and revives a deleted key; Hudi writes into bucket 3 and deletes. After each
    write every reader reads the model, each key once, each bucket one file group."""
    hudi = hudi_references.for_table_version(version)
    path = tmp_path / "t"
    create(path, table_type, version)
    model: dict[str, dict] = {}

    def write(actor: str, op: str, rows: list[dict], **spark_options: object) -> None:
        data = batch(rows)
        if actor == "hudi":
            hudi.write(path, data, hudi_options(table_type, version, op))
        else:
            getattr(uls, op)(spark.createDataFrame(data), str(path), **BUCKETS, **spark_options)
        for r in rows:
            gone = op == "delete" or r["_hoodie_is_deleted"]
            current = model.get(r["id"])
            if gone:
                model.pop(r["id"], None)
            elif current is None or r["ts"] >= current["ts"]:
                model[r["id"]] = r
        want = sorted((r["id"], r["ts"], r["v"]) for r in model.values())
        ours = open_table(path).read(columns=["id", "ts", "v"])
        assert sorted(tuple(r.values()) for r in ours.to_pylist()) == want, f"ours after {actor} {op}"
        theirs = hudi.snapshot(path).select(["id", "ts", "v"])
        assert sorted(tuple(r.values()) for r in theirs.to_pylist()) == want, f"Hudi's after {actor} {op}"
        rs = hudi_read(path).select(["id", "ts", "v"])
        assert sorted(tuple(r.values()) for r in rs.to_pylist()) == want, f"hudi-rs after {actor} {op}"
        assert_bucketed(path)

    first = keys_in({0, 1}, 6, 0)
    write("spark", "upsert", [row(k, 1) for k in first])
    to_hudi = keys_in({0, 1, 2}, 6, first[-1] + 3)
    write("hudi", "upsert", [row(k, 2) for k in first[:3] + to_hudi])
    into_hudis = [k for k in to_hudi if bucket_ids(pa.array([f"k{k:03d}"]), ["id"], NUM_BUCKETS)[0] == 2]
    mine = keys_in({2, 3}, 4, to_hudi[-1] + 3)
    write("spark", "upsert", [row(k, 3) for k in into_hudis[:1] + first[3:5] + mine], **DISTRIBUTED)
    write("spark", "delete", [row(k, 0) for k in first[:2]])
    write("spark", "upsert", [row(first[0], 4), row(mine[0], 4, deleted=True)], **DISTRIBUTED)
    last = keys_in({3}, 2, mine[-1] + 3)
    write("hudi", "upsert", [row(k, 5) for k in last + mine[1:2]])
    write("hudi", "delete", [row(k, 9) for k in first[2:3] + last[:1]])  # ts above the stored ones
    write("spark", "upsert", [row(k, 6) for k in last + first[:3]])
    groups = {
        (p.name, bucket_of(f.name.lstrip(".")))
        for p in path.glob("p*")
        for f in p.iterdir()
        if f.name.endswith(".parquet") or ".log." in f.name
    }
    assert {b for p, b in groups if p == "p0"} == {0, 1, 2, 3}


@pytest.mark.hudi
@pytest.mark.parametrize("moves", [False, True])
def test_an_upsert_by_record_index_finds_the_keys_of_hudis_log_only_file_groups(
    spark, hudi_references, tmp_path: Path, moves: bool
) -> None:
    """Hudi's bucket index under non-blocking concurrency control writes a merge-on-read table's
    new buckets as log files only (log-only file groups, as its Flink writer does); the next
    write builds the record index (from those logs too) and tags by it: on Spark as in process,
    the keys of log-only groups are found there and updated in place, none written twice, and
    the metadata table agrees with the data. `moves`: keys may change partition, so the stored
    ordering values are looked up (a log-only group has no base file to read them from)."""
    hudi = hudi_references.for_table_version(8)
    local, dist = tmp_path / "local", tmp_path / "spark"
    create(local, "MERGE_ON_READ", 8)
    first = keys_in({0, 1}, 4, 0)
    later = keys_in({2, 3}, 4, first[-1] + 3)
    stored = [row(k, 1) for k in first + later]
    hudi.write(local, batch(stored[:4]), hudi_options("MERGE_ON_READ", 8, "upsert"))  # base files
    # Under non-blocking concurrency control Hudi writes a new bucket's records into log files only.
    nbcc = {"hoodie.write.concurrency.mode": "NON_BLOCKING_CONCURRENCY_CONTROL",
            "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.InProcessLockProvider"}
    hudi.write(local, batch(stored[4:]), hudi_options("MERGE_ON_READ", 8, "upsert") | nbcc)
    assert {bucket_of(f.name) for f in local.glob("p0/*.parquet")} == {0, 1}
    assert {bucket_of(f.name[1:]) for f in local.glob("p0/.[0-9]*.log.*")} == {2, 3}  # (not Hadoop's .crc files)
    shutil.copytree(local, dist)
    by_record_index = {"hoodie.index.type": "RECORD_INDEX", "hoodie.metadata.enable": "true",
                       "hoodie.metadata.record.index.enable": "true",
                       "hoodie.record.index.update.partition.path": str(moves).lower()}
    rows = [row(k, 2) for k in later[:3] + first[:1] + [1000, 1001]]
    ours = open_table(local, by_record_index).upsert(batch(rows))
    theirs = uls.upsert(spark.createDataFrame(batch(rows)), str(dist), **by_record_index, **DISTRIBUTED)
    assert (theirs.num_updates, theirs.num_inserts) == (ours.num_updates, ours.num_inserts) == (4, 2)
    want = sorted({r["id"]: (r["id"], r["ts"], r["v"]) for r in stored + rows}.values())
    for path in (local, dist):
        got = open_table(path).read(columns=["id", "ts", "v"])
        assert sorted(tuple(r.values()) for r in got.to_pylist()) == want, path.name
        assert metadata_violations(Storage(path)) == [], path.name
