"""The archived timeline in Apache Hudi's formats (docs/DESIGN.md §5): version 6 archive log files
of HoodieArchivedMetaEntry records, version 8 the LSM timeline (layer files, manifests, version
file, compaction and clean); archives of earlier upsertlake releases read and moved; damaged
archives. Hudi itself reading and writing them: tests/hudi/test_crossover.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake import create_table, open_table
from upsertlake.errors import CorruptTableError
from upsertlake.logfile import read_avro_datums
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.archived_log import entry_schema_json, read_entries
from upsertlake.timeline.instant import Action

ARCHIVE_SOON = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.cleaner.commits.retained": "1",
                "hoodie.archive.automatic": "false", "hoodie.clean.automatic": "false",
                "hoodie.timeline.compaction.batch.size": "3"}
HISTORY = ".hoodie/timeline/history"
ARCHIVED = ".hoodie/archived"


def upsert(t, i: int) -> str:
    return t.upsert(pa.table({"uuid": [f"k{i}"], "ts": [i]})).instant_time


def files_of(root: Path) -> dict[str, int]:
    """Every file of a table (path: size)."""
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def manifest(root: Path) -> list[str]:
    """The files the latest LSM snapshot names (the version file says which)."""
    version = (root / HISTORY / "_version_").read_text()
    return [f["fileName"] for f in json.loads((root / HISTORY / f"manifest_{version}").read_text())["files"]]


def archived_times(root: Path, action: Action = Action.COMMIT) -> list[str]:
    return sorted(i.time for i in Timeline.load(Storage(root)).archived if i.action is action)


def test_each_archival_adds_to_hudis_archived_timeline_and_every_instant_stays(
    tmp_path: Path, table_version: int
) -> None:
    """Version 6: each archival a new `.commits_.archive.N_1-0-1` (storage without append rolls
    over, as Hudi's writer does); ten small ones are merged into the next version. Version 8: a
    layer-0 file and a new snapshot each; three layer-0 files are compacted into one of layer 1
    (batch size 3 here), three of those into layer 2; old snapshots and the files only they named
    are cleaned. Time travel reaches every instant."""
    root = tmp_path / "t"
    t = create_table(root, "t", "uuid", "ts", options=ARCHIVE_SOON)
    times, archivals = [], 0
    for i in range(24):
        times.append(upsert(t, i))
        moved = t.archive()
        archivals += bool(moved)
        if table_version == 6:
            names = sorted(p.name for p in (root / ARCHIVED).glob(".commits_*"))
            versions = range(1, archivals + 1) if archivals < 10 else [11, *range(12, archivals + 2)]
            assert names == sorted(f".commits_.archive.{n}_1-0-1" for n in versions)
            assert not (root / ARCHIVED / "mergeArchivePlan").exists()
        elif moved:
            listed = manifest(root)
            assert all((root / HISTORY / name).exists() for name in listed)
            assert sum(name.endswith("_0.parquet") for name in listed) < 3
            versions = sorted(int(p.name.split("_")[1]) for p in (root / HISTORY).glob("manifest_*"))
            assert versions[-1] == int((root / HISTORY / "_version_").read_text()) and len(versions) <= 5
            kept = {
                n
                for v in versions
                for n in json.loads((root / HISTORY / f"manifest_{v}").read_text())["files"]
                for n in [n["fileName"]]
            }
            assert {p.name for p in (root / HISTORY).glob("*.parquet")} == kept
    active = [i.time for i in t.timeline()]
    assert archivals == 11 and len(active) == 2 and archived_times(root) == times[:-2]
    if table_version == 8:  # 9 layer-0 files made 3 of layer 1, those one of layer 2; 2 of layer 0 since
        layers = sorted(name.rsplit("_", 1)[1] for name in manifest(root))
        assert layers == ["0.parquet", "0.parquet", "2.parquet"], manifest(root)
        assert not list((root / ARCHIVED).iterdir())
    for i, time in enumerate(times):
        assert sorted(t.read(columns=["uuid"], as_of=time).column(0).to_pylist()) == sorted(
            f"k{j}" for j in range(i + 1)
        )
    first = next(i for i in Timeline.load(Storage(root)).archived if i.time == times[0])
    assert sorted(t.read_incremental(first.completed_at).column("uuid").to_pylist()) == sorted(
        f"k{j}" for j in range(1, 24)
    )


def log_entries(root: Path) -> list[dict]:
    return [e for p in sorted((root / ARCHIVED).glob(".commits_*")) for e in read_entries(p.read_bytes(), p.name)]


def test_version_6_entries_are_hudis_archived_meta_entries(tmp_path: Path) -> None:
    """One entry per archived instant file (requested, inflight, completed), the document in its
    action's field as Hudi 0.15 converts it; blocks of at most ten entries under Hudi's schema."""
    root = tmp_path / "t"
    t = create_table(root, "t", "uuid", "ts", options={**ARCHIVE_SOON, "hoodie.write.table.version": 6})
    times = [upsert(t, i) for i in range(3)]
    t.clean("KEEP_LATEST_COMMITS", 1)
    [clean] = [i.time for i in t.timeline() if i.action is Action.CLEAN]
    times += [upsert(t, i) for i in range(3, 6)]
    t.clean("KEEP_LATEST_COMMITS", 1)  # the first clean's retained window no longer holds archival back
    before = {time: (root / ".hoodie" / f"{time}.commit").read_bytes() for time in times[:4]}
    plan = documents.decode((root / ".hoodie" / f"{clean}.clean.requested").read_bytes())
    cleaned = documents.decode((root / ".hoodie" / f"{clean}.clean").read_bytes())
    assert t.archive() and archived_times(root) == times[:4] and archived_times(root, Action.CLEAN) == [clean]

    [archive] = (root / ARCHIVED).glob(".commits_*")
    blocks = read_avro_datums(archive.read_bytes())
    assert [schema for schema, _ in blocks] == [entry_schema_json()] * 2 and [len(d) for _, d in blocks] == [10, 5]
    entries = log_entries(root)
    assert [(e["commitTime"], e["actionType"], e["actionState"]) for e in entries] == [
        (time, action, state)
        for time, action in sorted([*((x, "commit") for x in times[:4]), (clean, "clean")])
        for state in ("REQUESTED", "INFLIGHT", "COMPLETED")
    ]

    for e in entries:
        assert e["stateTransitionTime"] is not None and len(e["stateTransitionTime"]) == 17
        if e["actionType"] == "commit":
            meta = e["hoodieCommitMetadata"]
            assert meta["extraMetadata"]["ROLLING_STAT"] == ""
            if e["actionState"] == "COMPLETED":
                doc = json.loads(before[e["commitTime"]])
                assert meta["operationType"] == doc["operationType"] == "UPSERT"
                assert {k: v for k, v in meta["extraMetadata"].items() if k != "ROLLING_STAT"} == doc["extraMetadata"]
                assert [s["path"] for p in meta["partitionToWriteStats"].values() for s in p] == [
                    s["path"] for p in doc["partitionToWriteStats"].values() for s in p
                ]
            if e["actionState"] == "REQUESTED":
                assert meta == {
                    "partitionToWriteStats": {},
                    "extraMetadata": {"ROLLING_STAT": ""},
                    "version": None,
                    "operationType": "UNKNOWN",
                }
        else:
            field = {"COMPLETED": "hoodieCleanMetadata"}.get(e["actionState"], "hoodieCleanerPlan")
            want = cleaned if e["actionState"] == "COMPLETED" else plan
            assert (
                e[field]["earliestInstantToRetain" if field == "hoodieCleanerPlan" else "earliestCommitToRetain"]
                == (want["earliestInstantToRetain" if field == "hoodieCleanerPlan" else "earliestCommitToRetain"])
            )
    # what the timeline reads back: the commit documents, the clean's metadata
    timeline = Timeline.load(Storage(root))
    for inst in timeline.archived:
        if inst.action is Action.COMMIT:
            assert timeline.commit_metadata(inst).written_files == timeline.commit_metadata(inst).written_files
            assert [s.path for s in timeline.commit_metadata(inst).write_stats()] == [
                s["path"] for p in json.loads(before[inst.time])["partitionToWriteStats"].values() for s in p
            ]
        else:
            assert (
                documents.decode(timeline.document(inst))["earliestCommitToRetain"] == cleaned["earliestCommitToRetain"]
            )


def test_version_8_rows_carry_the_completed_files_and_their_plans(tmp_path: Path) -> None:
    """Each archived instant is a HoodieLSMTimelineInstant row: its completion time, its completed
    file's bytes, and the plan Hudi keeps (a clean's cleaner plan, a compaction's plan); the file
    is written as parquet-avro writes it (the Avro schema in the footer)."""
    root = tmp_path / "t"
    t = create_table(
        root, "t", "uuid", "ts", table_type="MERGE_ON_READ", options={**ARCHIVE_SOON, "hoodie.write.table.version": 8}
    )
    upsert(t, 0)
    upsert(t, 0)
    compaction = t.compact().instant_time
    t.clean("KEEP_LATEST_COMMITS", 1)
    [clean] = [i for i in t.timeline() if i.action is Action.CLEAN and i.is_completed]
    for i in range(1, 5):
        upsert(t, i)
    t.clean("KEEP_LATEST_COMMITS", 1)  # the first clean's retained window no longer holds archival back
    folder = root / ".hoodie" / "timeline"
    completed = {p.name.split("_")[0]: p.read_bytes() for p in folder.iterdir() if "_" in p.name}
    plans = {
        compaction: (folder / f"{compaction}.compaction.requested").read_bytes(),
        clean.time: (folder / f"{clean.time}.clean.requested").read_bytes(),
    }
    moved = t.archive()
    assert compaction in {i.time for i in moved} and clean.time in {i.time for i in moved}
    [name] = manifest(root)
    parquet = pq.ParquetFile(root / HISTORY / name)
    footer = parquet.metadata.metadata
    assert json.loads(footer[b"parquet.avro.schema"])["name"] == "HoodieLSMTimelineInstant"
    assert footer[b"writer.model.name"] == b"avro"
    rows = parquet.read().to_pylist()
    assert name == f"{rows[0]['instantTime']}_{rows[-1]['instantTime']}_0.parquet"
    assert [(r["instantTime"], r["action"], r["completionTime"]) for r in rows] == [
        (i.time, i.action.value, i.completion) for i in sorted(moved)
    ]
    for r in rows:
        assert r["metadata"] == completed[r["instantTime"]] and r["version"] == 1
        assert r["plan"] == plans.get(r["instantTime"])


def legacy_archive(root: Path, times: list[str]) -> None:
    """What an earlier upsertlake release's archival left: the completed instants of `times` in an
    `upsertlake-<first>-<last>.avro` file, their timeline files gone."""
    folder = Storage(root)
    timeline = Timeline.load(folder)
    doomed = [i for i in timeline.active() if i.time in times and i.is_completed]
    schema = {
        "type": "record",
        "name": "UpsertlakeArchivedInstant",
        "namespace": "upsertlake.archive",
        "fields": [
            {"name": "instantTime", "type": "string"},
            {"name": "action", "type": "string"},
            {"name": "metadata", "type": "bytes"},
            {"name": "completionTime", "type": ["null", "string"], "default": None},
        ],
    }
    out = io.BytesIO()
    fastavro.writer(
        out,
        fastavro.parse_schema(schema),
        [
            {
                "instantTime": i.time,
                "action": i.action.value,
                "metadata": timeline.document(i),
                "completionTime": i.completion,
            }
            for i in doomed
        ],
    )
    (root / ARCHIVED).mkdir(parents=True, exist_ok=True)
    (root / ARCHIVED / f"upsertlake-{times[0]}-{times[-1]}.avro").write_bytes(out.getvalue())
    for i in doomed:
        for p in timeline.storage.list(timeline.layout.folder):
            if p.name.startswith(i.time):
                folder.delete(p.path)


def test_archives_of_earlier_releases_are_read_and_moved_into_hudis_format(tmp_path: Path, table_version: int) -> None:
    root = tmp_path / "t"
    t = create_table(root, "t", "uuid", "ts", options=ARCHIVE_SOON)
    times = [upsert(t, i) for i in range(4)]
    legacy_archive(root, times[:2])
    assert archived_times(root) == times[:2] and [i.time for i in t.timeline()] == times[2:]
    assert t.read(as_of=times[0]).column("uuid").to_pylist() == ["k0"]
    times += [upsert(t, i) for i in range(4, 8)]
    assert t.archive()
    assert not list((root / ARCHIVED).glob("upsertlake-*"))
    assert archived_times(root) == times[:-2]
    if table_version == 6:
        assert sorted(e["commitTime"] for e in log_entries(root) if e["actionState"] == "COMPLETED") == times[:-2]
    else:
        assert (
            sorted(
                r for name in manifest(root) for r in pq.read_table(root / HISTORY / name)["instantTime"].to_pylist()
            )
            == times[:-2]
        )
    for i, time in enumerate(times):
        assert sorted(t.read(columns=["uuid"], as_of=time).column(0).to_pylist()) == sorted(
            f"k{j}" for j in range(i + 1)
        )


# -- damaged archives -----------------------------------------------------------------------------


def archived_table(root: Path, version: int, archivals: int = 1) -> list[str]:
    t = create_table(root, "t", "uuid", "ts", options={**ARCHIVE_SOON, "hoodie.write.table.version": version})
    times = []
    for i in range(3 + 2 * archivals):
        times.append(upsert(t, i))
        if i >= 3 and i % 2 == 1:
            assert t.archive()
    return times


def test_a_torn_archive_log_block_is_skipped_as_hudi_skips_it(tmp_path: Path) -> None:
    """An archival that died mid-write leaves a torn last block; its instants are still active
    (the archive is written before their files go), so the block is skipped, as Hudi's reader
    skips a corrupt block, and the next archival writes the next file."""
    root = tmp_path / "t"
    times = archived_table(root, 6, archivals=2)
    _first, second = sorted((root / ARCHIVED).glob(".commits_*"))
    assert archived_times(root) == times[:4]
    data = second.read_bytes()
    second.write_bytes(data[: len(data) - 40])
    before = files_of(root)
    assert archived_times(root) == times[:2]  # the second archival's block is torn
    assert files_of(root) == before
    t = open_table(root, options=ARCHIVE_SOON)
    times += [upsert(t, i) for i in range(5, 8)]
    assert t.archive()
    assert sorted(p.name for p in (root / ARCHIVED).glob(".commits_*"))[-1] == ".commits_.archive.3_1-0-1"


def test_an_archive_block_that_does_not_decode_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "t"
    times = archived_table(root, 6)
    [archive] = (root / ARCHIVED).glob(".commits_*")
    data = bytearray(archive.read_bytes())
    at = data.index(times[0].encode()) - 2  # the first record's commit time, the block's framing intact
    data[at : at + 30] = b"\xff" * 30
    archive.write_bytes(bytes(data))
    before = files_of(root)
    with pytest.raises(CorruptTableError, match=r"\.commits_\.archive\.1_1-0-1"):
        open_table(root).read()
    assert files_of(root) == before


def test_a_manifest_naming_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "t"
    archived_table(root, 8)
    [name] = manifest(root)
    (root / HISTORY / name).unlink()
    before = files_of(root)
    with pytest.raises(CorruptTableError, match=rf"manifest_1 names .*{name}, which does not exist"):
        open_table(root).read()
    with pytest.raises(CorruptTableError, match="which does not exist"):
        open_table(root, options=ARCHIVE_SOON).upsert(pa.table({"uuid": ["x"], "ts": [1]}))
    assert files_of(root) == before


def test_without_the_version_file_the_latest_manifest_is_read(tmp_path: Path) -> None:
    """A writer that died between the manifest and the version file: readers (Hudi's and ours)
    take the largest manifest listed."""
    root = tmp_path / "t"
    times = archived_table(root, 8, archivals=2)
    (root / HISTORY / "_version_").unlink()
    assert archived_times(root) == times[:4]
    (root / HISTORY / "_version_").write_text("junk")
    assert archived_times(root) == times[:4]


def merge_died(root: Path, finished: bool) -> tuple[list[Path], Path]:
    """A merge of the two archive files that died: with the merged file half written (`finished`
    False), or written and the first small file deleted."""
    from upsertlake.timeline.archived_log import merge_plan

    small = sorted((root / ARCHIVED).glob(".commits_*"))
    merged = root / ARCHIVED / f".commits_.archive.{len(small) + 1}_1-0-1"
    (root / ARCHIVED / "mergeArchivePlan").write_bytes(merge_plan([str(p) for p in small], merged.name))
    whole = b"".join(p.read_bytes() for p in small)  # their blocks one after the other: the merged file's content
    merged.write_bytes(whole if finished else whole[: len(whole) // 2 + 7])
    if finished:
        small[0].unlink()
    return small, merged


@pytest.mark.parametrize("finished", [False, True], ids=["merged-file-torn", "small-files-half-deleted"])
def test_a_merge_that_died_is_undone_or_finished_by_the_next_archival(tmp_path: Path, finished: bool) -> None:
    root = tmp_path / "t"
    times = archived_table(root, 6, archivals=2)
    small, merged = merge_died(root, finished)
    before = files_of(root)
    assert archived_times(root) == times[:4]  # every instant, in the small files or the merged one
    assert files_of(root) == before
    t = open_table(root, options=ARCHIVE_SOON)
    times += [upsert(t, i) for i in range(5, 8)]
    assert t.archive()
    left = sorted(p.name for p in (root / ARCHIVED).glob(".commits_*"))
    if finished:  # the merge is finished: the small files go, the merged one stays
        assert left == [merged.name, ".commits_.archive.4_1-0-1"]
    else:  # the merge is undone: its partial file goes
        assert left == [small[0].name, small[1].name, ".commits_.archive.3_1-0-1"]
    assert not (root / ARCHIVED / "mergeArchivePlan").exists()
    assert archived_times(root) == times[:-2]


def test_a_merged_file_that_does_not_parse_is_skipped_while_its_merge_plan_is_there(tmp_path: Path) -> None:
    root = tmp_path / "t"
    times = archived_table(root, 6, archivals=2)
    small, merged = merge_died(root, finished=False)
    data = bytearray(b"".join(p.read_bytes() for p in small))
    at = data.index(times[0].encode()) - 2
    data[at : at + 30] = b"\xff" * 30  # framed blocks whose records do not decode
    merged.write_bytes(bytes(data))
    assert archived_times(root) == times[:4]
    (root / ARCHIVED / "mergeArchivePlan").unlink()
    with pytest.raises(CorruptTableError, match=merged.name):
        archived_times(root)


def test_a_replacecommit_stays_active_until_a_clean_after_it(tmp_path: Path, table_version: int) -> None:
    """As Hudi's archiver keeps it (getEarliestInstantToRetainForClustering): archived before a
    clean deleted the file groups it replaced, Hudi's readers would see those as live again. The
    replacecommit and everything after it stays; once a clean has cleaned past it, it is archived,
    with its plan and replaced file groups readable from the archive."""
    root = tmp_path / "t"
    t = create_table(root, "t", "uuid", "ts", options=ARCHIVE_SOON)
    first = upsert(t, 0)
    replace = t.insert_overwrite_table(pa.table({"uuid": ["r"], "ts": [1]})).instant_time
    times = [upsert(t, i) for i in range(1, 6)]
    assert [i.time for i in t.archive()] == [first]  # what lies before the replacecommit only
    assert archived_times(root, Action.REPLACE_COMMIT) == []
    t.clean("KEEP_LATEST_COMMITS", 1)
    assert {i.time for i in t.archive()} >= {replace}
    assert archived_times(root, Action.REPLACE_COMMIT) == [replace]
    timeline = Timeline.load(Storage(root))
    [archived] = [i for i in timeline.archived if i.time == replace]
    assert timeline.commit_metadata(archived).partition_to_replace_file_ids
    assert sorted(t.read(columns=["uuid"]).column(0).to_pylist()) == sorted(["r", *(f"k{i}" for i in range(1, 6))])
    assert times[-1] in {i.time for i in t.timeline()}
