"""Keeping the metadata table on tables we write (version 8): built at the first write, updated in
the same instant as every write and service, compacted and cleaned, rolled back with a failed
write, dropped and built again when a writer that does not keep it wrote; RECORD_INDEX tags by it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake
from upsertlake.errors import ConfigError
from upsertlake.hfile import HFileReader
from upsertlake.hfile import file_info as hfile_info
from upsertlake.metadata import MetadataTable
from upsertlake.metadata.compaction import compact, compaction_time
from upsertlake.metadata.records import decode
from upsertlake.simulation.invariants import metadata_violations
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline

from metadata_checks import TYPED_COLUMNS, holds, log_reads, logs_described, typed

V8 = {"hoodie.write.table.version": "8", "hoodie.metadata.enable": "true"}


def batch(ids, part=None, ts=1, val=0.0) -> pa.Table:
    ids = list(ids)
    return pa.table({
        "id": [f"id-{i:04d}" for i in ids],
        "part": [part or "abc"[i % 3] for i in ids],
        "ts": pa.array([ts] * len(ids), pa.int64()),
        "val": pa.array([val + i for i in ids], pa.float64()),
    })


def new_table(root: Path, table_type: str = "COPY_ON_WRITE", **options: str) -> upsertlake.Table:
    return upsertlake.create_table(root, "t", record_key="id", precombine_field="ts", partition_fields="part",
                                   hive_style_partitioning=True, table_type=table_type, options={**V8, **options})


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_every_write_and_service_keeps_the_metadata_table(tmp_path: Path, table_type: str) -> None:
    t = new_table(tmp_path, table_type)
    options = {"hoodie.metadata.record.index.enable": "true", "hoodie.metadata.compact.max.delta.commits": "4"}
    t.upsert(batch(range(30)), options=options)
    table = holds(tmp_path)
    assert sorted(table.partitions) == ["column_stats", "files", "partition_stats", "record_index"]
    t.upsert(batch(range(20, 40), ts=2, val=100.0), options=options)
    t.delete(batch(range(5)).select(["id", "part"]), options=options)
    t.insert_overwrite(batch(range(100, 103), part="b", ts=3), options=options)
    t.upsert(batch(range(200, 205), part="z", ts=3), options=options)
    holds(tmp_path)
    if table_type == "MERGE_ON_READ":
        t.compact()
    t.cluster() if table_type == "COPY_ON_WRITE" else None
    t.clean()
    table = holds(tmp_path)
    compactions = [i for i in table.timeline.instants if i.action.value == "commit" and i.is_completed]
    assert compactions, "the metadata table was compacted"
    expected = sorted(
        [f"id-{i:04d}" for i in range(5, 40) if "abc"[i % 3] != "b"]
        + [f"id-{i:04d}" for i in (100, 101, 102, 200, 201, 202, 203, 204)]
    )
    assert sorted(t.read().column("id").to_pylist()) == expected


def test_the_record_index_is_compacted_from_its_stored_entries_as_record_by_record(tmp_path: Path) -> None:
    """A record-index file group is compacted from its stored entries, each distinct datum
    renamed once: its new base file holds exactly the records the record-by-record read gives
    (inserts, updates, keys moved to another partition, deletes; over the initialization's
    empty base file, then over a compacted one), each naming the new file."""
    t = new_table(tmp_path, "MERGE_ON_READ")
    ri = {"hoodie.metadata.record.index.enable": "true", "hoodie.metadata.compact.max.delta.commits": "100"}
    moved = {**ri, "hoodie.index.type": "GLOBAL_SIMPLE", "hoodie.simple.index.update.partition.path": "true"}
    storage = Storage(tmp_path)

    def compacted_as_read() -> int:
        timeline = Timeline.load(storage)
        table = MetadataTable.open(timeline)
        assert table is not None
        before = {sl.file_id: table.read_all(sl) for sl in table.slices("record_index")}
        time_ = compaction_time(table, timeline)
        assert time_ is not None
        compact(table, time_, 8)
        after = table.reloaded()
        for sl in after.slices("record_index"):
            assert sl.base is not None and sl.base.endswith(f"_{time_}.hfile") and not sl.logs
            name = sl.base.rpartition("/")[2]
            with after.storage.open_input(sl.base) as f:
                reader = HFileReader(f, sl.base)
                data = reader.read()
                schema = reader.file_info[hfile_info.SCHEMA].decode()
            keys = [k.decode() for k in data.column("key").to_pylist()]
            got = dict(zip(keys, decode(data.column("value").to_pylist(), keys, schema, sl.base)))
            assert got == {k: {**r, "_hoodie_file_name": name} for k, r in before[sl.file_id].items()}
        return sum(len(records) for records in before.values())

    t.upsert(batch(range(40)), options=ri)
    t.upsert(batch(range(20, 60), ts=2), options=ri)
    t.delete(batch(range(10)).select(["id", "part"]), options=ri)
    t.upsert(batch(range(30, 35), part="z", ts=3), options=moved)
    assert compacted_as_read() == 50  # the initialization's empty base file and logs
    t.upsert(batch(range(55, 70), ts=4), options=ri)
    t.delete(batch(range(10, 15)).select(["id", "part"]), options=ri)
    t.upsert(batch(range(15, 18), part="y", ts=5), options=moved)
    assert compacted_as_read() == 55  # a compacted base file and logs
    holds(tmp_path)
    located = MetadataTable.open(Timeline.load(storage)).record_locations([f"id-{i:04d}" for i in range(70)])
    assert sorted(located) == [f"id-{i:04d}" for i in range(15, 70)]
    assert {located[f"id-{i:04d}"][0] for i in (15, 16, 17)} == {"part=y"}


def test_a_merge_on_read_write_records_its_log_files_statistics_without_reading_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append that writes a log file computes its column statistics (`RecordsStats`): the
    commit reads no log file back, and the records equal what the file's records say. A log with
    NaN (no range holds) and a log of deletes only get none."""
    t = new_table(tmp_path, "MERGE_ON_READ")
    t.upsert(typed(range(30), 1))
    read = log_reads(monkeypatch)
    t.upsert(typed(range(12), 2, nan_part="c"))  # its tagging reads no log either: there was none
    assert read == []
    monkeypatch.undo()
    t.delete(typed([20, 23], 3).select(["id", "part"]))  # part=c, part=c
    described = logs_described(tmp_path, TYPED_COLUMNS)
    assert sorted((p, has) for (p, _), has in described.items()) == [
        ("part=a", True), ("part=b", True), ("part=c", False), ("part=c", False)
    ]
    holds(tmp_path)


def test_the_record_index_learns_the_keys_the_bucket_index_inserts_into_logs(tmp_path: Path) -> None:
    """On a merge-on-read table the bucket index appends a new key to its bucket's file group (as
    Hudi's does: its index finds keys in log files): the key lives only in a log file there, and
    the record index kept beside it locates it."""
    t = new_table(tmp_path, "MERGE_ON_READ")
    options = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "2",
               "hoodie.metadata.record.index.enable": "true"}
    t.upsert(batch(range(12)), options=options)
    bases = sorted(p.name for p in tmp_path.glob("part=*/*.parquet"))
    t.upsert(batch(range(6, 24), ts=2), options=options)
    assert sorted(p.name for p in tmp_path.glob("part=*/*.parquet")) == bases  # every record went to a log
    table = holds(tmp_path)  # the record index locates every key where its row is
    assert len(table.scan("record_index")) == 24
    assert metadata_violations(Storage(tmp_path)) == []


def test_record_index_tags_across_partitions(tmp_path: Path) -> None:
    """RECORD_INDEX is global: a key written again under another partition is found in its old one."""
    t = new_table(tmp_path)
    t.upsert(batch(range(10)), options={"hoodie.index.type": "RECORD_INDEX"})
    result = t.upsert(batch(range(5, 15), part="a", ts=2), options={"hoodie.index.type": "RECORD_INDEX"})
    assert (result.num_updates, result.num_inserts) == (5, 5)  # updated where they are (Hudi's default)
    data = t.read()
    assert sorted(data.column("id").to_pylist()) == [f"id-{i:04d}" for i in range(15)]  # no key twice
    where = {r["id"]: r["_hoodie_partition_path"] for r in data.to_pylist()}
    assert (where["id-0005"], where["id-0007"]) == ("part=c", "part=b")
    moved = t.upsert(
        batch([7], part="a", ts=3),
        options={"hoodie.index.type": "RECORD_INDEX", "hoodie.record.index.update.partition.path": "true"},
    )
    assert (moved.num_deletes, moved.num_inserts) == (1, 1)
    assert [r["_hoodie_partition_path"] for r in t.read().to_pylist() if r["id"] == "id-0007"] == ["part=a"]
    holds(tmp_path)


def test_by_default_a_table_without_one_gets_none(tmp_path: Path) -> None:
    """hoodie.metadata.enable's default keeps a metadata table but builds none (see its doc)."""
    t = upsertlake.create_table(
        tmp_path,
        "t",
        record_key="id",
        precombine_field="ts",
        partition_fields="part",
        options={"hoodie.write.table.version": "8"},
    )
    t.upsert(batch(range(3)))
    assert not (tmp_path / ".hoodie" / "metadata").exists()
    t.upsert(batch(range(3, 6)), options={"hoodie.metadata.enable": "true"})
    holds(tmp_path)
    upsertlake.open_table(tmp_path).upsert(batch(range(6, 9)))  # kept by default
    holds(tmp_path)
    assert len(t.read()) == 9


def test_record_index_without_a_metadata_table_is_refused_by_name(tmp_path: Path) -> None:
    t = new_table(tmp_path, **{"hoodie.metadata.enable": "false"})
    t.upsert(batch(range(3)), options={"hoodie.metadata.enable": "false"})
    with pytest.raises(ConfigError, match="RECORD_INDEX needs the metadata table's record index"):
        t.upsert(batch(range(3)), options={"hoodie.index.type": "RECORD_INDEX", "hoodie.metadata.enable": "false"})


KILLED_BEFORE_ITS_COMMIT = """
import os, signal
import upsertlake.engine.commit as commit
import pyarrow as pa
from upsertlake import open_table
real = commit.transition
def transition(storage, instant, to, *args, **kwargs):
    if to.value == "completed":  # the data instant: its metadata deltacommit completed already
        os.kill(os.getpid(), signal.SIGKILL)
    return real(storage, instant, to, *args, **kwargs)
commit.transition = transition
rows = {rows!r}
open_table({path!r}, {options!r}).upsert(pa.table(rows, schema=pa.schema([("id", pa.string()), ("part", pa.string()),
                                                                     ("ts", pa.int64()), ("val", pa.float64())])))
"""
FAST_HEARTBEAT = {"hoodie.client.heartbeat.interval_in_ms": 100, "hoodie.client.heartbeat.tolerable.misses": 1}


def test_a_write_killed_before_its_commit_leaves_nothing_readers_apply(tmp_path: Path) -> None:
    """kill -9 after the metadata deltacommit completed and before the data instant did: readers
    ignore its blocks (the listing is storage's committed files), and the next write's rollback of
    the failed instant rolls the metadata deltacommit back too."""
    t = new_table(tmp_path, **{"hoodie.metadata.record.index.enable": "true"})
    t.upsert(batch(range(10)), options={"hoodie.metadata.record.index.enable": "true"})
    before = sorted(t.read().column("id").to_pylist())
    script = KILLED_BEFORE_ITS_COMMIT.format(
        rows=batch(range(50, 60), ts=2).to_pydict(), path=str(tmp_path), options=FAST_HEARTBEAT
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    assert subprocess.run([sys.executable, "-c", script], env=env, timeout=300).returncode == -signal.SIGKILL
    mdt = Storage(tmp_path / ".hoodie" / "metadata")
    built = Timeline.load(mdt).get("00000000000000000").completed_at
    failed = Timeline.load(mdt).instants[-1]
    assert failed.is_completed and failed.action.value == "deltacommit"
    assert not any(i.time == failed.time and i.is_completed for i in Timeline.load(Storage(tmp_path)).instants)
    assert sorted(upsertlake.open_table(tmp_path).read().column("id").to_pylist()) == before
    holds(tmp_path)  # neither its files nor its keys: the data instant did not complete
    time.sleep(0.3)  # its heartbeat expires
    upsertlake.open_table(tmp_path, FAST_HEARTBEAT).upsert(batch(range(60, 61), ts=3))
    assert Timeline.load(mdt).get(failed.time) is None  # rolled back with its data instant
    assert Timeline.load(mdt).get("00000000000000000").completed_at == built  # not by building the metadata table again
    assert not [p for p in (tmp_path / ".hoodie" / "metadata").rglob(f"*{failed.time}*")]
    holds(tmp_path)
    assert sorted(t.read().column("id").to_pylist()) == [*before, "id-0060"]


def test_a_stale_metadata_table_is_not_trusted_and_is_built_again(tmp_path: Path) -> None:
    """A writer that does not keep the metadata table (an old upsertlake) commits beside it: readers
    list storage (warned), and the next write asking for one deletes it and builds it again."""
    from upsertlake.metadata.listing import MetadataTableWarning

    t = new_table(tmp_path)
    t.upsert(batch(range(10)))
    saved = tmp_path.parent / "saved"
    shutil.copytree(tmp_path / ".hoodie" / "metadata", saved / "metadata")
    shutil.copy(tmp_path / ".hoodie" / "hoodie.properties", saved / "hoodie.properties")
    t.upsert(batch(range(10, 20)), options={"hoodie.metadata.enable": "false"})
    assert not (tmp_path / ".hoodie" / "metadata").exists()
    shutil.copytree(saved / "metadata", tmp_path / ".hoodie" / "metadata")  # as the old writer left it
    shutil.copy(saved / "hoodie.properties", tmp_path / ".hoodie" / "hoodie.properties")
    with pytest.warns(MetadataTableWarning, match="misses 1 completed instant"):
        assert sorted(upsertlake.open_table(tmp_path).read().column("id").to_pylist()) == [
            f"id-{i:04d}" for i in range(20)
        ]
    upsertlake.open_table(tmp_path).upsert(batch(range(20, 30)), options={"hoodie.metadata.enable": "true"})
    holds(tmp_path)
    assert sorted(t.read().column("id").to_pylist()) == [f"id-{i:04d}" for i in range(30)]
