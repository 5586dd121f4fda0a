"""Merge-on-read tables written by Apache Hudi read as Hudi's reader (hudi-rs) reads them: the
snapshot, time travel to every completed instant and incremental windows, with log files (Avro and
parquet data blocks, delete blocks), a compaction and logs written after it; `read_optimized`
reads the base files alone; `files()` refuses a snapshot with log files and clustering refuses a
merge-on-read table, leaving it as it was."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import MergeOnReadError, open_table

from helpers import MOR_TABLES, hudi_read, tree_digest, unzip_mor_table
from hudi_compare import check_reads


@pytest.mark.parametrize("name", MOR_TABLES)
def test_hudi_written_mor_tables_read_as_hudi_reads_them(tmp_path: Path, name: str) -> None:
    path = unzip_mor_table(name, tmp_path)
    check_reads(open_table(path), path)


def test_the_empty_mor_table_reads_as_no_rows(tmp_path: Path) -> None:
    path = unzip_mor_table("mor_v6_empty", tmp_path)
    assert open_table(path).read().num_rows == 0


def fares(table: pa.Table) -> dict[str, float]:
    return dict(zip(table["rider"].to_pylist(), table["fare"].to_pylist()))


def test_log_updates_and_deletes_are_merged_over_the_base_files(tmp_path: Path) -> None:
    """v8 (mor_v8_trips_8i3u1d.sql): 8 inserts; rider-A's fare set to 0, rider-F deleted, rider-J
    updated then deleted, each in a log file; a compaction; then rider-G's fare set to 0 in a log
    file after it. The snapshot merges all of it; the base files alone (read-optimized) have what
    the compaction folded in, but not rider-G's update."""
    path = unzip_mor_table("mor_v8_trips_8i3u1d", tmp_path)
    table = open_table(path)
    original = {
        "rider-A": 19.10,
        "rider-C": 27.70,
        "rider-D": 33.90,
        "rider-E": 93.50,
        "rider-G": 43.40,
        "rider-I": 41.06,
    }
    assert fares(table.read()) == {**original, "rider-A": 0.0, "rider-G": 0.0}
    assert fares(table.read(query_type="read_optimized")) == {**original, "rider-A": 0.0}
    instants = [i.time for i in table.timeline() if i.is_completed and i.action.value == "deltacommit"]
    before_delete_of_j = table.read(as_of=instants[3])  # rider-J updated, not yet deleted
    assert fares(before_delete_of_j)["rider-J"] == 0.0 and "rider-F" not in fares(before_delete_of_j)
    assert fares(table.read(as_of=instants[0])) == {**original, "rider-F": 34.15, "rider-J": 17.85}


def test_files_refuses_a_mor_table_untouched(tmp_path: Path) -> None:
    """The base files of a snapshot whose slices have log files would miss those changes."""
    path = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    before = tree_digest(path)
    table = open_table(path)
    with pytest.raises(MergeOnReadError, match="have log files"):
        table.files()
    assert tree_digest(path) == before


def test_hudi_reader_agrees_on_read_optimized(tmp_path: Path) -> None:
    path = unzip_mor_table("mor_v8_trips_8i3u1d", tmp_path)
    from hudi import HudiReadOptions, HudiTableBuilder

    theirs_table = HudiTableBuilder.from_base_uri(path.resolve().as_uri()).build()
    opts = HudiReadOptions().with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    theirs = pa.Table.from_batches(theirs_table.read(opts))
    ours = open_table(path).read(query_type="read_optimized")
    assert sorted(ours["_hoodie_record_key"].to_pylist()) == sorted(theirs["_hoodie_record_key"].to_pylist())
    assert hudi_read(path).num_rows == 6
