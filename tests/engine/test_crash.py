"""A writer killed mid-write (SIGKILL) leaves nothing visible, and the next write rolls it back.

The writer is a separate Python process (`sys.executable -c`) upserting a batch large enough, into
files small enough (`hoodie.parquet.max.file.size`), to be writing many files when it is killed:
as soon as its `.inflight` file appears, or once several markers are under `.hoodie/.temp/<instant>/`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table
from upsertlake.timeline import documents
from upsertlake.timeline.instant import Action, State

from helpers import REPO, completed_times, hudi_read, instant_file, timeline_dir

PAD = "x" * 80


def rows_of(keys: range, ts: int, tag: str, parts: int) -> pa.Table:
    return pa.table(
        {
            "id": [f"k{i:06d}" for i in keys],
            "ts": [ts] * len(keys),
            "v": [f"{tag}-{i}" for i in keys],
            "p": [f"p{i % parts}" for i in keys],
            "pad": [PAD] * len(keys),
        }
    )


def snapshot(data: pa.Table) -> list[tuple]:
    cols = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path",
            "_hoodie_file_name", "id", "ts", "v", "p"]
    return sorted(tuple(r[c] for c in cols) for r in data.select(cols).to_pylist())


def data_rows(data: pa.Table) -> dict[str, tuple]:
    return {r["id"]: (r["ts"], r["v"], r["p"]) for r in data.select(["id", "ts", "v", "p"]).to_pylist()}


WRITER = """
import sys
import pyarrow as pa
from upsertlake import open_table

path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
keys = range(first, last)
batch = pa.table({
    "id": [f"k{i:06d}" for i in keys],
    "ts": [2] * len(keys),
    "v": [f"crash-{i}" for i in keys],
    "p": [f"p{i % 3}" for i in keys],  # p2 is a new partition
    "pad": ["x" * 80] * len(keys),
})
t = open_table(path, {"hoodie.parquet.max.file.size": 32 * 1024, "hoodie.upsert.shuffle.parallelism": 2,
                      "hoodie.client.heartbeat.interval_in_ms": 200})  # the next writer waits for its expiry
t.upsert(batch)
print("COMMITTED", flush=True)
"""


def pending_instant(root: Path) -> str | None:
    requested = {p.name.split(".")[0] for p in timeline_dir(root).glob("*.commit.requested")}
    return min(requested - set(completed_times(root)), default=None)


def kill_mid_write(root: Path, wait_for: str, timeout: float = 120.0) -> str:
    """Start the writer, SIGKILL it at the chosen point; returns the instant it was writing."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), "1000", "21000"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert proc.poll() is None, f"the writer ended before it was killed: {proc.communicate()}"
            assert time.monotonic() < deadline, "the writer never reached the point to kill it at"
            instant = pending_instant(root)
            if instant is not None:
                if wait_for == "inflight" and (timeline_dir(root) / f"{instant}.inflight").exists():
                    break
                # Its markers are written before its data files: kill it once it has written 5.
                if wait_for == "markers" and sum(1 for _ in root.rglob(f"*_{instant}.parquet")) >= 5:
                    break
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert instant not in completed_times(root), "the writer committed before it was killed"
    return instant


@pytest.mark.slow
@pytest.mark.usefixtures("table_version")
@pytest.mark.parametrize("wait_for", ["inflight", "markers"])
def test_killed_writer_is_invisible_and_rolled_back_by_the_next_write(tmp_path: Path, wait_for: str) -> None:
    root = tmp_path / "t"
    t = create_table(root, "t", record_key="id", precombine_field="ts", partition_fields="p")
    first = t.upsert(rows_of(range(0, 2000), 1, "one", 2))
    second = t.upsert(rows_of(range(1500, 2500), 1, "two", 2))
    committed_files = {p for p in root.rglob("*.parquet")}
    before = snapshot(t.read())
    before_rows = data_rows(t.read())
    assert len(before) == 2500

    failed = kill_mid_write(root, wait_for)

    # The failed write left its traces ...
    assert (timeline_dir(root) / f"{failed}.commit.requested").exists()
    failed_files = [p for p in root.rglob(f"*_{failed}.parquet")]
    if wait_for == "markers":
        assert failed_files, "killed after its markers, the writer had written data files"
    # ... which no reader sees: ours and Apache Hudi's show exactly the last committed snapshot.
    assert snapshot(open_table(root).read()) == before
    assert snapshot(t.read()) == before
    assert snapshot(hudi_read(root)) == before
    assert [i.time for i in open_table(root).timeline() if i.state is State.COMPLETED] == [
        first.instant_time, second.instant_time
    ]

    # The next write (single writer) waits for its heartbeat to expire (the window the dead writer
    # declared), rolls the failed instant back, then commits correctly.
    t2 = open_table(root)
    r = t2.upsert(rows_of(range(2400, 2600), 3, "three", 2))
    assert r.instant_time > failed
    assert not list(root.rglob(f"*_{failed}.parquet"))
    assert not [p.name for p in timeline_dir(root).iterdir() if p.name.startswith(failed)]
    assert not (root / ".hoodie" / ".temp" / failed).exists()
    # recorded as Hudi's writers record it: a completed rollback, before the write that ran it
    [rollback] = [i for i in t2.timeline() if i.action is Action.ROLLBACK]
    assert [(i.time, i.state) for i in t2.timeline()] == [
        (first.instant_time, State.COMPLETED), (second.instant_time, State.COMPLETED),
        (rollback.time, State.COMPLETED), (r.instant_time, State.COMPLETED)
    ]
    assert documents.decode(instant_file(root, rollback.time, "rollback").read_bytes())["commitsRollback"] == [failed]
    expected = dict(before_rows)
    expected.update({f"k{i:06d}": (3, f"three-{i}", f"p{i % 2}") for i in range(2400, 2600)})
    assert data_rows(t2.read()) == expected
    assert data_rows(hudi_read(root)) == expected
    assert (r.num_inserts, r.num_updates) == (100, 100)
    # nothing committed before is lost: every earlier file is still there, time travel agrees
    assert committed_files <= set(root.rglob("*.parquet"))
    assert snapshot(t2.read(as_of=second.instant_time)) == before
    assert snapshot(hudi_read(root, as_of=second.instant_time)) == before


# -- a kill at every stage of the write path, in both concurrency modes ------------------------
STAGE_WRITER = """
import os, signal, sys
import pyarrow as pa
import pyarrow.parquet as pq
import upsertlake.engine.instants as instants
import upsertlake.engine.write_client as wc
import upsertlake.storage.storage as st
from upsertlake import open_table

path, stage, mode = sys.argv[1], sys.argv[2], sys.argv[3]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)

def after(fn, when=lambda *a, **k: True):
    def wrapped(*a, **k):
        out = fn(*a, **k)
        if when(*a, **k):
            die()
        return out
    return wrapped

if stage == "requested":
    instants.create_requested = after(instants.create_requested)
elif stage == "inflight":
    wc.transition = after(wc.transition, lambda s, i, to, *r: to.value == "inflight")
elif stage == "mid_file":
    pq.ParquetWriter.write_table = after(pq.ParquetWriter.write_table)  # before the footer is written
elif stage == "before_commit":
    wc.WriteClient.commit = lambda *a, **k: die()
elif stage == "commit_rename":
    real_link = os.link
    def link(src, dst, *a, **k):
        if dst.endswith(".commit"):
            die()  # the commit's bytes are in a temporary file, not yet linked to its name
        return real_link(src, dst, *a, **k)
    st.os.link = link

keys = range(1500, 2600)
batch = pa.table({
    "id": [f"k{i:06d}" for i in keys], "ts": [2] * len(keys), "v": [f"crash-{i}" for i in keys],
    "p": [f"p{i % 3}" for i in keys], "pad": ["x" * 80] * len(keys),
})
opts = {"hoodie.parquet.max.file.size": 32 * 1024, "hoodie.client.heartbeat.interval_in_ms": 100,
        "hoodie.write.concurrency.mode": mode}
open_table(path, opts).upsert(batch)
print("COMMITTED", flush=True)
"""

STAGES = ["requested", "inflight", "mid_file", "before_commit", "commit_rename"]
MODES = ["single_writer", "optimistic_concurrency_control"]


@pytest.mark.usefixtures("table_version")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stage", STAGES)
def test_kill_at_every_stage_leaves_old_state_and_next_writer_cleans_up(tmp_path: Path, stage: str, mode: str) -> None:
    root = tmp_path / "t"
    t = create_table(root, "t", record_key="id", precombine_field="ts", partition_fields="p")
    first = t.upsert(rows_of(range(0, 2000), 1, "one", 2))
    before, before_rows = snapshot(t.read()), data_rows(t.read())
    before_files = set(root.rglob("*.parquet"))

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", STAGE_WRITER, str(root), stage, mode], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    failed = pending_instant(root)
    assert failed is not None and failed > first.instant_time
    if stage == "mid_file":
        assert list(root.rglob(f"*_{failed}.parquet")), "killed mid-write, a data file was being written"
    if stage == "commit_rename":
        assert [p for p in timeline_dir(root).iterdir() if p.name.startswith(f".{failed}") and ".commit." in p.name]

    # Readers see the old state, exactly.
    assert snapshot(open_table(root).read()) == before
    assert snapshot(hudi_read(root)) == before

    # The next writer, in the same mode, cleans up (under OCC once the heartbeat expired) and commits.
    time.sleep(0.3)
    t2 = open_table(root, {"hoodie.write.concurrency.mode": mode, "hoodie.client.heartbeat.interval_in_ms": 100})
    r = t2.upsert(rows_of(range(1900, 2100), 3, "three", 2))
    assert not list(root.rglob(f"*_{failed}.parquet"))
    assert not [p.name for p in timeline_dir(root).iterdir() if p.name.startswith(failed)]
    assert not (root / ".hoodie" / ".temp" / failed).exists()
    [rollback] = [i for i in t2.timeline() if i.action is Action.ROLLBACK]  # as Hudi records it
    assert [(i.time, i.state) for i in t2.timeline()] == [
        (first.instant_time, State.COMPLETED), (rollback.time, State.COMPLETED), (r.instant_time, State.COMPLETED)
    ]
    assert documents.decode(instant_file(root, rollback.time, "rollback").read_bytes())["commitsRollback"] == [failed]
    expected = dict(before_rows)
    expected.update({f"k{i:06d}": (3, f"three-{i}", f"p{i % 2}") for i in range(1900, 2100)})
    assert data_rows(t2.read()) == expected
    assert data_rows(hudi_read(root)) == expected
    assert before_files <= set(root.rglob("*.parquet"))  # nothing committed is lost
