"""A committed data file that is gone is never read around: reads and the writes that would build
on its file group stop with MissingFileError naming the file and its instant, and a refused write
leaves every byte as it was."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import CleanedInstantError, MissingFileError, create_table, open_table

from helpers import tree_digest

COLUMNS = ["id", "ts", "v", "p"]


def batch(ids, p, ts=1, v=None) -> pa.Table:
    return pa.table({"id": list(ids), "ts": [ts] * len(ids), "v": v or [f"{i}{ts}" for i in ids], "p": list(p)})


def data_file(root: Path, partition: str, instant: str) -> Path:
    (found,) = root.glob(f"{partition}/*_{instant}.parquet")
    return found


def rows(data: pa.Table) -> list[dict]:
    return sorted(data.select(COLUMNS).to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def root(tmp_path: Path, table_version: int) -> Path:
    """Partition x: group of a, b written at c1, a updated at c2; partition y: c, written at c1."""
    t = create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(batch(["a", "b", "c"], ["x", "x", "y"]))
    t.upsert(batch(["a"], ["x"], ts=2))
    return tmp_path / "t"


def instants(root: Path) -> list[str]:
    """Completed commit times of either layout (v8 names them <time>_<completion>.commit)."""
    return sorted({p.name.split(".")[0].split("_")[0] for p in root.glob(".hoodie/**/*.commit")})


def assert_missing(info: pytest.ExceptionInfo, gone: Path, instant: str, root: Path) -> None:
    message = str(info.value)
    assert message.startswith(f"{gone}, written by commit {instant} ")
    assert "is missing" in message
    assert f"upsertlake doctor {root}" in message and f"upsertlake restore {root}" in message


def test_a_read_refuses_a_missing_file_of_the_latest_snapshot(root: Path) -> None:
    _, c2 = instants(root)
    gone = data_file(root, "x", c2)
    gone.unlink()
    with pytest.raises(MissingFileError) as info:
        open_table(root).read()  # before: a's value of c1 (the previous version), silently
    assert_missing(info, gone, c2, root)
    with pytest.raises(MissingFileError):
        open_table(root).read(filters=[("p", "=", "x")])
    run = subprocess.run([sys.executable, "-m", "upsertlake.cli", "doctor", str(root)], capture_output=True, text=True)
    assert run.returncode == 1 and f"{gone.relative_to(root).as_posix()}: committed by" in run.stdout
    run = subprocess.run([sys.executable, "-m", "upsertlake.cli", "read", str(root)], capture_output=True, text=True)
    assert run.returncode != 0 and "MissingFileError" in run.stderr and str(gone) in run.stderr


def test_a_group_whose_only_file_is_gone_is_not_dropped(root: Path) -> None:
    c1, _ = instants(root)
    gone = data_file(root, "y", c1)
    gone.unlink()
    with pytest.raises(MissingFileError) as info:
        open_table(root).read()  # before: c's rows silently left out
    assert_missing(info, gone, c1, root)


INDEXES = ["SIMPLE", "BLOOM", "INMEMORY", "GLOBAL_SIMPLE", "GLOBAL_BLOOM", "GLOBAL_INMEMORY"]


@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize("mode", ["SINGLE_WRITER", "OPTIMISTIC_CONCURRENCY_CONTROL"])
def test_an_upsert_onto_a_missing_file_is_refused_and_changes_nothing(root: Path, index: str, mode: str) -> None:
    options = {"hoodie.index.type": index, "hoodie.write.concurrency.mode": mode}
    table = open_table(root, options)
    table.upsert(batch(["b"], ["x"], ts=3))  # the in-memory indexes now hold the table in this process
    latest = instants(root)[-1]
    gone = data_file(root, "x", latest)
    gone.unlink()
    before = tree_digest(root)
    for write in (table, open_table(root, options)):  # the same client (cached index) and a new one
        with pytest.raises(MissingFileError) as info:
            write.upsert(batch(["a"], ["x"], ts=4))  # before: merged onto c2's version, b's update lost
        assert_missing(info, gone, latest, root)
        assert tree_digest(root) == before
    assert instants(root)[-1] == latest


@pytest.mark.parametrize("operation", ["insert", "delete", "insert_overwrite"])
def test_other_writes_into_its_partition_are_refused(root: Path, operation: str) -> None:
    """insert packs new rows into the small file of the group (the stale version, before)."""
    c2 = instants(root)[-1]
    data_file(root, "x", c2).unlink()
    table = open_table(root)
    before = tree_digest(root)
    if operation == "insert_overwrite":  # replaces the partition without reading it: allowed
        table.insert_overwrite(batch(["n"], ["x"], ts=5))
        assert sorted(table.read().column("id").to_pylist()) == ["c", "n"]
        return
    with pytest.raises(MissingFileError):
        getattr(table, operation)(batch(["n" if operation == "insert" else "a"], ["x"], ts=5))
    assert tree_digest(root) == before


def test_writes_and_reads_elsewhere_proceed(root: Path) -> None:
    c1, c2 = instants(root)
    gone = data_file(root, "x", c2)
    gone.unlink()
    table = open_table(root)
    table.upsert(batch(["c", "d"], ["y", "y"], ts=3))  # partition y only: nothing of x is needed
    assert len(instants(root)) == 3
    done = {i.time: i.completed_at for i in table.timeline() if i.is_completed}  # v8: by completion
    assert sorted(table.read_incremental(done[c2]).column("id").to_pylist()) == ["c", "d"]
    with pytest.raises(MissingFileError):
        table.read_incremental(done[c1])
    with pytest.raises(MissingFileError):
        table.read()


def test_time_travel_needs_the_version_of_its_instant(root: Path) -> None:
    c1, _ = instants(root)
    first = data_file(root, "x", c1)
    expected_now = rows(open_table(root).read())
    first.unlink()  # the version of a's group as of c1: the latest snapshot does not need it
    table = open_table(root)
    assert rows(table.read()) == expected_now
    with pytest.raises(MissingFileError) as info:
        table.read(as_of=c1)  # before: the group silently left out of the snapshot as of c1
    assert_missing(info, first, c1, root)
    done = {i.time: i.completed_at for i in table.timeline() if i.is_completed}  # v8: by completion
    with pytest.raises(MissingFileError):
        table.read_incremental("20000101000000000", done[c1])


def test_time_travel_before_a_missing_later_version_still_reads(root: Path) -> None:
    c1, c2 = instants(root)
    as_of_c1 = rows(open_table(root).read(as_of=c1))
    data_file(root, "x", c2).unlink()
    table = open_table(root)
    assert rows(table.read(as_of=c1)) == as_of_c1
    with pytest.raises(MissingFileError):
        table.read(as_of=c2)


def test_files_gone_by_clean_clustering_and_overwrite_are_not_missing(root: Path) -> None:
    table = open_table(root)
    table.upsert(batch(["a"], ["x"], ts=3))
    table.cluster({"hoodie.clustering.plan.strategy.small.file.limit": "1000000"})
    table.insert_overwrite(batch(["e"], ["y"], ts=4))
    expected = rows(table.read())
    table.clean(retained=1)
    table.clean(policy="KEEP_LATEST_FILE_VERSIONS", retained=1)
    assert rows(open_table(root).read()) == expected
    assert [r["id"] for r in expected] == ["a", "b", "e"]


def test_a_file_removed_after_the_listing_is_not_skipped(root: Path) -> None:
    """read_scan used to skip a listed file that was gone when opened: rows silently lost."""
    from upsertlake.read.scan import read_scan
    from upsertlake.read.snapshot import snapshot_scan
    from upsertlake.timeline.active import Timeline

    table = open_table(root)
    scan = snapshot_scan(Timeline.load(table.storage), table.table_config)
    gone = root / scan.files[0].path
    gone.unlink()
    with pytest.raises(MissingFileError, match=re.escape(f"{gone}, written by instant")):
        read_scan(table.storage, scan)


def test_time_travel_into_a_version_a_clean_deleted(root: Path) -> None:
    """KEEP_LATEST_FILE_VERSIONS keeps no commit window: the earlier snapshot is refused, not
    returned without the cleaned group."""
    c1, _ = instants(root)
    table = open_table(root)
    table.clean(policy="KEEP_LATEST_FILE_VERSIONS", retained=1)
    with pytest.raises(CleanedInstantError):
        table.read(as_of=c1)


@pytest.mark.parametrize("service", ["cluster", "savepoint"])
def test_services_that_need_the_snapshot_refuse_and_change_nothing(root: Path, service: str) -> None:
    table = open_table(root)
    table.upsert(batch(["d"], ["x"], ts=3), {"hoodie.parquet.small.file.limit": "0"})  # a second group in x
    data_file(root, "x", instants(root)[1]).unlink()  # the latest version of a's group
    before = tree_digest(root)
    with pytest.raises(MissingFileError):
        getattr(table, service)()  # before: a savepoint without the group; a clustering of the stale version
    assert tree_digest(root) == before


def test_a_partition_whose_file_is_gone_can_be_dropped(root: Path) -> None:
    data_file(root, "x", instants(root)[-1]).unlink()
    table = open_table(root)
    table.delete_partitions(["x"])
    assert table.read().column("id").to_pylist() == ["c"]


def test_the_error_names_the_commit_file_of_either_layout(root: Path, table_version: int) -> None:
    c2 = instants(root)[-1]
    data_file(root, "x", c2).unlink()
    (commit,) = root.glob(f".hoodie/**/{c2}*.commit")
    with pytest.raises(MissingFileError, match=re.escape(f"({commit.relative_to(root).as_posix()})")):
        open_table(root).read()


def test_a_file_of_an_archived_commit_is_checked_too(tmp_path: Path) -> None:
    """The commit that wrote the only version of a group may be archived: the group is not dropped."""
    t = create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(batch(["a"], ["old"]))
    for ts in range(2, 8):
        t.upsert(batch(["z"], ["new"], ts=ts))
    t.archive({"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.cleaner.commits.retained": "1"})
    assert any((tmp_path / "t/.hoodie/archived").glob(".commits_.archive.*"))  # Hudi 0.x archive log files
    (gone,) = (tmp_path / "t/old").glob("*.parquet")
    gone.unlink()
    with pytest.raises(MissingFileError, match=re.escape(f"{gone}, written by commit ")):
        open_table(tmp_path / "t").read()  # before: only z's row


def test_committed_files_in_a_folder_without_partition_metadata(root: Path) -> None:
    """Readers skip a folder without .hoodie_partition_metadata: its committed rows are not dropped."""
    (root / "y/.hoodie_partition_metadata").unlink()
    with pytest.raises(MissingFileError, match=r"is in a folder without .hoodie_partition_metadata"):
        open_table(root).read()  # before: c's row silently left out


def test_a_commit_rolled_back_while_listing_says_read_again(root: Path) -> None:
    from upsertlake.layout.file_system_view import FileSystemView
    from upsertlake.timeline.active import Timeline

    table = open_table(root)
    view = FileSystemView(Timeline.load(table.storage))
    assert view._committed  # the commits' write stats are read, the table not listed yet
    table.rollback()  # undoes c2: its file and commit go
    with pytest.raises(MissingFileError, match="was rolled back while this view listed the table; read"):
        view.latest_base_files()
    assert sorted(table.read().column("v").to_pylist()) == ["a1", "b1", "c1"]
