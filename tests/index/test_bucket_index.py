"""Hudi's simple bucket index (hoodie.index.type=BUCKET), in process: keys hash to Hudi's buckets
(the expected values were printed by Java 17's String.hashCode and List.hashCode), each bucket is
one file group named by its number, copy-on-write rewrites a bucket's group with its new keys,
merge-on-read appends them to its log, and Hudi's reader reads what we write."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table
from upsertlake.errors import ConfigError, SchemaError, UnsupportedTableError, WriteConflictError
from upsertlake.layout.bucket_id import bucket_ids, bucket_of
from upsertlake.timeline.instant import State
from upsertlake.util.java_hash import java_hash_codes

from helpers import hudi_read

BUCKETS = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 4}
OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}


def test_keys_hash_as_java_and_hudi_hash_them() -> None:
    strings = ["", "a", "hello", "Hello World", "é", "日本", "😀", "k0000012345", "key-000001"]
    assert java_hash_codes(pa.array(strings)).view("int32").tolist() == [
        0, 97, 99162322, -862545276, 233, 835047, 1772899, -1874403154, 1413236015]
    keys = pa.array(["k0000012345", "key-000001", "k1", "uuid-7", "été"])
    assert bucket_ids(keys, ["id"], 256).tolist() == [205, 78, 69, 196, 189]
    assert bucket_ids(keys, ["id"], 4).tolist() == [1, 2, 1, 0, 1]
    # a complex key hashes the values of the hash fields, in their order: List("x", "1"), List("1")
    assert bucket_ids(pa.array(["id:1,name:x"]), ["name", "id"], 8).tolist() == [2]
    assert bucket_ids(pa.array(["id:1,name:x"]), ["id"], 8).tolist() == [0]
    assert (
        bucket_of("00000003-1d2c-4f5e-8a9b-0c1d2e3f4a5b-0"),
        bucket_of("3fa85f64-5717-4562-b3fc-2c963f66afa6-0"),
    ) == (3, None)
    with pytest.raises(SchemaError, match="cannot hash record keys of field:value pairs whose values hold ','"):
        bucket_ids(pa.array(["id:1,name:x,y"]), ["id"], 8)


def rows(ids: range, ts: int) -> pa.Table:
    return pa.table({"id": [f"k{i:03d}" for i in ids], "ts": [ts] * len(ids), "p": [f"p{i % 2}" for i in ids],
                     "v": [f"v{ts}-{i}" for i in ids]})


def snapshot(path: Path) -> list[tuple]:
    return sorted(tuple(r.values()) for r in open_table(path).read(columns=["id", "ts", "p", "v"]).to_pylist())


def check_buckets(path: Path) -> dict[str, set[str]]:
    """Every row sits in the file group of its key's bucket; partition -> file ids."""
    t = open_table(path).read(columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"])
    expected = bucket_ids(t.column("_hoodie_record_key"), ["id"], 4).tolist()
    groups: dict[str, set[str]] = {}
    for p, name, bucket in zip(
        t.column("_hoodie_partition_path").to_pylist(), t.column("_hoodie_file_name").to_pylist(), expected
    ):
        assert bucket_of(name) == bucket, (name, bucket)
        groups.setdefault(p, set()).add(name.lstrip(".").split("_")[0])
    return groups


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_writes_go_to_their_keys_buckets_and_read_the_same_in_hudi(
    tmp_path: Path, table_version: int, table_type: str
) -> None:
    path = tmp_path / "t"
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields=["p"],
                     table_type=table_type, options=BUCKETS)
    first = t.upsert(rows(range(40), 1))
    assert (first.num_inserts, first.num_updates) == (40, 0)
    groups = check_buckets(path)
    assert {p: len(g) for p, g in groups.items()} == {"p0": 4, "p1": 4}
    second = t.upsert(rows(range(20, 60), 2))  # 20 updates, 20 new keys, all in existing buckets
    # copy-on-write tells new keys from updates as it merges; an append logs both as Hudi's does
    assert (second.num_inserts, second.num_updates) == ((20, 20) if table_type == "COPY_ON_WRITE" else (0, 40))
    assert check_buckets(path) == groups  # no new file group: every key went to its bucket's
    if table_type == "MERGE_ON_READ":
        logs = sorted(f.name for f in path.rglob(".*.log.*"))
        assert len(logs) == 8 and all(bucket_of(name[1:]) is not None for name in logs)
    t.delete(pa.table({"id": ["k001", "k002", "k999"], "p": ["p1", "p0", "p1"]}))
    want = sorted([(f"k{i:03d}", 1, f"p{i % 2}", f"v1-{i}") for i in range(3, 20)]
                  + [(f"k{i:03d}", 2, f"p{i % 2}", f"v2-{i}") for i in range(20, 60)]
                  + [("k000", 1, "p0", "v1-0")])
    assert snapshot(path) == want
    hudi = hudi_read(path).select(["id", "ts", "p", "v"])
    assert sorted(tuple(r.values()) for r in hudi.to_pylist()) == want


def test_inserts_and_bulk_inserts_fill_buckets_too(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields=["p"], options=BUCKETS)
    t.bulk_insert(rows(range(30), 1))
    groups = check_buckets(path)
    t.insert(rows(range(30, 50), 1))
    assert check_buckets(path) == groups
    assert len(snapshot(path)) == 50


def test_a_table_not_written_by_buckets_is_refused_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields=["p"])
    t.upsert(rows(range(10), 1))
    before = snapshot(path)
    with pytest.raises(
        UnsupportedTableError,
        match=r"file group \S+ of partition 'p[01]' is none of the 4 buckets' \(its name gives (no bucket|bucket "
              r"\d+)\): the table was written without hoodie.index.type=BUCKET",
    ):
        open_table(path, BUCKETS).upsert(rows(range(5), 2))
    assert snapshot(path) == before and [i.state for i in open_table(path).timeline()] == [State.COMPLETED]


def test_the_number_of_buckets_cannot_shrink(tmp_path: Path) -> None:
    path = tmp_path / "t"
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields=["p"], options=BUCKETS).upsert(
        rows(range(40), 1)
    )
    with pytest.raises(
        UnsupportedTableError, match=r"of partition .p0. is none of the 2 buckets' \(its name gives bucket [23]\)"
    ):
        open_table(path, {**BUCKETS, "hoodie.bucket.index.num.buckets": 2}).upsert(rows(range(5), 2))


def test_bad_bucket_options_and_what_buckets_cannot_do_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields=["p"], options=BUCKETS).upsert(
        rows(range(4), 1)
    )
    before = snapshot(path)
    refused = [
        (
            {"hoodie.bucket.index.hash.field": "v"},
            ConfigError,
            "hoodie.bucket.index.hash.field names v, which are not record key fields",
        ),
        ({"hoodie.index.bucket.engine": "CONSISTENT_HASHING"}, ConfigError, "CONSISTENT_HASHING"),
        (
            {"hoodie.clustering.inline": "true"},
            ConfigError,
            "hoodie.clustering.inline=true cannot go with hoodie.index.type=BUCKET",
        ),
        (
            {"hoodie.bucket.index.num.buckets": 0},
            ConfigError,
            r"invalid value 0 \(int\) for hoodie.bucket.index.num.buckets: expected an integer of at least 1",
        ),
    ]
    for options, error, message in refused:
        with pytest.raises(error, match=message):
            open_table(path, {**BUCKETS, **options}).upsert(rows(range(1), 2))
    with pytest.raises(UnsupportedTableError, match=r"clustering a table written with hoodie.index.type=BUCKET"):
        open_table(path, BUCKETS).cluster()
    assert snapshot(path) == before and [i.state for i in open_table(path).timeline()] == [State.COMPLETED]


@pytest.mark.parametrize("retries", [0, 1])
def test_two_writers_creating_one_bucket_do_not_leave_it_two_groups(tmp_path: Path, retries: int) -> None:
    """Each writer creates a file group for bucket 1 of a new partition: the later commit must not
    complete beside the first (the bucket would have two groups, and tagging could not choose).
    It conflicts; with a retry it is tagged again, and goes to the group the first one made."""
    path = tmp_path / "t"
    opts = {**BUCKETS, **OCC, "hoodie.write.num.retries.on.conflict.failures": retries}
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields=["p"], options=opts)
    assert bucket_ids(pa.array(["k001", "k005"]), ["id"], 4).tolist() == [1, 1]
    c1, c2 = (open_table(path, opts).write_client() for _ in range(2))
    t1, t2 = c1.start_commit(), c2.start_commit()
    r1 = c1.upsert(pa.table({"id": ["k001"], "ts": [1], "p": ["q"], "v": ["one"]}), t1)
    r2 = c2.upsert(pa.table({"id": ["k005"], "ts": [1], "p": ["q"], "v": ["two"]}), t2)
    assert r1.write_stats[0].fileId != r2.write_stats[0].fileId
    c1.commit(t1, r1)
    if retries:
        c2.commit(t2, r2)
    else:
        with pytest.raises(WriteConflictError, match=r"of the bucket\(s\) this write wrote other groups of"):
            c2.commit(t2, r2)
    assert check_buckets(path) == {"q": {r1.write_stats[0].fileId}}
    assert snapshot(path) == [("k001", 1, "q", "one")] + ([("k005", 1, "q", "two")] if retries else [])
