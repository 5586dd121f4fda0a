"""Reading Apache Hudi's metadata table on the tables Hudi wrote (hudi-rs's test tables that carry
one): its listing is storage's, its record index puts every key where the key's row is, its
column statistics are the files' footers', its partition statistics bound each partition's rows."""

from __future__ import annotations

import shutil
import zipfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import upsertlake
from upsertlake.config import option_list
from upsertlake.config.java_properties import parse_java_properties
from upsertlake.layout.file_system_view import FileSystemView, list_partitions_and_files, sort_listing
from upsertlake.logfile.blocks import DeleteBlock, HFileBlock
from upsertlake.logfile.reader import read_blocks
from upsertlake.metadata import MetadataTable
from upsertlake.metadata.listing import MetadataTableWarning, listed_files
from upsertlake.metadata.records import decode
from upsertlake.metadata.stats import bound
from upsertlake.read.statistics import FileStatistics
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline

HUDI_TABLES = Path(__file__).resolve().parent.parent / "hudi_tables"


def _with_metadata_table(zip_path: Path) -> bool:
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
    lance = any(n.endswith(".lance") or "/_versions/" in n for n in names)
    return not lance and any("/.hoodie/metadata/files/" in n for n in names)


def _metadata_partitions(zip_path: Path) -> list[str]:
    """The metadata partitions the table's hoodie.properties lists as complete (what
    MetadataTable.partitions reads), from the zip without unpacking it."""
    with zipfile.ZipFile(zip_path) as zf:
        (name,) = [n for n in zf.namelist() if n.count("/") == 2 and n.endswith("/.hoodie/hoodie.properties")]
        properties = parse_java_properties(zf.read(name).decode("utf-8"))
    return option_list(properties.get("hoodie.table.metadata.partitions", ""))


# Every Hudi-written table in tests/hudi_tables with a metadata table (Lance base files aside).
TABLES = sorted(p for p in HUDI_TABLES.rglob("*.zip") if _with_metadata_table(p))
# Those whose metadata table keeps partition statistics (Hudi keeps none for an unpartitioned table).
WITH_PARTITION_STATS = [p for p in TABLES if "partition_stats" in _metadata_partitions(p)]


def unzip(zip_path: Path, dest: Path) -> Path:
    with zipfile.ZipFile(zip_path) as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX")]
        zf.extractall(dest, members)
    (root,) = {dest / m.split("/")[0] for m in members}
    return root


def open_metadata(root: Path) -> tuple[Storage, Timeline, MetadataTable]:
    storage = Storage(root)
    timeline = Timeline.load(storage)
    table = MetadataTable.open(timeline)
    assert table is not None
    return storage, timeline, table


def test_the_tables_with_a_metadata_table_are_found() -> None:
    assert "mor_v8_trips_8i3u1d.zip" in {p.name for p in TABLES}
    without = sorted(str(p.relative_to(HUDI_TABLES)) for p in set(TABLES) - set(WITH_PARTITION_STATS))
    assert without == [
        "v9/cow/v9_txns_nonpart_meta.zip", "v9/mor/v9_nonpartitioned_rollback.zip", "v9/mor/v9_txns_nonpart_meta.zip"
    ]


def test_the_metadata_tables_log_files_decode(tmp_path: Path) -> None:
    """Every log file of the trips table's metadata table: its HFile blocks decode into
    HoodieMetadataRecords of the partition's type, its delete blocks name record keys."""
    root = unzip(HUDI_TABLES / "mor" / "mor_v8_trips_8i3u1d.zip", tmp_path)
    hfile, deletes, records = 0, 0, 0
    types = {"files": {1, 2}, "column_stats": {3}, "partition_stats": {6}, "record_index": {5}}
    for p in sorted((root / ".hoodie" / "metadata").rglob(".*.log.*")):
        for block in read_blocks(p.read_bytes(), p.name):
            if isinstance(block, HFileBlock):
                entries = block.reader().read()
                keys = [k.decode() for k in entries.column("key").to_pylist()]
                decoded = decode(entries.column("value").to_pylist(), keys, block.schema_json, p.name)
                assert [r["key"] for r in decoded] == keys == sorted(keys)
                partition = p.parent.name
                assert {r["type"] for r in decoded} <= types.get(partition, {7}), p.name
                hfile += 1
                records += len(decoded)
            else:
                assert isinstance(block, DeleteBlock)
                deletes += 1
    assert (hfile, deletes, records) == (35, 28, 224)


@pytest.mark.parametrize("zip_path", TABLES, ids=lambda p: p.stem)
def test_listing_from_the_metadata_table_is_storages(zip_path: Path, tmp_path: Path) -> None:
    root = unzip(zip_path, tmp_path)
    storage = Storage(root)
    listed = listed_files(Timeline.load(storage))
    assert listed is not None
    partitions, entries = listed
    from_metadata = sort_listing(entries, None, partitions)
    from_storage = list_partitions_and_files(storage)
    assert from_metadata.partitions == from_storage.partitions
    assert {(f.path, f.size) for f in from_metadata.base_files} == {(f.path, f.size) for f in from_storage.base_files}
    assert {(f.path, f.size) for f in from_metadata.log_files} == {(f.path, f.size) for f in from_storage.log_files}


@pytest.mark.parametrize("zip_path", TABLES, ids=lambda p: p.stem)
def test_every_key_is_in_the_file_group_the_record_index_names(zip_path: Path, tmp_path: Path) -> None:
    root = unzip(zip_path, tmp_path)
    _, _, table = open_metadata(root)
    rows = upsertlake.open_table(root).read(
        columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"]
    )
    found = list(zip(*(rows.column(c).to_pylist() for c in rows.column_names)))
    times = Counter(key for key, _, _ in found)
    # a key Hudi inserted twice (v9_timebasedkeygen_*: an insert of a stored key) has two rows and
    # one index entry: the keys stored once are checked by place, every key by presence
    stored = {key: (partition, name.split("_")[0]) for key, partition, name in found if times[key] == 1}
    assert stored
    assert table.record_locations(stored) == stored
    everything = table.scan("record_index")
    assert sorted(everything) == sorted(times)  # no entry for a deleted key


@pytest.mark.parametrize("zip_path", TABLES, ids=lambda p: p.stem)
def test_every_files_column_statistics_are_its_footers(zip_path: Path, tmp_path: Path) -> None:
    root = unzip(zip_path, tmp_path)
    _storage, timeline, table = open_metadata(root)
    files = FileSystemView(timeline).latest_base_files()
    compared = 0
    for bf in files:
        meta = pq.ParquetFile(root / bf.path).metadata
        arrow = meta.schema.to_arrow_schema()
        columns = [arrow.field(i).name for i in range(len(arrow)) if not arrow.field(i).name.startswith("_hoodie")]
        recorded = table.column_stats([(bf.partition_path, bf.name)], columns).get((bf.partition_path, bf.name), {})
        if meta.num_rows == 0:  # every row of the file deleted (v9_timebasedkeygen_*): Hudi records no statistics
            assert not recorded, bf.path
            continue
        assert recorded, bf.path
        for name, stats in recorded.items():
            column = meta.schema.names.index(name)
            st = meta.row_group(0).column(column).statistics
            t = arrow.field(name).type
            assert stats["valueCount"] == meta.num_rows
            assert stats["nullCount"] == sum(
                meta.row_group(g).column(column).statistics.null_count for g in range(meta.num_row_groups)
            )
            if st.has_min_max:
                assert (bound(stats, "minValue", t), bound(stats, "maxValue", t)) == (st.min, st.max), (bf.path, name)
            compared += 1
    assert compared > len(files)


@pytest.mark.parametrize("zip_path", WITH_PARTITION_STATS, ids=lambda p: p.stem)
def test_partition_statistics_bound_each_partitions_rows(zip_path: Path, tmp_path: Path) -> None:
    root = unzip(zip_path, tmp_path)
    _, _, table = open_metadata(root)
    assert "partition_stats" in table.partitions
    data = upsertlake.open_table(root).read()
    schema = data.schema
    columns = [f.name for f in schema if not f.name.startswith("_hoodie") and not pa.types.is_nested(f.type)]
    by_partition = table.partition_stats(columns)
    partitions = set(data.column("_hoodie_partition_path").to_pylist())
    # a partition whose every row was deleted keeps its statistics (v9_timebasedkeygen_*)
    assert partitions <= set(by_partition)
    emptied = {bf.partition_path for bf in FileSystemView(Timeline.load(Storage(root))).latest_base_files()
               if bf.partition_path not in partitions}
    assert set(by_partition) - partitions <= emptied
    checked = 0
    for partition, stats in by_partition.items():
        rows = data.filter(pc.equal(data.column("_hoodie_partition_path"), partition))
        for name, record in stats.items():
            t = schema.field(name).type
            values = rows.column(name)
            low, high = bound(record, "minValue", t), bound(record, "maxValue", t)
            present = pc.min_max(values)
            if present["min"].as_py() is not None:
                assert low <= present["min"].as_py() and present["max"].as_py() <= high, (partition, name)
            checked += 1
    assert checked >= len(partitions)


def test_a_read_lists_no_partition_when_the_metadata_table_is_valid(tmp_path: Path, monkeypatch) -> None:
    """The file system view takes its files from the metadata table: no partition folder is listed."""
    root = unzip(HUDI_TABLES / "mor" / "mor_v8_trips_8i3u1d.zip", tmp_path)
    expected = upsertlake.open_table(root).read().sort_by("_hoodie_record_key")
    listed: list[str] = []
    original = Storage.list

    def counting(self, rel: str = "", recursive: bool = False):
        listed.append(rel)
        return original(self, rel, recursive)

    monkeypatch.setattr(Storage, "list", counting)
    monkeypatch.setattr(Storage, "list_outside", lambda self, folder: pytest.fail("the whole table was listed"))
    got = upsertlake.open_table(root).read().sort_by("_hoodie_record_key")
    assert got.equals(expected)
    assert not [rel for rel in listed if rel.startswith("city=")]


def test_a_metadata_table_missing_an_instant_is_not_trusted(tmp_path: Path) -> None:
    """A writer that did not keep the metadata table committed after it (its deltacommit is
    missing): the listing warns and comes from storage, and the read is still exact."""
    root = unzip(HUDI_TABLES / "mor" / "mor_v8_trips_8i3u1d.zip", tmp_path)
    expected = upsertlake.open_table(root).read().sort_by("_hoodie_record_key")
    timeline = root / ".hoodie" / "metadata" / ".hoodie" / "timeline"
    for f in timeline.glob("20251220210130911*"):
        f.unlink()
    with pytest.warns(MetadataTableWarning, match="misses 1 completed instant.*20251220210130911"):
        assert listed_files(Timeline.load(Storage(root))) is None
    with pytest.warns(MetadataTableWarning):
        got = upsertlake.open_table(root).read().sort_by("_hoodie_record_key")
    assert got.equals(expected)


def test_a_listed_metadata_table_that_is_gone_warns_and_storage_is_listed(tmp_path: Path) -> None:
    root = unzip(HUDI_TABLES / "mor" / "mor_v8_trips_8i3u1d.zip", tmp_path)
    expected = upsertlake.open_table(root).read().sort_by("_hoodie_record_key")
    shutil.rmtree(root / ".hoodie" / "metadata")
    with pytest.warns(MetadataTableWarning, match="cannot be read.*has no instants"):
        got = upsertlake.open_table(root).read().sort_by("_hoodie_record_key")
    assert got.equals(expected)


def test_blocks_of_a_data_instant_not_completed_are_ignored(tmp_path: Path) -> None:
    """The metadata table is written before the data instant completes: until it does (or when it
    failed), its blocks do not count. With the last data deltacommit made pending again, the
    record index maps its updated keys to where they were before and no longer lists its log file."""
    root = unzip(HUDI_TABLES / "mor" / "mor_v8_trips_8i3u1d.zip", tmp_path)
    _storage, _timeline, table = open_metadata(root)
    before = table.files(["city=sao_paulo"])["city=sao_paulo"]
    assert ".8aa68f7e-afd6-4c94-b86c-8a886552e08d-0_20251220210130911.log.1_0-1139-3316" in before
    (root / ".hoodie" / "timeline" / "20251220210130911_20251220210131755.deltacommit").unlink()
    _, _, pending = open_metadata(root)
    after = pending.files(["city=sao_paulo"])["city=sao_paulo"]
    assert set(before) - set(after) == {".8aa68f7e-afd6-4c94-b86c-8a886552e08d-0_20251220210130911.log.1_0-1139-3316"}


def test_files_are_skipped_by_the_metadata_tables_column_statistics(tmp_path: Path, monkeypatch) -> None:
    """A read filtered on a data column judges Hudi's files by the metadata table's column_stats
    (no footer is opened for them) and returns exactly the rows the filter keeps."""
    root = unzip(HUDI_TABLES / "mor" / "mor_v8_trips_8i3u1d.zip", tmp_path)
    table = upsertlake.open_table(root)
    everything = table.read()
    expected = everything.filter(pc.greater(everything.column("fare"), 90)).sort_by("_hoodie_record_key")
    monkeypatch.setattr(Storage, "parquet_file", lambda *a, **k: pytest.fail("a footer was read"))
    monkeypatch.setattr(FileStatistics, "of_partitions", lambda *a: {})  # files alone are judged
    plan = table.scan(filters=[("fare", ">", 90)], query_type="read_optimized").plan
    assert sorted(bf.partition_path for bf in plan.files) == ["city=san_francisco"]  # the others' fares are below
    monkeypatch.undo()
    got = table.read(filters=[("fare", ">", 90)]).sort_by("_hoodie_record_key")
    assert got.equals(expected) and got.num_rows == 1


def test_partitions_are_pruned_by_the_metadata_tables_partition_statistics(tmp_path: Path) -> None:
    """`rider = 'rider-I'` can only hold in chennai by its partition statistics: the other
    partitions' slices are not planned, and the rows are exact."""
    root = unzip(HUDI_TABLES / "mor" / "mor_v8_trips_8i3u1d.zip", tmp_path)
    table = upsertlake.open_table(root)
    plan = table.scan(filters=[("rider", "=", "rider-I")]).plan
    assert {u.partition_path for u in [*plan.files, *plan.slices]} == {"city=chennai"}
    got = table.read(filters=[("rider", "=", "rider-I")])
    assert got.column("rider").to_pylist() == ["rider-I"]
