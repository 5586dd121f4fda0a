"""Indexes: every implementation tags exactly like a reference read of the latest base files.

The reference is computed here from the table's files alone (completed instants from the commit
files in `.hoodie/`, latest file of each file group by instant, keys read with pyarrow), never
through upsertlake's file system view. Rule for a key stored more than once (plain inserts make
duplicates): the location in the record's own partition if there is one, then the smallest
(partition, fileId) — see `upsertlake.index.base.join_locations`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from upsertlake import create_table, open_table
from upsertlake.config.enums import IndexType
from upsertlake.index import make_index
from upsertlake.index.bloom import BloomIndex
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline

from helpers import REPO, record_bytes

NON_GLOBAL = ("SIMPLE", "BLOOM", "INMEMORY")
GLOBAL = ("GLOBAL_SIMPLE", "GLOBAL_BLOOM", "GLOBAL_INMEMORY")
PARTITIONS = ("p0", "p1", "p2")
# Several small file groups per partition; small bloom filters keep the files (and the test) small.
SMALL_FILES = {
    "hoodie.parquet.max.file.size": 4000,
    "hoodie.parquet.small.file.limit": 3400,
    "hoodie.copyonwrite.record.size.estimate": 400,
    "hoodie.index.bloom.num_entries": 100,
}
_BASE_FILE = re.compile(r"^(?P<fid>[^_]+)_(?P<token>[^_]+)_(?P<instant>\d{17})\.parquet$")


# --- the reference, from the files alone ---------------------------------------------------------
def latest_files(path: Path) -> dict[tuple[str, str], tuple[str, Path]]:
    """(partition, fileId) -> (instant, file) of the newest file of each group of a completed commit."""
    completed = {p.name.split(".")[0] for p in (path / ".hoodie").iterdir() if re.fullmatch(r"\d{17}\.commit", p.name)}
    latest: dict[tuple[str, str], tuple[str, Path]] = {}
    for f in path.rglob("*.parquet"):
        if ".hoodie" in f.relative_to(path).parts:
            continue
        m = _BASE_FILE.match(f.name)
        assert m, f.name
        if m["instant"] not in completed:
            continue
        group = (f.parent.relative_to(path).as_posix(), m["fid"])
        if group not in latest or latest[group][0] < m["instant"]:
            latest[group] = (m["instant"], f)
    return latest


def stored_locations(path: Path) -> dict[str, list[tuple[str, str, str]]]:
    """key -> every (partition, fileId, instant) holding it."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for (partition, fid), (instant, f) in latest_files(path).items():
        for key in pq.read_table(f, columns=["_hoodie_record_key"]).column(0).to_pylist():
            out.setdefault(key, []).append((partition, fid, instant))
    return out


def reference_tags(path: Path, keys: list[str], partitions: list[str], is_global: bool) -> list[dict]:
    stored = stored_locations(path)
    out = []
    for key, partition in zip(keys, partitions):
        locs = sorted(set(stored.get(key, [])))
        own = [loc for loc in locs if loc[0] == partition]
        pick = own[0] if own else (locs[0] if locs and is_global else None)
        out.append(dict(zip(("loc_partition", "loc_file_id", "loc_instant"), pick or (None, None, None))))
    return out


def tag(index_type: str, path: Path, keys: list[str], partitions: list[str]) -> pa.Table:
    index = make_index(IndexType(index_type))
    half = len(keys) // 2  # the write path hands the index chunked columns
    k = pa.chunked_array([pa.array(keys[:half], pa.string()), pa.array(keys[half:], pa.string())])
    p = pa.chunked_array([pa.array(partitions[:half], pa.string()), pa.array(partitions[half:], pa.string())])
    view = FileSystemView(Timeline.load(Storage(path)))
    tags = index.tag(k, p, view)
    # The engine's dedup leaves each key once (in its partition, unless global) and says so: the
    # first row of each, tagged as `unique`, tags as above.
    seen: set = set()
    first = [i for i, pair in enumerate(zip(keys, partitions))
             if (ident := pair[0] if index.is_global else pair) not in seen and not seen.add(ident)]
    at = pa.array(first, pa.int64())
    assert (
        make_index(IndexType(index_type)).tag(k.take(at), p.take(at), view, unique=True).to_pylist()
        == tags.take(at).to_pylist()
    )
    return tags


def new_table(path: Path, index_type: str = "SIMPLE", **options: object):
    create_table(path, "t", "id", "ts", "p")
    return open_table(path, {"hoodie.index.type": index_type, **SMALL_FILES, **options})


def batch(ids: list[int], parts: list[int], ts: int, value: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": [f"key-{i}" for i in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "p": [PARTITIONS[p] for p in parts],
            "v": pa.array([value + i for i in ids], pa.int64()),
        }
    )


def check_footers(path: Path) -> int:
    """(e) Every base file carries Hudi's footer keys, its true key range, and no ARROW:schema."""
    count = 0
    for f in path.rglob("*.parquet"):
        meta = pq.ParquetFile(f).metadata.metadata
        assert b"ARROW:schema" not in meta, f
        assert meta[b"hoodie_bloom_filter_type_code"] == b"DYNAMIC_V0"
        bloom = meta[b"org.apache.hudi.bloomfilter"]
        assert bloom
        keys = pq.read_table(f, columns=["_hoodie_record_key"]).column(0).to_pylist()
        if keys:
            assert meta[b"hoodie_min_record_key"].decode() == min(keys)
            assert meta[b"hoodie_max_record_key"].decode() == max(keys)
        else:  # Hudi writes no key range for an empty file
            assert b"hoodie_min_record_key" not in meta and b"hoodie_max_record_key" not in meta
        assert f.read_bytes().count(bloom[:64]) == 1, "the bloom filter is stored twice"
        count += 1
    return count


# --- (a) all indexes agree with the reference ----------------------------------------------------
_write = st.tuples(
    st.sampled_from(["upsert", "upsert", "insert", "delete"]),
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 2)), min_size=1, max_size=60),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writer_index=st.sampled_from(NON_GLOBAL + GLOBAL),
    writes=st.lists(_write, min_size=1, max_size=4),
    probe=st.lists(st.tuples(st.integers(0, 70), st.integers(0, 2)), max_size=30),
)
def test_all_indexes_tag_like_the_files(writer_index: str, writes, probe) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t"
        table = new_table(path, writer_index)
        for n, (operation, rows) in enumerate(writes):
            ids, parts = [r[0] for r in rows], [r[1] for r in rows]
            data = batch(ids, parts, ts=n, value=100 * n)
            getattr(table, operation)(data.select(["id", "p"]) if operation == "delete" else data)
        stored = stored_locations(path)
        # Random keys (stored or new), every stored key in its partition and in the next one.
        keys = [f"key-{i}" for i, _ in probe]
        parts = [PARTITIONS[p] for _, p in probe]
        for key, locs in sorted(stored.items()):
            for partition in {loc[0] for loc in locs}:
                keys += [key, key]
                parts += [partition, PARTITIONS[(PARTITIONS.index(partition) + 1) % 3]]
        for kinds, is_global in ((NON_GLOBAL, False), (GLOBAL, True)):
            expected = reference_tags(path, keys, parts, is_global)
            for kind in kinds:
                assert tag(kind, path, keys, parts).to_pylist() == expected, kind
        check_footers(path)


# --- (b) bloom index pruning ---------------------------------------------------------------------
def test_bloom_index_opens_only_the_file_holding_the_keys(tmp_path: Path) -> None:
    path = tmp_path / "t"
    n = 2000  # even ids only, in order: 20 files of 100 consecutive keys
    ids = [f"{2 * i:08d}" for i in range(n)]
    data = pa.table({"id": ids, "ts": [0] * n, "p": ["p0"] * n, "v": list(range(n))})
    max_size = int(100.5 * record_bytes(new_table(tmp_path / "probe"), data))
    table = new_table(
        path,
        "BLOOM",
        **{"hoodie.parquet.max.file.size": max_size, "hoodie.index.bloom.num_entries": 1000,
           "hoodie.index.bloom.fpp": 1e-9},
    )
    table.bulk_insert(data)
    files = sorted(
        latest_files(path).items(), key=lambda kv: pq.read_metadata(kv[1][1]).metadata[b"hoodie_min_record_key"]
    )
    assert len(files) == 20
    (partition, fid), (instant, f) = files[7]
    stored = pq.read_table(f, columns=["_hoodie_record_key"]).column(0).to_pylist()
    lo, hi = int(min(stored)), int(max(stored))
    absent = [f"{i:08d}" for i in range(lo + 1, hi, 2)]  # the odd ids between: in range, not stored
    keys = stored + absent
    index = BloomIndex()
    tags = index.tag(pa.array(keys), pa.array(["p0"] * len(keys)), FileSystemView(Timeline.load(Storage(path))))
    assert tags.slice(0, len(stored)).to_pylist() == [
        {"loc_partition": partition, "loc_file_id": fid, "loc_instant": instant}
    ] * len(stored)
    assert tags.column("loc_file_id").slice(len(stored)).null_count == len(absent)
    stats = index.stats()
    assert stats["files_considered"] == 20
    assert stats["files_opened"] == 1
    assert stats["keys_matched"] == len(stored)
    assert stats["bloom_checks"] == len(keys)  # range pruning sent every key to this file only
    assert stats["candidate_keys"] - stats["keys_matched"] == 0  # no false positive at fpp 1e-9
    # Keys outside every range (and new keys inside one) open no file at all.
    index.tag(
        pa.array(["zzz", "00000001", absent[0]]), pa.array(["p0"] * 3), FileSystemView(Timeline.load(Storage(path)))
    )
    assert index.stats()["files_opened"] == 0


# --- (c) the in-memory index ---------------------------------------------------------------------
def _view(path: Path) -> FileSystemView:
    return FileSystemView(Timeline.load(Storage(path)))


def _probe(path: Path) -> tuple[list[str], list[str]]:
    keys = [f"key-{i}" for i in range(70)] * 3
    parts = [p for p in PARTITIONS for _ in range(70)]
    return keys, parts


def _assert_tags_like_reference(path: Path, index_type: str, *, files_opened: int | None) -> None:
    keys, parts = _probe(path)
    index = make_index(IndexType(index_type))
    got = index.tag(pa.array(keys), pa.array(parts), _view(path)).to_pylist()
    assert got == reference_tags(path, keys, parts, index.is_global)
    if files_opened is not None:
        assert index.stats()["files_opened"] == files_opened


@pytest.mark.parametrize("index_type", ["INMEMORY", "GLOBAL_INMEMORY"])
def test_in_memory_index_built_once_and_kept_up_to_date(tmp_path: Path, index_type: str) -> None:
    path = tmp_path / "t"
    table = new_table(path, index_type)
    table.upsert(batch(list(range(60)), [i % 3 for i in range(60)], ts=1))
    n_files = len(latest_files(path))
    assert n_files > 3
    # The table's own writes built it (the upsert tagged): no file is read again.
    _assert_tags_like_reference(path, index_type, files_opened=0)
    _assert_tags_like_reference(path, index_type, files_opened=0)
    # Our own writes keep it current without a rebuild.
    table.insert(batch([60, 61, 5], [0, 1, 1], ts=2))  # key-5 duplicated into p1 (it lives in p2)
    _assert_tags_like_reference(path, index_type, files_opened=0)
    table.upsert(batch([0, 1, 62, 63], [0, 1, 2, 0], ts=3))
    _assert_tags_like_reference(path, index_type, files_opened=0)
    table.delete(batch([2, 3, 60, 69], [2, 0, 0, 0], ts=4).select(["id", "p"]))
    _assert_tags_like_reference(path, index_type, files_opened=0)
    table.delete(batch([5], [1], ts=4).select(["id", "p"]))  # one copy of key-5: the other stays
    assert [loc[0] for loc in stored_locations(path)["key-5"]] == ["p2"]
    _assert_tags_like_reference(path, index_type, files_opened=0)
    # Another writer in this process (its own Table object, another index): rebuilt on next use.
    other = open_table(path, {**SMALL_FILES, "hoodie.index.type": "SIMPLE"})
    other.upsert(batch([64, 65, 6], [1, 1, 0], ts=5))
    _assert_tags_like_reference(path, index_type, files_opened=len(latest_files(path)))
    _assert_tags_like_reference(path, index_type, files_opened=0)
    # Another process commits: rebuilt on next use.
    script = (
        "import sys, pyarrow as pa\n"
        "from upsertlake import open_table\n"
        "t = open_table(sys.argv[1], {'hoodie.index.type': 'SIMPLE', 'hoodie.index.bloom.num_entries': 100})\n"
        "t.upsert(pa.table({'id': ['key-66', 'key-7'], 'ts': pa.array([6, 6], pa.int64()),"
        " 'p': ['p2', 'p1'], 'v': pa.array([1, 2], pa.int64())}))\n"
        "t.delete(pa.table({'id': ['key-8'], 'p': ['p2']}))\n"
    )
    root = REPO
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, env=env, cwd=root)
    _assert_tags_like_reference(path, index_type, files_opened=len(latest_files(path)))
    # And the table's own next write after that is applied incrementally again.
    table.upsert(batch([67, 9], [2, 0], ts=7))
    _assert_tags_like_reference(path, index_type, files_opened=0)
    assert table.read().num_rows == sum(len(v) for v in stored_locations(path).values())


# --- (d) global indexes and partition moves ------------------------------------------------------
@pytest.mark.parametrize("index_type", GLOBAL)
@pytest.mark.parametrize("update_partition_path", [True, False])
def test_global_index_moves_a_key_to_its_new_partition(
    tmp_path: Path, index_type: str, update_partition_path: bool
) -> None:
    path = tmp_path / "t"
    flag = str(update_partition_path).lower()
    table = new_table(
        path,
        index_type,
        **{"hoodie.simple.index.update.partition.path": flag, "hoodie.bloom.index.update.partition.path": flag},
    )
    table.upsert(batch([1, 2, 3], [0, 0, 1], ts=1, value=10))
    table.upsert(batch([1, 3], [2, 1], ts=2, value=20))  # key-1 arrives with partition p2
    snap = {r["id"]: r for r in table.read().to_pylist()}
    assert sorted(snap) == ["key-1", "key-2", "key-3"]
    moved = snap["key-1"]
    assert (moved["v"], moved["ts"], moved["p"]) == (21, 2, "p2")  # the record's data as sent
    if update_partition_path:
        assert moved["_hoodie_partition_path"] == "p2"
        assert moved["_hoodie_commit_time"] == table.timeline()[-1].time
    else:  # updated where it lives
        assert moved["_hoodie_partition_path"] == "p0"
    assert {k: len(v) for k, v in stored_locations(path).items()} == {"key-1": 1, "key-2": 1, "key-3": 1}
    home = stored_locations(path)["key-1"][0][0]
    assert home == ("p2" if update_partition_path else "p0")


@pytest.mark.parametrize(
    ("index_type", "option"),
    [("GLOBAL_SIMPLE", "hoodie.simple.index.update.partition.path"),
     ("GLOBAL_BLOOM", "hoodie.bloom.index.update.partition.path")],
)
def test_each_global_index_reads_its_own_update_partition_path_option(
    tmp_path: Path, index_type: str, option: str
) -> None:
    """As in Hudi, the simple index's option does not govern the bloom index and vice versa."""
    other = ({"hoodie.simple.index.update.partition.path", "hoodie.bloom.index.update.partition.path"} - {option}).pop()
    for name, options, home in (("own", {option: "false"}, "p0"), ("other", {other: "false"}, "p1")):
        path = tmp_path / name
        table = new_table(path, index_type, **options)
        table.upsert(batch([1], [0], ts=1))
        table.upsert(batch([1], [1], ts=2))
        assert [locs[0][0] for locs in stored_locations(path).values()] == [home]


# --- (e) footers ---------------------------------------------------------------------------------
def test_every_base_file_has_hudi_footer_keys(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = new_table(path, "BLOOM")
    table.upsert(batch(list(range(50)), [i % 3 for i in range(50)], ts=1))
    table.insert(batch([3, 4, 60], [0, 1, 2], ts=2))
    table.upsert(batch(list(range(0, 50, 4)), [i % 3 for i in range(0, 50, 4)], ts=3))
    # Delete every key of one file group: its new version is empty.
    (partition, fid), (_, f) = sorted(latest_files(path).items())[0]
    keys = pq.read_table(f, columns=["_hoodie_record_key"]).column(0).to_pylist()
    table.delete(pa.table({"id": keys, "p": [partition] * len(keys)}))
    assert pq.read_metadata(latest_files(path)[(partition, fid)][1]).num_rows == 0
    assert check_footers(path) >= 10
    for _, f in latest_files(path).values():
        assert f.stat().st_size < 20_000  # rows + one ~0.7 KB filter, not two copies of it
