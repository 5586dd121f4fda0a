"""Under optimistic concurrency no acknowledged write is lost.

A retried write goes under a new instant (its failed attempt rolled back first), so every file it
commits is newer than every version it merged onto (readers order a group's versions by instant
time); and a replace (insert_overwrite, insert_overwrite_table, delete_partition) conflicts with
every write that committed into the partitions it replaces after it started.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import WriteConflictError, create_table, open_table
from upsertlake.services.doctor import diagnose
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import State

from concurrent_writers import OCC, assert_clean, hudi_snap, make, rows, snap, started, writer

RETRY_ONCE = {"hoodie.write.num.retries.on.conflict.failures": 1}


def completed(path: Path) -> list[str]:
    return [i.time for i in open_table(path).timeline() if i.state is State.COMPLETED]


# -- a retry goes under a new instant --------------------------------------------------------
@pytest.mark.usefixtures("table_version")
def test_a_retry_onto_a_later_instants_version_is_committed_under_a_newer_instant(tmp_path: Path) -> None:
    """A (retries=1) starts first and writes k ts=100; B starts later and commits k ts=50. A's retry
    merges onto B's version: under A's own (earlier) instant its file would be hidden."""
    make(tmp_path)
    a, ta, ra = started(tmp_path, rows(("a", 100, "A", "p1")), options=RETRY_ONCE)
    b, tb, rb = started(tmp_path, rows(("a", 50, "B", "p1")))
    b.commit(tb, rb)
    done = a.commit(ta, ra)
    assert done.retries == 1 and done.instant_time > tb
    assert completed(tmp_path)[-2:] == [tb, done.instant_time]
    assert ta not in {i.time for i in open_table(tmp_path).timeline()}
    expected = [("a", 100, "A", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    (stat,) = done.write_stats
    assert stat.prevCommit == tb and Path(tmp_path, stat.path).name.endswith(f"_{done.instant_time}.parquet")
    assert_clean(tmp_path)


def test_a_retried_write_that_loses_by_ordering_value_keeps_the_larger_one(tmp_path: Path) -> None:
    make(tmp_path)
    a, ta, ra = started(tmp_path, rows(("a", 50, "A", "p1"), ("c", 7, "A", "p2")), options=RETRY_ONCE)
    b, tb, rb = started(tmp_path, rows(("a", 100, "B", "p1")))
    b.commit(tb, rb)
    done = a.commit(ta, ra)
    assert done.retries == 1 and done.instant_time > tb
    expected = [("a", 100, "B", "p1"), ("b", 1, "b1", "p1"), ("c", 7, "A", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    assert_clean(tmp_path)


def test_a_write_that_built_on_a_later_instants_version_before_its_retry_moves(tmp_path: Path) -> None:
    """The retry's plan reads the table as it is then: a commit named by an instant later than the
    retry's, finished meanwhile, is merged onto and so must be checked again (here: re-merged by
    moving the write once more), never taken as already seen."""
    from upsertlake.engine import commit

    make(tmp_path)
    a, ta, ra = started(tmp_path, rows(("a", 100, "A", "p1")), options=RETRY_ONCE)
    b, tb, rb = started(tmp_path, rows(("a", 50, "B", "p1")))
    b.commit(tb, rb)
    pending = a.writes.get(ta)
    redo = pending.redo
    late: list[str] = []

    def redo_after_a_later_commit(instant: str, attempt: int):
        c, tc, rc = started(tmp_path, rows(("b", 9, "C", "p1")))  # started after the retry's instant
        c.commit(tc, rc)
        late.append(tc)
        return redo(instant, attempt)

    a.writes.keep(ta, redo=redo_after_a_later_commit)
    done = a.commit(ta, ra)
    (tc,) = late
    assert done.instant_time > tc and done.retries == 1 and done.remerges == 1
    expected = [("a", 100, "A", "p1"), ("b", 9, "C", "p1"), ("c", 1, "c1", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    assert commit.OPTIMISTIC_REMERGES >= 1
    assert_clean(tmp_path)


SLOW_WRITER = """
import sys, time
from pathlib import Path
import pyarrow as pa
from upsertlake import open_table
from upsertlake.engine.bucket_writer import BucketJob

path, ready, go = sys.argv[1:4]
original = BucketJob.write

def wait_for_go(self, storage, number, records, base_file=None, attempt=1, write_token=None):
    if attempt == 1 and not Path(ready).exists():  # the first attempt's write stage waits
        Path(ready).write_text(self.instant_time)
        for _ in range(6000):
            if Path(go).exists():
                break
            time.sleep(0.01)
        else:
            sys.exit("the test never said go")
    return original(self, storage, number, records, base_file, attempt, write_token)

BucketJob.write = wait_for_go
options = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control",
           "hoodie.write.num.retries.on.conflict.failures": 1, "hoodie.parquet.small.file.limit": 0}
done = open_table(path, options).upsert(pa.table({"id": ["a"], "ts": [100], "v": ["A"], "p": ["p1"]}))
print(done.instant_time, done.retries)
"""


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    for _ in range(6000):
        if path.exists() or proc.poll() is not None:
            return
        time.sleep(0.01)


def test_a_writer_retried_across_processes_keeps_its_acknowledged_value(tmp_path: Path) -> None:
    """A retried write merged onto a later commit's version: A (retries=1) upserts a with ts=100
    while B commits ts=50 for it during A's write stage; A reports success, so the table shows 100."""
    make(tmp_path)
    ready, go = tmp_path.parent / f"{tmp_path.name}.ready", tmp_path.parent / f"{tmp_path.name}.go"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, str(tmp_path), str(ready), str(go)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for(ready, proc)
        assert ready.exists(), proc.communicate(timeout=60)
        b = open_table(tmp_path, dict(OCC, **{"hoodie.parquet.small.file.limit": 0})).upsert(rows(("a", 50, "B", "p1")))
        go.write_text("go")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    instant, retries = out.split()
    assert ready.read_text() < b.instant_time < instant and retries == "1"
    assert completed(tmp_path)[-2:] == [b.instant_time, instant]
    expected = [("a", 100, "A", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    assert_clean(tmp_path)


RANDOM_WRITER = """
import json, random, sys, time
import pyarrow as pa
from upsertlake import WriteConflictError, open_table
from upsertlake.engine.bucket_writer import BucketJob

path, who, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1000 + who)
original = BucketJob.write

def jittered(self, *args, **kwargs):  # widens the write stage, so writes overlap more often
    time.sleep(rng.uniform(0, 0.06))
    return original(self, *args, **kwargs)

BucketJob.write = jittered
options = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control",
           "hoodie.write.num.retries.on.conflict.failures": 4}
table = open_table(path, options)
acked = []
for r in range(rounds):
    keys = rng.sample(range(10), 4)  # k8, k9 are new keys: concurrent inserts of one key
    ts = [(rng.randrange(10**6) * 100 + r) * 10 + who for _ in keys]  # never equal across writes
    batch = pa.table({"id": [f"k{k}" for k in keys], "ts": ts, "v": [f"w{who}r{r}"] * 4,
                      "p": [f"p{k % 2}" for k in keys]})
    try:
        done = table.upsert(batch)
    except WriteConflictError:
        continue
    acked.append({"instant": done.instant_time, "rows": batch.to_pylist()})
print(json.dumps(acked))
"""


def test_writers_in_several_processes_with_retries_lose_no_acknowledged_write(tmp_path: Path) -> None:
    """Three processes, ten rounds each, overlapping keys, retries on: the table holds, per key,
    the acknowledged row with the largest ordering value (event-time ordering), and nothing else."""
    create_table(tmp_path, name="t", record_key="id", precombine_field="ts", partition_fields=["p"], options=OCC)
    open_table(tmp_path, OCC).upsert(
        pa.table({"id": [f"k{k}" for k in range(8)], "ts": [0] * 8, "v": ["init"] * 8,
                  "p": [f"p{k % 2}" for k in range(8)]})
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", RANDOM_WRITER, str(tmp_path), str(w), "10"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(3)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    acked = [w for out, _ in outputs for w in json.loads(out)]
    assert len(acked) >= 8  # most writes get through (retries on)
    expected = {f"k{k}": (0, "init", f"p{k % 2}") for k in range(8)}
    for write in acked:
        for row in write["rows"]:
            if row["ts"] > expected.get(row["id"], (-1,))[0]:
                expected[row["id"]] = (row["ts"], row["v"], row["p"])
    want = sorted((k, *v) for k, v in expected.items())
    assert snap(tmp_path) == want == hudi_snap(tmp_path)
    # A hidden file may be masked above by a later, larger value: the doctor finds it anyway.
    assert [f for f in diagnose(Storage(tmp_path)).findings if f.problem] == []
    times = {i.time for i in Timeline.load(Storage(tmp_path)).completed_writes()}  # archived ones too
    assert all(w["instant"] in times for w in acked) and len({w["instant"] for w in acked}) == len(acked)
    assert_clean(tmp_path)


# -- a replace conflicts with writes into the partitions it replaces -------------------------
def _replace(path: Path, operation: str):
    """A writer with a started and planned replace of p1 (or of the whole table)."""
    r = writer(path)
    t = r.start_commit(operation)
    if operation == "delete_partition":
        return r, t, r.delete_partitions(["p1"], t)
    return r, t, r.overwrite(operation, rows(("x", 1, "x1", "p1")), t)


@pytest.mark.usefixtures("table_version")
@pytest.mark.parametrize("operation", ["insert_overwrite", "insert_overwrite_table", "delete_partition"])
def test_a_replace_conflicts_with_an_insert_into_a_new_file_group_committed_meanwhile(
    tmp_path: Path, operation: str
) -> None:
    """U inserts n into a new file group of p1 and commits after R was planned; R, committed
    last, would leave n in a table whose only serial order (U, then R) has it gone."""
    make(tmp_path)
    u, tu, ru = started(tmp_path, rows(("n", 1, "n1", "p1")))
    assert ru.write_stats[0].prevCommit == "null"  # a new file group
    r, tr, rr = _replace(tmp_path, operation)
    u.commit(tu, ru)
    with pytest.raises(WriteConflictError, match=rf"{tu} .*partition\(s\) p1"):
        r.commit(tr, rr)
    assert snap(tmp_path) == [("a", 1, "a1", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2"), ("n", 1, "n1", "p1")]
    assert_clean(tmp_path)


def test_insert_overwrite_table_conflicts_with_a_write_into_a_partition_created_after_it_started(
    tmp_path: Path,
) -> None:
    make(tmp_path)
    r, tr, rr = _replace(tmp_path, "insert_overwrite_table")
    u, tu, ru = started(tmp_path, rows(("n", 1, "n1", "p9")))
    u.commit(tu, ru)
    with pytest.raises(WriteConflictError, match=rf"{tu} .*partition\(s\) p9"):
        r.commit(tr, rr)
    assert ("n", 1, "n1", "p9") in snap(tmp_path)
    assert_clean(tmp_path)


def test_insert_overwrite_of_other_partitions_commits_beside_an_insert(tmp_path: Path) -> None:
    make(tmp_path)
    u, tu, ru = started(tmp_path, rows(("n", 1, "n1", "p2")))
    r, tr, rr = _replace(tmp_path, "insert_overwrite")
    u.commit(tu, ru)
    r.commit(tr, rr)
    assert snap(tmp_path) == [("c", 1, "c1", "p2"), ("n", 1, "n1", "p2"), ("x", 1, "x1", "p1")] == hudi_snap(tmp_path)
    assert_clean(tmp_path)


@pytest.mark.usefixtures("table_version")
def test_a_retried_replace_replaces_what_the_insert_added(tmp_path: Path) -> None:
    """With retries R goes again under a new instant, after U: U's n is replaced, as serially."""
    make(tmp_path)
    u, tu, ru = started(tmp_path, rows(("n", 1, "n1", "p1")))
    r = writer(tmp_path, RETRY_ONCE)
    tr = r.start_commit("insert_overwrite")
    rr = r.overwrite("insert_overwrite", rows(("x", 1, "x1", "p1")), tr)
    u.commit(tu, ru)
    done = r.commit(tr, rr)
    assert done.retries == 1 and done.instant_time > tr > tu
    assert snap(tmp_path) == [("c", 1, "c1", "p2"), ("x", 1, "x1", "p1")] == hudi_snap(tmp_path)
    assert_clean(tmp_path)


@pytest.mark.parametrize("first", ["upsert", "overwrite"])
def test_insert_overwrite_racing_an_upsert_keeps_one_serial_order(tmp_path: Path, first: str) -> None:
    """U updates a (p1) and inserts m into p1; R overwrites p1. Whichever commits first, the
    other fails, and the table is as after the one that committed."""
    make(tmp_path)
    u, tu, ru = started(tmp_path, rows(("a", 2, "a2", "p1"), ("m", 1, "m1", "p1")))
    r, tr, rr = _replace(tmp_path, "insert_overwrite")
    winner, loser = ((u, tu, ru), (r, tr, rr)) if first == "upsert" else ((r, tr, rr), (u, tu, ru))
    winner[0].commit(winner[1], winner[2])
    with pytest.raises(WriteConflictError):
        loser[0].commit(loser[1], loser[2])
    if first == "upsert":
        expected = [("a", 2, "a2", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2"), ("m", 1, "m1", "p1")]
    else:
        expected = [("c", 1, "c1", "p2"), ("x", 1, "x1", "p1")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    assert_clean(tmp_path)


def test_an_upsert_retried_after_an_insert_overwrite_lands_on_top_of_it(tmp_path: Path) -> None:
    """R overwrites p1 and commits; U (planned before, retries on) updated a of p1: its retry
    finds a gone and inserts it, as in the serial order R, then U."""
    make(tmp_path)
    u, tu, ru = started(tmp_path, rows(("a", 2, "a2", "p1")), options=RETRY_ONCE)
    r, tr, rr = _replace(tmp_path, "insert_overwrite")
    r.commit(tr, rr)
    done = u.commit(tu, ru)
    assert done.retries == 1 and done.instant_time > tr
    assert snap(tmp_path) == [("a", 2, "a2", "p1"), ("c", 1, "c1", "p2"), ("x", 1, "x1", "p1")] == hudi_snap(tmp_path)
    assert_clean(tmp_path)


@pytest.mark.parametrize("operation", ["insert_overwrite", "insert_overwrite_table"])
def test_two_overwrites_of_a_new_partition_do_not_both_commit(tmp_path: Path, operation: str) -> None:
    """Neither retires a file group (the partition had none when they were planned): committed
    both, the partition held both batches, a state no serial order gives."""
    make(tmp_path)
    first, second = writer(tmp_path), writer(tmp_path)
    t1, t2 = first.start_commit(operation), second.start_commit(operation)
    r1 = first.overwrite(operation, rows(("x", 1, "x1", "p9")), t1)
    r2 = second.overwrite(operation, rows(("y", 1, "y1", "p9")), t2)
    first.commit(t1, r1)
    with pytest.raises(WriteConflictError, match=rf"{t1} .*(partition\(s\) p9|retired)"):
        second.commit(t2, r2)
    expected = [("x", 1, "x1", "p9")]
    if operation == "insert_overwrite":
        expected = [("a", 1, "a1", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2"), *expected]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    assert_clean(tmp_path)


def test_a_later_instant_committed_during_a_re_merge_moves_the_write_in_the_next_round(tmp_path: Path) -> None:
    """Per-record re-merge keeps the guarantee: A re-merges (keeping its instant) onto X, named
    before it; meanwhile Y, named after A, rewrites the group: the next round moves A past Y."""
    make(tmp_path)
    x, tx, rx = started(tmp_path, rows(("b", 2, "X", "p1")))
    a, ta, ra = started(tmp_path, rows(("a", 2, "A", "p1")))
    x.commit(tx, rx)
    pending = a.writes.get(ta)
    rewrite = pending.rewrite
    late: list[str] = []

    def rewrite_while_y_commits(job, numbers, attempt):
        if not late:
            y, ty, ry = started(tmp_path, rows(("b", 3, "Y", "p1")))
            y.commit(ty, ry)
            late.append(ty)
        return rewrite(job, numbers, attempt)

    a.writes.keep(ta, rewrite=rewrite_while_y_commits)
    done = a.commit(ta, ra)
    (ty,) = late
    assert tx < ta < ty < done.instant_time and done.remerges == 2
    (stat,) = done.write_stats
    assert stat.prevCommit == ty
    expected = [("a", 2, "A", "p1"), ("b", 3, "Y", "p1"), ("c", 1, "c1", "p2")]
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    assert_clean(tmp_path)


def test_the_doctor_reports_a_version_hidden_behind_a_later_instants(tmp_path: Path) -> None:
    """What the old retry left: a commit named before the version it merged onto. The doctor says
    so (the table is not healthy), naming the file, the commit and the later instant."""
    make(tmp_path)
    a, ta = writer(tmp_path), None
    ta = a.start_commit()
    b, tb, rb = started(tmp_path, rows(("a", 50, "B", "p1")))
    b.commit(tb, rb)
    assert diagnose(Storage(tmp_path)).ok
    a.writes.check_from(ta, a.writes.get(ta).checked | {tb})  # as the old retry did: took the later commit as seen
    done = a.commit(ta, a.upsert(rows(("a", 100, "A", "p1")), ta))
    assert done.instant_time == ta and snap(tmp_path)[0] == ("a", 50, "B", "p1")  # A's row hidden
    report = diagnose(Storage(tmp_path))
    (found,) = [f for f in report.findings if f.check == "hidden"]
    (stat,) = done.write_stats
    assert found.path == stat.path and found.problem and not report.ok
    assert f"{ta}.commit" in found.message and f"later instant {tb}" in found.message


def test_a_commit_archived_by_another_writer_after_the_timeline_was_listed_is_still_read(tmp_path: Path) -> None:
    """Seen with several writers and a short archive window: a writer's timeline listed a commit,
    another writer archived it, and the first failed with 'commit file missing' (CorruptTableError)."""

    opts = dict(OCC, **{"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3,
                        "hoodie.cleaner.commits.retained": 1})
    make(tmp_path, opts)
    listed = Timeline.load(Storage(tmp_path))
    (first,) = listed.completed_writes()
    t = open_table(tmp_path, opts)
    for ts in range(2, 6):
        t.upsert(rows(("a", ts, f"a{ts}", "p1")))  # the fourth archives the oldest commits
    assert first not in listed.archived and first in Timeline.load(Storage(tmp_path)).archived
    assert listed.commit_metadata(first).operation_type == "UPSERT"
    assert listed.latest_schema() is not None
