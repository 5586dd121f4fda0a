"""Concurrent writers: the conflict rule, lazy rollback by heartbeat, and the lock providers.

The scenarios re-express Hudi's TestSimpleConcurrentFileWritesConflictResolutionStrategy and
TestHoodieClientMultiWriter. Writers are separate WriteClient objects (separate Table handles) whose
steps the tests interleave explicitly, so every ordering is deterministic; the lock providers are
also exercised across processes.
"""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from upsertlake import WriteConflictError, open_table
from upsertlake.concurrency.heartbeat import heartbeat_path, is_expired
from upsertlake.concurrency.key_summary import ROARING_MIN, KeySummary, key_hashes, read_summaries, write_summaries
from upsertlake.concurrency.lock import (
    FILE_SYSTEM_PROVIDER,
    IN_PROCESS_PROVIDER,
    make_lock,
)
from upsertlake.config import Config
from upsertlake.errors import ConfigError, CorruptTableError, LockTimeoutError
from upsertlake.layout.markers import read_markers
from upsertlake.storage import Storage
from upsertlake.timeline.instant import Action, State

from concurrent_writers import (
    OCC,
    CountingLock,
    assert_clean,
    concurrent_writer,
    hudi_snap,
    make,
    rows,
    snap,
    started,
    writer,
)
from helpers import hudi_read, timeline_dir

PROVIDERS = ["upsertlake.concurrency.lock.FlockLockProvider", FILE_SYSTEM_PROVIDER, IN_PROCESS_PROVIDER]


# -- the conflict rule -------------------------------------------------------------------------
@pytest.mark.usefixtures("table_version")
def test_no_concurrent_writes_no_conflict(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    c1.commit(t1, r1)
    c2, t2, r2 = started(tmp_path, rows(("a", 3, "a3", "p1")))  # started after t1 completed
    c2.commit(t2, r2)
    assert snap(tmp_path) == [("a", 3, "a3", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2")]


def test_different_records_of_one_file_group_both_commit_the_later_re_merging(tmp_path: Path) -> None:
    """Beyond Hudi, whose file-group rule fails the later write: it merges its records again onto
    the version the other commit wrote (new write token, same instant), and the table holds both."""
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("b", 2, "b2", "p1")))  # same file group as a
    c1.commit(t1, r1)
    done = c2.commit(t2, r2)
    expected = [("a", 2, "a2", "p1"), ("b", 2, "b2", "p1"), ("c", 1, "c1", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    assert (done.instant_time, done.remerges, done.retries, done.num_updates, done.num_inserts) == (t2, 1, 0, 1, 0)
    (stat,) = done.write_stats
    old = r2.write_stats[0]
    assert (stat.fileId, stat.prevCommit, stat.numWrites, stat.numUpdateWrites) == (old.fileId, t1, 2, 1)
    assert stat.path == old.path.replace("_0-1-0_", "_0-2-0_")  # a new write token
    assert not Path(tmp_path, old.path).exists()
    meta = json.loads((tmp_path / ".hoodie" / f"{t2}.commit").read_text())
    assert [s["path"] for s in meta["partitionToWriteStats"]["p1"]] == [stat.path]
    assert_clean(tmp_path)


def test_a_re_merge_writes_on_as_many_threads_as_the_write_was_given(tmp_path: Path, monkeypatch) -> None:
    """The writing threads (hoodie.upsert.shuffle.parallelism) given to one write call hold for its
    re-merge too (the client's own options, which do not set them, would mean one per CPU)."""
    from upsertlake.engine import write_buckets

    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    threads: list[int] = []
    real = write_buckets.write_rows

    def write_rows(storage, job, records, rows, n, *args, **kwargs):
        threads.append(n)
        return real(storage, job, records, rows, n, *args, **kwargs)

    monkeypatch.setattr(write_buckets, "write_rows", write_rows)
    c2 = writer(tmp_path)
    t2 = c2.start_commit()
    r2 = c2.upsert(rows(("b", 2, "b2", "p1")), t2, {"hoodie.upsert.shuffle.parallelism": 3})  # same file group as a
    c1.commit(t1, r1)
    assert c2.commit(t2, r2).remerges == 1
    assert threads == [3, 3]  # the write, then its re-merge
    assert snap(tmp_path) == [("a", 2, "a2", "p1"), ("b", 2, "b2", "p1"), ("c", 1, "c1", "p2")]


def test_a_re_merge_onto_a_later_instants_version_moves_the_write_to_a_new_instant(tmp_path: Path) -> None:
    """Readers order a group's versions by instant time: a version named by t1 after t2's would be
    hidden, so the write of t1 is written again under a new instant and t1 is rolled back."""
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("b", 2, "b2", "p1"), ("c", 2, "c2", "p2")))  # same group as a
    c2.commit(t2, r2)
    done = c1.commit(t1, r1)
    assert done.instant_time > t2 and done.remerges == 1
    expected = [("a", 2, "a2", "p1"), ("b", 2, "b2", "p1"), ("c", 2, "c2", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    timeline = open_table(tmp_path).timeline()
    assert [i.time for i in timeline if i.action is Action.COMMIT][-2:] == [t2, done.instant_time]
    assert t1 not in {i.time for i in timeline} and not list(tmp_path.rglob(f"*_{t1}.parquet"))
    (stat,) = done.write_stats
    assert (stat.prevCommit, stat.numWrites, stat.numUpdateWrites) == (t2, 2, 1)
    assert not (tmp_path / ".hoodie" / ".keys" / t1).exists()
    assert_clean(tmp_path)


@pytest.mark.usefixtures("table_version")
def test_a_moved_write_whose_record_lost_by_ordering_value_keeps_the_larger_one(tmp_path: Path) -> None:
    """The write of t1 tags only after t2 (started later, with a larger ordering value for a)
    committed, so it merges onto t2's version, where its record of a loses (EVENT_TIME_ORDERING):
    it did not write a, no conflict. It moves to an instant after t2's and a keeps t2's record,
    as the serial application of t2 then the moved write, merged by ordering value, gives (not
    "the last commit's record wins", which the simulator's checker assumed)."""
    make(tmp_path)
    c1 = writer(tmp_path)
    t1 = c1.start_commit()
    c2, t2, r2 = started(tmp_path, rows(("a", 3, "a3", "p1")))
    c2.commit(t2, r2)
    r1 = c1.upsert(rows(("a", 2, "a2", "p1"), ("b", 2, "b2", "p1")), t1)
    assert (r1.num_updates, r1.write_stats[0].prevCommit) == (1, t2)  # b only: a lost to a3
    done = c1.commit(t1, r1)
    assert done.instant_time > t2 and (done.remerges, done.num_updates) == (1, 1)
    expected = [("a", 3, "a3", "p1"), ("b", 2, "b2", "p1"), ("c", 1, "c1", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    assert_clean(tmp_path)


@pytest.mark.usefixtures("table_version")
def test_conflict_is_found_whichever_writer_started_first(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("a", 3, "a3", "p1")))
    c1.commit(t1, r1)  # the earlier instant commits first this time
    with pytest.raises(WriteConflictError, match=f"conflicts with commit {t1} .*both wrote the record key\\(s\\) a;"):
        c2.commit(t2, r2)
    assert snap(tmp_path)[0] == ("a", 2, "a2", "p1")
    assert_clean(tmp_path)


@pytest.mark.usefixtures("table_version")
def test_disjoint_partitions_both_commit_in_either_order(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1"), ("d", 1, "d1", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("c", 2, "c2", "p2"), ("e", 1, "e1", "p3")))
    c2.commit(t2, r2)
    c1.commit(t1, r1)
    expected = [("a", 2, "a2", "p1"), ("b", 1, "b1", "p1"), ("c", 2, "c2", "p2"), ("d", 1, "d1", "p1"),
                ("e", 1, "e1", "p3")]
    assert snap(tmp_path) == expected
    got = hudi_read(tmp_path).select(["id", "ts", "v", "p"]).to_pylist()
    assert sorted(tuple(r.values()) for r in got) == expected


def test_inserts_packed_into_the_same_small_file_both_commit(tmp_path: Path) -> None:
    make(tmp_path, small_file_limit=10 * 1024 * 1024)
    c1, t1, r1 = started(tmp_path, rows(("x", 1, "x1", "p1")), small_file_limit=10 * 1024 * 1024)
    c2, t2, r2 = started(tmp_path, rows(("y", 1, "y1", "p1")), small_file_limit=10 * 1024 * 1024)
    assert r1.num_inserts == r2.num_inserts == 1 and r1.write_stats[0].fileId == r2.write_stats[0].fileId
    c1.commit(t1, r1)
    done = c2.commit(t2, r2)
    assert (done.remerges, done.num_inserts, done.write_stats[0].numWrites) == (1, 1, 4)
    assert [r[0] for r in snap(tmp_path)] == ["a", "b", "c", "x", "y"]
    assert snap(tmp_path) == hudi_snap(tmp_path)
    assert_clean(tmp_path)


@pytest.mark.usefixtures("table_version")
def test_concurrent_inserts_of_one_new_key_fail_the_later_writer(tmp_path: Path) -> None:
    """Beyond Hudi: each writer creates its own file group, so the file-group check sees nothing."""
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("new", 1, "w1", "p1"), ("n1", 1, "w1", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("new", 2, "w2", "p1"), ("n2", 1, "w2", "p1")))
    assert r1.write_stats[0].fileId != r2.write_stats[0].fileId
    c1.commit(t1, r1)
    with pytest.raises(WriteConflictError, match="both wrote the record key\\(s\\) new"):
        c2.commit(t2, r2)
    ids = [r[0] for r in snap(tmp_path)]
    assert ids == ["a", "b", "c", "n1", "new"]
    assert sorted(hudi_read(tmp_path)["id"].to_pylist()) == ids


@pytest.mark.usefixtures("table_version")
def test_same_new_key_in_different_partitions_is_no_conflict(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("new", 1, "w1", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("new", 1, "w2", "p2")))
    c1.commit(t1, r1)
    c2.commit(t2, r2)  # a partitioned index keeps one key per partition
    assert [r for r in snap(tmp_path) if r[0] == "new"] == [("new", 1, "w1", "p1"), ("new", 1, "w2", "p2")]


@pytest.mark.usefixtures("table_version")
def test_same_new_key_in_different_partitions_conflicts_under_a_global_index(tmp_path: Path) -> None:
    opts = {"hoodie.index.type": "GLOBAL_SIMPLE"}
    make(tmp_path, opts)
    c1, t1, r1 = started(tmp_path, rows(("new", 1, "w1", "p1")), options=opts)
    c2, t2, r2 = started(tmp_path, rows(("new", 1, "w2", "p2")), options=opts)
    c1.commit(t1, r1)
    with pytest.raises(WriteConflictError, match="both wrote the record key\\(s\\) new"):
        c2.commit(t2, r2)


def _clustering_plan(path: Path, time_: str, slices: list[tuple[str, str]]) -> None:
    """A pending clustering instant as Hudi writes it: Avro HoodieRequestedReplaceMetadata."""
    schema = {
        "type": "record", "name": "HoodieRequestedReplaceMetadata", "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {"name": "operationType", "type": ["null", "string"]},
            {"name": "clusteringPlan", "type": ["null", {
                "type": "record", "name": "HoodieClusteringPlan", "fields": [
                    {"name": "inputGroups", "type": {"type": "array", "items": {
                        "type": "record", "name": "HoodieClusteringGroup", "fields": [
                            {"name": "slices", "type": {"type": "array", "items": {
                                "type": "record", "name": "HoodieSliceInfo", "fields": [
                                    {"name": "fileId", "type": "string"},
                                    {"name": "partitionPath", "type": "string"}]}}}]}}}]}]},
        ],
    }
    plan = {"operationType": "CLUSTER",
            "clusteringPlan": {"inputGroups": [{"slices": [{"fileId": f, "partitionPath": p} for p, f in slices]}]}}
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [plan])
    (path / ".hoodie" / f"{time_}.replacecommit.requested").write_bytes(buf.getvalue())


def test_write_touching_a_file_group_in_a_pending_clustering_conflicts(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    fg = r1.write_stats[0].fileId
    _clustering_plan(tmp_path, str(int(t1) + 1), [("p1", fg)])
    with pytest.raises(WriteConflictError, match=f"replacecommit {int(t1) + 1} \\(pending\\): it is clustering"):
        c1.commit(t1, r1)


def test_pending_clustering_of_other_file_groups_is_no_conflict(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    _clustering_plan(tmp_path, str(int(t1) + 1), [("p2", "some-other-file-group")])
    c1.commit(t1, r1)
    assert snap(tmp_path)[0] == ("a", 2, "a2", "p1")


# -- lazy rollback by heartbeat (multi-writer) -------------------------------------------------
def test_live_heartbeat_keeps_a_pending_write_alive(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    assert (tmp_path / ".hoodie" / ".heartbeat" / t1).exists()
    c2, t2, r2 = started(tmp_path, rows(("c", 2, "c2", "p2")))  # must not roll t1 back
    c2.commit(t2, r2)
    c1.commit(t1, r1)
    assert [r[:3] for r in snap(tmp_path)] == [("a", 2, "a2"), ("b", 1, "b1"), ("c", 2, "c2")]
    assert list((tmp_path / ".hoodie" / ".heartbeat").iterdir()) == []


@pytest.mark.usefixtures("table_version")
def test_expired_heartbeat_is_rolled_back_by_the_next_writer(tmp_path: Path) -> None:
    make(tmp_path)
    opts = {"hoodie.client.heartbeat.interval_in_ms": 100, "hoodie.client.heartbeat.tolerable.misses": 2}
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")), options=opts)
    c1.writes.get(t1).heartbeat._stop.set()  # the writer hangs: its heartbeat stops
    time.sleep(0.35)
    assert is_expired(Storage(tmp_path), t1, 100, 2)
    c2, t2, r2 = started(tmp_path, rows(("c", 2, "c2", "p2")), options=opts)
    assert (timeline_dir(tmp_path) / f"{t1}.commit.requested").exists() is False
    assert not any(Path(tmp_path, p).exists() for p in r1.files_written)
    c2.commit(t2, r2)
    with pytest.raises(WriteConflictError, match=f"write {t1} is no longer pending"):
        c1.commit(t1, r1)
    assert [r[:3] for r in snap(tmp_path)] == [("a", 1, "a1"), ("b", 1, "b1"), ("c", 2, "c2")]
    assert_clean(tmp_path)


@pytest.mark.usefixtures("table_version")
def test_single_writer_rolls_back_a_dead_write_and_waits_for_a_live_one(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))  # OCC writer with a live heartbeat
    c1.writes.get(t1).heartbeat.stop()  # it dies
    single = open_table(tmp_path, {"hoodie.parquet.small.file.limit": 0}).write_client()
    t2 = single.start_commit()
    assert (timeline_dir(tmp_path) / f"{t1}.commit.requested").exists() is False
    single.commit(t2, single.upsert(rows(("c", 2, "c2", "p2")), t2))
    with pytest.raises(WriteConflictError, match="no longer pending"):
        c1.commit(t1, r1)
    assert_clean(tmp_path)
    # A live write is waited for: the single writer starts once it has committed.
    c3, t3, r3 = started(tmp_path, rows(("a", 3, "a3", "p1")), options={"hoodie.client.heartbeat.interval_in_ms": 100})
    committer = threading.Timer(0.5, c3.commit, (t3, r3))
    committer.start()
    t4 = single.start_commit()
    committer.join()
    assert t4 > t3 and [i.time for i in open_table(tmp_path).timeline()][-2:] == [t3, t4]
    single.commit(t4, single.upsert(rows(("b", 4, "b4", "p1")), t4))
    assert snap(tmp_path) == [("a", 3, "a3", "p1"), ("b", 4, "b4", "p1"), ("c", 2, "c2", "p2")]
    assert_clean(tmp_path)


def test_heartbeat_without_file_is_expired(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    assert is_expired(storage, "20260101000000000", 60000, 2)
    storage.write_bytes(heartbeat_path("20260101000000000"), b"")
    assert not is_expired(storage, "20260101000000000", 60000, 2)


# -- many writers at once, across processes ----------------------------------------------------
@pytest.mark.parametrize("provider", [PROVIDERS[0], FILE_SYSTEM_PROVIDER])
def test_writers_in_several_processes_on_disjoint_partitions_all_commit(tmp_path: Path, provider: str) -> None:
    make(tmp_path, {"hoodie.write.lock.provider": provider})
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=concurrent_writer, args=(str(tmp_path), 4, provider, f"q{w}", out)) for w in range(3)]
    for p in procs:
        p.start()
    times = [t for _ in procs for t in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(set(times)) == 12
    ids = [r[0] for r in snap(tmp_path)]
    assert ids == sorted(["a", "b", "c"] + [f"q{w}-{i}" for w in range(3) for i in range(4)])
    assert_clean(tmp_path)


def test_threads_with_the_in_process_lock(tmp_path: Path) -> None:
    make(tmp_path, {"hoodie.write.lock.provider": IN_PROCESS_PROVIDER})
    errors: list[BaseException] = []

    def work(part: str) -> None:
        try:
            t = open_table(tmp_path, dict(OCC, **{"hoodie.write.lock.provider": IN_PROCESS_PROVIDER}))
            for i in range(3):
                t.upsert(rows((f"{part}-{i}", 1, "v", part)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"t{w}",)) for w in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(snap(tmp_path)) == 3 + 9


# -- lock providers ----------------------------------------------------------------------------
@pytest.mark.parametrize("provider", PROVIDERS)
def test_lock_is_exclusive_and_times_out_with_a_clear_error(tmp_path: Path, provider: str) -> None:
    Storage(tmp_path).makedirs(".hoodie")
    cfg = Config.resolve({"hoodie.write.lock.provider": provider, "hoodie.write.lock.wait_time_ms": 50})
    first, second = make_lock(Storage(tmp_path), cfg), make_lock(Storage(tmp_path), cfg)
    with first.hold():
        result: list[BaseException] = []
        th = threading.Thread(target=lambda: _try(second, result))
        th.start()
        th.join()
        assert len(result) == 1 and isinstance(result[0], LockTimeoutError)
        assert "within 50 ms (hoodie.write.lock.wait_time_ms)" in str(result[0])
    with second.hold():  # released: the other one gets it
        pass


def _try(lock, result: list) -> None:
    try:
        with lock.hold():
            pass
    except LockTimeoutError as exc:
        result.append(exc)


def test_file_system_lock_takes_over_a_dead_holders_lock(tmp_path: Path) -> None:
    Storage(tmp_path).makedirs(".hoodie")
    lock_file = tmp_path / ".hoodie" / "lock"
    dead = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    dead.start()
    dead.join()
    lock_file.write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "created_ms": 0, "token": "x"}))
    cfg = Config.resolve({"hoodie.write.lock.provider": FILE_SYSTEM_PROVIDER, "hoodie.write.lock.wait_time_ms": 2000})
    with make_lock(Storage(tmp_path), cfg).hold():
        assert json.loads(lock_file.read_text())["pid"] == os.getpid()
    assert not lock_file.exists()


def test_file_system_lock_of_a_live_holder_expires_only_after_the_configured_minutes(tmp_path: Path) -> None:
    Storage(tmp_path).makedirs(".hoodie")
    lock_file = tmp_path / ".hoodie" / "lock"
    old_ms = int(time.time() * 1000) - 3 * 60_000
    lock_file.write_text(json.dumps({"host": "elsewhere", "pid": 1, "created_ms": old_ms, "token": "x"}))
    base = {"hoodie.write.lock.provider": FILE_SYSTEM_PROVIDER, "hoodie.write.lock.wait_time_ms": 50}
    with pytest.raises(LockTimeoutError, match="held by pid 1 on elsewhere"), make_lock(
        Storage(tmp_path), Config.resolve(base)
    ).hold():
        pass
    with make_lock(Storage(tmp_path), Config.resolve(dict(base, **{"hoodie.write.lock.filesystem.expire": 2}))).hold():
        assert json.loads(lock_file.read_text())["pid"] == os.getpid()


def test_a_users_lock_provider_class_is_used(tmp_path: Path) -> None:
    make(tmp_path, {"hoodie.write.lock.provider": "concurrent_writers.CountingLock"})
    before = CountingLock.acquired
    open_table(tmp_path, {"hoodie.write.lock.provider": "concurrent_writers.CountingLock"}).upsert(
        rows(("z", 1, "z1", "p1"))
    )
    # start_commit and commit; the automatic clean and archival take it only when due (neither is, on 2 commits)
    assert CountingLock.acquired - before == 2


def test_unknown_lock_provider_is_a_config_error(tmp_path: Path) -> None:
    make(tmp_path)
    before = sorted(p.name for p in (tmp_path / ".hoodie").iterdir())
    with pytest.raises(ConfigError, match=r"cannot load lock provider class 'com.example.NoSuchLock'"):
        open_table(tmp_path, {"hoodie.write.lock.provider": "com.example.NoSuchLock"}).upsert(rows(("z", 1, "z", "p1")))
    assert sorted(p.name for p in (tmp_path / ".hoodie").iterdir()) == before


@pytest.mark.usefixtures("table_version")
def test_timeline_has_one_completed_commit_per_acknowledged_write(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    c1.commit(t1, r1)
    commits = [i for i in open_table(tmp_path).timeline() if i.action is Action.COMMIT]
    assert [i.state for i in commits] == [State.COMPLETED, State.COMPLETED]


def test_a_write_marks_all_its_files_with_one_batch_in_hudis_layout(tmp_path: Path) -> None:
    """Markers in the layout of Hudi's timeline-server-based markers: MARKERS.type, then one
    MARKERS<n> file naming every file the write creates (one request, not one a file)."""
    make(tmp_path)
    c, pending, result = started(tmp_path, rows(("a", 2, "a2", "p1"), ("d", 1, "d1", "p3"), ("e", 1, "e1", "p4")))
    folder = tmp_path / ".hoodie" / ".temp" / pending
    assert len(list(folder.iterdir())) == 2
    assert (folder / "MARKERS.type").read_bytes() == b"TIMELINE_SERVER_BASED"
    (batch,) = [p for p in folder.iterdir() if p.name != "MARKERS.type"]
    assert batch.name.startswith("MARKERS") and batch.name[7:].isdigit()
    io = {"p1": "MERGE", "p3": "CREATE", "p4": "CREATE"}
    assert sorted(batch.read_text().splitlines()) == sorted(
        f"{s.path}.marker.{io[s.partitionPath]}" for s in result.write_stats)
    assert read_markers(Storage(tmp_path), pending) == sorted(
        (s.path, io[s.partitionPath]) for s in result.write_stats)
    c.rollback(pending)  # the batch names the files a rollback deletes
    assert_clean(tmp_path)
    assert snap(tmp_path) == [("a", 1, "a1", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2")]


# -- key summaries -----------------------------------------------------------------------------
def summary_of(path: Path, instant: str, partition: str, file_id: str):
    return read_summaries(Storage(path), instant).get((partition, file_id))


def test_key_hashes_are_stable_and_the_summary_round_trips() -> None:
    # The hashes are on disk: they must never change between versions or machines.
    assert key_hashes(pa.array(["a", "", "id-1"])).tolist() == [2191698264, 4023394144, 3642176598]
    assert key_hashes(pa.chunked_array([["a"], ["id-1"]])).tolist() == [2191698264, 3642176598]
    small = KeySummary.of(pa.array(["u1", "u2"]), pa.array(["d"]), pa.array([], pa.string()))
    back = KeySummary.from_bytes(small.to_bytes(), "test")
    assert [a.tolist() for a in (back.updated, back.deleted, back.inserted)] == [
        sorted(key_hashes(pa.array(["u1", "u2"])).tolist()), key_hashes(pa.array(["d"])).tolist(), []
    ]
    assert len(small.to_bytes()) == 5 + 3 * 9 + 3 * 4
    many = pa.array([f"key-{i:08d}" for i in range(ROARING_MIN * 2)])
    big = KeySummary.of(pa.array([], pa.string()), pa.array([], pa.string()), many)
    data = big.to_bytes()
    assert len(data) < 4 * len(big.inserted)  # stored as a roaring bitmap, smaller than the array
    assert np.array_equal(KeySummary.from_bytes(data, "test").inserted, big.inserted)
    with pytest.raises(CorruptTableError, match="damaged"):
        KeySummary.from_bytes(data[:100], "test")
    with pytest.raises(CorruptTableError, match="not a version 1 key summary"):
        KeySummary.from_bytes(b"PAR1", "test")


def test_a_write_stores_its_groups_summaries_in_one_sidecar_and_readers_unite_them(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    a = KeySummary.of(pa.array(["u1"]), pa.array([], pa.string()), pa.array(["i1", "i2"]))
    b = KeySummary.of(pa.array([], pa.string()), pa.array(["d1"]), pa.array([], pa.string()))
    write_summaries(storage, "001", {("p/1", "f1"): a, ("", "f2"): b})
    assert len(list((tmp_path / ".hoodie" / ".keys" / "001").iterdir())) == 1
    # A re-merge (or a retried task) stores another: a group's summary is the union.
    write_summaries(storage, "001", {("p/1", "f1"): b})
    got = read_summaries(storage, "001")
    assert sorted(got) == [("", "f2"), ("p/1", "f1")]
    assert np.array_equal(got[("p/1", "f1")].hashes(), np.union1d(a.hashes(), b.hashes()))
    assert np.array_equal(got[("", "f2")].deleted, b.deleted)
    # A summary of one group stored before the batches is read by its path.
    legacy = tmp_path / ".hoodie" / ".keys" / "001" / "p" / "1" / "f3.keys"
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(a.to_bytes())
    assert np.array_equal(read_summaries(storage, "001")[("p/1", "f3")].inserted, a.inserted)
    assert read_summaries(storage, "002") == {}
    sidecar = next(p for p in (tmp_path / ".hoodie" / ".keys" / "001").iterdir() if p.is_file())
    sidecar.write_bytes(sidecar.read_bytes()[:-3])
    with pytest.raises(CorruptTableError, match="damaged"):
        read_summaries(storage, "001")


def test_each_bucket_write_stores_the_keys_it_updated_deleted_and_inserted(tmp_path: Path) -> None:
    make(tmp_path)
    t = open_table(tmp_path, OCC)
    batch = rows(("a", 2, "a2", "p1"), ("b", 2, "b2", "p1"), ("d", 1, "d1", "p1"), ("e", 1, "e1", "p2"))
    result = t.upsert(batch.append_column("_hoodie_is_deleted", pa.array([False, True, False, False])))
    by_partition = {s.partitionPath: s for s in result.write_stats}
    p1 = summary_of(tmp_path, result.instant_time, "p1", by_partition["p1"].fileId)
    assert p1.updated.tolist() == key_hashes(pa.array(["a"])).tolist()
    assert p1.deleted.tolist() == key_hashes(pa.array(["b"])).tolist()
    assert p1.inserted.tolist() == key_hashes(pa.array(["d"])).tolist()
    p2 = summary_of(tmp_path, result.instant_time, "p2", by_partition["p2"].fileId)
    assert (p2.updated.tolist(), p2.deleted.tolist(), p2.inserted.tolist()) == (
        [],
        [],
        key_hashes(pa.array(["e"])).tolist(),
    )
    # Without an in-memory index the writer gets no key arrays back: the check reads the summaries.
    assert result.index_update.inserted.num_rows == result.index_update.deleted.num_rows == 0
    # Apache Hudi's reader ignores the sidecars: snapshot, time travel and incremental reads agree.
    assert hudi_snap(tmp_path) == snap(tmp_path)
    first = t.timeline()[0].time
    assert sorted(hudi_read(tmp_path, as_of=first).column("id").to_pylist()) == ["a", "b", "c"]
    assert sorted(hudi_read(tmp_path, begin=first).column("id").to_pylist()) == ["a", "d", "e"]


def test_key_summaries_go_with_their_instant_on_rollback_clean_and_archive(tmp_path: Path) -> None:
    make(tmp_path, {"hoodie.clean.automatic": False})
    keys = tmp_path / ".hoodie" / ".keys"
    t = open_table(tmp_path, dict(OCC, **{"hoodie.clean.automatic": False}))
    times = [t.timeline()[0].time] + [t.upsert(rows(("a", i, f"a{i}", "p1"))).instant_time for i in range(2, 8)]
    assert sorted(p.name for p in keys.iterdir()) == times
    c, pending, _ = started(tmp_path, rows(("c", 9, "c9", "p2")))
    assert (keys / pending).exists()
    c.rollback(pending)  # a pending write
    assert not (keys / pending).exists()
    t.rollback()  # the latest completed commit
    assert sorted(p.name for p in keys.iterdir()) == times[:-1]
    cleaned = t.clean("KEEP_LATEST_COMMITS", 2)
    # Old versions of group p1 are cleaned; the summaries stay with their instants (one sidecar
    # holds all of a write's groups) until those are archived.
    gone = [(f.split("/")[0], *Path(f).stem.split("_")) for f in cleaned.files_deleted]
    assert len(gone) == 4 and all(summary_of(tmp_path, i, p, f) is not None for p, f, _, i in gone)
    assert sorted(p.name for p in keys.iterdir()) == times[:-1]
    moved = t.archive({"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3})
    assert moved and all(not (keys / i.time).exists() for i in moved)
    assert hudi_snap(tmp_path) == snap(tmp_path)


def test_a_hash_collision_is_confirmed_against_the_keys_and_is_no_conflict(tmp_path: Path) -> None:
    # k0115978 and k0125128 share one 32-bit hash; the check must read the keys and let both commit.
    assert key_hashes(pa.array(["k0115978"])).tolist() == key_hashes(pa.array(["k0125128"])).tolist()
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("k0115978", 1, "x", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("k0125128", 1, "y", "p1")))
    c1.commit(t1, r1)
    c2.commit(t2, r2)
    assert [r[0] for r in snap(tmp_path)] == ["a", "b", "c", "k0115978", "k0125128"]
    assert_clean(tmp_path)


KILLED_WHILE_RE_MERGING = """
import os, signal, sys
import pyarrow as pa
from upsertlake import open_table
from upsertlake.engine.bucket_writer import BucketJob

path, move = sys.argv[1], sys.argv[2] == "move"
opts = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        "hoodie.client.heartbeat.interval_in_ms": 200, "hoodie.parquet.small.file.limit": 0}
rows = lambda i, ts, v, p: pa.table({"id": [i], "ts": [ts], "v": [v], "p": [p]})
c1, c2 = open_table(path, opts).write_client(), open_table(path, opts).write_client()
first, second = (c2, c1) if move else (c1, c2)  # c2 commits last; with "move" it has the earlier instant
t_first = first.start_commit()
t_second = second.start_commit()
t1, t2 = (t_second, t_first) if move else (t_first, t_second)
r1 = c1.upsert(rows("a", 2, "a2", "p1"), t1)
r2 = c2.upsert(rows("b", 2, "b2", "p1"), t2)
c1.commit(t1, r1)
original = BucketJob.write

def write_then_die(self, storage, number, records, base_file=None, attempt=1, write_token=None):
    status = original(self, storage, number, records, base_file, attempt, write_token)
    os.kill(os.getpid(), signal.SIGKILL)  # killed once the re-merged file is written

BucketJob.write = write_then_die
c2.commit(t2, r2)
"""


@pytest.mark.parametrize("move", ["same", "move"])
def test_a_writer_killed_while_re_merging_leaves_nothing_visible(tmp_path: Path, move: str) -> None:
    make(tmp_path)
    proc = subprocess.run([sys.executable, "-c", KILLED_WHILE_RE_MERGING, str(tmp_path), move], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    expected = [("a", 2, "a2", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    pending = [i for i in open_table(tmp_path).timeline() if i.state is not State.COMPLETED]
    assert len(pending) == (2 if move == "move" else 1)  # the old instant and the one it moved to
    time.sleep(0.6)  # their heartbeats expire (200 ms x 2 misses)
    w = writer(tmp_path, {"hoodie.client.heartbeat.interval_in_ms": 200})
    assert sorted(w.rollback_failed_writes()) == sorted(i.time for i in pending)
    assert snap(tmp_path) == expected
    assert_clean(tmp_path)
    assert not any((tmp_path / ".hoodie" / ".keys" / i.time).exists() for i in pending)


RETRY = {"hoodie.write.num.retries.on.conflict.failures": 2}


@pytest.mark.parametrize(("ts1", "ts2", "a"), [(2, 3, ("a", 3, "w2", "p1")), (3, 2, ("a", 3, "w1", "p1"))])
def test_a_conflict_on_a_record_is_retried_when_configured(tmp_path: Path, ts1: int, ts2: int, a: tuple) -> None:
    """Tagged and merged again against the table with the other commit: under event-time ordering
    the larger ordering value wins whichever writer commits last, as in either serial order."""
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", ts1, "w1", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("a", ts2, "w2", "p1"), ("c", ts2, "w2", "p2")), options=RETRY)
    c1.commit(t1, r1)
    done = c2.commit(t2, r2)
    assert done.retries == 1 and done.instant_time > t2  # retried under a new instant, as Hudi
    assert t2 not in {i.time for i in open_table(tmp_path).timeline()}
    expected = [a, ("b", 1, "b1", "p1"), ("c", ts2, "w2", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    p1 = next(s for s in done.write_stats if s.partitionPath == "p1")
    assert (p1.prevCommit, done.num_updates) == (t1, 2 if ts2 > ts1 else 1)  # merged onto t1's version
    assert_clean(tmp_path)


def test_without_retries_a_conflict_on_a_record_fails_as_before(tmp_path: Path) -> None:
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "w1", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("a", 3, "w2", "p1")))
    c1.commit(t1, r1)
    with pytest.raises(WriteConflictError, match="record key"):
        c2.commit(t2, r2)
    assert snap(tmp_path)[0] == ("a", 2, "w1", "p1")
    assert_clean(tmp_path)


@pytest.mark.parametrize(("optimistic", "move", "locks"), [(2, False, 2), (2, True, 3), (0, False, 1), (0, True, 1)])
def test_a_re_merge_runs_outside_the_lock_until_the_last_round_which_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, optimistic: int, move: bool, locks: int
) -> None:
    """With OPTIMISTIC_REMERGES = 0 the first re-merge is already the last: it runs holding the lock
    (one acquisition: check, re-merge, commit), and the outcome is the same."""
    from upsertlake.engine import commit

    monkeypatch.setattr(commit, "OPTIMISTIC_REMERGES", optimistic)
    opts = {"hoodie.write.lock.provider": "concurrent_writers.CountingLock"}
    make(tmp_path, opts)
    c1, c2 = writer(tmp_path, opts), writer(tmp_path, opts)
    first, second = (c2, c1) if move else (c1, c2)
    t_first = first.start_commit()
    t_second = second.start_commit()
    t1, t2 = (t_second, t_first) if move else (t_first, t_second)
    r1, r2 = c1.upsert(rows(("a", 2, "a2", "p1")), t1), c2.upsert(rows(("b", 2, "b2", "p1")), t2)
    c1.commit(t1, r1)
    before = CountingLock.acquired
    done = c2.commit(t2, r2)
    assert CountingLock.acquired - before == locks
    assert (done.remerges, done.instant_time == t2) == (1, not move)
    assert snap(tmp_path) == [("a", 2, "a2", "p1"), ("b", 2, "b2", "p1"), ("c", 1, "c1", "p2")] == hudi_snap(tmp_path)
    assert_clean(tmp_path)


def test_a_commit_without_key_summaries_falls_back_to_the_file_group_rule(tmp_path: Path) -> None:
    """As if Apache Hudi (or upsertlake before summaries) had written the other commit."""
    make(tmp_path)
    c1, t1, r1 = started(tmp_path, rows(("a", 2, "a2", "p1")))
    c2, t2, r2 = started(tmp_path, rows(("b", 2, "b2", "p1"), ("c", 2, "c2", "p2")))  # a's group too
    c1.commit(t1, r1)
    shutil.rmtree(tmp_path / ".hoodie" / ".keys" / t1)
    with pytest.raises(WriteConflictError, match=rf"commit {t1} .*both wrote file group\(s\) p1/.* no key summary"):
        c2.commit(t2, r2)
    assert snap(tmp_path) == [("a", 2, "a2", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2")]
    assert_clean(tmp_path)
    # Without a shared group its inserts are still compared with the keys in its files.
    c3, t3, r3 = started(tmp_path, rows(("new", 1, "w3", "p2")))
    c4, t4, r4 = started(tmp_path, rows(("new", 2, "w4", "p2")))
    c3.commit(t3, r3)
    shutil.rmtree(tmp_path / ".hoodie" / ".keys" / t3)
    with pytest.raises(WriteConflictError, match=rf"commit {t3} .*both wrote the record key\(s\) new;"):
        c4.commit(t4, r4)
    assert_clean(tmp_path)
