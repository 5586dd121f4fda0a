"""Table services: rollback, clean, savepoint and restore, with Hudi's Avro instants, and Apache
Hudi's reader agreeing with ours after each."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake import create_table, open_table
from upsertlake.errors import (
    CleanedInstantError,
    ServiceError,
    UpsertlakeError,
    WriteConflictError,
)
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Action, State

from helpers import hudi_read, instant_file, timeline_dir

NO_AUTO_CLEAN = {"hoodie.clean.automatic": False}

# Every service test runs on a table of each version (6 and 8), checked with hudi-rs.
pytestmark = pytest.mark.usefixtures("table_version")


def rows(ids: range, ts: int, tag: str) -> pa.Table:
    return pa.table({"id": [f"k{i:03d}" for i in ids], "ts": [ts] * len(ids), "v": [f"{tag}-{i}" for i in ids],
                     "p": [f"p{i % 2}" for i in ids]})


def snap(path: Path, **read: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in open_table(path).read(columns=["id", "ts", "v", "p"], **read).to_pylist())


def hudi_snap(path: Path, **read: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in hudi_read(path, **read).select(["id", "ts", "v", "p"]).to_pylist())


def table_with_commits(path: Path, n: int, options: dict | None = None) -> list[str]:
    """n upserts of the same 10 keys: every commit writes a new version of both file groups."""
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p",
                     options=options or NO_AUTO_CLEAN)
    return [t.upsert(rows(range(10), i, f"c{i}")).instant_time for i in range(1, n + 1)]


def doc(path: Path, time_: str, action: str) -> dict:
    """The Avro document of an instant: completed (`action`) or pending (`action.state`)."""
    if "." not in action:
        return documents.decode(instant_file(path, time_, action).read_bytes())
    folder = timeline_dir(path)
    pending = folder / f"{time_}.{action}"
    if not pending.exists():  # version 8 names a pending clustering so
        pending = folder / f"{time_}.{action.replace('replacecommit', 'clustering')}"
    return documents.decode(pending.read_bytes())


def commit_doc(path: Path, time_: str, action: str) -> dict:
    """A completed commit's document: JSON in version 6, Avro in version 8."""
    data = instant_file(path, time_, action).read_bytes()
    return documents.decode(data) if data.startswith(b"Obj\x01") else json.loads(data)


def test_rollback_of_the_latest_commit_is_a_rollback_instant(tmp_path: Path) -> None:
    times = table_with_commits(tmp_path, 3)
    before = snap(tmp_path, as_of=times[1])
    done = open_table(tmp_path, NO_AUTO_CLEAN).rollback()
    assert (done.action, done.state) == (Action.ROLLBACK, State.COMPLETED)
    assert [i.time for i in open_table(tmp_path).timeline() if i.action is Action.COMMIT] == times[:2]
    meta = doc(tmp_path, done.time, "rollback")
    assert meta["commitsRollback"] == [times[2]] and meta["totalFilesDeleted"] == 2
    assert doc(tmp_path, done.time, "rollback.requested")["instantToRollback"]["commitTime"] == times[2]
    assert not list(tmp_path.rglob(f"*_{times[2]}.parquet"))
    assert snap(tmp_path) == before == hudi_snap(tmp_path)


def test_rollback_of_a_pending_write(tmp_path: Path) -> None:
    times = table_with_commits(tmp_path, 1)
    client = open_table(tmp_path, NO_AUTO_CLEAN).write_client()
    pending = client.start_commit()
    client.upsert(rows(range(5), 9, "never"), pending)
    assert list(tmp_path.rglob(f"*_{pending}.parquet"))
    with pytest.raises(ServiceError, match=f"write {pending} is in flight"):  # its writer is alive
        open_table(tmp_path).rollback(pending)
    client.writes.get(pending).heartbeat.stop()  # the writer is gone
    done = open_table(tmp_path).rollback(pending)
    assert doc(tmp_path, done.time, "rollback")["commitsRollback"] == [pending]
    assert not list(tmp_path.rglob(f"*_{pending}.parquet"))
    assert [i.time for i in open_table(tmp_path).timeline() if i.action is Action.COMMIT] == times


def test_rollback_refuses_what_it_cannot_undo(tmp_path: Path) -> None:
    create_table(tmp_path / "empty", "t", record_key="id")
    with pytest.raises(ServiceError, match="no completed commit to roll back"):
        open_table(tmp_path / "empty").rollback()
    times = table_with_commits(tmp_path / "t", 2)
    with pytest.raises(ServiceError, match=f"only the latest completed commit \\({times[1]}\\)"):
        open_table(tmp_path / "t").rollback(times[0])
    with pytest.raises(ServiceError, match="no commit at 20200101000000000"):
        open_table(tmp_path / "t").rollback("20200101000000000")


def test_clean_keep_latest_commits(tmp_path: Path, table_version: int) -> None:
    times = table_with_commits(tmp_path, 5)
    snapshot = snap(tmp_path)
    result = open_table(tmp_path).clean("KEEP_LATEST_COMMITS", 2)
    # the snapshots of the last 2 commits stay whole: versions of commits 4 and 5 survive
    assert result.earliest_commit_to_retain == times[3]
    assert sorted(Path(p).name.rsplit("_", 1)[1][:-8] for p in result.files_deleted) == sorted(times[:3] * 2)
    assert snap(tmp_path) == snapshot == hudi_snap(tmp_path)
    assert snap(tmp_path, as_of=times[3]) == sorted((f"k{i:03d}", 4, f"c4-{i}", f"p{i % 2}") for i in range(10))
    with pytest.raises(CleanedInstantError, match=f"time travel to {times[1]} is before the cleaner's retained window"):
        open_table(tmp_path).read(as_of=times[1])
    # incremental reads as Apache Hudi's: the newest files the range wrote are there, so from
    # the first commit on is the 10 rows of the last; a range whose files were cleaned is refused
    # at version 6 (Hudi 0.x) and read from the latest files at 8 (Hudi 1.x's full table scan,
    # where no row's latest version is from the range)
    assert len(open_table(tmp_path).read_incremental(times[0])) == 10
    assert len(open_table(tmp_path).read_incremental(times[3])) == 10
    if table_version == 6:
        with pytest.raises(CleanedInstantError, match=f"written by commit {times[2]}, which a clean deleted"):
            open_table(tmp_path).read_incremental(times[0], times[2])
    else:
        window = open_table(tmp_path).timeline()
        completed = {i.time: i.completion for i in window}
        assert len(open_table(tmp_path).read_incremental(times[0], completed[times[2]] or times[2])) == 0
    meta = doc(tmp_path, result.instant_time, "clean")
    assert (meta["policy"], meta["totalFilesDeleted"], meta["earliestCommitToRetain"]) == (
        "KEEP_LATEST_COMMITS", 6, times[3])
    assert open_table(tmp_path).clean("KEEP_LATEST_COMMITS", 2).instant_time is None  # nothing more to do


def test_clean_keep_latest_file_versions(tmp_path: Path) -> None:
    table_with_commits(tmp_path, 4)
    snapshot = snap(tmp_path)
    result = open_table(tmp_path).clean("KEEP_LATEST_FILE_VERSIONS", 1)
    assert len(result.files_deleted) == 6 and len(list(tmp_path.rglob("*.parquet"))) == 2
    assert snap(tmp_path) == snapshot == hudi_snap(tmp_path)


def test_automatic_clean_keeps_the_configured_commits(tmp_path: Path) -> None:
    times = table_with_commits(tmp_path, 6, {"hoodie.cleaner.commits.retained": 3})
    assert len(list(tmp_path.rglob("*.parquet"))) == 2 * 3
    cleans = [i for i in open_table(tmp_path).timeline() if i.action is Action.CLEAN]
    assert cleans and all(i.state is State.COMPLETED for i in cleans)
    assert snap(tmp_path, as_of=times[3]) == hudi_snap(tmp_path, as_of=times[3])


def test_savepoint_survives_cleaning_and_restore_returns_to_it(tmp_path: Path) -> None:
    times = table_with_commits(tmp_path, 2)
    t = open_table(tmp_path, NO_AUTO_CLEAN)
    sp = t.savepoint(times[1], comment="before the backfill")
    assert (sp.time, sp.action, sp.state) == (times[1], Action.SAVEPOINT, State.COMPLETED)
    assert doc(tmp_path, times[1], "savepoint")["comments"] == "before the backfill"
    at_savepoint = snap(tmp_path)
    for i in range(3, 7):
        t.upsert(rows(range(10), i, f"c{i}"))
    t.clean("KEEP_LATEST_COMMITS", 1)
    assert snap(tmp_path, as_of=times[1]) == at_savepoint  # pinned files were kept
    with pytest.raises(ServiceError, match="no completed savepoint at"):
        t.restore(times[0])
    done = t.restore(times[1])
    assert (done.action, done.state) == (Action.RESTORE, State.COMPLETED)
    assert [i.time for i in open_table(tmp_path).timeline() if i.action is Action.COMMIT] == times
    assert snap(tmp_path) == at_savepoint == hudi_snap(tmp_path)
    r = t.upsert(rows(range(10, 12), 9, "after"))  # the table takes writes again
    assert r.num_inserts == 2 and len(snap(tmp_path)) == 12


def test_service_commands(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    times = table_with_commits(tmp_path, 4)

    def cli(*args: str) -> dict:
        p = subprocess.run([sys.executable, "-m", "upsertlake.cli", args[0], str(tmp_path), *args[1:], "--json"],
                           capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    assert cli("savepoint", times[1])["action"] == "savepoint"
    out = cli("clean", "--policy", "KEEP_LATEST_COMMITS", "--retained", "2")
    assert out["earliest_commit_to_retain"] == times[2] and len(out["files_deleted"]) == 2  # not the savepoint
    assert cli("rollback")["action"] == "rollback"
    assert cli("restore", times[1])["action"] == "restore"
    assert snap(tmp_path) == sorted((f"k{i:03d}", 2, f"c2-{i}", f"p{i % 2}") for i in range(10))
    p = subprocess.run([sys.executable, "-m", "upsertlake.cli", "restore", str(tmp_path), times[0]],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2 and p.stderr.startswith("error: ServiceError: no completed savepoint at")


# -- clustering --------------------------------------------------------------------------------
SMALL = {"hoodie.parquet.small.file.limit": 0, "hoodie.clean.automatic": False}


def small_file_table(path: Path, batches: int = 6) -> list[str]:
    """Each insert of new keys makes one new small file group per partition."""
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=SMALL)
    return [t.upsert(rows(range(10 * b, 10 * b + 10), 1, f"b{b}")).instant_time for b in range(batches)]


def full_snap(path: Path) -> list[tuple]:
    cols = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path",
            "id", "ts", "v", "p"]
    return sorted(tuple(r.values()) for r in open_table(path).read(columns=cols).to_pylist())


def test_cluster_merges_small_file_groups_without_changing_the_snapshot(tmp_path: Path, table_version: int) -> None:
    times = small_file_table(tmp_path)
    before, files_before = full_snap(tmp_path), len(list(tmp_path.rglob("*.parquet")))
    assert files_before == 12
    result = open_table(tmp_path, SMALL).cluster({"hoodie.clustering.plan.strategy.sort.columns": "v"})
    assert {p: len(ids) for p, ids in result.replaced.items()} == {"p0": 6, "p1": 6}
    assert len(result.files_written) == 2
    assert full_snap(tmp_path) == before  # commit times and seqnos kept; only the files changed
    assert hudi_snap(tmp_path) == snap(tmp_path)
    latest = {r["_hoodie_file_name"] for r in open_table(tmp_path).read(columns=["_hoodie_file_name"]).to_pylist()}
    assert latest == {Path(f).name for f in result.files_written}
    meta = commit_doc(tmp_path, result.instant_time, "replacecommit")
    assert meta["operationType"] == "CLUSTER" and len(meta["partitionToReplaceFileIds"]["p0"]) == 6
    names = sorted(p.name for p in timeline_dir(tmp_path).glob(f"{result.instant_time}*"))
    pending = "clustering" if table_version == 8 else "replacecommit"  # Hudi 1.x names it so
    assert {f"{result.instant_time}.{pending}.inflight", f"{result.instant_time}.{pending}.requested"} < set(names)
    plan = doc(tmp_path, result.instant_time, "replacecommit.requested")
    assert plan["operationType"] == "CLUSTER" and len(plan["clusteringPlan"]["inputGroups"]) == 2
    written = pq.read_table(tmp_path / result.files_written[0]).column("v").to_pylist()
    assert written == sorted(written)  # sorted by the sort column
    assert snap(tmp_path, as_of=times[-1]) == snap(tmp_path) == hudi_snap(tmp_path, as_of=times[-1])
    nothing = open_table(tmp_path, SMALL).cluster()  # one group per partition: nothing to merge
    assert (nothing.instant_time, nothing.replaced, nothing.files_written) == (None, {}, ())
    assert nothing.reason.startswith("no partition has two file groups below hoodie.clustering.plan.strategy")


def test_upsert_on_a_group_being_clustered_conflicts_and_inserts_avoid_it(tmp_path: Path, monkeypatch) -> None:
    from upsertlake.services import cluster as cluster_module

    small_file_table(tmp_path, 3)
    packing = {"hoodie.parquet.small.file.limit": 10 * 1024 * 1024, "hoodie.clean.automatic": False}
    outcome: dict[str, object] = {}
    real = cluster_module._write_group

    def meanwhile(*args, **kwargs):
        if not outcome:  # another writer acts while the clustering is pending
            t = open_table(tmp_path, packing)
            inserted = t.upsert(rows(range(100, 102), 1, "new"))
            outcome["insert_groups"] = {s.fileId for s in inserted.write_stats}
            try:
                t.upsert(rows(range(2), 5, "upd"))
            except WriteConflictError as exc:
                outcome["conflict"] = str(exc)
        return real(*args, **kwargs)

    monkeypatch.setattr(cluster_module, "_write_group", meanwhile)
    before_groups = {r["_hoodie_file_name"].split("_")[0] for r in open_table(tmp_path).read(
        columns=["_hoodie_file_name"]).to_pylist()}
    result = open_table(tmp_path, SMALL).cluster()
    assert "it is clustering file group" in str(outcome["conflict"])
    assert not outcome["insert_groups"] & before_groups  # small-file inserts skipped the planned groups
    got = {r[0]: r[2] for r in snap(tmp_path)}
    assert len(got) == 32 and got["k000"] == "b0-0" and got["k100"] == "new-100"  # nothing lost or doubled
    assert result is not None and hudi_snap(tmp_path) == snap(tmp_path)


def test_inline_clustering_runs_every_n_commits(tmp_path: Path) -> None:
    opts = dict(SMALL, **{"hoodie.clustering.inline": True, "hoodie.clustering.inline.max.commits": 3})
    t = create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=opts)
    for b in range(3):
        t.upsert(rows(range(10 * b, 10 * b + 10), 1, f"b{b}"))
    actions = [i.action for i in open_table(tmp_path).timeline()]
    assert actions == [Action.COMMIT] * 3 + [Action.REPLACE_COMMIT]
    assert len(snap(tmp_path)) == 30 and hudi_snap(tmp_path) == snap(tmp_path)


# -- overwrite operations ----------------------------------------------------------------------
def test_insert_overwrite_replaces_the_partitions_in_the_batch(tmp_path: Path) -> None:
    table_with_commits(tmp_path, 2)  # k000..k009 in p0 and p1
    t = open_table(tmp_path, NO_AUTO_CLEAN)
    r = t.insert_overwrite(pa.table({"id": ["x1", "x2"], "ts": [7, 7], "v": ["new", "new"], "p": ["p0", "p0"]}))
    assert r.num_inserts == 2 and set(r.replaced) == {"p0"}
    expected = sorted([("x1", 7, "new", "p0"), ("x2", 7, "new", "p0")]
                      + [(f"k{i:03d}", 2, f"c2-{i}", "p1") for i in range(1, 10, 2)])
    assert snap(tmp_path) == expected == hudi_snap(tmp_path)
    last = open_table(tmp_path).timeline()[-1]
    assert (last.action, last.state) == (Action.REPLACE_COMMIT, State.COMPLETED)
    assert doc(tmp_path, last.time, "replacecommit.requested")["operationType"] == "INSERT_OVERWRITE"
    r = t.upsert(rows(range(2), 8, "after"))  # the index forgot the retired groups: k000 is new again
    assert (r.num_inserts, r.num_updates) == (1, 1)


def test_insert_overwrite_table_and_delete_partition(tmp_path: Path) -> None:
    times = table_with_commits(tmp_path, 1)
    t = open_table(tmp_path, NO_AUTO_CLEAN)
    t.insert_overwrite_table(pa.table({"id": ["y"], "ts": [1], "v": ["only"], "p": ["p5"]}))
    assert snap(tmp_path) == [("y", 1, "only", "p5")] == hudi_snap(tmp_path)
    assert len(snap(tmp_path, as_of=times[0])) == 10  # the replaced files stay for time travel
    t.upsert(rows(range(4), 2, "back"))
    r = t.delete_partitions(["p5", "p1"])
    assert r.replaced is not None and sorted(r.replaced) == ["p1", "p5"]
    assert snap(tmp_path) == [("k000", 2, "back-0", "p0"), ("k002", 2, "back-2", "p0")] == hudi_snap(tmp_path)
    with pytest.raises(UpsertlakeError, match="no such partition"):
        t.delete_partitions(["nope"])
    assert [i.state for i in open_table(tmp_path).timeline()] == [State.COMPLETED] * 4  # the failed one left none


# -- archival ----------------------------------------------------------------------------------
def test_archive_keeps_the_timeline_short_and_reads_reaching_back(tmp_path: Path, table_version: int) -> None:
    times = table_with_commits(tmp_path, 8)
    completions = {i.time: i.completion for i in open_table(tmp_path).timeline()}
    t = open_table(tmp_path, NO_AUTO_CLEAN)
    t.savepoint(times[1])
    moved = t.archive({"hoodie.keep.min.commits": 3, "hoodie.keep.max.commits": 5})
    # the savepoint holds archival back: nothing at or after it goes
    assert [i.time for i in moved] == [times[0]]
    t2 = open_table(tmp_path, NO_AUTO_CLEAN)
    active = [i.time for i in t2.timeline() if i.action is Action.COMMIT]
    assert active == times[1:]
    hudis = (
        ".hoodie/archived/.commits_.archive.1_1-0-1" if table_version == 6 else ".hoodie/timeline/history/manifest_1"
    )
    assert (tmp_path / hudis).is_file()  # Hudi's archived timeline of the version
    archived = Timeline.load(Storage(tmp_path)).instants[0]  # keeps its completion time (version 8)
    assert (archived.time, archived.completion) == (times[0], completions[times[0]])
    assert (archived.completion is not None) == (table_version == 8)
    # time travel and incremental reads still reach the archived commit; Hudi's reader agrees on the snapshot
    assert snap(tmp_path, as_of=times[0]) == sorted((f"k{i:03d}", 1, f"c1-{i}", f"p{i % 2}") for i in range(10))
    assert len(t2.read_incremental(times[0])) == 10
    assert snap(tmp_path) == hudi_snap(tmp_path)
    with pytest.raises(ServiceError, match="is archived"):
        t2.rollback(times[0])


def test_automatic_archival_after_commits(tmp_path: Path) -> None:
    opts = dict(NO_AUTO_CLEAN, **{"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 4})
    times = table_with_commits(tmp_path, 7, opts)
    active = [i.time for i in open_table(tmp_path).timeline() if i.action is Action.COMMIT]
    assert len(active) <= 4 and active == times[-len(active) :]
    assert times[0] not in active  # archived, and still readable
    assert snap(tmp_path, as_of=times[0]) == sorted((f"k{i:03d}", 1, f"c1-{i}", f"p{i % 2}") for i in range(10))
    assert snap(tmp_path) == hudi_snap(tmp_path)


def test_inline_clustering_uses_the_writes_own_options(tmp_path: Path) -> None:
    t = create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=SMALL)
    per_write = {
        "hoodie.clustering.inline": True,
        "hoodie.clustering.inline.max.commits": 2,
        "hoodie.clustering.plan.strategy.small.file.limit": 1,
    }  # no file is that small
    for b in range(2):
        t.upsert(rows(range(10 * b, 10 * b + 10), 1, f"b{b}"), per_write)
    assert [i.action for i in open_table(tmp_path).timeline()] == [Action.COMMIT] * 2
