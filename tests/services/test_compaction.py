"""Compaction of merge-on-read tables: the Hudi-written fixtures compacted by us read as before and
as Hudi's reader reads them, at every instant; the plan and the commit are Hudi's documents with
Hudi's numbers; a compaction killed with SIGKILL leaves the table readable and is recovered; a
deltacommit completing while a plan is pending goes to the next slice; clean then removes the old
slices with their logs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest

from upsertlake import open_table
from upsertlake.config import Config
from upsertlake.errors import ConfigError, ServiceError
from upsertlake.services.compaction_plan import compaction_due, delta_commits_since_compaction
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import CommitMetadata
from upsertlake.timeline.instant import Action, State

from helpers import (
    FAST_HEARTBEAT,
    MOR_TABLES,
    REPO,
    cli_in_process,
    decoded,
    hudi_read,
    kill_mid_compaction,
    unzip_mor_table,
)
from hudi_compare import assert_same, check_reads

V8 = "mor_v8_trips_8i3u1d"
HUDI_COMPACTION = "20251220210129235"  # the compaction Hudi ran in the v8 fixture
AFTER_IT = "20251220210130911"  # the deltacommit Hudi wrote after it


def fare_of(table: pa.Table, rider: str) -> float:
    return dict(zip(table["rider"].to_pylist(), table["fare"].to_pylist()))[rider]


def without_file_name(table: pa.Table) -> pa.Table:
    return decoded(table).drop_columns(["_hoodie_file_name"]).sort_by("_hoodie_record_key")


def timeline_dir(path: Path) -> Path:
    return path / ".hoodie" / "timeline" if (path / ".hoodie" / "timeline").exists() else path / ".hoodie"


def avro_doc(path: Path) -> dict:
    with open(path, "rb") as f:
        return next(iter(fastavro.reader(f)))


@pytest.mark.parametrize("name", MOR_TABLES)
def test_compacting_a_hudi_table_changes_no_read(tmp_path: Path, name: str) -> None:
    path = unzip_mor_table(name, tmp_path)
    table = open_table(path)
    before = table.read()
    result = table.compact()
    assert result.compacted and result.operations >= 1 and result.log_files_compacted >= result.operations
    table = open_table(path)
    assert without_file_name(table.read()).equals(without_file_name(before))
    # Every slice with logs was folded: the base files alone now hold the snapshot.
    assert without_file_name(table.read(query_type="read_optimized")).equals(without_file_name(before))
    check_reads(table, path)  # snapshot, every instant, incremental windows, as Hudi's reader reads them
    folder = timeline_dir(path)
    t = result.instant_time
    assert (folder / f"{t}.compaction.requested").exists() and (folder / f"{t}.compaction.inflight").exists()
    [commit] = [f for f in os.listdir(folder) if f.split("_")[0].split(".")[0] == t and f.endswith(".commit")]
    meta = CommitMetadata.from_bytes((folder / commit).read_bytes())
    assert meta.compacted and meta.operation_type == "COMPACT"
    assert sorted(s.path for s in meta.write_stats()) == sorted(result.files_written)
    for stat in meta.write_stats():
        rows = table.read(columns=["_hoodie_file_name", "_hoodie_record_key"])
        names = set(rows["_hoodie_file_name"].to_pylist())
        assert stat.path.rpartition("/")[2] in names or stat.numWrites == 0
    assert open_table(path).compact().reason == "no file slice has log files to compact"


def hudi_before_compaction(tmp_path: Path) -> Path:
    """The v8 fixture as it was just before Hudi compacted it: the compaction and the deltacommit
    after it taken away."""
    path = unzip_mor_table(V8, tmp_path)
    folder = timeline_dir(path)
    for f in os.listdir(folder):
        if f.startswith((HUDI_COMPACTION, AFTER_IT)):
            os.remove(folder / f)
    for f in path.rglob("*"):
        if f.is_file() and (f.name.endswith(f"_{HUDI_COMPACTION}.parquet") or f"_{AFTER_IT}.log." in f.name):
            f.unlink()
    return path


def test_plan_and_commit_are_the_documents_hudi_wrote(tmp_path: Path) -> None:
    """Compacting the v8 fixture's state before Hudi's compaction plans the same operations, in
    Hudi's order (largest logs first) with Hudi's metrics, and commits write stats with Hudi's counts."""
    hudi = unzip_mor_table(V8, tmp_path / "hudi")
    hudi_folder = timeline_dir(hudi)
    hudi_plan = avro_doc(hudi_folder / f"{HUDI_COMPACTION}.compaction.requested")
    [hudi_commit] = [f for f in os.listdir(hudi_folder) if f.startswith(HUDI_COMPACTION) and f.endswith(".commit")]
    hudi_meta = avro_doc(hudi_folder / hudi_commit)

    path = hudi_before_compaction(tmp_path / "ours")
    result = open_table(path).compact()
    folder = timeline_dir(path)
    plan = avro_doc(folder / f"{result.instant_time}.compaction.requested")
    assert plan["operations"] == hudi_plan["operations"]
    assert plan["version"] == hudi_plan["version"] == 2
    assert (folder / f"{result.instant_time}.compaction.inflight").read_bytes() == b""  # as Hudi's
    [commit] = [f for f in os.listdir(folder) if f.startswith(result.instant_time) and f.endswith(".commit")]
    meta = avro_doc(folder / commit)
    assert meta["compacted"] is True and meta["operationType"] == "COMPACT"
    compared = ["fileId", "prevCommit", "numWrites", "numDeletes", "numUpdateWrites", "numInserts", "partitionPath",
                "totalLogRecords", "totalUpdatedRecordsCompacted", "totalLogBlocks", "totalCorruptLogBlock",
                "totalRollbackBlocks", "prevBaseFile", "totalLogFilesCompacted", "totalLogSizeCompacted"]

    def stats(doc: dict) -> dict:
        return {p: [{k: s[k] for k in compared} for s in lst] for p, lst in doc["partitionToWriteStats"].items()}

    assert stats(meta) == stats(hudi_meta)
    # And the compacted table reads as Hudi's compacted one, base files alone included.
    assert without_file_name(open_table(path).read()).equals(
        without_file_name(open_table(hudi).read(as_of=HUDI_COMPACTION))
    )
    assert without_file_name(open_table(path).read(query_type="read_optimized")).equals(
        without_file_name(open_table(hudi).read(query_type="read_optimized", as_of=HUDI_COMPACTION)))


@pytest.mark.parametrize("name", ["mor_v6_trips_8i1u", V8])
def test_a_compaction_killed_midway_leaves_the_table_readable_and_is_run_again(tmp_path: Path, name: str) -> None:
    path = hudi_before_compaction(tmp_path) if name == V8 else unzip_mor_table(name, tmp_path)
    before = open_table(path).read()
    kill_mid_compaction(path, FAST_HEARTBEAT)
    [pending] = Timeline.load(open_table(path).storage).pending_compactions()
    assert pending.state is State.INFLIGHT
    written = [f for f in path.rglob(f"*_{pending.time}.parquet")]
    assert written  # the killed compactor wrote base files (one per thread at most): invisible to readers
    assert_same(open_table(path).read(), before, "snapshot after the kill")
    assert_same(hudi_read(path), before, "hudi's snapshot after the kill")
    time.sleep(0.3)  # its heartbeat expires
    result = open_table(path, FAST_HEARTBEAT).compact()
    assert result.recovered and result.instant_time == pending.time
    timeline = Timeline.load(open_table(path).storage)
    [rollback] = timeline.filter([Action.ROLLBACK], [State.COMPLETED])
    assert rollback.time > pending.time and not timeline.pending_compactions()
    table = open_table(path)
    assert without_file_name(table.read()).equals(without_file_name(before))
    check_reads(table, path, windows=False)


def test_an_explicit_rollback_returns_an_inflight_compaction_to_its_plan(tmp_path: Path) -> None:
    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    before = open_table(path).read()
    kill_mid_compaction(path, FAST_HEARTBEAT)
    table = open_table(path)
    [pending] = Timeline.load(table.storage).pending_compactions()
    time.sleep(0.3)  # its heartbeat expires: a live compaction is not pulled from under its compactor
    done = table.rollback(pending.time)
    assert done.action is Action.ROLLBACK and done.is_completed
    [still] = Timeline.load(table.storage).pending_compactions()
    assert still.state is State.REQUESTED and still.time == pending.time
    assert not list(path.rglob(f"*_{pending.time}.parquet"))
    assert_same(table.read(), before, "snapshot after the rollback")
    result = open_table(path).compact()  # the plan runs again, under its instant
    assert result.instant_time == pending.time and not result.recovered
    assert without_file_name(open_table(path).read()).equals(without_file_name(before))


def test_a_live_compaction_is_left_to_its_compactor(tmp_path: Path) -> None:
    """An inflight compaction whose heartbeat beats is not rolled back by a second `compact`."""
    from upsertlake.concurrency.heartbeat import Heartbeat

    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    kill_mid_compaction(path, FAST_HEARTBEAT)
    table = open_table(path)
    [pending] = Timeline.load(table.storage).pending_compactions()
    beat = Heartbeat(table.storage, pending.time, 100).start()
    try:
        result = table.compact(FAST_HEARTBEAT)
        assert not result.compacted and result.reason.endswith(
            f"compaction {pending.time} is running in another process"
        )
        with pytest.raises(ServiceError, match=f"compaction {pending.time} is running \\(its heartbeat is alive\\)"):
            table.rollback(pending.time)
    finally:
        beat.stop()
    assert list(path.rglob(f"*_{pending.time}.parquet"))


def test_the_inline_trigger_counts_deltacommits_since_the_last_compaction(tmp_path: Path) -> None:
    v8 = open_table(unzip_mor_table(V8, tmp_path / "a"))
    timeline = Timeline.load(v8.storage)
    assert delta_commits_since_compaction(timeline) == 1  # Hudi's compaction, then one deltacommit
    assert not compaction_due(timeline, Config.resolve(None))  # default: 5
    assert compaction_due(timeline, Config.resolve({"hoodie.compact.inline.max.delta.commits": 1}))
    v6 = open_table(unzip_mor_table("mor_v6_trips_8i1u", tmp_path / "b"))
    assert delta_commits_since_compaction(Timeline.load(v6.storage)) == 2
    v6.compact()
    assert delta_commits_since_compaction(Timeline.load(v6.storage)) == 0


def test_the_trigger_strategies_count_deltacommits_seconds_or_both(tmp_path: Path) -> None:
    """hoodie.compact.inline.trigger.strategy as Hudi's ScheduleCompactionActionExecutor: the
    deltacommits since the last compaction (or since the last plan), the seconds since that
    compaction, either, or both."""
    from datetime import timedelta

    from upsertlake.services.compaction_plan import schedule
    from upsertlake.timeline.instant_time import parse_instant_time

    table = open_table(unzip_mor_table(V8, tmp_path / "a"))
    timeline = Timeline.load(table.storage)
    compacted = timeline.filter([Action.COMMIT], [State.COMPLETED])[-1].time
    at = parse_instant_time(compacted)

    def due(strategy: str, commits: int, seconds: int, after: int) -> bool:
        cfg = Config.resolve({"hoodie.compact.inline.trigger.strategy": strategy,
                              "hoodie.compact.inline.max.delta.commits": commits,
                              "hoodie.compact.inline.max.delta.seconds": seconds})
        return compaction_due(Timeline.load(table.storage), cfg, now=at + timedelta(seconds=after))

    # one deltacommit since Hudi's compaction
    assert [due("NUM_COMMITS", n, 10, 0) for n in (1, 2)] == [True, False]
    assert [due("TIME_ELAPSED", 5, 10, after) for after in (9, 10)] == [False, True]
    assert [due("NUM_OR_TIME", n, 10, after) for n, after in ((2, 9), (1, 9), (2, 10))] == [False, True, True]
    assert [due("NUM_AND_TIME", n, 10, after) for n, after in ((1, 9), (2, 10), (1, 10))] == [False, False, True]
    assert due("NUM_COMMITS_AFTER_LAST_REQUEST", 1, 10, 0)
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, Config.resolve(None))
    assert plan is not None and plan.time > compacted  # a pending plan: no deltacommit since it
    assert not due("NUM_COMMITS_AFTER_LAST_REQUEST", 1, 10, 0) and due("NUM_COMMITS", 1, 10, 0)
    with pytest.raises(ConfigError, match=r"hoodie.compact.inline.trigger.strategy"):
        Config.resolve({"hoodie.compact.inline.trigger.strategy": "SOMETIMES"})


def test_an_unsupported_strategy_is_refused_untouched(tmp_path: Path) -> None:
    from helpers import tree_digest

    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    before = tree_digest(path)
    with pytest.raises(ConfigError, match=r"DayBasedCompactionStrategy.*is not supported"):
        open_table(path).compact(
            {"hoodie.compaction.strategy": "org.apache.hudi.table.action.compact.strategy.DayBasedCompactionStrategy"}
        )
    assert tree_digest(path) == before
    result = open_table(path).compact({"hoodie.compaction.strategy": "UnBoundedCompactionStrategy"})
    assert result.compacted


def test_the_log_size_threshold_leaves_small_slices_for_later(tmp_path: Path) -> None:
    path = hudi_before_compaction(tmp_path)
    result = open_table(path).compact({"hoodie.compaction.logfile.size.threshold": 1000})
    assert result.operations == 2  # chennai (2117 bytes of logs) and san_francisco (1153); not sao_paulo (978)


def test_compacting_a_copy_on_write_table_is_refused(tmp_path: Path) -> None:
    from upsertlake import create_table

    table = create_table(tmp_path / "t", "t", "id")
    table.upsert(pa.table({"id": ["a"], "v": [1]}))
    with pytest.raises(ServiceError, match="only merge-on-read tables are compacted"):
        table.compact()


def findings(path: Path, **options: object) -> list[tuple[str, str, str, bool, str | None]]:
    from upsertlake.services.doctor import diagnose, doctor_config

    table = open_table(path)
    report = diagnose(table.storage, doctor_config(table.storage, {k: str(v) for k, v in options.items()}))
    return [(f.check, f.path, f.message, f.problem, f.fix) for f in report.findings]


def test_the_doctor_tells_committed_logs_from_orphans_and_failed_writes(tmp_path: Path) -> None:
    from upsertlake.services.doctor import DELETE_ORPHAN, treat

    path = unzip_mor_table(V8, tmp_path)
    open_table(path).compact()  # keeps the metadata table (its log files are not the doctor's)
    assert findings(path) == []  # every log file is committed: no orphan
    logs = sorted(p for p in path.rglob(".*.log.*") if ".hoodie" not in p.relative_to(path).parts)
    stray = logs[0].with_name(logs[0].name.replace(logs[0].name.split("_")[1].split(".")[0], "20991231000000000"))
    shutil.copy(logs[0], stray)  # a log of an instant on no timeline
    failed = "20991230000000000"  # a deltacommit that died after writing its log file
    for suffix in ("deltacommit.requested", "deltacommit.inflight"):
        (timeline_dir(path) / f"{failed}.{suffix}").write_bytes(b"")
    dead_log = logs[1].with_name(logs[1].name.replace(logs[1].name.split("_")[1].split(".")[0], failed))
    shutil.copy(logs[1], dead_log)
    time.sleep(0.3)
    rel = lambda p: str(p.relative_to(path))  # noqa: E731
    found = {f[1]: f for f in findings(path, **FAST_HEARTBEAT) if f[0] == "orphan"}
    assert found == {
        rel(stray): (
            "orphan",
            rel(stray),
            "written by instant 20991231000000000, which is on no timeline (nothing commits it)",
            True,
            DELETE_ORPHAN,
        ),
        rel(dead_log): ("orphan", rel(dead_log), f"written by failed write {failed}", True, f"roll back {failed}"),
    }
    table = open_table(path)
    treat(table.storage, Config.resolve(FAST_HEARTBEAT))
    assert not stray.exists() and not dead_log.exists() and all(p.exists() for p in logs)
    assert findings(path) == []


def failed_v6_append(path: Path) -> tuple[Path, str]:
    """A failed deltacommit (requested and inflight, no heartbeat) whose APPEND marker names the
    fixture's one log file, which holds committed blocks too; returns the log and the instant."""
    [log] = list(path.rglob(".*.log.*"))
    failed = "20991230000000000"
    for suffix in ("deltacommit.requested", "deltacommit.inflight"):
        (path / ".hoodie" / f"{failed}.{suffix}").write_bytes(b"")
    marker = path / ".hoodie" / ".temp" / failed / log.parent.name / f"{log.name}.marker.APPEND"
    marker.parent.mkdir(parents=True)
    marker.write_bytes(b"")
    time.sleep(0.3)
    return log, failed


def test_the_doctor_names_a_log_a_failed_v6_write_appended_to(tmp_path: Path) -> None:
    """Version 6 names a log file by its slice, not by the write: the failed write's markers tell."""
    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    log, failed = failed_v6_append(path)
    rel = str(log.relative_to(path))
    assert [f for f in findings(path, **FAST_HEARTBEAT) if f[0] == "orphan"] == [
        ("orphan", rel, f"appended to by failed write {failed}", True, f"roll back {failed}")
    ]


def test_the_doctor_reports_a_compaction_that_died(tmp_path: Path) -> None:
    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    kill_mid_compaction(path, FAST_HEARTBEAT)
    [pending] = Timeline.load(open_table(path).storage).pending_compactions()
    time.sleep(0.3)
    assert findings(path, **FAST_HEARTBEAT) == [(
        "pending", f".hoodie/{pending.time}.compaction.inflight",
        f"a compaction whose compactor stopped midway: its files are invisible to readers; `upsertlake compact "
        f"{open_table(path).storage.base}` rolls it back and runs its plan again", True, None,
    )]


def test_rolling_back_a_failed_v6_write_keeps_the_log_it_appended_to(tmp_path: Path) -> None:
    """Its blocks are skipped by readers (their instant never completes); the log's committed
    blocks stay: deleting the file, as its APPEND marker names it, would lose them."""
    from upsertlake.services.doctor import treat

    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    before = open_table(path).read()
    log, failed = failed_v6_append(path)
    treat(open_table(path).storage, Config.resolve(FAST_HEARTBEAT))
    assert log.exists() and not (path / ".hoodie" / f"{failed}.deltacommit.inflight").exists()
    assert_same(open_table(path).read(), before, "snapshot")


def test_compact_show_stats_and_files_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = unzip_mor_table(V8, tmp_path)
    [after_log] = [f for f in path.rglob(f".*_{AFTER_IT}.log.*") if ".hoodie" not in f.parts]

    def run(*argv: str) -> object:
        code, out, _ = cli_in_process(capsys, *argv)
        assert code == 0
        return json.loads(out) if "--json" in argv else out

    show = run("show", str(path), "--json")
    assert show["compaction_backlog"] == {"slices_with_logs": 1, "log_files": 1, "log_bytes": after_log.stat().st_size,
                                          "delta_commits_since_compaction": 1, "pending_compactions": []}
    assert show["rows"] == 6 and show["file_groups"] == 3 and show["log_files_on_storage"] == 5
    assert {p["partition"]: (p["rows"], p["log_files"]) for p in show["partitions"]} == {
        "city=chennai": (1, 0), "city=san_francisco": (4, 0), "city=sao_paulo": (1, 1)}
    files = run("files", str(path), "--json")
    assert sorted((r["file"], r["latest"]) for r in files if r["kind"] == "log" and r["latest"]) == [
        (after_log.name, True)
    ]
    done = run("compact", str(path), "--option", "hoodie.compaction.strategy=UnBoundedCompactionStrategy", "--json")
    assert (done["compacted"], done["operations"], done["log_files_compacted"], done["records_written"]) == (
        True,
        1,
        1,
        1,
    )
    stats = run("stats", str(path), "--json")
    assert stats["compaction_backlog"] == {"slices_with_logs": 0, "log_files": 0, "log_bytes": 0,
                                           "delta_commits_since_compaction": 0, "pending_compactions": []}
    assert sum(p["rows"] for p in stats["partitions"]) == 6
    assert run("compact", str(path)).strip() == "nothing to compact: no file slice has log files to compact"


def data_files(path: Path) -> set[str]:
    return {str(f.relative_to(path)) for f in path.rglob("*") if f.is_file() and ".hoodie" not in f.parts
            and (f.suffix == ".parquet" or ".log." in f.name)}


@pytest.mark.parametrize("policy", ["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS"])
@pytest.mark.parametrize("name", ["mor_v6_trips_8i1u", V8])
def test_clean_after_compaction_removes_the_old_slices_with_their_logs(tmp_path: Path, name: str, policy: str) -> None:
    path = unzip_mor_table(name, tmp_path)
    table = open_table(path)
    before = table.read()
    compacted = table.compact()
    on_storage = data_files(path)
    latest = {str(Path(p)) for p in compacted.files_written}
    view_files = {
        (f"{sl.base.path}" if sl.base else None) for sl in _slices(path)
    } | {lf.path for sl in _slices(path) for lf in sl.logs}
    result = open_table(path).clean(policy, 1)
    assert set(result.files_deleted) == on_storage - view_files  # every old slice, logs included; nothing else
    assert latest <= data_files(path) and data_files(path) == view_files - {None}
    assert any(".log." in f for f in result.files_deleted)
    table = open_table(path)
    assert without_file_name(table.read()).equals(without_file_name(before))
    assert_same(table.read(), hudi_read(path), "snapshot after the clean")


def _slices(path: Path) -> list:
    from upsertlake.layout.file_system_view import FileSystemView

    return FileSystemView(Timeline.load(open_table(path).storage)).latest_file_slices()


def test_clean_keeps_the_slices_retained_reads_need(tmp_path: Path) -> None:
    """KEEP_LATEST_COMMITS 3 on the v8 fixture compacted again: the reads as of the last three
    commits still find every base and log file they merge, and read as Hudi's reader reads them."""
    path = unzip_mor_table(V8, tmp_path)
    open_table(path).compact()
    result = open_table(path).clean("KEEP_LATEST_COMMITS", 3)
    assert result.files_deleted  # the slices before Hudi's compaction
    table = open_table(path)
    retained = [i.time for i in table.timeline() if i.is_completed and i.action.value in ("commit", "deltacommit")][-3:]
    assert result.earliest_commit_to_retain == retained[0]
    for t in retained:
        assert_same(table.read(as_of=t), hudi_read(path, as_of=t), f"as of {t}")


def test_a_savepoint_pins_a_slice_and_its_logs_against_clean(tmp_path: Path) -> None:
    path = unzip_mor_table(V8, tmp_path)
    table = open_table(path)
    pinned_at = [i.time for i in table.timeline() if i.is_completed and i.action.value == "deltacommit"][3]
    table.savepoint(pinned_at)
    as_of = table.read(as_of=pinned_at)
    table.compact()
    open_table(path).clean("KEEP_LATEST_COMMITS", 1)
    folder = timeline_dir(path)
    doc = avro_doc(folder / next(f for f in os.listdir(folder) if f.startswith(pinned_at) and f.endswith(".savepoint")))
    pinned = {n for p in doc["partitionMetadata"].values() for n in p["savepointDataFile"]}
    assert any(".log." in n for n in pinned)
    assert without_file_name(open_table(path).read(as_of=pinned_at)).equals(without_file_name(as_of))


def test_archive_keeps_a_compaction_plan_with_its_commit_and_stops_at_a_pending_one(tmp_path: Path) -> None:
    path = unzip_mor_table(V8, tmp_path)
    ours = open_table(path).compact().instant_time
    before = {t: open_table(path).read(as_of=t) for t in (HUDI_COMPACTION, AFTER_IT)}
    folder = timeline_dir(path)
    plan = (folder / f"{ours}.compaction.requested").read_bytes()
    limits = {"hoodie.keep.min.commits": 1, "hoodie.keep.max.commits": 2}
    # A pending plan (crafted from ours) just after Hudi's compaction: nothing from it on is archived.
    (folder / "20251220210130000.compaction.requested").write_bytes(plan)
    archived = open_table(path).archive(limits)
    assert max(i.time for i in archived) < "20251220210130000"
    assert HUDI_COMPACTION in {i.time for i in archived}
    (folder / "20251220210130000.compaction.requested").unlink()
    # Hudi's compaction commit was archived with its plan: no plan is left without its commit.
    assert not [f for f in os.listdir(folder) if f.startswith(HUDI_COMPACTION)]
    assert Timeline.load(open_table(path).storage).pending_compactions() == []
    assert [i.time for i in open_table(path).timeline() if i.action.value in ("commit", "deltacommit")] == [
        AFTER_IT,
        ours,
    ]
    assert (folder / f"{ours}.compaction.requested").exists()  # ours is not archived: its plan stays
    for t, table in before.items():  # archived instants still read (their files are there)
        assert without_file_name(open_table(path).read(as_of=t)).equals(without_file_name(table))


@pytest.mark.parametrize("name", ["mor_v6_trips_8i1u", V8])
def test_restore_rolls_back_deltacommits_and_compactions_after_the_savepoint(tmp_path: Path, name: str) -> None:
    from upsertlake.logfile import CommandBlock, read_blocks
    from upsertlake.services.compaction_plan import schedule

    path = unzip_mor_table(name, tmp_path)
    table = open_table(path)
    deltas = [i.time for i in table.timeline() if i.is_completed and i.action.value == "deltacommit"]
    point = deltas[0] if name != V8 else deltas[2]
    table.savepoint(point)
    expected = table.read(as_of=point)
    logs_before = {f for f in data_files(path) if ".log." in f}
    table.compact()
    extra = open_table(path)
    assert schedule(extra.storage, extra.write_client().context.lock, extra.table_config, extra.options) is None
    (timeline_dir(path) / "20991231000000000.compaction.requested").write_bytes(  # a pending plan after it
        next(timeline_dir(path).glob("*.compaction.requested")).read_bytes())
    done = open_table(path).restore(point)
    assert done.is_completed
    table = open_table(path)
    assert without_file_name(table.read()).equals(without_file_name(expected))
    assert_same(table.read(), hudi_read(path), "snapshot after the restore")
    timeline = Timeline.load(table.storage)
    assert timeline.pending_compactions() == [] and not timeline.filter([Action.COMPACTION])
    assert [i.time for i in timeline.completed_writes()] == [t for t in deltas if t <= point]
    logs_now = {f for f in data_files(path) if ".log." in f}
    if name == V8:  # layout 2: the log files of the deltacommits rolled back are gone
        assert logs_now == {f for f in logs_before if Path(f).name.split("_")[1].split(".")[0] <= point}
    else:  # layout 1: the slice's log keeps its blocks; a new log file voids the deltacommit's
        [voiding] = logs_now - logs_before
        blocks = read_blocks((path / voiding).read_bytes())
        assert [(type(b), b.target_instant) for b in blocks] == [(CommandBlock, deltas[1])]
        assert logs_before <= logs_now
    check_reads(table, path, windows=False)


# -- a writer appending while a compaction is planned and run ------------------------------------
def start_deltacommit(path: Path, groups: dict[str, list[str]] | None) -> str:
    """A deltacommit a writer has started: requested, then (with `groups`) inflight with Hudi's
    workload profile naming the file groups it updates."""
    from upsertlake.config.table_config import TableConfig
    from upsertlake.services.metadata_table import drop_metadata_table
    from upsertlake.timeline.active import create_requested, transition
    from upsertlake.timeline.commit_metadata import write_stat_json
    from upsertlake.timeline.instant import Instant

    storage = open_table(path).storage
    drop_metadata_table(storage, TableConfig.load(storage))  # as our writers do: Hudi's readers would list from it
    requested = create_requested(storage, Action.DELTA_COMMIT)
    if groups is not None:
        profile = {"partitionToWriteStats": {p: [write_stat_json(fileId=f, numUpdateWrites=1) for f in ids]
                                             for p, ids in groups.items()},
                   "compacted": False, "extraMetadata": {}, "operationType": "UPSERT"}
        transition(storage, Instant(requested.time, Action.DELTA_COMMIT, State.REQUESTED), State.INFLIGHT,
                   json.dumps(profile).encode())
    return requested.time


def append_update(path: Path, instant: str, rider: str, fare: float, log_instant: str, version: int) -> str:
    """Append rider's record with a new fare and a larger ts, as a data block of `instant`, to a
    new log file of its file group named `.{fileId}_{log_instant}.log.{version}_0-1-0`; returns
    the file's table-relative path."""
    from upsertlake.logfile import append_blocks, data_block
    from upsertlake.logfile.avro_records import with_meta_fields

    table = open_table(path)
    rows = decoded(table.read()).filter(pa.compute.equal(table.read()["rider"], rider))
    assert rows.num_rows == 1
    rows = rows.set_column(rows.schema.get_field_index("fare"), "fare", pa.array([fare]))
    rows = rows.set_column(rows.schema.get_field_index("ts"), "ts", pa.array([rows["ts"][0].as_py() + 1]))
    rows = rows.set_column(0, "_hoodie_commit_time", pa.array([instant]))
    rows = rows.set_column(1, "_hoodie_commit_seqno", pa.array([f"{instant}_0_0"]))
    schema_json = json.dumps(with_meta_fields(json.loads(Timeline.load(table.storage).latest_schema())))
    partition = rows["_hoodie_partition_path"][0].as_py()
    file_id = rows["_hoodie_file_name"][0].as_py().split("_")[0]
    name = f".{file_id}_{log_instant}.log.{version}_0-1-0"
    rel = f"{partition}/{name}" if partition else name
    (path / rel).write_bytes(append_blocks([data_block(instant, rows, schema_json)]))
    marker = path / ".hoodie" / ".temp" / instant / (partition or "") / f"{name}.marker.APPEND"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_bytes(b"")
    return rel


def complete_deltacommit(path: Path, instant: str, log: str, file_id: str) -> None:
    from upsertlake.timeline.active import transition
    from upsertlake.timeline.commit_metadata import WriteStat
    from upsertlake.timeline.instant import Instant

    storage = open_table(path).storage
    partition = log.rpartition("/")[0]
    size = (path / log).stat().st_size
    stat = WriteStat(fileId=file_id, path=log, partitionPath=partition, prevCommit=instant, numUpdateWrites=1,
                     numWrites=1, totalWriteBytes=size, fileSizeInBytes=size)
    meta = CommitMetadata({partition: [stat]}, "UPSERT", {"schema": Timeline.load(storage).latest_schema()})
    transition(storage, Instant(instant, Action.DELTA_COMMIT, State.INFLIGHT), State.COMPLETED, meta.to_json_bytes())
    shutil.rmtree(path / ".hoodie" / ".temp" / instant, ignore_errors=True)


SAO_PAULO = ("city=sao_paulo", "8aa68f7e-afd6-4c94-b86c-8a886552e08d-0")


def test_v8_a_deltacommit_completing_after_the_plan_goes_to_the_next_slice(tmp_path: Path) -> None:
    """Layout 2: a write started before the plan and completed after it appends to the slice the
    plan starts (Hudi 1.x places a log by its deltacommit's completion); the plan takes only the
    logs completed before it. Compaction and readers agree, and so does Hudi's reader."""
    from upsertlake.services.compaction import execute
    from upsertlake.services.compaction_plan import read_plan, schedule

    path = unzip_mor_table(V8, tmp_path)
    writer = start_deltacommit(path, None)  # it has said nothing yet of the groups it writes (as Hudi's writers)
    table = open_table(path)
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    assert plan is not None and plan.time > writer
    [op] = read_plan(Timeline.load(table.storage), plan)
    assert op.file_group == SAO_PAULO and op.delta_files == (f".{SAO_PAULO[1]}_{AFTER_IT}.log.1_0-1139-3316",)
    log = append_update(path, writer, "rider-G", 99.0, writer, 1)
    complete_deltacommit(path, writer, log, SAO_PAULO[1])
    assert fare_of(open_table(path).read(), "rider-G") == 99.0 == fare_of(hudi_read(path), "rider-G")
    before = fare_of(open_table(path).read(as_of=AFTER_IT), "rider-G")
    result = execute(table.storage, table.write_client().context.lock, table.options, plan)
    assert result.instant_time == plan.time
    table = open_table(path)
    assert fare_of(table.read(), "rider-G") == 99.0
    [sl] = [s for s in _slices(path) if s.file_group == SAO_PAULO]
    assert sl.base.instant_time == plan.time and [lf.path for lf in sl.logs] == [log]
    check_reads(table, path, windows=False)
    # Hudi's rule on version 8 (README, Table versions): the slice as of an instant is chosen by its
    # base instant, and a log is placed by its deltacommit's completion. As of its own instant, this
    # deltacommit, completed after the plan, is in the compacted slice, which is not yet visible: both
    # readers miss it (upsertlake's writers never leave such a write: they are done again).
    assert fare_of(table.read(as_of=writer), "rider-G") == before == fare_of(hudi_read(path, as_of=writer), "rider-G")


def test_v6_a_plan_leaves_out_the_groups_pending_writes_declared_or_marked(tmp_path: Path) -> None:
    """Layout 1 names a log by its slice: a write started before the plan appends to the old slice.
    The plan leaves out the groups a pending write's workload profile names, and those it marked
    (a write marks each file before it creates it); a write that has said nothing yet holds no plan
    back (else every compaction beside busy writers would be refused): our writers check
    at commit whether a later plan took their groups, and are then done again."""
    from upsertlake.services.compaction_plan import read_plan, schedule

    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    sf = ("city=san_francisco", "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0")
    chennai = ("city=chennai", "84e82649-b1ee-4a25-a316-17cc6872616b-0")
    sao_paulo = ("city=sao_paulo", "061498b3-e8ef-42f9-9d17-a509b2779501-0")
    base = "20250331030642808"
    # Committed deltacommits give chennai and sao_paulo a log too: every group has one to compact.
    for group, rider in ((chennai, "rider-I"), (sao_paulo, "rider-F")):
        first = start_deltacommit(path, {group[0]: [group[1]]})
        complete_deltacommit(path, first, append_update(path, first, rider, 7.0, base, 1), group[1])
    silent = start_deltacommit(path, None)  # requested: it has said nothing
    declared = start_deltacommit(path, {sf[0]: [sf[1]]})  # its inflight profile names sf's group
    marking = start_deltacommit(path, None)
    marked = append_update(path, marking, "rider-G", 66.0, base, 2)  # marked, then written: sao_paulo's
    table = open_table(path)
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    [op] = read_plan(Timeline.load(table.storage), plan)
    assert op.file_group == chennai
    complete_deltacommit(path, declared, append_update(path, declared, "rider-A", 55.0, base, 2), sf[1])
    complete_deltacommit(path, marking, marked, sao_paulo[1])
    (path / ".hoodie" / f"{silent}.deltacommit.requested").unlink()
    result = open_table(path).compact()
    assert result.instant_time == plan.time and result.operations == 1
    table = open_table(path)
    fares = dict(zip(*(table.read()[c].to_pylist() for c in ("rider", "fare"))))
    assert (fares["rider-A"], fares["rider-I"], fares["rider-F"], fares["rider-G"]) == (55.0, 7.0, 7.0, 66.0)
    check_reads(table, path, windows=False)


def test_a_compacted_base_files_footer_holds_every_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new base file's bloom filter and key range cover its keys: built anew over a Hudi base
    file, resumed (the base's filter plus the keys the logs add) over one of ours."""
    from upsertlake.layout.bloom_filter import bloom_filter_for_keys
    from upsertlake.layout.file_writer import FileWriterConfig
    from upsertlake.layout.footer import read_footer

    path = unzip_mor_table(V8, tmp_path)
    open_table(path).compact()  # sao_paulo's base is now ours
    first = start_deltacommit(path, {SAO_PAULO[0]: [SAO_PAULO[1]]})
    log = append_update(path, first, "rider-G", 12.0, first, 1)
    # and a record with a new key in the same block, logged as an insert
    from upsertlake.logfile import append_blocks, data_block, read_blocks

    [block] = read_blocks((path / log).read_bytes())
    new = block.records.set_column(2, "_hoodie_record_key", pa.array(["0000-new-key"]))
    new = new.set_column(new.schema.get_field_index("uuid"), "uuid", pa.array(["0000-new-key"]))
    (path / log).write_bytes(
        append_blocks([data_block(first, pa.concat_tables([block.records, new]), block.schema_json)])
    )
    complete_deltacommit(path, first, log, SAO_PAULO[1])
    import upsertlake.services.compaction_slice as compaction

    resumed = []
    real = compaction.resumed_bloom
    monkeypatch.setattr(compaction, "resumed_bloom", lambda *a: resumed.append(real(*a)) or resumed[-1])
    result = open_table(path).compact()
    assert len(resumed) == 1 and resumed[0] is not None  # our base file: its filter was resumed
    table = open_table(path)
    for written in result.files_written:
        [bf] = [b for sl in _slices(path) if (b := sl.base) is not None and b.path == written]
        keys = pa.chunked_array(table.storage.read_parquet(bf.path).column("_hoodie_record_key")).combine_chunks()
        footer = read_footer(table.storage, bf)
        assert footer.bloom.might_contain(keys).all()
        assert (footer.min_key, footer.max_key) == (pc_min(keys), pc_max(keys)) == ("0000-new-key", pc_max(keys))
        cfg = FileWriterConfig()
        fresh = bloom_filter_for_keys(
            keys, cfg.bloom_num_entries, cfg.bloom_fpp, cfg.bloom_filter_type, cfg.bloom_max_entries
        )
        assert footer.bloom.serialize() == fresh.serialize()
    assert "0000-new-key" in table.read()["_hoodie_record_key"].to_pylist()
    check_reads(table, path, windows=False)


def pc_min(keys: pa.Array) -> str:
    return pa.compute.min_max(keys)["min"].as_py()


def pc_max(keys: pa.Array) -> str:
    return pa.compute.min_max(keys)["max"].as_py()


@pytest.mark.spark
def test_compaction_on_spark_merges_each_slice_as_a_task(spark, tmp_path: Path) -> None:
    import upsertlake.spark as uls

    ours = hudi_before_compaction(tmp_path / "spark")
    local = hudi_before_compaction(tmp_path / "local")
    on_spark = uls.compact(spark, str(ours))
    in_process = open_table(local).compact()
    assert (on_spark.operations, on_spark.log_files_compacted, on_spark.records_written) == (3, 4, 6)
    assert (in_process.operations, in_process.log_files_compacted, in_process.records_written) == (3, 4, 6)
    assert without_file_name(open_table(ours).read()).equals(without_file_name(open_table(local).read()))
    check_reads(open_table(ours), ours, windows=False)


def test_the_timeline_shows_a_completed_compaction_as_its_commit_and_a_pending_plan_as_pending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from upsertlake.services.compaction_plan import schedule

    path = hudi_before_compaction(tmp_path)

    def rows() -> list[tuple[str, str, str]]:
        code, out, _ = cli_in_process(capsys, "timeline", path, "--json")
        assert code == 0
        return [(r["action"], r["state"], r["operation"]) for r in json.loads(out)]

    table = open_table(path)
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    assert rows()[-1] == ("compaction", "requested", None)
    open_table(path).compact()
    assert rows()[-1] == ("commit", "completed", "COMPACT") and ("compaction", "inflight", None) not in rows()
    assert plan is not None


def test_the_doctor_reports_an_unreadable_compaction_plan(tmp_path: Path) -> None:
    from upsertlake.services.compaction_plan import schedule

    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    table = open_table(path)
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    requested = path / ".hoodie" / f"{plan.time}.compaction.requested"
    requested.write_bytes(requested.read_bytes()[:40])
    [(check, where, message, problem, fix)] = [f for f in findings(path) if f[3]]
    assert (check, where, problem, fix) == ("instant", f".hoodie/{plan.time}.compaction.requested", True, None)
    assert message.startswith(f"cannot parse .hoodie/{plan.time}.compaction.requested")
    assert message.endswith("nor plan another while it is pending: put back a good copy")


def test_a_compaction_that_fails_goes_back_to_its_plan_and_leaves_the_reads_alone(tmp_path: Path) -> None:
    from upsertlake.errors import MissingFileError
    from upsertlake.services.compaction_plan import schedule
    from upsertlake.services.metadata_table import drop_metadata_table

    path = hudi_before_compaction(tmp_path)
    table = open_table(path)
    # files listed from storage: a missing one is seen at planning
    drop_metadata_table(table.storage, table.table_config)
    before = open_table(path).read()
    [log] = [f for f in path.rglob(".*.log.*") if "sao_paulo" in str(f) and ".hoodie" not in str(f)]
    moved = log.rename(tmp_path / log.name)
    with pytest.raises(MissingFileError, match=log.name):  # a committed file is missing: no plan
        open_table(path).compact()
    assert Timeline.load(open_table(path).storage).pending_compactions() == []
    moved.rename(log)
    table = open_table(path)
    planned = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    moved = log.rename(tmp_path / log.name)  # gone after the plan: the execution fails midway
    with pytest.raises(MissingFileError, match=log.name):
        open_table(path).compact()
    [plan] = Timeline.load(open_table(path).storage).pending_compactions()
    assert plan.state is State.REQUESTED and plan.time == planned.time
    assert not list(path.rglob(f"*_{plan.time}.parquet"))
    assert [i.action for i in open_table(path).timeline() if i.time > plan.time] == [Action.ROLLBACK]
    moved.rename(log)
    assert_same(open_table(path).read(), before, "snapshot after the failed compaction")
    with pytest.raises(ServiceError, match=f"compaction {plan.time} is not inflight"):
        open_table(path).rollback(plan.time)
    result = open_table(path).compact()
    assert result.instant_time == plan.time and result.operations == 3
    assert without_file_name(open_table(path).read()).equals(without_file_name(before))


def test_a_plan_another_compactor_took_is_not_executed_twice(tmp_path: Path) -> None:
    from upsertlake.services.compaction import execute
    from upsertlake.services.compaction_plan import schedule

    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    table = open_table(path)
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    execute(table.storage, table.write_client().context.lock, table.options, plan)
    with pytest.raises(ServiceError, match=f"compaction {plan.time} is not a requested plan"):
        execute(table.storage, table.write_client().context.lock, table.options, plan)


def test_inline_compaction_runs_after_the_deltacommit_that_makes_it_due(tmp_path: Path) -> None:
    """The hook a writer calls after each commit (Table.services_after_commit): with
    hoodie.compact.inline on, a compaction once max.delta.commits deltacommits followed the last."""
    path = unzip_mor_table(V8, tmp_path)
    inline = {"hoodie.compact.inline": True, "hoodie.compact.inline.max.delta.commits": 2}
    open_table(path).services_after_commit(inline)  # one deltacommit since Hudi's compaction: not due
    assert not [i for i in open_table(path).timeline() if i.action.value == "commit" and i.time > HUDI_COMPACTION]
    writer = start_deltacommit(path, {SAO_PAULO[0]: [SAO_PAULO[1]]})
    complete_deltacommit(path, writer, append_update(path, writer, "rider-G", 5.0, writer, 1), SAO_PAULO[1])
    before = open_table(path).read()
    open_table(path).services_after_commit(inline)
    [ours] = [i for i in open_table(path).timeline() if i.action.value == "commit" and i.time > writer]
    assert CommitMetadata.from_bytes(next(timeline_dir(path).glob(f"{ours.time}_*.commit")).read_bytes()).compacted
    assert without_file_name(open_table(path).read()).equals(without_file_name(before))


def test_an_inline_compaction_is_not_held_back_by_a_write_that_has_not_said_its_groups(tmp_path: Path) -> None:
    """Another writer's deltacommit is requested and has not said which file groups it writes: the
    inline compaction due after this commit runs all the same (it was refused, with a warning, after
    most commits under several writers). Version 6, where a log is named by its slice's base."""
    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    inline = {"hoodie.compact.inline": True, "hoodie.compact.inline.max.delta.commits": 1}
    other = open_table(path, {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}).write_client()
    waiting = other.start_commit()
    before = open_table(path).read()
    open_table(path).services_after_commit(inline)
    [compaction] = [i for i in open_table(path).timeline() if i.action is Action.COMMIT and i.time > waiting]
    assert CommitMetadata.from_bytes(next(timeline_dir(path).glob(f"{compaction.time}.commit")).read_bytes()).compacted
    assert without_file_name(open_table(path).read()).equals(without_file_name(before))
    other.rollback(waiting)


def test_no_write_conflicts_with_a_compaction_that_completed_beside_it(tmp_path: Path) -> None:
    """Optimistic concurrency: a deltacommit appending to a file group a compaction rewrote while
    it ran neither conflicts nor re-merges (the compaction changed no record)."""
    from upsertlake.concurrency.conflict import check_commit
    from upsertlake.timeline.commit_metadata import WriteStat

    path = unzip_mor_table(V8, tmp_path)
    checked = frozenset(i.time for i in Timeline.load(open_table(path).storage).completed_writes())
    result = open_table(path).compact()
    timeline = Timeline.load(open_table(path).storage)
    mine = [WriteStat(fileId=SAO_PAULO[1], path=f"{SAO_PAULO[0]}/.{SAO_PAULO[1]}_20991231000000000.log.1_0-1-0",
                      partitionPath=SAO_PAULO[0], numUpdateWrites=1)]
    check = check_commit(timeline, checked, "20991231000000000", mine, set(), global_keys=False)
    assert (check.conflict, check.stale) == (None, {})
    assert result.files_written == (f"{SAO_PAULO[0]}/{SAO_PAULO[1]}_0-0-0_{result.instant_time}.parquet",)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", ["mor_v6_trips_8i1u", V8])
def test_random_appends_compactions_and_cleans_read_as_the_model_and_as_hudi(
    tmp_path: Path, name: str, seed: int
) -> None:
    """Deltacommits appending updates (written with the log codec, as a writer names its logs in
    each layout), compactions and cleans in a random order: after every step the snapshot holds
    the model's fares, Hudi's reader reads the same, and after a compaction the base files alone
    (read_optimized) hold the snapshot."""
    import random

    rng = random.Random(seed)
    path = unzip_mor_table(name, tmp_path)
    table = open_table(path)
    model = dict(zip(*(table.read()[c].to_pylist() for c in ("rider", "fare"))))
    layout_2 = (path / ".hoodie" / "timeline").exists()
    for step in range(8):
        action = rng.choice(["append", "append", "compact", "clean"])
        if action == "append":
            rider, fare = rng.choice(sorted(model)), float(rng.randrange(1000))
            rows = open_table(path).read()
            file_id = rows.filter(pa.compute.equal(rows["rider"], rider))["_hoodie_file_name"][0].as_py().split("_")[0]
            [sl] = [s for s in _slices(path) if s.file_id == file_id]
            writer = start_deltacommit(path, {sl.partition_path: [file_id]})
            if layout_2:
                log_instant, version = writer, 1
            else:  # the slice's base instant, the next version of its logs
                log_instant = sl.base.instant_time
                version = 1 + max((lf.name.version for lf in sl.logs if lf.name.instant == log_instant), default=0)
            complete_deltacommit(path, writer, append_update(path, writer, rider, fare, log_instant, version), file_id)
            model[rider] = fare
        elif action == "compact":
            open_table(path).compact()
            ro = open_table(path).read(query_type="read_optimized")
            assert dict(zip(ro["rider"].to_pylist(), ro["fare"].to_pylist())) == model, f"step {step}: read_optimized"
        else:
            open_table(path).clean("KEEP_LATEST_COMMITS", 2)
        snapshot = open_table(path).read()
        assert dict(zip(snapshot["rider"].to_pylist(), snapshot["fare"].to_pylist())) == model, f"step {step}: {action}"
        assert_same(snapshot, hudi_read(path), f"step {step}: {action}")


def test_restore_drops_a_pending_plan_and_the_logs_writers_named_by_it(tmp_path: Path) -> None:
    """Layout 1: while a plan is pending, writers name their logs by its instant (the slice it
    starts). A restore to before it rolls back those writes and drops the plan with those logs."""
    from upsertlake.concurrency.heartbeat import Heartbeat
    from upsertlake.services.compaction_plan import schedule

    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    table = open_table(path)
    point = [i.time for i in table.timeline() if i.is_completed][-1]
    table.savepoint(point)
    before = table.read()
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    sf = ("city=san_francisco", "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0")
    writer = start_deltacommit(path, {sf[0]: [sf[1]]})
    complete_deltacommit(path, writer, append_update(path, writer, "rider-A", 3.0, plan.time, 1), sf[1])
    assert dict(zip(*(open_table(path).read()[c].to_pylist() for c in ("rider", "fare"))))["rider-A"] == 3.0
    kill_mid_compaction(path, FAST_HEARTBEAT)  # the plan is inflight, its compactor gone
    beat = Heartbeat(table.storage, plan.time, 100).start()  # ... or not: a live one is left alone
    try:
        with pytest.raises(ServiceError, match=f"compaction {plan.time} is running"):
            open_table(path).restore(point)
    finally:
        beat.stop()
    time.sleep(0.3)
    open_table(path, FAST_HEARTBEAT).restore(point)
    assert not [f for f in data_files(path) if plan.time in f or writer in f]
    assert without_file_name(open_table(path).read()).equals(without_file_name(before))
    assert_same(open_table(path).read(), hudi_read(path), "snapshot after the restore")
    assert [f for f in findings(path) if f[3]] == []


# -- a separate compactor beside busy writers ------------------------------------------------
BUSY_WRITER = """
import json, random, sys, time
import pyarrow as pa
import upsertlake.engine.planner as planner
from upsertlake import open_table

path, who, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(who)
real_tag = planner.tag

def slow_tag(*args, **kwargs):  # a longer tag stage: compactions are planned while writes tag
    time.sleep(rng.uniform(0, 0.08))
    return real_tag(*args, **kwargs)

planner.tag = slow_tag
table = open_table(path, {"hoodie.write.concurrency.mode": "optimistic_concurrency_control",
                          # no clean or archival: time travel reaches back to the first write
                          "hoodie.clean.automatic": False, "hoodie.archive.automatic": False})
acked = []
for r in range(rounds):
    keys = rng.sample(range(who * 100, who * 100 + 30), 5)  # keys of its own, in file groups shared by all
    data = pa.table({"id": [f"k{k}" for k in keys], "ts": [r + 1] * 5, "v": [f"w{who}r{r}"] * 5,
                     "p": [f"p{k % 2}" for k in keys]})
    done = table.upsert(data)
    acked.append({"instant": done.instant_time, "rows": data.to_pylist()})
print(json.dumps(acked))
"""

COMPACTOR = """
import json, os, sys, time
from upsertlake import open_table

path, stop = sys.argv[1:3]
done = []
while not os.path.exists(stop):
    result = open_table(path, {"hoodie.compaction.logfile.size.threshold": 0}).compact()
    if result.compacted:
        done.append(result.instant_time)
    time.sleep(0.02)
print(json.dumps(done))
"""


@pytest.mark.parametrize("version", [6, 8])
def test_a_separate_compactor_makes_progress_beside_busy_writers_and_nothing_is_lost(
    tmp_path: Path, version: int
) -> None:
    """Two writer processes (optimistic concurrency, keys of their own in shared file groups) and a
    compactor process calling `compact()` in a loop. On version 6 the compactor used to be refused
    whenever a write had not yet said which file groups it writes (12 times of 12). Now it
    compacts beside them; writes a plan overtook are done again after it. Every acknowledged write
    is in the table, and every read as of every acknowledged instant is the model's (the writes
    requested at or before it), in our reader and Hudi's."""
    from upsertlake import create_table

    path = tmp_path / "t"
    options = {"hoodie.write.table.version": version, "hoodie.write.concurrency.mode": "optimistic_concurrency_control"}
    keys = [k for w in range(2) for k in range(w * 100, w * 100 + 30)]
    table = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p",
                         table_type="MERGE_ON_READ", options=options)
    initial = pa.table({"id": [f"k{k}" for k in keys], "ts": [0] * len(keys), "v": ["init"] * len(keys),
                        "p": [f"p{k % 2}" for k in keys]})
    start = table.upsert(initial).instant_time
    stop = tmp_path / "stop"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    compactor = subprocess.Popen([sys.executable, "-c", COMPACTOR, str(path), str(stop)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writers = [subprocess.Popen([sys.executable, "-c", BUSY_WRITER, str(path), str(w), "10"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(2)]
    outputs = [w.communicate(timeout=300) for w in writers]
    stop.write_text("")
    compacted, errors = compactor.communicate(timeout=300)
    for w, (_, err) in zip(writers, outputs):
        assert w.returncode == 0, err[-3000:]
    assert compactor.returncode == 0, errors[-3000:]
    assert json.loads(compacted), "the compactor never completed a compaction beside the writers"
    acked = sorted((a for out, _ in outputs for a in json.loads(out)), key=lambda a: a["instant"])
    assert len(acked) == 20

    def model(as_of: str) -> dict[str, tuple]:
        rows = {r["id"]: (r["ts"], r["v"]) for r in initial.to_pylist()}
        for write in acked:
            if write["instant"] <= as_of:
                rows.update({r["id"]: (r["ts"], r["v"]) for r in write["rows"]})
        return rows

    def ours(**read: str) -> dict[str, tuple]:
        rows = open_table(path).read(columns=["id", "ts", "v"], **read).to_pylist()
        assert len(rows) == len(keys)  # no key twice
        return {r["id"]: (r["ts"], r["v"]) for r in rows}

    def hudis(**read: str) -> dict[str, tuple]:
        return {r["id"]: (r["ts"], r["v"]) for r in hudi_read(path, **read).select(["id", "ts", "v"]).to_pylist()}

    while open_table(path).compact().compacted:  # what the loop left, so that Hudi's reader reads every slice
        pass
    assert ours() == model(acked[-1]["instant"]) == hudis()
    for instant in [start] + [a["instant"] for a in acked]:
        assert ours(as_of=instant) == model(instant) == hudis(as_of=instant), instant
