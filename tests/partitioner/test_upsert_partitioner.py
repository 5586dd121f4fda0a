"""Workload profile and UpsertPartitioner: Hudi's TestUpsertPartitioner cases (copy-on-write) with
their numbers, then the properties the write path relies on (stable routing, even spread, Hudi's
MD5 rule, the inflight file Hudi writes)."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import random
import re
import struct
import uuid
from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upsertlake.partitioner import (
    BucketType,
    PartitionerConfig,
    SmallFile,
    UpsertPartitioner,
    WorkloadProfile,
    average_record_size,
    md5_key_hash,
    new_file_id,
)

HUDI_PARTITION = "2016/09/26"


def random_keys(n: int, seed: int = 7) -> list[str]:
    """UUID record keys like HoodieTestDataGenerator's, reproducible."""
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


def records(
    partition: str, num_inserts: int, updates: dict[str, int], seed: int = 7
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(partition paths, record keys, fileIds) of a batch: inserts first, then the tagged updates."""
    file_ids = [None] * num_inserts + [fid for fid, n in updates.items() for _ in range(n)]
    n = len(file_ids)
    return pa.array([partition] * n), pa.array(random_keys(n, seed)), pa.array(file_ids, pa.string())


def hudi_test_partitioner(
    small_file_limit: int, num_inserts: int, num_updates: int, file_size: int, auto_split: bool
) -> UpsertPartitioner:
    """TestUpsertPartitioner.getUpsertPartitioner: commit 001 wrote `file1` of `file_size` bytes and
    no stats (so the 1024-byte estimate holds); max file size 1000 KB, insert split size 100."""
    config = PartitionerConfig(
        max_file_size=1000 * 1024, small_file_limit=small_file_limit, insert_split_size=100, auto_split=auto_split
    )
    parts, keys, fids = records(HUDI_PARTITION, num_inserts, {"file1": num_updates})
    profile = WorkloadProfile.build(parts, fids, "UPSERT")
    avg = average_record_size([(0, 0)])
    partitioner = UpsertPartitioner(profile, {HUDI_PARTITION: [SmallFile("file1", file_size)]}, avg, config)
    # "Update record should have gone to the 1 update partition"
    assert partitioner.assign(parts[-1:], keys[-1:], fids[-1:]).tolist() == [0]
    return partitioner


def weights(targets: list[tuple[int, float]]) -> list[float]:
    """Each bucket's own weight, back from the cumulative weights Hudi keeps."""
    cumulative = [w for _, w in targets]
    return [b - a for a, b in zip([0.0, *cumulative], cumulative)]


def hudi_get_partition(partitioner: UpsertPartitioner, partition: str, key: str, file_id: str | None) -> int:
    """UpsertPartitioner.getPartition transliterated one record at a time, as the reference."""
    if file_id is not None:
        return partitioner.update_bucket(file_id)
    targets = partitioner.insert_buckets(partition)
    total = max(1, partitioner.profile.partitions[partition].num_inserts)
    hash_of_key = struct.unpack("<q", hashlib.md5(key.encode("utf-8")).digest()[:8])[0]
    r = 1.0 * (hash_of_key % total) / total  # Python's % on a positive divisor is Math.floorMod
    index = bisect.bisect_left([w for _, w in targets], r)
    return targets[index][0] if index < len(targets) else targets[0][0]


# -- Hudi's TestUpsertPartitioner ---------------------------------------------------------------


def test_upsert_partitioner() -> None:
    # Small files off: all updates go together, the 200 inserts are split by 100.
    partitioner = hudi_test_partitioner(0, 200, 100, 1024, auto_split=False)
    assert len(partitioner.insert_buckets(HUDI_PARTITION)) == 2


def test_upsert_partitioner_with_records_per_bucket() -> None:
    # 250 inserts by 100: buckets of 100, 100 and 50.
    partitioner = hudi_test_partitioner(0, 250, 100, 1024, auto_split=False)
    targets = partitioner.insert_buckets(HUDI_PARTITION)
    assert len(targets) == 3
    assert weights(targets) == pytest.approx([0.4, 0.4, 0.2])
    assert [w for _, w in targets] == [0.4, 0.8, 1.0]


def test_partition_weight() -> None:
    # testPartitionWeight sets bucket 0 to weight 0.2 and bucket 1 to 0.8 by hand, then checks
    # that 2000 inserts spread 0.2 / 0.8. Here the same weights arise naturally: a small file
    # with room for 400 records, then one new bucket of insert split size 1600.
    total = 2000
    config = PartitionerConfig(max_file_size=1000 * 1024, insert_split_size=1600, auto_split=False)
    parts, keys, fids = records(HUDI_PARTITION, total, {})
    profile = WorkloadProfile.build(parts, fids, "UPSERT")
    small = {HUDI_PARTITION: [SmallFile("small", 1000 * 1024 - 400 * 1024)]}
    partitioner = UpsertPartitioner(profile, small, 1024, config)
    assert partitioner.insert_buckets(HUDI_PARTITION) == [(0, 0.2), (1, 1.0)]

    counts = Counter(partitioner.assign(parts, keys, fids).tolist())
    assert counts[0] < counts[1]
    assert counts[0] + counts[1] == total
    assert f"{counts[0] / total:.1f}" == "0.2"
    assert f"{counts[1] / total:.1f}" == "0.8"


def test_upsert_partitioner_with_small_insert_handling() -> None:
    # file1 (800 KB) is small: it takes (1000 KB - 800 KB) / 1024 = 200 of the 400 inserts, the
    # other 200 go to two buckets of the insert split size 100.
    partitioner = hudi_test_partitioner(1000 * 1024, 400, 100, 800 * 1024, auto_split=False)
    targets = partitioner.insert_buckets(HUDI_PARTITION)
    assert len(partitioner.buckets) == 3
    assert [b.type for b in partitioner.buckets] == [BucketType.UPDATE, BucketType.INSERT, BucketType.INSERT]
    assert len(targets) == 3
    assert [n for n, _ in targets] == [0, 1, 2]
    assert weights(targets) == pytest.approx([0.5, 0.25, 0.25], abs=0.01)
    assert [w for _, w in targets] == pytest.approx([0.5, 0.75, 1.0], abs=0.01)

    # Auto-tuned split: 1000 KB / 1024 = 1000 records per bucket; 2400 inserts = 200 + 1000 + 1000 + 200.
    partitioner = hudi_test_partitioner(1000 * 1024, 2400, 100, 800 * 1024, auto_split=True)
    targets = partitioner.insert_buckets(HUDI_PARTITION)
    assert len(partitioner.buckets) == 4
    assert [b.type for b in partitioner.buckets] == [BucketType.UPDATE] + [BucketType.INSERT] * 3
    assert len(targets) == 4
    assert [n for n, _ in targets] == [0, 1, 2, 3]
    assert weights(targets) == pytest.approx([0.08, 0.42, 0.42, 0.08], abs=0.01)
    assert [w for _, w in targets] == pytest.approx([0.08, 0.5, 0.92, 1.0], abs=0.01)


def test_upsert_partitioner_with_small_file_handling_and_clustering_plan() -> None:
    # File group "1" is in a pending clustering plan, "3" (1 byte) is not: only "3" takes inserts.
    parts, _, fids = records(HUDI_PARTITION, 100, {})
    profile = WorkloadProfile.build(parts, fids, "UPSERT")
    small = {HUDI_PARTITION: [SmallFile("1", 1), SmallFile("3", 1)]}
    partitioner = UpsertPartitioner(
        profile, small, 1024, PartitionerConfig(max_file_size=1000 * 1024), pending_clustering={HUDI_PARTITION: {"1"}}
    )
    assert partitioner.small_files == [SmallFile("3", 1)]
    assert [(b.type, b.file_id) for b in partitioner.buckets] == [(BucketType.UPDATE, "3")]


# -- bucket assignment beyond Hudi's tests -------------------------------------------------------


def test_update_buckets_come_first_then_each_partitions_small_files_and_new_buckets() -> None:
    ids = iter(f"new-{i}-0" for i in itertools.count())
    profile = WorkloadProfile.build(
        pa.array(["p1", "p1", "p2", "p2", "p2", "p1"]),
        pa.array([None, "a", None, "b", "c", None]),
        "UPSERT",
    )
    config = PartitionerConfig(max_file_size=10_000, small_file_limit=9_500, insert_split_size=1, auto_split=False)
    small = {
        "p1": [SmallFile("big", 9_500), SmallFile("s1", 9_001), SmallFile("s2", 1)],  # big: not below the limit
        "p2": [SmallFile("c", 4_000), SmallFile("s3", 1)],  # c is updated and small
    }
    partitioner = UpsertPartitioner(profile, small, 1_000, config, lambda: next(ids))
    assert [(b.number, b.type, b.partition_path, b.file_id) for b in partitioner.buckets] == [
        (0, BucketType.UPDATE, "p1", "a"),
        (1, BucketType.UPDATE, "p2", "b"),
        (2, BucketType.UPDATE, "p2", "c"),
        (3, BucketType.UPDATE, "p1", "s2"),  # s1 has room for 0 records; s2 takes both inserts
    ]
    # p1: 2 inserts, s2 has room for 9; p2: 1 insert into the update bucket of c, s3 never reached.
    assert partitioner.insert_buckets("p1") == [(3, 1.0)]
    assert partitioner.insert_buckets("p2") == [(2, 1.0)]
    assert [f.file_id for f in partitioner.small_files] == ["s1", "s2", "c", "s3"]
    assert partitioner.update_bucket("b") == 1


def test_small_files_stop_when_all_inserts_are_placed_and_the_rest_overflow_to_new_buckets() -> None:
    profile = WorkloadProfile.build(pa.array(["p"] * 25), pa.nulls(25, pa.string()), "INSERT")
    config = PartitionerConfig(max_file_size=1_000, small_file_limit=900, insert_split_size=7, auto_split=False)
    small = {"p": [SmallFile("f1", 900), SmallFile("f2", 800), SmallFile("f3", 500)]}  # f1 is not below the limit
    partitioner = UpsertPartitioner(profile, small, 10, config, iter(["n1-0", "n2-0"]).__next__)
    # f2 takes 20, f3 the remaining 5 (room for 50); no new bucket is needed.
    assert [(b.type, b.file_id) for b in partitioner.buckets] == [(BucketType.UPDATE, "f2"), (BucketType.UPDATE, "f3")]
    assert partitioner.insert_buckets("p") == [(0, 0.8), (1, 1.0)]

    # Small-file handling off: 25 inserts by 7 = 7 + 7 + 7 + 4.
    no_small_files = PartitionerConfig(small_file_limit=0, insert_split_size=7, auto_split=False)
    partitioner = UpsertPartitioner(profile, small, 10, no_small_files)
    assert [b.type for b in partitioner.buckets] == [BucketType.INSERT] * 4
    assert weights(partitioner.insert_buckets("p")) == pytest.approx([7 / 25, 7 / 25, 7 / 25, 4 / 25])


def test_records_per_bucket_is_at_least_one_when_a_record_outgrows_the_max_file_size() -> None:
    # DESIGN.md §7: estimate 2000 bytes, max file size 1000 -> Hudi's perBucket is 0 (division by
    # zero, then Integer.MAX_VALUE buckets); guarded to one record per bucket.
    profile = WorkloadProfile.build(pa.array(["p"] * 3), pa.nulls(3, pa.string()), "INSERT")
    partitioner = UpsertPartitioner(profile, {}, 2_000, PartitionerConfig(max_file_size=1_000))
    assert [b.type for b in partitioner.buckets] == [BucketType.INSERT] * 3
    assert weights(partitioner.insert_buckets("p")) == pytest.approx([1 / 3] * 3)
    got = partitioner.assign(pa.array(["p"] * 3), pa.array(["a", "b", "c"]), pa.nulls(3, pa.string()))
    assert set(got.tolist()) <= {0, 1, 2}


def test_insert_buckets_get_new_hudi_file_ids() -> None:
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-0", new_file_id())
    profile = WorkloadProfile.build(pa.array(["p"] * 3), pa.nulls(3, pa.string()), "INSERT")
    partitioner = UpsertPartitioner(profile, {}, 1024, PartitionerConfig(insert_split_size=1, auto_split=False))
    ids = [b.file_id for b in partitioner.buckets]
    assert len(set(ids)) == 3 and all(i.endswith("-0") and "_" not in i for i in ids)


def test_the_same_key_always_lands_in_the_same_bucket() -> None:
    n = 5_000
    keys = random_keys(n, seed=3)
    profile = WorkloadProfile.build(pa.array(["p"] * n), pa.nulls(n, pa.string()), "INSERT")
    config = PartitionerConfig(insert_split_size=1_000, auto_split=False)
    first = UpsertPartitioner(profile, {}, 1024, config).assign(
        pa.array(["p"] * n), pa.array(keys), pa.nulls(n, pa.string())
    )
    # A new partitioner (a retried write) and a reordered, rechunked batch route every key alike.
    order = np.random.default_rng(5).permutation(n)
    shuffled = [keys[i] for i in order]
    chunked = pa.chunked_array([shuffled[:1234], shuffled[1234:]])
    again = UpsertPartitioner(profile, {}, 1024, config).assign(
        pa.chunked_array([["p"] * 1234, ["p"] * (n - 1234)]), chunked, pa.chunked_array([pa.nulls(n, pa.string())])
    )
    assert np.array_equal(again, first[order])


def test_inserts_spread_evenly_over_equal_buckets() -> None:
    n = 100_000
    profile = WorkloadProfile.build(pa.array(["p"] * n), pa.nulls(n, pa.string()), "INSERT")
    partitioner = UpsertPartitioner(profile, {}, 1024, PartitionerConfig(insert_split_size=25_000, auto_split=False))
    assert len(partitioner.buckets) == 4
    keys = pa.array([f"key-{i:06d}" for i in range(n)])
    counts = np.bincount(partitioner.assign(pa.array(["p"] * n), keys, pa.nulls(n, pa.string())), minlength=4)
    assert all(abs(c / n - 0.25) <= 0.02 for c in counts), counts


def test_assign_matches_hudis_get_partition_record_by_record() -> None:
    rng = random.Random(11)
    parts = [rng.choice(["a", "b/c", ""]) for _ in range(3_000)]
    fids = [rng.choice([None, None, None, "fa", "fb", "fc"]) for _ in parts]
    fids = [None if f is None else f"{p}-{f}" for p, f in zip(parts, fids)]
    keys = [f"k{i}:{rng.random()}é" for i in range(len(parts))]
    profile = WorkloadProfile.build(pa.array(parts), pa.array(fids, pa.string()), "UPSERT")
    small = {"a": [SmallFile("a-fa", 900_000), SmallFile("a-x", 990_000)], "": [SmallFile("-y", 0)]}
    config = PartitionerConfig(
        max_file_size=1_000_000, small_file_limit=995_000, insert_split_size=97, auto_split=False
    )
    partitioner = UpsertPartitioner(profile, small, 1_000, config)
    got = partitioner.assign(pa.array(parts), pa.array(keys), pa.array(fids, pa.string()))
    assert got.tolist() == [hudi_get_partition(partitioner, p, k, f) for p, k, f in zip(parts, keys, fids)]


def test_a_record_tagged_with_an_unknown_file_group_is_an_error() -> None:
    profile = WorkloadProfile.build(pa.array(["p"]), pa.array(["f1"]), "UPSERT")
    partitioner = UpsertPartitioner(profile, {}, 1024, PartitionerConfig())
    with pytest.raises(KeyError):
        partitioner.assign(pa.array(["p"]), pa.array(["k"]), pa.array(["f2"]))


@settings(max_examples=60, deadline=None)
@given(
    layout=st.lists(
        st.tuples(  # per partition: inserts, update counts per file, small file sizes
            st.integers(0, 300),
            st.lists(st.integers(1, 40), max_size=3),
            st.lists(st.integers(0, 6_000), max_size=3),
        ),
        min_size=1,
        max_size=3,
    ),
    max_file_size=st.integers(1, 5_000),
    small_file_limit=st.integers(-1, 6_000),
    avg=st.integers(1, 600),
    split=st.integers(1, 120),
    auto_split=st.booleans(),
)
def test_every_record_lands_in_a_bucket_of_its_own_partition(
    layout: list[tuple[int, list[int], list[int]]],
    max_file_size: int,
    small_file_limit: int,
    avg: int,
    split: int,
    auto_split: bool,
) -> None:
    parts, fids, small = [], [], {}
    for i, (inserts, updates, small_sizes) in enumerate(layout):
        p = f"p{i}"
        parts += [p] * (inserts + sum(updates))
        fids += [None] * inserts + [f"{p}-u{j}" for j, n in enumerate(updates) for _ in range(n)]
        small[p] = [SmallFile(f"{p}-u{j}" if j % 2 else f"{p}-s{j}", size) for j, size in enumerate(small_sizes)]
    config = PartitionerConfig(max_file_size, small_file_limit, split, auto_split)
    profile = WorkloadProfile.build(pa.array(parts, pa.string()), pa.array(fids, pa.string()), "UPSERT")
    partitioner = UpsertPartitioner(profile, small, avg, config)

    assert [b.number for b in partitioner.buckets] == list(range(len(partitioner.buckets)))
    per_bucket = max(1, max_file_size // avg if auto_split else split)
    for p, workload in profile.partitions.items():
        targets = partitioner.insert_buckets(p)
        assert bool(targets) == (workload.num_inserts > 0)
        if targets:
            cumulative = [w for _, w in targets]
            assert all(a < b for a, b in pairwise(cumulative))
            assert cumulative[-1] == pytest.approx(1.0)
            for number, w in zip((n for n, _ in targets), weights(targets)):
                assert partitioner.buckets[number].partition_path == p
                if partitioner.buckets[number].type is BucketType.INSERT:
                    assert round(w * workload.num_inserts) <= per_bucket

    keys = random_keys(len(parts))
    got = partitioner.assign(pa.array(parts, pa.string()), pa.array(keys), pa.array(fids, pa.string()))
    for p, f, k, b in zip(parts, fids, keys, got.tolist()):
        bucket = partitioner.buckets[b]
        assert bucket.partition_path == p
        if f is not None:
            assert bucket.file_id == f
        else:
            assert b in [n for n, _ in partitioner.insert_buckets(p)]
        assert b == hudi_get_partition(partitioner, p, k, f)


# -- MD5 key hash ---------------------------------------------------------------------------------


def test_md5_key_hash_reads_the_first_eight_digest_bytes_little_endian_signed() -> None:
    # MD5("")  = d41d8cd98f00b204...: bytes d4 1d 8c d9 8f 00 b2 04 -> 0x04b2008fd98c1dd4
    # MD5("a") = 0cc175b9c0f1b6a8...: bytes 0c c1 75 b9 c0 f1 b6 a8 -> 0xa8b6f1c0b975c10c, negative
    assert md5_key_hash(pa.array(["", "a"])).tolist() == [0x04B2008FD98C1DD4, 0xA8B6F1C0B975C10C - 2**64]

    keys = ["uuid-1", "id:42,name:Zoë", "日本語キー", "x" * 1000, "2016/09/26"]
    expected = [struct.unpack("<q", hashlib.md5(k.encode("utf-8")).digest()[:8])[0] for k in keys]
    assert md5_key_hash(pa.array(keys)).tolist() == expected
    assert md5_key_hash(pa.array(keys, pa.large_string())).tolist() == expected
    assert md5_key_hash(pa.chunked_array([keys[:2], keys[2:]])).tolist() == expected
    assert md5_key_hash(pa.array(["pad", *keys]).slice(1)).tolist() == expected
    assert md5_key_hash(pa.array([], pa.string())).dtype == np.int64


# -- workload profile and the inflight file -------------------------------------------------------


def test_profile_counts_inserts_and_updates_per_file() -> None:
    profile = WorkloadProfile.build(
        pa.chunked_array([["p1", "p1", "p2"], ["p1", "p2", "p1"]]),
        pa.chunked_array([[None, "f1", "f2"], ["f1", None, "f3"]]),
        "UPSERT",
        instant_times=pa.chunked_array([[None, "001", "002"], ["001", None, "003"]]),
    )
    assert list(profile.partitions) == ["p1", "p2"]
    p1, p2 = profile.partitions["p1"], profile.partitions["p2"]
    assert (p1.num_inserts, dict(p1.updates)) == (1, {"f1": 2, "f3": 1})
    assert dict(p1.prev_commits) == {"f1": "001", "f3": "003"}
    assert (p2.num_inserts, dict(p2.updates)) == (1, {"f2": 1})

    doc = json.loads(profile.to_inflight_json())
    assert doc["operationType"] == "UPSERT"
    stats = doc["partitionToWriteStats"]
    assert [(s["fileId"], s["prevCommit"], s["numInserts"], s["numUpdateWrites"]) for s in stats["p1"]] == [
        ("", "null", 1, 0),
        ("f1", "001", 0, 2),
        ("f3", "003", 0, 1),
    ]
    assert [(s["fileId"], s["numInserts"], s["numUpdateWrites"]) for s in stats["p2"]] == [("", 1, 0), ("f2", 0, 1)]


def test_profile_of_an_insert_only_batch() -> None:
    profile = WorkloadProfile.build(pa.array(["", ""]), pa.nulls(2, pa.string()), "INSERT")
    assert profile.partitions[""].num_inserts == 2 and not profile.partitions[""].updates
    assert json.loads(profile.to_inflight_json())["partitionToWriteStats"][""][0]["numInserts"] == 2


@pytest.mark.parametrize(
    ("table", "instant", "rows"),
    [
        (  # first commit: inserts only
            "v6_complexkeygen_hivestyle",
            "20240418173213674",
            [("byteField=20/shortField=100", None, None)]
            + [("byteField=10/shortField=300", None, None)] * 2,
        ),
        (  # an update in one partition (its insert stat carries 0), an insert in another
            "v6_complexkeygen_hivestyle",
            "20240418173235694",
            [
                ("byteField=10/shortField=300", "a22e8257-e249-45e9-ba46-115bc85adcba-0", "20240418173213674"),
                ("byteField=30/shortField=100", None, None),
            ],
        ),
        (  # non-partitioned: partition path ""
            "v6_nonpartitioned",
            "20240418173551906",
            [("", None, None), ("", "a079bdb3-731c-4894-b855-abfcd6921007-0", "20240418173550988")],
        ),
    ],
)
def test_inflight_json_equals_what_hudi_wrote(hudi_table, table: str, instant: str, rows: list[tuple]) -> None:
    root: Path = hudi_table(table)
    parts, fids, instants = (pa.array(list(col), pa.string()) for col in zip(*rows))
    profile = WorkloadProfile.build(parts, fids, "UPSERT", instant_times=instants)
    assert json.loads(profile.to_inflight_json()) == json.loads((root / ".hoodie" / f"{instant}.inflight").read_bytes())
