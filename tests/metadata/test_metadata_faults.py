"""kill -9 inside the metadata table's own services (its compaction, the trim of its timeline):
what the killed writer leaves, readers ignore, and the next writers take away, so the metadata
table agrees with the data table (the simulator's invariant, `metadata_violations`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake
import upsertlake.engine.commit as commit
from upsertlake.metadata.table import unsynced_instants
from upsertlake.simulation.invariants import metadata_violations
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline

from helpers import REPO

OPTIONS = {
    "hoodie.write.table.version": "8", "hoodie.metadata.enable": "true", "hoodie.metadata.record.index.enable": "true",
    "hoodie.metadata.compact.max.delta.commits": "2",
    "hoodie.client.heartbeat.interval_in_ms": "100", "hoodie.client.heartbeat.tolerable.misses": "1",
}

# Upserts `rows`, SIGKILLed just before the `nth` call of Storage.<verb> whose full path matches `part`.
KILLED_AT = """
import os, re, signal, sys
import pyarrow as pa
from upsertlake import open_table
from upsertlake.storage import Storage
verb, part, nth = {verb!r}, {part!r}, {nth!r}
real, calls = getattr(Storage, verb), []
def wrapped(self, rel, *args, **kwargs):
    if re.search(part, self.full_path(rel)):
        calls.append(rel)
        if len(calls) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(self, rel, *args, **kwargs)
setattr(Storage, verb, wrapped)
open_table({path!r}, {options!r}).upsert(pa.table({rows!r}))
"""


def batch(ids: range, ts: int = 1) -> pa.Table:
    return pa.table({
        "id": [f"id-{i:04d}" for i in ids],
        "part": ["ab"[i % 2] for i in ids],
        "ts": pa.array([ts] * len(ids), pa.int64()),
    })


def killed_upsert(
    root: Path, rows: pa.Table, verb: str, part: str, nth: int, options: dict[str, str] = OPTIONS
) -> None:
    script = KILLED_AT.format(verb=verb, part=part, nth=nth, path=str(root), options=options, rows=rows.to_pydict())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    assert subprocess.run([sys.executable, "-c", script], env=env, timeout=300).returncode == -signal.SIGKILL


def metadata_timeline(root: Path) -> Timeline:
    return Timeline.load(Storage(root / ".hoodie" / "metadata"))


def pending_compactions(root: Path) -> list[str]:
    """Metadata compactions planned and never completed (a completed one is a commit of its time)."""
    instants = metadata_timeline(root).instants
    done = {i.time for i in instants if i.is_completed}
    return sorted({i.time for i in instants if i.action.value == "compaction" and i.time not in done})


def test_a_metadata_compaction_killed_midway_goes_with_the_rollback_of_its_write(tmp_path: Path) -> None:
    """Killed after writing one base file of a metadata compaction (inside the data write's commit,
    so that write fails too): readers ignore the pending compaction; the rollback of the failed
    write discards it with its base files instead of leaving them forever."""
    t = upsertlake.create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="part",
                                options=OPTIONS)
    t.upsert(batch(range(10)), options=OPTIONS)
    killed_upsert(tmp_path, batch(range(10, 20), ts=2), "write_bytes", r"\.hfile$", 2)
    failed = pending_compactions(tmp_path)
    assert len(failed) == 1
    assert len(list((tmp_path / ".hoodie" / "metadata").rglob(f"*_{failed[0]}.hfile"))) == 1
    assert sorted(upsertlake.open_table(tmp_path).read().column("id").to_pylist()) == [
        f"id-{i:04d}" for i in range(10)
    ]
    time.sleep(0.3)  # the killed writer's heartbeat expires
    # the next write rolls the failed one back, and its pending metadata compaction with it
    upsertlake.open_table(tmp_path, OPTIONS).upsert(batch(range(20, 21), ts=3))
    assert metadata_timeline(tmp_path).get(failed[0]) is None
    assert not list((tmp_path / ".hoodie" / "metadata").rglob(f"*{failed[0]}*"))
    assert metadata_violations(Storage(tmp_path)) == []
    assert sorted(upsertlake.open_table(tmp_path).read().column("id").to_pylist()) == [
        f"id-{i:04d}" for i in [*range(10), 20]
    ]


def test_a_trim_of_the_metadata_timeline_killed_midway_leaves_no_pending_instant(tmp_path: Path) -> None:
    """The trim deletes an old instant's files pending ones first, the completed one last: killed
    between two deletes, the instant is still completed (trimmed by the next one), never a pending
    deltacommit no rollback or trim would ever take."""
    t = upsertlake.create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="part",
                                options=OPTIONS)
    for n in range(4):  # two metadata compactions: the next one trims the timeline
        t.upsert(batch(range(n * 10, n * 10 + 10), ts=n), options=OPTIONS)
    before = {i.time for i in metadata_timeline(tmp_path).instants if i.is_completed}
    killed_upsert(tmp_path, batch(range(40, 50), ts=5), "delete", "/.hoodie/metadata/.hoodie/timeline/", 2)
    after = metadata_timeline(tmp_path)
    trimmed = before - {i.time for i in after.instants if i.is_completed}
    assert not trimmed  # killed before the completed file of the first instant went
    assert metadata_violations(Storage(tmp_path)) == []
    time.sleep(0.3)
    for n in range(2):
        upsertlake.open_table(tmp_path, OPTIONS).upsert(batch(range(50 + n, 51 + n), ts=6))
    assert metadata_violations(Storage(tmp_path)) == []
    assert len(upsertlake.open_table(tmp_path).read()) == 42


def test_a_compaction_killed_after_its_metadata_commit_and_run_again_keeps_the_metadata_table(tmp_path: Path) -> None:
    """An inline compaction of a merge-on-read table killed after its metadata deltacommit
    completed, before its commit did: the next compactor rolls the plan back and runs it again at
    the same instant. That rollback undid an instant the metadata table holds again (the re-run's
    deltacommit, completed after it): it is no sign of a writer that does not keep the metadata
    table, which is kept, not deleted and built again from a full listing."""
    mor = {**OPTIONS, "hoodie.table.type": "MERGE_ON_READ", "hoodie.compact.inline": "true",
           "hoodie.compact.inline.max.delta.commits": "2"}
    t = upsertlake.create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="part",
                                table_type="MERGE_ON_READ", options=mor)
    t.upsert(batch(range(10)), options=mor)
    built = metadata_timeline(tmp_path).get("00000000000000000").completed_at
    data_commit = rf"^{tmp_path}/\.hoodie/timeline/\d+_\d+\.commit$"  # the compaction's, not the metadata table's
    killed_upsert(tmp_path, batch(range(5), ts=2), "write_if_absent", data_commit, 1, mor)
    plan = Timeline.load(Storage(tmp_path)).pending_compactions()
    assert len(plan) == 1 and metadata_timeline(tmp_path).get(plan[0].time).is_completed
    time.sleep(0.3)
    assert upsertlake.open_table(tmp_path, mor).compact(mor).instant_time == plan[0].time  # rolled back, run again
    rollbacks = [i for i in Timeline.load(Storage(tmp_path)).instants if i.action.value == "rollback"]
    assert len(rollbacks) == 1 and rollbacks[0].is_completed
    assert unsynced_instants(Timeline.load(Storage(tmp_path)), metadata_timeline(tmp_path)) == []
    upsertlake.open_table(tmp_path, mor).upsert(batch(range(20, 25), ts=3))
    assert metadata_timeline(tmp_path).get("00000000000000000").completed_at == built  # not built again
    assert metadata_violations(Storage(tmp_path)) == []
    assert sorted(t.read().column("id").to_pylist()) == [f"id-{i:04d}" for i in [*range(10), *range(20, 25)]]


@pytest.mark.parametrize("rolled_back_by", ["its writer", "the next writer"])
def test_a_failed_write_synced_after_a_metadata_compaction_is_rolled_back_without_dropping_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rolled_back_by: str
) -> None:
    """A write that started before another writer's commit compacted the metadata table (at a
    later instant time) syncs after it, then fails before its data instant completes: its blocks
    came after the compaction, none was folded, so its rollback discards its deltacommit; the
    metadata table is not deleted as if a compaction had folded them, and the empty folder of the
    partition the failed write created is no partition the metadata table must list. Whether its
    own writer rolls it back, or the next writer once its heartbeat expired (a recorded rollback:
    that one took the compaction's later instant time for a fold and built the metadata table
    again, found by `upsertlake simulate --metadata`)."""
    t = upsertlake.create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="part",
                                options=OPTIONS)
    t.upsert(batch(range(10)), options=OPTIONS)
    built = metadata_timeline(tmp_path).get("00000000000000000").completed_at
    slow = upsertlake.open_table(tmp_path, OPTIONS).write_client()
    instant = slow.start_commit()
    for n in range(2):  # another writer commits twice: the metadata table is compacted after `instant`
        upsertlake.open_table(tmp_path, OPTIONS).upsert(batch(range(20 + n, 21 + n), ts=2))
    assert [c for c in pending_compactions(tmp_path)] == []
    assert any(i.action.value == "commit" and i.time > instant for i in metadata_timeline(tmp_path).instants)
    real, failed = commit.transition, []

    def fail_at_completion(storage, inst, to, *args, **kwargs):  # the data instant, its metadata committed
        if to.value == "completed":
            failed.append(inst.time)  # (a write moved to a new instant by a re-merge: that one)
            raise OSError("killed")
        return real(storage, inst, to, *args, **kwargs)

    monkeypatch.setattr(commit, "transition", fail_at_completion)
    rows = batch(range(30, 35), ts=3).set_column(1, "part", pa.array(["z"] * 5))
    with pytest.raises(OSError, match="killed"):
        slow.commit(instant, slow.upsert(rows, instant))
    monkeypatch.undo()
    assert failed == [instant]  # (a partition of its own: not moved to a new instant by a re-merge)
    assert metadata_timeline(tmp_path).get(instant).is_completed
    if rolled_back_by == "its writer":
        slow.rollback(instant)
    else:
        slow.writes.end(instant)  # its process died: the heartbeat stops
        time.sleep(0.3)
        assert upsertlake.open_table(tmp_path, OPTIONS).write_client().rollback_failed_writes() == [instant]
    assert metadata_timeline(tmp_path).get("00000000000000000").completed_at == built  # kept
    assert metadata_timeline(tmp_path).get(instant) is None
    assert metadata_violations(Storage(tmp_path)) == []
    assert sorted(t.read().column("id").to_pylist()) == [f"id-{i:04d}" for i in [*range(10), 20, 21]]


def test_a_commit_rolled_back_after_a_metadata_compaction_folded_it_drops_the_metadata_table(tmp_path: Path) -> None:
    """Three commits, the metadata table compacted inside the second's and the third's commit:
    the third's compaction folded the second's deltacommit into base files (it completed before
    the compaction's instant time), not the third's own. Rolling the third back discards its
    deltacommit, the metadata table kept; rolling the second back cannot take its records out of
    the base files (Hudi refuses it): the metadata table goes, readers list storage, and the next
    write builds it again."""
    t = upsertlake.create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="part",
                                options=OPTIONS)
    for n in range(3):
        t.upsert(batch(range(n * 10, n * 10 + 10), ts=n), options=OPTIONS)
    _, second, third = Timeline.load(Storage(tmp_path)).completed_writes()
    mdt = metadata_timeline(tmp_path)
    compactions = [i.time for i in mdt.instants if i.action.value == "commit"]
    assert any(c > mdt.get(second.time).completed_at for c in compactions)  # folded
    assert all(c < mdt.get(third.time).completed_at for c in compactions)  # not folded
    built = mdt.get("00000000000000000").completed_at
    assert t.rollback().time > third.time
    assert metadata_timeline(tmp_path).get(third.time) is None
    assert metadata_timeline(tmp_path).get("00000000000000000").completed_at == built  # kept
    assert metadata_violations(Storage(tmp_path)) == []
    t.rollback()
    assert not (tmp_path / ".hoodie" / "metadata").exists()
    assert sorted(t.read().column("id").to_pylist()) == [f"id-{i:04d}" for i in range(10)]
    upsertlake.open_table(tmp_path, OPTIONS).upsert(batch(range(40, 41), ts=4))
    assert metadata_timeline(tmp_path).get("00000000000000000").completed_at > built  # built again
    assert metadata_violations(Storage(tmp_path)) == []
    assert sorted(t.read().column("id").to_pylist()) == [f"id-{i:04d}" for i in [*range(10), 40]]
