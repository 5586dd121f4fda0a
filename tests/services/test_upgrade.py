"""Upgrading version 6 tables to version 8 (Hudi 1.x), crash-safe and resumable; the version a
table keeps; the metadata table writers remove."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake.storage.storage as storage_module
from upsertlake import ConfigError, UnsupportedTableError, create_table, open_table, upgrade_table
from upsertlake.config.java_properties import parse_java_properties
from upsertlake.config.properties_file import BACKUP_FILE
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import CleanedInstantError, ServiceError
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.archived_log import read_entries
from upsertlake.timeline.commit_metadata import AVRO_MAGIC
from upsertlake.timeline.instant import State

from helpers import hudi_read, timeline_dir, tree_digest
from hudi_compare import assert_same, assert_same_as_of, check_reads

NO_AUTO_CLEAN = {"hoodie.clean.automatic": False}


def rows(ids: range, ts: int, tag: str) -> pa.Table:
    return pa.table({
        "id": [f"k{i:03d}" for i in ids], "ts": [ts] * len(ids),
        "v": [f"{tag}-{i}" for i in ids], "p": [f"p{i % 2}" for i in ids],
    })


def properties(path: Path) -> dict[str, str]:
    return parse_java_properties((path / ".hoodie" / "hoodie.properties").read_text("latin-1"))


def reads(path: Path) -> dict[str, list]:
    """Snapshot and time travel to every completed write, ours: what an upgrade must not change."""
    table = open_table(path)
    times = [i.time for i in table.timeline() if i.is_completed and i.action.value in ("commit", "replacecommit")]
    key = "_hoodie_record_key" if table.table_config.populate_meta_fields else "id"
    out = {"snapshot": table.read().sort_by(key).to_pylist()}
    for t in times:
        try:
            out[t] = table.read(as_of=t).sort_by(key).to_pylist()
        except CleanedInstantError:
            out[t] = "cleaned"
    return out


def hudi_agrees(path: Path) -> None:
    """Ours == hudi-rs: the snapshot, and time travel to every write the cleaner kept whole."""
    table = open_table(path)
    assert_same(table.read(), hudi_read(path), "snapshot")
    for t, got in reads(path).items():
        if t != "snapshot" and got != "cleaned":
            assert_same_as_of(table.read(as_of=t), hudi_read(path, as_of=t), f"as of {t}")


def shapes(path: Path) -> list[str]:
    """The names in the timeline folder with every instant time written T: its structure."""
    return sorted(re.sub(r"\d{17}", "T", p.name) for p in timeline_dir(path).iterdir())


def layout_1_instants(path: Path) -> list[str]:
    return sorted(p.name for p in (path / ".hoodie").iterdir() if p.is_file() and p.name[:1].isdigit())


@pytest.mark.parametrize(
    "name",
    ["v6_simplekeygen_nonhivestyle", "v6_complexkeygen_hivestyle", "v6_nonpartitioned",
     "v6_simplekeygen_nonhivestyle_overwritetable", "v6_empty"],
)
def test_hudi_written_v6_tables_upgrade_and_read_the_same(hudi_table, name: str) -> None:
    path = hudi_table(name)
    before = reads(path)
    old_names = layout_1_instants(path)
    result = upgrade_table(path, 8)
    assert (result.from_version, result.to_version, result.rolled_back) == (6, 8, ())
    props = properties(path)
    assert (props["hoodie.table.version"], props["hoodie.timeline.layout.version"]) == ("8", "2")
    assert props["hoodie.table.initial.version"] == "6"
    assert props["hoodie.timeline.path"] == "timeline" and props["hoodie.timeline.history.path"] == "history"
    # merge mode from the payload class; none set and a precombine field: event time, as Hudi 1.0 writes
    if "hoodie.table.precombine.field" in props:
        assert props["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"
        assert props["hoodie.record.merge.strategy.id"] == "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
    else:
        assert props["hoodie.record.merge.mode"] == "COMMIT_TIME_ORDERING"
        assert props["hoodie.record.merge.strategy.id"] == "ce9acb64-bde0-424c-9b91-f6ebba25356d"
    # the key generator class stays, its type is added
    assert props["hoodie.table.keygenerator.class"].endswith("KeyGenerator")
    assert props["hoodie.table.keygenerator.type"] in ("SIMPLE", "COMPLEX", "NON_PARTITION")
    assert not (path / BACKUP_FILE).exists()
    # every instant moved and renamed; commit documents are Avro now
    assert layout_1_instants(path) == []
    new_names = sorted(p.name for p in (path / ".hoodie" / "timeline").iterdir() if p.is_file())
    assert len(new_names) == len(old_names) and (path / ".hoodie" / "timeline" / "history").is_dir()
    for p in (path / ".hoodie" / "timeline").glob("*_*.*commit"):
        assert p.read_bytes().startswith(b"Obj\x01"), p.name
    assert reads(path) == before
    check_reads(open_table(path), path)
    # and it takes writes, which Hudi's reader reads
    table = open_table(path)
    if table.read().num_rows:
        batch = table.read().drop_columns([c for c in table.read().column_names if c.startswith("_hoodie")])
        table.upsert(batch.slice(0, 1))
        check_reads(open_table(path), path)


@pytest.mark.parametrize("name", ["v6_timebasedkeygen_nonhivestyle", "v6_simplekeygen_hivestyle_no_metafields"])
def test_tables_we_cannot_write_are_not_upgraded(hudi_table, name: str) -> None:
    path = hudi_table(name)
    before = tree_digest(path)
    with pytest.raises(UnsupportedTableError):
        upgrade_table(path, 8)
    assert tree_digest(path) == before


def services_table(path: Path) -> list[str]:
    """A version 6 table with commits, a savepoint, a clean, a rollback and a clustering."""
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=NO_AUTO_CLEAN)
    times = [t.upsert(rows(range(10), i, f"c{i}")).instant_time for i in range(1, 5)]
    t.savepoint(times[1])
    t.clean(retained=2)
    t.upsert(rows(range(5, 15), 9, "late"))
    t.rollback()
    t.upsert(rows(range(20, 30), 1, "new"), {"hoodie.parquet.small.file.limit": 0})  # new small groups
    assert t.cluster() is not None
    return times


def test_upgrade_keeps_every_service_instant_and_services_work_after(tmp_path: Path) -> None:
    services_table(tmp_path)
    before = reads(tmp_path)
    kinds_before = sorted((i.time, i.action.value, i.state.value) for i in open_table(tmp_path).timeline())
    upgrade_table(tmp_path, 8)
    table = open_table(tmp_path)
    assert table.table_config.table_version == 8
    assert sorted((i.time, i.action.value, i.state.value) for i in table.timeline()) == kinds_before
    assert all(i.completion for i in table.timeline() if i.is_completed)
    names = {p.name for p in timeline_dir(tmp_path).iterdir()}
    cluster = [i for i in table.timeline() if i.action.value == "replacecommit"][-1]
    assert {f"{cluster.time}.clustering.requested", f"{cluster.time}.clustering.inflight"} <= names
    assert reads(tmp_path) == before
    hudi_agrees(tmp_path)
    # services on the upgraded table: savepoint, upsert, rollback, restore, clean; hudi-rs agrees
    t = open_table(tmp_path, NO_AUTO_CLEAN)
    sp = t.savepoint()
    t.upsert(rows(range(3, 8), 20, "after"))
    t.rollback()
    t.upsert(rows(range(3, 8), 21, "after2"))
    t.restore(sp.time)
    assert reads(tmp_path)["snapshot"] == before["snapshot"]
    t.clean(retained=1)
    hudi_agrees(tmp_path)


class Crash(BaseException):
    """Stands in for the process dying: nothing after it runs."""


def crash_on(monkeypatch, method: str, nth: int, when=lambda rel: True) -> None:
    """Make the nth call of Storage.<method> whose path passes `when` die before it acts."""
    real = getattr(storage_module.Storage, method)
    calls = {"n": 0}

    def dying(self, rel, *args, **kwargs):
        if when(rel):
            calls["n"] += 1
            if calls["n"] == nth:
                raise Crash(f"{method} {rel}")
        return real(self, rel, *args, **kwargs)

    monkeypatch.setattr(storage_module.Storage, method, dying)


def crashed(monkeypatch, path: Path, to: int, crash: tuple, before: dict[str, list]) -> int:
    """Run `upgrade_table(path, to)` dying at `crash` (`crash_on`'s arguments); the table's version
    after, which is 6 or 8, the table reading as `before`."""
    with monkeypatch.context() as m:
        crash_on(m, *crash)
        with pytest.raises(Crash):
            upgrade_table(path, to)
    version = open_table(path).table_config.table_version
    assert version in (6, 8)
    assert reads(path) == before
    return version


# Crash points in the order the upgrade passes them.
CRASHES = [
    ("write_bytes", 1, lambda rel: "/timeline/" in rel),  # copying the first instant
    ("write_bytes", 4, lambda rel: "/timeline/" in rel),  # in the middle of the copies
    ("write_bytes", 1, lambda rel: rel == BACKUP_FILE),  # before the backup is written
    ("write_bytes", 1, lambda rel: rel.endswith("/hoodie.properties")),  # backup written, new file not
    ("delete", 1, lambda rel: rel == BACKUP_FILE),  # new file written, backup left
    ("delete", 1, lambda rel: rel.startswith(".hoodie/") and rel[8:9].isdigit()),  # before the old instants go
    ("delete", 3, lambda rel: rel.startswith(".hoodie/") and rel[8:9].isdigit()),  # some old instants gone
]


@pytest.mark.parametrize(
    ("method", "nth", "when"), CRASHES, ids=[f"{m}-{n}-{i}" for i, (m, n, _) in enumerate(CRASHES)]
)
def test_a_crash_at_any_step_leaves_a_table_that_opens_and_a_rerun_finishes(
    tmp_path: Path, monkeypatch, method: str, nth: int, when
) -> None:
    reference, path = tmp_path / "reference", tmp_path / "crashed"
    for p in (reference, path):
        t = create_table(p, "t", record_key="id", precombine_field="ts", partition_fields="p", options=NO_AUTO_CLEAN)
        for i in range(1, 4):
            t.upsert(rows(range(i, 10 + i), i, f"c{i}"))
    before = reads(path)
    upgrade_table(reference, 8)
    # the crashed table opens, at version 6 or 8, and reads exactly as before (ours and Hudi's)
    version = crashed(monkeypatch, path, 8, (method, nth, when), before)
    check_reads(open_table(path), path, windows=False)
    # a rerun finishes the upgrade: the same timeline and reads as an upgrade never interrupted
    result = upgrade_table(path, 8)
    assert result.from_version == version
    assert properties(path)["hoodie.table.version"] == "8" and not (path / BACKUP_FILE).exists()
    assert layout_1_instants(path) == []
    assert shapes(path) == shapes(reference)
    assert [(i.action, i.state) for i in open_table(path).timeline()] == [
        (i.action, i.state) for i in open_table(reference).timeline()
    ]
    assert reads(path) == before
    check_reads(open_table(path), path)
    assert upgrade_table(path, 8).old_files_deleted == 0  # nothing left to do


# Crash points in the order a downgrade to 6 passes them.
DOWN_CRASHES = [
    ("write_bytes", 1, lambda rel: rel.startswith(".hoodie/") and rel[8:9].isdigit()),  # copying the first instant
    ("write_bytes", 3, lambda rel: rel.startswith(".hoodie/") and rel[8:9].isdigit()),  # in the middle of the copies
    ("write_if_absent", 1, lambda rel: "/archived/" in rel),  # writing the archive log file
    ("write_bytes", 1, lambda rel: rel == BACKUP_FILE),  # before the backup is written
    ("write_bytes", 1, lambda rel: rel.endswith("/hoodie.properties")),  # backup written, new file not
    ("delete", 1, lambda rel: rel.startswith(".hoodie/timeline/")),  # before the layout 2 instants go
    ("delete", 3, lambda rel: rel.startswith(".hoodie/timeline/")),  # some of them gone
]


@pytest.mark.parametrize(
    ("method", "nth", "when"), DOWN_CRASHES, ids=[f"{m}-{n}-{i}" for i, (m, n, _) in enumerate(DOWN_CRASHES)]
)
def test_a_crash_in_a_downgrade_to_6_leaves_a_table_that_opens_and_a_rerun_finishes(
    tmp_path: Path, monkeypatch, method: str, nth: int, when
) -> None:
    options = {"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3, **NO_AUTO_CLEAN}
    reference, path = tmp_path / "reference", tmp_path / "crashed"
    for p in (reference, path):
        t = create_table(p, "t", record_key="id", precombine_field="ts", partition_fields="p",
                         options={**options, "hoodie.write.table.version": 8})
        for i in range(1, 6):
            t.upsert(rows(range(i, 10 + i), i, f"c{i}"))
        t.archive()
    before = reads(path)
    archived = sorted(i.time for i in Timeline.load(Storage(path)).archived)
    assert archived
    upgrade_table(reference, 6)
    # the crashed table opens, at version 8 or 6, and reads exactly as before, archive included
    version = crashed(monkeypatch, path, 6, (method, nth, when), before)
    assert sorted(i.time for i in Timeline.load(Storage(path)).archived) == archived
    # a rerun finishes the downgrade: the same timeline, archive and reads as one never interrupted
    result = upgrade_table(path, 6)
    assert result.from_version == version
    assert properties(path)["hoodie.table.version"] == "6" and not (path / BACKUP_FILE).exists()
    assert [(i.action, i.state) for i in open_table(path).timeline()] == [
        (i.action, i.state) for i in open_table(reference).timeline()
    ]
    entries = [e for p in sorted((path / ".hoodie/archived").glob(".commits_*"))
               for e in read_entries(p.read_bytes(), p.name)]
    assert sorted(e["commitTime"] for e in entries) == archived, "each archived instant once"
    assert reads(path) == before
    hudi_agrees(path)


def test_a_running_write_makes_the_upgrade_refuse_and_a_failed_one_is_rolled_back(tmp_path: Path) -> None:
    occ = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}
    t = create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=occ)
    t.upsert(rows(range(10), 1, "one"))
    client = open_table(tmp_path, occ).write_client()
    live = client.start_commit()
    result = client.upsert(rows(range(5), 2, "two"), live)
    before = tree_digest(tmp_path)
    with pytest.raises(ServiceError, match=f"write {live} is in progress"):
        upgrade_table(tmp_path, 8)
    assert tree_digest(tmp_path) == before
    # the writer dies (its heartbeat stops and expires): the upgrade rolls its write back first
    client.writes.get(live).heartbeat.stop()
    done = upgrade_table(tmp_path, 8, {"hoodie.client.heartbeat.interval_in_ms": 1})
    assert done.rolled_back == (live,)
    assert not list(tmp_path.rglob(f"*_{live}.parquet"))
    with pytest.raises(Exception, match=r"changed to version 8 while write .* not committed"):
        client.commit(live, result)
    check_reads(open_table(tmp_path), tmp_path)


def test_a_writer_opened_before_the_upgrade_writes_version_8(tmp_path: Path) -> None:
    old = create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="p")
    old.upsert(rows(range(10), 1, "one"))
    upgrade_table(tmp_path, 8)
    r = old.upsert(rows(range(5, 15), 2, "two"))  # re-reads the version under the lock
    assert old.table_config.table_version == 8
    assert layout_1_instants(tmp_path) == []
    assert [i.state for i in open_table(tmp_path).timeline()] == [State.COMPLETED, State.COMPLETED]
    assert r.instant_time in {i.time for i in open_table(tmp_path).timeline()}
    assert sorted(hudi_read(tmp_path)["id"].to_pylist()) == [f"k{i:03d}" for i in range(15)]


def test_upgrade_refuses_other_versions(tmp_path: Path, hudi_table) -> None:
    t = create_table(tmp_path / "t", "t", record_key="id")
    with pytest.raises(ConfigError, match="version 8 or 9"):
        upgrade_table(tmp_path / "t", 10)
    assert upgrade_table(hudi_table("v8_nonpartitioned"), 8).from_version == 8  # nothing to do
    assert t.table_config.table_version == 6


def test_cli_upgrade(tmp_path: Path) -> None:
    create_table(tmp_path, "t", record_key="id", precombine_field="ts").upsert(rows(range(4), 1, "a"))
    run = [sys.executable, "-m", "upsertlake.cli", "upgrade", str(tmp_path), "--to", "8"]
    p = subprocess.run([*run, "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {
        "from_version": 6, "to_version": 8, "rolled_back": [], "instants_moved": 1, "old_files_deleted": 3,
        "archived_moved": 0,
    }
    p = subprocess.run(run, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "the table is at version 8 already"


# -- the version a table keeps ------------------------------------------------------------------


def test_write_table_version_creates_8_and_a_table_keeps_its_version(tmp_path: Path) -> None:
    v8 = create_table(tmp_path / "v8", "t", record_key="id", options={"hoodie.write.table.version": 8})
    props = properties(tmp_path / "v8")
    assert (props["hoodie.table.version"], props["hoodie.timeline.layout.version"]) == ("8", "2")
    assert props["hoodie.table.keygenerator.type"] == "NON_PARTITION"
    assert "hoodie.table.keygenerator.class" not in props  # Hudi 1.x writes the type only
    assert props["hoodie.record.merge.mode"] == "COMMIT_TIME_ORDERING"  # no precombine field
    assert TableConfig.load(Storage(tmp_path / "v8")).keygen_class.endswith("NonpartitionedKeyGenerator")
    assert create_table(tmp_path / "v6", "t", record_key="id").table_config.table_version == 6  # the default
    with pytest.raises(ConfigError, match="table is at version 8"):
        open_table(tmp_path / "v8", {"hoodie.write.table.version": 6})
    with pytest.raises(ConfigError, match="table is at version 6"):
        open_table(tmp_path / "v6").upsert(pa.table({"id": [1]}), {"hoodie.write.table.version": 8})
    with pytest.raises(ConfigError, match="version 6, 8 or 9"):
        create_table(tmp_path / "v7", "t", record_key="id", options={"hoodie.write.table.version": 7})
    assert not (tmp_path / "v7").exists() or not (tmp_path / "v7" / ".hoodie").exists()
    v8.upsert(pa.table({"id": [1, 2]}))
    assert properties(tmp_path / "v8")["hoodie.table.version"] == "8"
    assert sorted(hudi_read(tmp_path / "v8")["id"].to_pylist()) == [1, 2]


# -- the metadata table -------------------------------------------------------------------------


@pytest.mark.usefixtures("table_version")
def test_a_write_deletes_a_metadata_table_it_would_leave_stale(tmp_path: Path, caplog) -> None:
    """Version 6: a metadata table is deleted (upsertlake keeps version 8's and 9's only); version
    8: one that cannot be read is deleted (and not built again unless asked for)."""
    t = create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(rows(range(4), 1, "a"))
    # as Hudi 1.x's Spark writer leaves a table: a metadata table, listed in the properties
    (tmp_path / ".hoodie" / "metadata" / "files").mkdir(parents=True)
    (tmp_path / ".hoodie" / "metadata" / "files" / "x.log").write_bytes(b"stale")
    props_file = tmp_path / ".hoodie" / "hoodie.properties"
    props_file.write_text(props_file.read_text("latin-1") + "hoodie.table.metadata.partitions=files\n", "latin-1")
    with caplog.at_level(logging.WARNING, logger="upsertlake.services.metadata_table"):
        open_table(tmp_path).upsert(rows(range(2, 6), 2, "b"))
    assert not (tmp_path / ".hoodie" / "metadata").exists()
    assert "hoodie.table.metadata.partitions" not in properties(tmp_path)
    assert any("deleted the metadata table" in r.message for r in caplog.records)
    assert sorted(hudi_read(tmp_path)["id"].to_pylist()) == [f"k{i:03d}" for i in range(6)]


@pytest.mark.parametrize("to", [8, 9])
def test_the_archived_timeline_moves_into_the_lsm_timeline(tmp_path: Path, to: int) -> None:
    """A version 6 table we archived (Hudi 0.x's archive log files): after the upgrade its
    archived instants are in the LSM timeline (`.hoodie/timeline/history/`), each completed at its
    archive entry's stateTransitionTime, with its document; time travel and incremental reads
    still reach them, and the archive log files stay (Hudi's upgradeToLSMTimeline)."""
    path = tmp_path / "t"
    options = {"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3, "hoodie.cleaner.commits.retained": 1,
               "hoodie.commits.archival.batch": 2, "hoodie.timeline.compaction.batch.size": 2, **NO_AUTO_CLEAN}
    table = create_table(path, "t", record_key="id", precombine_field="ts", options=options)
    times = [table.upsert(rows(range(n, n + 2), n, f"w{n}")).instant_time for n in range(6)]
    table.clean()
    times += [table.upsert(rows(range(n, n + 2), n, f"w{n}")).instant_time for n in range(6, 9)]
    table.archive()
    before = Timeline.load(Storage(path))
    archived = sorted((i.time, i.action.value) for i in before.archived)
    assert archived == [(t, "commit") for t in times[:5]]
    entries = {(e["commitTime"], e["actionType"]): e["stateTransitionTime"]
               for p in sorted((path / ".hoodie/archived").glob(".commits_*"))
               for e in read_entries(p.read_bytes(), p.name) if e["actionState"] == "COMPLETED"}
    logs = sorted(p.name for p in (path / ".hoodie/archived").iterdir())
    expected_reads = reads(path)

    result = upgrade_table(path, to, options)  # hoodie.commits.archival.batch: rows per layer-0 file
    assert (result.from_version, result.to_version, result.archived_moved) == (6, to, 5)
    after = Timeline.load(Storage(path))
    assert after.layout.version == 2
    assert sorted((i.time, i.action.value) for i in after.archived) == archived
    assert {(i.time, i.action.value): i.completion for i in after.archived} == entries
    for i in after.archived:  # the commit documents as Avro, saying what they said
        assert after.document(i).startswith(AVRO_MAGIC)
        was, now = before.commit_metadata(i), after.commit_metadata(i)
        assert (now.partition_to_write_stats, now.operation_type, now.schema) == (
            was.partition_to_write_stats, was.operation_type, was.schema)
    history = path / ".hoodie/timeline/history"
    version = (history / "_version_").read_text()
    listed = [f["fileName"] for f in json.loads((history / f"manifest_{version}").read_text())["files"]]
    # 5 instants in batches of 2: three layer-0 files, the oldest two compacted into one of layer 1
    assert sorted(name.rsplit("_", 1)[1] for name in listed) == ["0.parquet", "1.parquet"], listed
    assert sorted(p.name for p in (path / ".hoodie/archived").iterdir()) == logs
    assert reads(path) == expected_reads
    first = min(after.archived)
    assert sorted(open_table(path).read_incremental(first.completed_at).column("id").to_pylist()) == sorted(
        {f"k{i:03d}" for n in range(1, 9) for i in range(n, n + 2)})
    # a rerun of the upgrade leaves it so; archiving on goes on in the LSM timeline
    upgrade_table(path, to)
    assert sorted((i.time, i.action.value) for i in Timeline.load(Storage(path)).archived) == archived
    table = open_table(path, options)
    times += [table.upsert(rows(range(n, n + 2), n, f"w{n}")).instant_time for n in range(9, 12)]
    table.clean()
    table.archive()
    now = sorted((i.time, i.action.value) for i in Timeline.load(Storage(path)).archived if i.action.value == "commit")
    assert now == [(t, "commit") for t in times[:-2]]


@pytest.mark.parametrize("start", [8, 9])
def test_a_downgrade_to_6_converts_the_timeline_and_its_archive_back(tmp_path: Path, start: int) -> None:
    """8 (or 9) -> 6, as Hudi's EightToSevenDowngradeHandler does: every instant back in
    `.hoodie/` under its version 6 name, commit documents as JSON, the LSM timeline's instants in
    an archive log file (completed at their completion times), the properties of a version 6
    table; reads are the same, hudi-rs reads it so, writes and archival go on at 6, and an upgrade
    brings it back with every instant."""
    path = tmp_path / "t"
    options = {"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3, "hoodie.cleaner.commits.retained": 1,
               **NO_AUTO_CLEAN}
    table = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=options)
    times = [table.upsert(rows(range(4), 0, "w0")).instant_time]
    at_6 = properties(path)
    upgrade_table(path, start)
    table = open_table(path, options)
    times += [table.upsert(rows(range(n, n + 2), n, f"w{n}")).instant_time for n in range(1, 6)]
    table.clean()
    times += [table.upsert(rows(range(n, n + 2), n, f"w{n}")).instant_time for n in range(6, 9)]
    table.archive()
    before = Timeline.load(Storage(path))
    archived = {(i.time, i.action.value): i.completion for i in before.archived}
    active = [(i.time, i.action.value, i.state) for i in before.active()]
    assert len(archived) == 5 and ("clean", State.COMPLETED) in [(a, s) for _, a, s in active]
    expected_reads = reads(path)

    result = upgrade_table(path, 6, options)
    assert (result.from_version, result.to_version, result.archived_moved) == (start, 6, 5)
    assert properties(path) == {**at_6, "hoodie.compaction.payload.class":
                                "org.apache.hudi.common.model.DefaultHoodieRecordPayload"}
    assert not [p.name for p in (path / ".hoodie/timeline").iterdir() if p.is_file()], "no layout 2 instant left"
    after = Timeline.load(Storage(path))
    assert after.layout.version == 1
    assert [(i.time, i.action.value, i.state) for i in after.active()] == active
    assert {(i.time, i.action.value) for i in after.archived} == set(archived)
    commit = next(i for i in after.active() if i.action.value == "commit" and i.is_completed)
    assert json.loads((path / ".hoodie" / commit.file_name()).read_bytes())["operationType"] == "UPSERT"
    entries = {(e["commitTime"], e["actionType"]): e["stateTransitionTime"]
               for p in sorted((path / ".hoodie/archived").glob(".commits_*"))
               for e in read_entries(p.read_bytes(), p.name) if e["actionState"] == "COMPLETED"}
    assert entries == archived
    assert reads(path) == expected_reads
    hudi_agrees(path)
    assert upgrade_table(path, 6).old_files_deleted == 0  # a rerun: nothing left to do
    table = open_table(path, options)
    times += [table.upsert(rows(range(n, n + 2), n, f"w{n}")).instant_time for n in range(9, 12)]
    table.clean()
    table.archive()
    hudi_agrees(path)
    upgrade_table(path, start)
    back = Timeline.load(Storage(path))
    assert set(archived) < {(i.time, i.action.value) for i in back.archived}
    assert [i.time for i in back.instants if i.action.value == "commit"] == times
    hudi_agrees(path)


def test_merge_on_read_tables_are_not_downgraded_to_6(tmp_path: Path) -> None:
    table = create_table(tmp_path, "t", record_key="id", precombine_field="ts", table_type="MERGE_ON_READ",
                         options={"hoodie.write.table.version": 8})
    table.upsert(rows(range(2), 1, "a"))
    before = tree_digest(tmp_path)
    with pytest.raises(ConfigError, match="not safe: it is merge-on-read, and its log files are named by their"):
        upgrade_table(tmp_path, 6)
    assert tree_digest(tmp_path) == before
