"""Clustering merge-on-read tables (Hudi's clustering of file slices): each planned slice is read
merged with its log files and written as a base file of a new file group, committed as a
replacecommit. The snapshot does not change and reads as Hudi's reader reads it at every instant,
the replaced groups' logs are no longer read and go at clean; file groups in a pending compaction
are not clustered, and a pending clustering's groups are not compacted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from upsertlake import WriteConflictError, open_table
from upsertlake.services.cluster import in_process
from upsertlake.services.compaction_plan import read_plan, schedule
from upsertlake.timeline.active import Timeline

from helpers import unzip_mor_table
from hudi_compare import check_reads
from mor_tables import batch, hudi_snapshot, logs_of, mor_table, snapshot

VERSIONS = [6, 8]
SMALL = {"hoodie.parquet.small.file.limit": 0}  # every insert batch writes new file groups


def two_groups_per_partition_with_logs(path: Path, version: int):
    """Ids 0-59 in two insert batches (two file groups in each of p0-p2), then even ids updated
    and ids 3, 9, 33 deleted: log files (data and delete blocks) in all six groups."""
    table = mor_table(path, version, **SMALL)
    table.insert(batch(list(range(30)), [1] * 30, version))
    table.insert(batch(list(range(30, 60)), [1] * 30, version))
    evens = list(range(0, 60, 2))
    table.upsert(batch(evens, [2] * len(evens), version + 10))
    table.delete(batch([3, 9, 33], [3] * 3, version).select(["id", "ts", "p"]))
    return table


def groups(path: Path) -> set[tuple[str, str]]:
    """(partition, fileId) of every file group with a visible slice."""
    from upsertlake.layout.file_system_view import FileSystemView

    return {sl.file_group for sl in FileSystemView(Timeline.load(open_table(path).storage)).latest_file_slices()}


@pytest.mark.parametrize("version", VERSIONS)
def test_clustering_merges_each_slice_with_its_logs_and_reads_the_same(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table = two_groups_per_partition_with_logs(path, version)
    before, old_groups, old_logs = snapshot(table), groups(path), logs_of(path)
    assert len(before) == 57 and len(old_groups) == 6 and len({lf.parent for lf in old_logs}) == 3
    assert before["k0002"]["ts"] == 2 and "k0003" not in before

    result = table.cluster()
    assert result.clustered
    assert {p: len(ids) for p, ids in result.replaced.items()} == {"p0": 2, "p1": 2, "p2": 2}
    assert len(result.files_written) == 3
    assert {(p, f) for p, ids in result.replaced.items() for f in ids} == old_groups
    assert snapshot(table) == before == hudi_snapshot(path)
    new_groups = groups(path)
    assert len(new_groups) == 3 and not new_groups & old_groups
    check_reads(table, path, windows=False)

    # The replaced groups' log files are not read any more: gone from a copy, it reads the same.
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    for lf in logs_of(copy):
        lf.unlink()
    assert snapshot(open_table(copy)) == before == hudi_snapshot(copy)

    # Writes go on into the new groups (logs again), and read as Hudi reads them.
    table.upsert(batch([0, 1, 30], [5, 5, 5], version + 20))
    after = snapshot(table)
    assert after["k0000"]["ts"] == after["k0001"]["ts"] == after["k0030"]["ts"] == 5
    assert after == hudi_snapshot(path)
    check_reads(table, path, windows=False)
    new_logs = set(logs_of(path)) - set(old_logs)
    assert new_logs and all(any(fid in lf.name for _, fid in new_groups) for lf in new_logs)

    # Clean removes the replaced slices: their base files and their logs.
    table.clean("KEEP_LATEST_COMMITS", 1)
    assert not set(old_logs) & set(logs_of(path))
    remaining = {f.name for f in path.rglob("*.parquet")}
    assert not any(fid in name for _, fid in old_groups for name in remaining)
    assert snapshot(table) == after == hudi_snapshot(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_groups_in_a_pending_compaction_are_not_clustered(tmp_path: Path, version: int) -> None:
    """p0 and p1 have logs, p2 none: a compaction planned over p0 and p1 leaves only p2's two
    log-free groups to cluster (Hudi's ClusteringPlanStrategy skips pending compactions)."""
    path = tmp_path / "t"
    table = mor_table(path, version, **SMALL)
    table.insert(batch(list(range(30)), [1] * 30, version))
    table.insert(batch(list(range(30, 60)), [1] * 30, version))
    updated = [i for i in range(60) if i % 3 != 2]  # partitions p0 and p1
    table.upsert(batch(updated, [2] * len(updated), version))
    before = snapshot(table)
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    assert plan is not None
    compacting = {op.file_group for op in read_plan(Timeline.load(table.storage), plan)}
    assert {p for p, _ in compacting} == {"p0", "p1"} and len(compacting) == 4

    result = table.cluster()
    assert list(result.replaced) == ["p2"] and len(result.replaced["p2"]) == 2
    assert snapshot(table) == before == hudi_snapshot(path)
    assert compacting <= groups(path)
    done = table.compact()
    assert done.compacted and done.operations == 4
    assert snapshot(table) == before == hudi_snapshot(path)
    check_reads(table, path, windows=False)


def test_nothing_to_cluster_names_the_pending_compaction(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = two_groups_per_partition_with_logs(path, 8)
    assert schedule(table.storage, table.write_client().context.lock, table.table_config, table.options) is not None
    result = table.cluster()
    assert not result.clustered
    assert result.reason == (
        "no partition has two file groups below hoodie.clustering.plan.strategy.small.file.limit=314572800 "
        "bytes (0 small of 6 file groups in 3 partition(s)); 6 file group(s) are in a pending compaction"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_pending_clustering_is_left_out_of_a_compaction_scheduled_meanwhile(tmp_path: Path, version: int) -> None:
    """p0 has two groups with logs (clustered), p1 and p2 one each (nothing to merge them with):
    a compaction scheduled while the clustering runs plans p1's and p2's slices only."""
    path = tmp_path / "t"
    table = mor_table(path, version, **SMALL)
    table.insert(batch(list(range(30)), [1] * 30, version))
    table.insert(batch([30, 33, 36], [1] * 3, version))  # a second group in p0 only
    updated = [*range(30), 30, 33, 36]
    table.upsert(batch(updated, [2] * len(updated), version))
    before = snapshot(table)
    planned: list = []

    def schedule_meanwhile(fn, work):
        planned.append(schedule(table.storage, table.write_client().context.lock, table.table_config, table.options))
        return in_process(fn, work)

    result = table.cluster(map_groups=schedule_meanwhile)
    assert list(result.replaced) == ["p0"] and len(result.replaced["p0"]) == 2
    ops = read_plan(Timeline.load(table.storage), planned[0])
    assert sorted(op.partition_path for op in ops) == ["p1", "p2"]
    assert snapshot(table) == before == hudi_snapshot(path)
    assert table.compact().operations == 2
    assert snapshot(table) == before == hudi_snapshot(path)
    check_reads(table, path, windows=False)


def test_inline_clustering_counts_deltacommits(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = mor_table(
        path, 8, **SMALL, **{"hoodie.clustering.inline": "true", "hoodie.clustering.inline.max.commits": 3}
    )
    table.insert(batch(list(range(30)), [1] * 30, 8))
    table.insert(batch(list(range(30, 60)), [1] * 30, 8))
    assert not [i for i in table.timeline() if i.action.value == "replacecommit"]
    table.upsert(batch([0, 1, 2], [2] * 3, 8))  # the third deltacommit: clustering runs after it
    replaces = [i for i in table.timeline() if i.action.value == "replacecommit" and i.is_completed]
    assert len(replaces) == 1
    assert snapshot(table) == hudi_snapshot(path)
    assert sorted(snapshot(table)) == [f"k{i:04d}" for i in range(60)]


def test_a_hudi_written_mor_table_clustered_reads_as_hudi_reads_it(tmp_path: Path) -> None:
    """Hudi's v6 table: two file groups, one with a log file; clustered into one base file."""
    path = unzip_mor_table("mor_v6_nonpartitioned", tmp_path)
    table = open_table(path)
    before = table.read(columns=["id", "isActive"]).sort_by("id")
    result = table.cluster()
    assert result.clustered and len(result.replaced[""]) == 2
    assert table.read(columns=["id", "isActive"]).sort_by("id").equals(before)
    check_reads(table, path, windows=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_append_to_a_group_clustered_meanwhile_conflicts_and_is_rolled_back(tmp_path: Path, version: int) -> None:
    """A deltacommit that appended to a slice, committing after the clustering replaced its
    group, would leave its records in a group no reader sees: it conflicts and is rolled back.
    The clustering read only completed writes' blocks (the pending append's log is in the slice)."""
    path = tmp_path / "t"
    two_groups_per_partition_with_logs(path, version)
    occ = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}
    client = open_table(path, occ).write_client()
    instant = client.start_commit()
    pending = client.upsert(batch([0], [9], version + 30), instant)
    assert any(".log." in s.path for s in pending.write_stats)
    table = open_table(path, occ)
    before = snapshot(table)
    assert before["k0000"]["ts"] == 2
    result = table.cluster()
    assert result.clustered and snapshot(table) == before
    retired = f"conflicts with replacecommit {result.instant_time} \\(completed\\): it retired file group\\(s\\) p0/"
    with pytest.raises(WriteConflictError, match=retired + ".*this write was rolled back"):
        client.commit(instant, pending)
    assert [i for i in table.timeline() if not i.is_completed] == []
    assert snapshot(table) == before == hudi_snapshot(path)
    check_reads(table, path, windows=False)


def test_clustering_on_spark_merges_each_group_as_a_task(spark, tmp_path: Path) -> None:
    """`upsertlake.spark.cluster`: the planned slices, logs and all, go to the tasks."""
    import upsertlake.spark as uls

    path = tmp_path / "t"
    table = two_groups_per_partition_with_logs(path, 8)
    before = snapshot(table)
    result = uls.cluster(spark, str(path))
    assert result.clustered and {p: len(ids) for p, ids in result.replaced.items()} == {"p0": 2, "p1": 2, "p2": 2}
    assert len(result.files_written) == 3
    assert snapshot(open_table(path)) == before == hudi_snapshot(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_plan_names_each_slice_with_its_log_files(tmp_path: Path, version: int) -> None:
    """The requested plan (HoodieRequestedReplaceMetadata) lists each slice's base and log files
    by full path, and its group's metrics count the logs (Hudi's FileSliceMetricUtils)."""
    from upsertlake.layout.file_system_view import FileSystemView
    from upsertlake.timeline import documents
    from upsertlake.timeline.instant import Action, State

    path = tmp_path / "t"
    table = two_groups_per_partition_with_logs(path, version)
    slices = {sl.file_group: sl for sl in FileSystemView(Timeline.load(table.storage)).latest_file_slices()}
    docs: list[dict] = []

    def read_plan_meanwhile(fn, work):
        timeline = Timeline.load(table.storage)
        [pending] = timeline.filter([Action.REPLACE_COMMIT], [State.REQUESTED, State.INFLIGHT])
        docs.append(documents.decode(table.storage.read_bytes(timeline.layout.path(pending.with_state(State.REQUESTED)))))
        return in_process(fn, work)

    table.cluster(map_groups=read_plan_meanwhile)
    groups_ = docs[0]["clusteringPlan"]["inputGroups"]
    assert len(groups_) == 3
    for group in groups_:
        planned = [slices[(s["partitionPath"], s["fileId"])] for s in group["slices"]]
        assert [s["dataFilePath"] for s in group["slices"]] == [table.storage.full_path(sl.base.path) for sl in planned]
        assert [s["deltaFilePaths"] for s in group["slices"]] == [
            [table.storage.full_path(lf.path) for lf in sl.logs] for sl in planned
        ]
        log_files = [lf for sl in planned for lf in sl.logs]
        assert group["metrics"]["TOTAL_LOG_FILES"] == float(len(log_files)) > 0
        assert group["metrics"]["TOTAL_LOG_FILES_SIZE"] == float(sum(lf.size for lf in log_files))
