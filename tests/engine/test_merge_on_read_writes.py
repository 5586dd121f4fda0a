"""Merge-on-read tables we write: every write is a deltacommit; updates and deletes are
appended as log files to their file group's slice, inserts go to new or small log-free slices.
After every write the snapshot and time travel to every completed instant read the same in
process, with Apache Hudi's reader (hudi-rs), and as an independent model (a dict of key -> row);
failed deltacommits roll back as Hudi does per table version, concurrent appends conflict per
record, and upserts into Hudi-written merge-on-read tables read back the same by both readers."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import WriteConflictError, create_table, open_table
from upsertlake.config.enums import TableType
from upsertlake.errors import ConfigError
from upsertlake.layout.markers import reconcile_markers
from upsertlake.logfile import CommandBlock, DataBlock, DeleteBlock, LogFileName, read_blocks
from upsertlake.storage import Storage

from helpers import FAST_HEARTBEAT, REPO, TESTS, hudi_read, kill_mid_compaction, timeline_dir, unzip_mor_table
from hudi_compare import check_reads
from mor_tables import COLUMNS, VERSIONS, batch, hudi_snapshot, logs_of, mor_table, snapshot

# -- creating ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_a_merge_on_read_table_declares_its_type_and_merge_mode(tmp_path: Path, version: int) -> None:
    mor_table(tmp_path / "t", version)
    props = (tmp_path / "t/.hoodie/hoodie.properties").read_text()
    assert "hoodie.table.type=MERGE_ON_READ" in props
    assert "hoodie.compaction.payload.class=org.apache.hudi.common.model.DefaultHoodieRecordPayload" in props
    assert ("hoodie.record.merge.mode=EVENT_TIME_ORDERING" in props) == (version == 8)
    create_table(tmp_path / "c", "c", record_key="id", options={"hoodie.datasource.write.table.type": "merge_on_read"})
    props = (tmp_path / "c/.hoodie/hoodie.properties").read_text()
    assert "hoodie.table.type=MERGE_ON_READ" in props  # no precombine field: merged by commit time
    assert "hoodie.compaction.payload.class=org.apache.hudi.common.model.OverwriteWithLatestAvroPayload" in props


@pytest.mark.parametrize("version", VERSIONS)
def test_commit_time_ordering_is_declared_and_kept_by_both_readers_before_and_after_compaction(
    tmp_path: Path, version: int
) -> None:
    """Version 6 once recorded DefaultHoodieRecordPayload whatever the merge mode, and a
    later record with a smaller precombine value lost, in both readers. It declares
    OverwriteWithLatestAvroPayload, as Hudi 0.x records commit time and as Hudi 1.x and hudi-rs
    read a version 6 table's merge mode from its payload class; its writes take the table's mode
    when reopened, and another mode is refused (readers merge the logs by the table's)."""
    path = tmp_path / "t"
    table = mor_table(path, version, **{"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"})
    props = (path / ".hoodie/hoodie.properties").read_text()
    assert "hoodie.compaction.payload.class=org.apache.hudi.common.model.OverwriteWithLatestAvroPayload" in props
    assert "DefaultHoodieRecordPayload" not in props
    assert ("hoodie.record.merge.mode=COMMIT_TIME_ORDERING" in props) == (version == 8)
    table.upsert(batch([0, 1], [9, 9], 1))
    open_table(path).upsert(batch([0], [8], 2))  # later, smaller ts: it wins
    expected = {r["id"]: r for r in batch([0], [8], 2).to_pylist() + batch([1], [9], 1).to_pylist()}
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)
    with pytest.raises(ConfigError, match="merges by COMMIT_TIME_ORDERING"):
        open_table(path).upsert(batch([1], [1], 3), {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"})
    open_table(path).compact()
    assert snapshot(open_table(path), query_type="read_optimized") == expected == hudi_snapshot(path)


def test_the_cli_creates_a_merge_on_read_table(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "upsertlake.cli", "create", str(tmp_path / "t"), "--name", "t",
                        "--record-key", "id", "--precombine-field", "ts", "--table-type", "merge_on_read"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert open_table(tmp_path / "t").table_config.table_type is TableType.MERGE_ON_READ


# -- writing: the model --------------------------------------------------------------------


def apply(model: dict[str, dict], op: str, data: pa.Table) -> None:
    """What an operation does to the model (event time: a smaller ts never replaces a larger)."""
    for row in data.to_pylist():
        old = model.get(row["id"])
        if op == "delete":
            model.pop(row["id"], None)
        elif op in ("insert", "bulk_insert") or old is None or row["ts"] >= old["ts"]:
            model[row["id"]] = row


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", ["partitioned", "flat_no_small_files", "parquet_blocks"])
def test_random_writes_read_as_the_model_in_both_readers(tmp_path: Path, version: int, variant: str) -> None:
    options = {
        "partitioned": {},
        "flat_no_small_files": {"hoodie.parquet.small.file.limit": 0},
        "parquet_blocks": {"hoodie.logfile.data.block.format": "parquet"},
    }[variant]
    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=variant != "flat_no_small_files", **options)
    rng = random.Random(version * 10 + len(variant))
    model: dict[str, dict] = {}
    history: list[dict[str, dict]] = []
    table.bulk_insert(first := batch(list(range(60)), [5] * 60, version))
    apply(model, "bulk_insert", first)
    history.append(dict(model))
    next_id = 60
    for step in range(7):
        op = ["upsert", "upsert", "delete", "insert", "upsert", "delete", "upsert"][step]
        existing = sorted(int(k[1:]) for k in model)
        if op == "insert":
            ids = list(range(next_id, next_id + 15))
            next_id += 15
        elif op == "delete":
            ids = [*rng.sample(existing, 8), next_id + 1000]  # and a key the table never held
        else:
            ids = rng.sample(existing, 20) + list(range(next_id, next_id + 5))
            next_id += 5
        data = batch(ids, [rng.randint(0, 9) for _ in ids], version + step)
        getattr(table, op)(data)
        apply(model, op, data)
        history.append(dict(model))
        assert snapshot(table) == model, f"after {op} {step}"
    instants = [i for i in table.timeline() if i.is_completed]
    assert {i.action.value for i in instants} == {"deltacommit"}
    assert logs_of(path), "updates and deletes went to log files"
    for inst, expected in zip(instants, history):
        assert snapshot(table, as_of=inst.time) == expected
        assert hudi_snapshot(path, as_of=inst.time) == expected, f"hudi as of {inst.time}"
    check_reads(table, path, windows=False)  # incremental: see the report (hudi-rs skips the base)


@pytest.mark.parametrize("version", VERSIONS)
def test_updates_append_a_log_file_per_file_group_and_read_no_base_file(tmp_path: Path, version: int) -> None:
    """An upsert of existing keys writes one new log file per file group (a new version of the
    slice on version 6, named by the deltacommit on 8) with the records and Hudi's meta columns,
    and a delete block for delete(); the base files stay as they are."""
    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=False)
    first = table.bulk_insert(batch(list(range(10)), [1] * 10, version))
    (base,) = first.files_written
    base_bytes = (path / base).read_bytes()
    up = table.upsert(batch([1, 2], [2, 2], version))
    gone = table.delete(batch([3], [0], version))
    assert (path / base).read_bytes() == base_bytes
    names = [LogFileName.parse(p.name) for p in logs_of(path)]
    file_id = base.split("_")[0]
    if version == 6:
        assert sorted((n.file_id, n.instant, n.version) for n in names) == [
            (file_id, first.instant_time, 1), (file_id, first.instant_time, 2)]
    else:
        assert sorted((n.file_id, n.instant, n.version) for n in names) == [
            (file_id, up.instant_time, 1), (file_id, gone.instant_time, 1)]
    (data,) = read_blocks((path / up.files_written[0]).read_bytes())
    assert isinstance(data, DataBlock) and data.instant == up.instant_time
    meta = data.records.select(["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
                                "_hoodie_partition_path", "_hoodie_file_name"]).to_pylist()
    assert meta == [
        {"_hoodie_commit_time": up.instant_time, "_hoodie_commit_seqno": f"{up.instant_time}_0_{n}",
         "_hoodie_record_key": f"k000{i}", "_hoodie_partition_path": "", "_hoodie_file_name": file_id}
        for n, i in enumerate([1, 2])
    ]
    (deleted,) = read_blocks((path / gone.files_written[0]).read_bytes())
    assert isinstance(deleted, DeleteBlock)
    assert deleted.keys.to_pylist() == [
        {"record_key": "k0003", "partition_path": "", "ordering_value": None, "natural_order": True}]
    commit = timeline_dir(path) / (f"{up.instant_time}.deltacommit" if version == 6 else "")
    if version == 6:
        stat = json.loads(commit.read_text())["partitionToWriteStats"][""][0]
        assert {k: stat[k] for k in ("fileId", "prevCommit", "numWrites", "numUpdateWrites", "numInserts",
                                     "logVersion", "logOffset", "baseFile", "logFiles")} == {
            "fileId": file_id, "prevCommit": first.instant_time, "numWrites": 2, "numUpdateWrites": 2,
            "numInserts": 0, "logVersion": 2 - 1, "logOffset": 0, "baseFile": Path(base).name,
            "logFiles": [Path(up.files_written[0]).name]}
        assert stat["fileSizeInBytes"] == (path / up.files_written[0]).stat().st_size
    assert up.num_updates == 2 and gone.num_deletes == 1
    expected = {r["id"]: r for r in batch(list(range(10)), [1] * 10, version).to_pylist()}
    expected.update({r["id"]: r for r in batch([1, 2], [2, 2], version).to_pylist()})
    del expected["k0003"]
    assert snapshot(table) == expected == hudi_snapshot(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_appends_encoded_in_one_pass_write_what_each_append_writes_alone(
    tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process the Avro blocks of all of a write's appends are encoded in one pass
    (`AppendJob.for_batch`); each log file is byte for byte what its append writes alone, as a
    Spark task does, `_hoodie_is_deleted` records (a delete block beside the data) included."""
    import shutil

    from upsertlake.engine.append_handle import AppendJob

    base = tmp_path / "base"
    mor_table(base, version, **{"hoodie.parquet.small.file.limit": 0}).bulk_insert(
        batch(list(range(60)), [1] * 60, version)
    )
    changes = batch(list(range(0, 60, 2)), [2] * 30, version)
    changes = changes.append_column("_hoodie_is_deleted", pa.array([i % 5 == 0 for i in range(30)]))
    logs: dict[str, dict[str, bytes]] = {}
    for mode in ("together", "alone"):
        shutil.copytree(base, tmp_path / mode)
        if mode == "alone":
            monkeypatch.setattr(AppendJob, "for_batch", lambda self, records, rows, threads=1: self)
        result = open_table(tmp_path / mode).upsert(changes)
        logs[mode] = {f: (tmp_path / mode / f).read_bytes() for f in result.files_written if ".log." in f}
        blocks = [[type(b) for b in read_blocks(data)] for data in logs[mode].values()]
        assert blocks == [[DataBlock, DeleteBlock]] * 3
        mark = result.instant_time
        logs[mode] = {f.replace(mark, "<i>"): data.replace(mark.encode(), b"<i>") for f, data in logs[mode].items()}
    assert logs["together"] == logs["alone"]


@pytest.mark.parametrize("version", VERSIONS)
def test_equal_ordering_values_the_later_write_wins_in_both_readers(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table = mor_table(path, version)
    table.upsert(batch([1, 2, 3], [7, 7, 7], 1))
    table.upsert(batch([1, 2], [7, 7], 2))
    table.upsert(batch([2], [7], 3))
    table.upsert(batch([3], [6], 4))  # smaller: loses to the base file's row
    got = {k: r["v"] for k, r in snapshot(table).items()}
    assert got == {"k0001": 1002.0, "k0002": 2003.0, "k0003": 3001.0}
    assert {k: r["v"] for k, r in hudi_snapshot(path).items()} == got


@pytest.mark.parametrize("version", VERSIONS)
def test_an_is_deleted_record_competes_by_its_ordering_value(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=False)
    table.upsert(batch([1, 2], [5, 5], 1))
    deletes = batch([1, 2], [4, 6], 2).append_column("_hoodie_is_deleted", pa.array([True, True]))
    table.upsert(deletes)
    (log,) = logs_of(path)
    (block,) = read_blocks(log.read_bytes())
    assert block.keys.select(["record_key", "ordering_value"]).to_pylist() == [
        {"record_key": "k0001", "ordering_value": 4}, {"record_key": "k0002", "ordering_value": 6}]
    assert set(snapshot(table)) == {"k0001"} == set(hudi_snapshot(path))


# -- the same writes read the same on copy-on-write and merge-on-read -----------------------


def side_by_side(root: Path, version: int, writes: list[tuple[str, pa.Table]], compact_after: tuple[int, ...] = (),
                 **options: object) -> dict[str, dict]:
    """Apply `writes` ((method, batch) pairs) to a copy-on-write and a merge-on-read table of the
    same options, compacting the latter after the writes numbered in `compact_after`; both
    readers read the merge-on-read table as copy-on-write holds it, before and after a last
    compaction. Returns that state."""
    tables = {kind: create_table(
        root / kind, "t", record_key="id", precombine_field="ts", partition_fields="p", table_type=kind,
        options={"hoodie.write.table.version": version, **options}) for kind in ("COPY_ON_WRITE", "MERGE_ON_READ")}
    for n, (method, data) in enumerate(writes):
        for kind, table in tables.items():
            getattr(table, method)(data)
            if kind == "MERGE_ON_READ" and n in compact_after:
                table.compact()
    expected = snapshot(open_table(root / "COPY_ON_WRITE"))
    mor = root / "MERGE_ON_READ"
    assert snapshot(open_table(mor)) == expected == hudi_snapshot(mor)
    open_table(mor).compact()
    assert snapshot(open_table(mor), query_type="read_optimized") == expected == hudi_snapshot(mor)
    return expected


def row(key: str, ts: int, v: float, p: str, deleted: bool = False) -> pa.Table:
    return pa.table({"id": [key], "ts": pa.array([ts], pa.int64()), "v": [v], "p": [p],
                     "_hoodie_is_deleted": [deleted]})


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("index", ["GLOBAL_SIMPLE", "GLOBAL_BLOOM", "GLOBAL_INMEMORY"])
def test_a_global_index_moves_a_key_away_and_back_leaving_one_copy(tmp_path: Path, index: str, version: int) -> None:
    """A key upserted into p1, moved to p0, moved back to p1 was stored twice on
    merge-on-read ((2, p0) and (3, p1)): the index found it in p1's base file though a log had
    deleted it there, so the move back updated in place and never deleted the p0 copy. A copy its
    slice's logs deleted is not found (as Hudi reads a global index's merged records), and the
    stored record a move competes with is the merged one (a log's update of it counts)."""
    writes = [("upsert", row("a", 1, 1.0, "p1")), ("upsert", row("a", 2, 2.0, "p0")),
              ("upsert", row("a", 3, 3.0, "p1"))]
    assert side_by_side(tmp_path / "moves", version, writes, **{"hoodie.index.type": index}) == {
        "a": {"id": "a", "ts": 3, "v": 3.0, "p": "p1"}}
    # a log raised b's ts to 5: a record of b at 4 for p0 loses to it and stays in p1 (event time)
    writes = [("upsert", row("b", 1, 1.0, "p1")), ("upsert", row("b", 5, 5.0, "p1")),
              ("upsert", row("b", 4, 4.0, "p0"))]
    assert side_by_side(tmp_path / "stays", version, writes, **{"hoodie.index.type": index}) == {
        "b": {"id": "b", "ts": 5, "v": 5.0, "p": "p1"}}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("index", ["SIMPLE", "BLOOM", "INMEMORY", "GLOBAL_SIMPLE", "BUCKET"])
@pytest.mark.parametrize("deleted", [False, True], ids=["plain", "is_deleted"])
def test_a_deleted_key_written_again_with_a_smaller_ts_reads_as_copy_on_write_writes_it(
    tmp_path: Path, index: str, version: int, deleted: bool
) -> None:
    """Upsert a at ts 9, delete() it, upsert a at ts 8. A plain row read as the old
    (9, v1) in both readers, also after compact(), where copy-on-write gives (8, v2); a
    `_hoodie_is_deleted` row read as (9, v1) in ours and as nothing in Hudi's. The key is gone
    from its slice, so the row is an insert: into another file group (the bucket index, which
    cannot move a key, rewrites the slice) or, a delete, nothing. Compacting between the delete
    and the row gives the same; so do the other indexes."""
    options = {"hoodie.index.type": index, "hoodie.bucket.index.num.buckets": 2}
    writes = [("upsert", row("a", 9, 1.0, "p1")), ("upsert", row("b", 1, 1.0, "p1")),
              ("delete", pa.table({"id": ["a"], "p": ["p1"]})), ("upsert", row("a", 8, 2.0, "p1", deleted))]
    expected = {} if deleted else {"a": {"id": "a", "ts": 8, "v": 2.0, "p": "p1"}}
    expected["b"] = {"id": "b", "ts": 1, "v": 1.0, "p": "p1"}
    assert side_by_side(tmp_path / "a", version, writes, **options) == expected
    assert side_by_side(tmp_path / "b", version, writes, compact_after=(2,), **options) == expected
    # a delete with an ordering value above the late row's: the same
    writes[2] = ("upsert", row("a", 10, 0.0, "p1", True))
    assert side_by_side(tmp_path / "c", version, writes, **options) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_plain_deletes_and_deletes_with_an_ordering_value_go_to_blocks_of_their_own(
    tmp_path: Path, version: int
) -> None:
    """One write that deletes a key for good (here: a global index moves it out of its file
    group) and another by a `_hoodie_is_deleted` row in the same group: one delete block holding
    both Hudi's IntWrapper(0) and a LongWrapper is refused by hudi-rs ("Delete block mixes
    ordering types"), so each kind gets a block (found by the random merge-on-read sequences)."""
    path = tmp_path / "t"
    table = mor_table(path, version, **{"hoodie.index.type": "GLOBAL_SIMPLE"})
    table.upsert(pa.concat_tables([row("a", 1, 1.0, "p1"), row("b", 1, 1.0, "p1"), row("c", 1, 1.0, "p1")]))
    table.upsert(pa.concat_tables([row("a", 2, 2.0, "p0"), row("b", 2, 2.0, "p1", True)]))
    (log,) = logs_of(path)
    blocks = read_blocks(log.read_bytes())
    assert [(type(b).__name__, b.keys.column("natural_order").to_pylist()) for b in blocks] == [
        ("DeleteBlock", [True]), ("DeleteBlock", [False])]
    expected = {"a": {"id": "a", "ts": 2, "v": 2.0, "p": "p0"}, "c": {"id": "c", "ts": 1, "v": 1.0, "p": "p1"}}
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)


# -- rollback ------------------------------------------------------------------------------


def fail_a_write(table, data: pa.Table) -> str:
    """A write whose files are all on storage but whose commit never happens (the writer died)."""
    client = table.write_client()
    instant = client.start_commit()
    client.upsert(data, instant)
    return instant


@pytest.mark.parametrize("version", VERSIONS)
def test_a_failed_deltacommit_rolls_back_as_hudi_does(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table = mor_table(path, version)
    table.upsert(batch(list(range(9)), [1] * 9, 1))
    table.upsert(batch([1, 2], [2, 2], 2))
    before = snapshot(table)
    logs_before = logs_of(path)
    failed = fail_a_write(table, batch([1, 5, 100], [9, 9, 9], 3))  # appends to two groups, an insert
    written = set(logs_of(path)) - set(logs_before)
    assert len(written) == 2
    assert snapshot(table) == before == hudi_snapshot(path)  # pending: invisible
    table.upsert(batch([6], [3], 4))  # starts by rolling the failed write back
    before["k0006"] = batch([6], [3], 4).to_pylist()[0]
    rollbacks = [i for i in table.timeline() if i.action.value == "rollback"]
    assert len(rollbacks) == 1 and rollbacks[0].is_completed
    assert not [i for i in table.timeline() if i.time == failed]
    assert not [p for p in path.rglob("*.parquet") if failed in p.name]  # the insert's base file went
    now = set(logs_of(path))
    if version == 6:
        assert written <= now  # kept, voided by a rollback block in a new log version of each slice
        blocks = [read_blocks(p.read_bytes()) for p in now - written - set(logs_before)]
        commands = [b for bs in blocks for b in bs if isinstance(b, CommandBlock)]
        assert sorted((c.instant, c.target_instant) for c in commands) == [(rollbacks[0].time, failed)] * 2
    else:
        assert not written & now  # deleted
    assert snapshot(table) == before == hudi_snapshot(path)
    check_reads(table, path, windows=False)  # incremental: see the report (hudi-rs skips the base)


@pytest.mark.parametrize("version", VERSIONS)
def test_kill_9_during_a_deltacommit_leaves_the_table_readable(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=False, **{"hoodie.parquet.small.file.limit": 0})
    table.bulk_insert(batch(list(range(3000)), [1] * 3000, 1))
    expected = snapshot(table)
    script = f"""
import sys, time, pyarrow as pa
sys.path.insert(0, {str(TESTS)!r})
from upsertlake import open_table
import upsertlake.engine.append_handle as ah
from mor_tables import batch
real = ah.append_blocks
def slow(blocks):
    out = real(blocks)
    print("appending", flush=True)
    time.sleep(60)
    return out
ah.append_blocks = slow
t = open_table({str(path)!r}, {{"hoodie.client.heartbeat.interval_in_ms": 200}})
t.upsert(batch(list(range(0, 3000, 7)), [2] * 429, 2))
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stdout.readline().strip() == "appending"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)
    table = open_table(path, {"hoodie.client.heartbeat.interval_in_ms": 200})  # waits for its expiry
    table.upsert(batch([1, 2], [3, 3], 3))
    expected.update({r["id"]: r for r in batch([1, 2], [3, 3], 3).to_pylist()})
    assert snapshot(table) == expected == hudi_snapshot(path)
    assert [i.action.value for i in table.timeline()] == ["deltacommit", "rollback", "deltacommit"]


# -- optimistic concurrency ----------------------------------------------------------------


def two_writers(path: Path, version: int) -> tuple:
    """An unpartitioned table of keys 0-9, and two OCC write clients, each with a started write."""
    occ = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}
    table = mor_table(path, version, partitioned=False)
    table.upsert(batch(list(range(10)), [1] * 10, 1))
    a, b = open_table(path, occ).write_client(), open_table(path, occ).write_client()
    return table, a, b, a.start_commit(), b.start_commit()


@pytest.mark.parametrize("version", VERSIONS)
def test_concurrent_appends_conflict_per_record(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table, a, b, ta, tb = two_writers(path, version)
    ra = a.upsert(batch([1, 2], [2, 2], 2), ta)
    rb = b.upsert(batch([3], [2], 3), tb)  # the same file group, another record: both stand
    a.commit(ta, ra)
    b.commit(tb, rb)
    expected = {r["id"]: r for r in batch(list(range(10)), [1] * 10, 1).to_pylist()}
    expected.update({r["id"]: r for r in batch([1, 2], [2, 2], 2).to_pylist() + batch([3], [2], 3).to_pylist()})
    assert snapshot(table) == expected == hudi_snapshot(path)
    tc, td = a.start_commit(), b.start_commit()
    rc = a.upsert(batch([4], [5], 4), tc)
    rd = b.upsert(batch([4, 5], [6, 6], 5), td)  # the same record: the later commit fails
    a.commit(tc, rc)
    with pytest.raises(WriteConflictError, match="both wrote the record key\\(s\\) k0004"):
        b.commit(td, rd)
    expected.update({r["id"]: r for r in batch([4], [5], 4).to_pylist()})
    assert snapshot(table) == expected == hudi_snapshot(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_append_whose_log_name_a_concurrent_writer_took_rolls_over_to_the_next_version(
    tmp_path: Path, version: int
) -> None:
    """Two writers plan appends to one slice before either writes. On version 6 a log is named by
    the slice's base instant, so both plan the same next version under the same write token:
    the second to write takes the version after (Hudi's log writer rolls over too), where it
    failed with "another write took its name" (found by `upsertlake simulate --table-type
    MERGE_ON_READ`). On version 8 each is named by its own deltacommit. Both commit."""
    path = tmp_path / "t"
    table, a, b, ta, tb = two_writers(path, version)
    planned = b.plan("upsert", batch([3], [2], 3))  # before a's log file exists
    a.commit(ta, a.upsert(batch([1, 2], [2, 2], 2), ta))
    statuses = b._write_buckets(planned, b.begin_write(tb, planned), None)
    b.commit(tb, b.write_result(tb, planned, statuses, {}))

    names = sorted(
        (n.instant, n.version, n.write_token) for n in map(LogFileName.parse, (p.name for p in logs_of(path)))
    )
    base = {p.name.rpartition("_")[2].removesuffix(".parquet") for p in path.glob("*.parquet")}
    assert names == (
        [(*base, 1, "0-1-0"), (*base, 2, "0-1-0")] if version == 6 else [(ta, 1, "0-1-0"), (tb, 1, "0-1-0")]
    )
    assert [s.stat.logVersion for s in statuses] == [2 if version == 6 else 1]
    assert not (path / ".hoodie" / ".temp").exists() or not any((path / ".hoodie" / ".temp").iterdir())
    expected = {r["id"]: r for r in batch(list(range(10)), [1] * 10, 1).to_pylist()}
    expected.update({r["id"]: r for r in batch([1, 2], [2, 2], 2).to_pylist() + batch([3], [2], 3).to_pylist()})
    assert snapshot(table) == expected == hudi_snapshot(path)


def test_a_rollback_leaves_the_log_whose_planned_name_a_concurrent_writer_took(tmp_path: Path) -> None:
    """On version 6 the second writer's marker batch names the log version the first took. Its
    reconciliation leaves that log alone, and its rollback (Hudi 0.14's: a rollback command block
    in the slice's next log file, its own log left in place) voids its blocks alone; the first
    writer's log stays whole."""
    path = tmp_path / "t"
    table, a, b, ta, tb = two_writers(path, 6)
    planned = b.plan("upsert", batch([3], [2], 3))
    a.commit(ta, a.upsert(batch([1, 2], [2, 2], 2), ta))
    statuses = b._write_buckets(planned, b.begin_write(tb, planned), None)
    assert sorted(n.version for n in map(LogFileName.parse, (p.name for p in logs_of(path)))) == [1, 2]
    first = {p.name: p.read_bytes() for p in logs_of(path)}
    # A commit's reconciliation (Spark's, a retry's) deletes marked files the write does not
    # report, but not a log whose planned name the other writer took.
    assert reconcile_markers(Storage(path), tb, [s.stat.path for s in statuses]) == []
    b.rollback(tb)
    logs = {p.name: p.read_bytes() for p in logs_of(path)}
    assert sorted(LogFileName.parse(n).version for n in logs) == [1, 2, 3]  # one rollback block
    assert {n: logs[n] for n in first} == first
    expected = {r["id"]: r for r in batch(list(range(10)), [1] * 10, 1).to_pylist()}
    expected.update({r["id"]: r for r in batch([1, 2], [2, 2], 2).to_pylist()})
    assert snapshot(table) == expected == hudi_snapshot(path)


WRITE_THEN_DIE = """
import os, sys
sys.path.insert(0, {tests!r})
from upsertlake import open_table
from mor_tables import batch
client = open_table({path!r}, {options!r}).write_client()
instant = client.start_commit()
client.upsert(batch([1, 2], [5, 5], 5), instant)  # appended, never committed
os._exit(0)
"""
ROLLBACK_THEN_DIE = """
import os, signal, sys
import upsertlake.services.rollback as rollback
from upsertlake import open_table
from upsertlake.timeline.instant import State
real = rollback.transition
def transition(storage, instant, state, *args, **kwargs):
    if instant.action.value == "rollback" and state is State.{state}:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(storage, instant, state, *args, **kwargs)
rollback.transition = transition
open_table({path!r}, {options!r}).write_client().rollback_failed_writes()
"""


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dies_before", ["INFLIGHT", "COMPLETED"])
def test_a_rollback_killed_midway_is_finished_by_the_next_writer(
    tmp_path: Path, version: int, dies_before: str
) -> None:
    """A process rolling back a failed deltacommit is killed with its `.rollback` pending: before
    undoing anything (the next rollback of that write runs under the same instant, as Hudi
    reuses a pending rollback), or after undoing it all (the pending rollback, with nothing left
    to do, goes). Either way nothing stays pending; it stayed forever (found by the simulator)."""
    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=False)
    table.upsert(batch(list(range(10)), [1] * 10, 1))
    expected = snapshot(table)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    write = WRITE_THEN_DIE.format(tests=str(TESTS), path=str(path), options=FAST_HEARTBEAT)
    subprocess.run([sys.executable, "-c", write], env=env, check=True, timeout=120)
    [failed] = [i for i in open_table(path).timeline() if not i.is_completed]
    time.sleep(0.3)  # its heartbeat expires
    kill = ROLLBACK_THEN_DIE.format(state=dies_before, path=str(path), options=FAST_HEARTBEAT)
    assert subprocess.run([sys.executable, "-c", kill], env=env, timeout=120).returncode == -signal.SIGKILL
    [dead] = [i for i in open_table(path).timeline() if i.action.value == "rollback"]
    assert not dead.is_completed

    open_table(path, FAST_HEARTBEAT).write_client().rollback_failed_writes()
    timeline = open_table(path).timeline()
    assert all(i.is_completed for i in timeline) and failed.time not in {i.time for i in timeline}
    rollbacks = [i.time for i in timeline if i.action.value == "rollback"]
    assert rollbacks == ([dead.time] if dies_before == "INFLIGHT" else [])
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)


def test_a_pending_rollback_with_an_unreadable_plan_is_left_as_it_is(tmp_path: Path) -> None:
    """Older Hudi wrote empty `.rollback.requested` files: such a rollback is neither run again
    nor removed, and writes go on."""
    path = tmp_path / "t"
    table = mor_table(path, 6, partitioned=False)
    table.upsert(batch(list(range(5)), [1] * 5, 1))
    (path / ".hoodie" / "20200101000000000.rollback.requested").write_bytes(b"")
    table.upsert(batch([1], [2], 2))
    assert [(i.time, i.state.value) for i in open_table(path).timeline() if i.action.value == "rollback"] == [
        ("20200101000000000", "requested")
    ]
    assert snapshot(open_table(path))["k0001"]["ts"] == 2


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("compactor", ["planned only", "killed"])
def test_a_key_deleted_in_a_slice_a_pending_compaction_folds_is_inserted_elsewhere(
    tmp_path: Path, version: int, compactor: str
) -> None:
    """A key deleted in a log, then a compaction planned (it will drop the key)
    that nobody runs (scheduled only, or its compactor killed: its heartbeat expires), then the key
    written again. That write used to fail with a conflict until someone ran `compact()`, every
    time. Its slice's logs deleted it, so it is an insert: it goes to a new file group, not as an
    append to the slice the compaction starts, where its only copy would sit in a log no index
    reads and the next write of the key would insert a second copy (found by `upsertlake
    simulate --table-type MERGE_ON_READ`). It is stored once, before and after the compaction."""
    from upsertlake.services.compaction_plan import schedule

    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=False, **FAST_HEARTBEAT)
    table.upsert(batch(list(range(10)), [1] * 10, 1))
    table.delete(batch([3], [2], 2).select(["id", "p"]))
    before = snapshot(table)
    assert "k0003" not in before
    if compactor == "killed":
        kill_mid_compaction(path, FAST_HEARTBEAT)
        [plan] = [i for i in open_table(path).timeline() if i.action.value == "compaction"]
        assert plan.state.value == "inflight"
        time.sleep(0.3)  # its heartbeat expires
    else:
        plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    assert snapshot(open_table(path)) == before == hudi_snapshot(path)

    result = open_table(path, FAST_HEARTBEAT).upsert(batch([3, 4], [5, 5], 3))
    assert (result.num_inserts, result.num_updates) == (1, 1)
    expected = {**before, **{r["id"]: r for r in batch([3, 4], [5, 5], 3).to_pylist()}}
    assert snapshot(open_table(path)) == expected  # snapshot() fails on a key read twice
    if version == 8:  # hudi-rs leaves a v6 slice a pending plan starts out until the plan completes
        assert hudi_snapshot(path) == expected
    assert open_table(path, FAST_HEARTBEAT).compact().instant_time == plan.time
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)
    table = open_table(path)
    table.upsert(batch([3], [6], 4))
    expected.update({r["id"]: r for r in batch([3], [6], 4).to_pylist()})
    assert snapshot(table) == expected == hudi_snapshot(path)
    table.compact()
    assert snapshot(open_table(path), query_type="read_optimized") == expected == hudi_snapshot(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_append_to_a_group_a_later_compaction_left_alone_commits(tmp_path: Path, version: int) -> None:
    """A compaction newer than an append's slice that did not compact its group (no logs there)
    has nothing to say about its keys (a first version of the check failed such writes)."""
    path = tmp_path / "t"
    table = mor_table(path, version)
    table.upsert(batch(list(range(10)), [1] * 10, 1))
    table.upsert(batch([0], [2], 2))  # a log in p0's group only
    assert len(table.compact().files_written) == 1
    table.upsert(batch([1, 2], [3, 3], 3))  # p1 and p2: their slices are older than the compaction
    expected = {r["id"]: r for r in batch(list(range(10)), [1] * 10, 1).to_pylist()}
    expected.update({r["id"]: r for r in batch([0], [2], 2).to_pylist() + batch([1, 2], [3, 3], 3).to_pylist()})
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)


def test_v8_a_deleted_key_written_beside_a_plan_is_inserted_elsewhere(tmp_path: Path) -> None:
    """Version 8 places a log by its deltacommit's completion. A key deleted in a slice, written
    again by a write in flight while a compaction is scheduled: the write found it deleted and
    inserted it in a new file group, and the plan leaves out the group the write declared (a
    write tagging as the plan is made is done again after it: see
    test_a_deleted_key_written_while_a_plan_is_made_is_inserted_and_its_update_done_again). The
    write commits, and the key is stored once (a duplicate on the next write before, found by the
    simulator)."""
    from upsertlake.services.compaction_plan import schedule

    path = tmp_path / "t"
    table = mor_table(path, 8, partitioned=False)
    table.upsert(batch(list(range(10)), [1] * 10, 1))
    table.delete(batch([3], [2], 2).select(["id", "p"]))
    b = open_table(path, {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}).write_client()
    tb = b.start_commit()
    written = b.upsert(batch([3, 4], [5, 5], 3), tb)  # planned against the slice with the delete
    assert (written.num_inserts, written.num_updates) == (1, 1)
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    assert plan is None  # the write in flight declared its one group
    b.commit(tb, written)
    expected = {**snapshot(table), **{r["id"]: r for r in batch([3, 4], [5, 5], 3).to_pylist()}}
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)
    open_table(path).compact()
    table = open_table(path)
    table.upsert(batch([3], [6], 4))
    expected.update({r["id"]: r for r in batch([3], [6], 4).to_pylist()})
    assert snapshot(table) == expected == hudi_snapshot(path)


def write_while_a_compaction_is_planned(table, data: pa.Table, monkeypatch: pytest.MonkeyPatch):
    """`table.upsert(data)` in a thread that stops after it has read the timeline, before it tags
    (it has said nothing yet of the file groups it will write); meanwhile a compaction is planned.
    Returns (the write's result, its first instant, the plan)."""
    import threading

    import upsertlake.engine.planner as planner
    from upsertlake.services.compaction_plan import schedule

    tagging, go = threading.Event(), threading.Event()
    real_tag = planner.tag

    def tag_after_the_plan(*args, **kwargs):
        if not tagging.is_set():
            tagging.set()
            assert go.wait(60)
        return real_tag(*args, **kwargs)

    monkeypatch.setattr(planner, "tag", tag_after_the_plan)
    out: dict[str, object] = {}

    def write() -> None:
        try:
            out["result"] = table.upsert(data)
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert tagging.wait(60)
        [first] = [i.time for i in open_table(table.storage.base).timeline() if not i.is_completed]
        other = open_table(table.storage.base)
        plan = schedule(other.storage, other.write_client().context.lock, other.table_config, other.options)
    finally:
        go.set()
        thread.join(120)
    if "error" in out:
        raise out["error"]
    return out["result"], first, plan


@pytest.mark.parametrize("version", VERSIONS)
def test_a_write_whose_slices_a_later_plan_took_is_done_again_after_it(
    tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction is planned while a write tags (it has declared no file
    group yet, so the plan is not held back: version 6 used to refuse to schedule). Committed as it
    was, the write would be lost (version 6: its log, named by the old slice, falls out of the
    one the compaction starts) or misplaced (version 8: its log, completing after the plan, joins
    the new slice, so time travel to its own instant missed it once the compaction ran). It is
    done again under an instant after the plan's: every read, as of every instant, is the model's,
    in both readers, before and after the compaction runs."""
    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=False)
    first = table.upsert(batch(list(range(6)), [1] * 6, 1)).instant_time
    second = table.upsert(batch([0, 1], [2, 2], 2)).instant_time  # a log: the slice has something to compact
    done, attempt, plan = write_while_a_compaction_is_planned(open_table(path), batch([1, 2], [3, 3], 3), monkeypatch)
    assert plan is not None and attempt < plan.time < done.instant_time and done.overtaken == 1

    model = {first: {r["id"]: r for r in batch(list(range(6)), [1] * 6, 1).to_pylist()}}
    model[second] = {**model[first], **{r["id"]: r for r in batch([0, 1], [2, 2], 2).to_pylist()}}
    model[done.instant_time] = {**model[second], **{r["id"]: r for r in batch([1, 2], [3, 3], 3).to_pylist()}}
    model[attempt] = model[plan.time] = model[second]  # the first attempt is gone; the plan writes no record
    for compacted in (False, True):
        if compacted:
            assert open_table(path).compact().instant_time == plan.time
        # hudi-rs leaves out a version 6 log named by a pending plan until it completes (see
        # test_appends_respect_a_pending_compaction_plan): Hudi's reader is compared where it reads it.
        hudi = version == 8 or compacted
        for instant, expected in sorted(model.items()):
            assert snapshot(open_table(path), as_of=instant) == expected, instant
            assert not hudi or hudi_snapshot(path, as_of=instant) == expected, instant
        assert snapshot(open_table(path)) == model[done.instant_time]
        assert not hudi or hudi_snapshot(path) == model[done.instant_time]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_deleted_key_written_while_a_plan_is_made_is_inserted_and_its_update_done_again(
    tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key deleted in a log; a write of it (and of a live key) tags while a compaction is planned
    that will drop it. The deleted key is an insert (its slice's logs delete it), stored once; the
    live key's append, named by the slice the plan folds, is done again after the plan."""
    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=False)
    table.upsert(batch(list(range(10)), [1] * 10, 1))
    table.delete(batch([3], [2], 2).select(["id", "p"]))
    before = snapshot(table)
    done, _, plan = write_while_a_compaction_is_planned(open_table(path), batch([3, 4], [5, 5], 3), monkeypatch)
    # Tagged after the plan, the deleted key is an insert; the update of k0004, appended to the
    # slice the write planned against, is done again after the plan.
    assert plan is not None and done.overtaken == 1 and done.instant_time > plan.time
    expected = {**before, **{r["id"]: r for r in batch([3, 4], [5, 5], 3).to_pylist()}}
    assert snapshot(open_table(path)) == expected
    assert open_table(path).compact().instant_time == plan.time
    open_table(path).upsert(batch([3], [6], 4))
    expected.update({r["id"]: r for r in batch([3], [6], 4).to_pylist()})
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_bucket_slice_rewritten_while_a_compaction_is_scheduled_is_kept(tmp_path: Path, version: int) -> None:
    """Under the bucket index a deleted key written again rewrites its bucket's slice (a base
    file). A compaction planned meanwhile would fold the slice before it under a later instant:
    its base file would hide the rewrite, and the key would be lost. The plan leaves out the
    group the write in flight declared, so the write commits (a write still tagging when the
    plan is made is done again after it: `engine.overtaken`)."""
    from upsertlake.services.compaction_plan import schedule

    path = tmp_path / "t"
    options = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 1}
    table = mor_table(path, version, partitioned=False, **options)
    table.upsert(batch([1, 2], [9, 1], 1))
    table.delete(batch([1], [0], 2))
    writer = open_table(path, {"hoodie.write.concurrency.mode": "optimistic_concurrency_control", **options})
    client = writer.write_client()
    instant = client.start_commit()
    written = client.upsert(batch([1], [8], 3), instant)
    assert [f.endswith(".parquet") for f in written.files_written] == [True]  # the slice, rewritten
    plan = schedule(table.storage, table.write_client().context.lock, table.table_config, table.options)
    expected = {r["id"]: r for r in batch([2], [1], 1).to_pylist() + batch([1], [8], 3).to_pylist()}
    assert plan is None
    client.commit(instant, written)
    assert snapshot(open_table(path)) == expected == hudi_snapshot(path)
    open_table(path, options).compact()
    assert snapshot(open_table(path), query_type="read_optimized") == expected == hudi_snapshot(path)


# -- Hudi's tables -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mor_v6_trips_8i1u", "mor_v8_trips_8i3u1d", "mor_v6_nonpartitioned"])
def test_upserts_into_hudi_written_mor_tables_read_the_same_in_both_readers(tmp_path: Path, name: str) -> None:
    path = unzip_mor_table(name, tmp_path)
    table = open_table(path)
    data = table.read()
    key = table.table_config.record_key_fields[0]
    change = data.slice(0, 2).drop_columns([c for c in data.column_names if c.startswith("_hoodie")])
    if table.table_config.precombine_field:
        pc_field = table.table_config.precombine_field
        change = change.set_column(
            change.schema.get_field_index(pc_field),
            pc_field,
            pa.array([v + 1 for v in change.column(pc_field).to_pylist()], change.schema.field(pc_field).type),
        )
    before_logs = set(logs_of(path))
    result = table.upsert(change)
    assert result.num_updates == 2
    assert set(logs_of(path)) > before_logs
    table.delete(change.slice(0, 1))
    ours = open_table(path).read()
    assert sorted(ours.column(key).to_pylist()) == sorted(data.column(key).to_pylist()[1:])
    check_reads(open_table(path), path, windows=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_rolling_back_the_latest_deltacommit(tmp_path: Path, version: int) -> None:
    """Table.rollback() of a completed deltacommit: its appends are voided (v6: a rollback block;
    v8: its log files deleted), its new base files deleted; both readers read the table before it."""
    path = tmp_path / "t"
    table = mor_table(path, version)
    table.upsert(batch(list(range(9)), [1] * 9, 1))
    table.upsert(batch([1], [2], 2))
    before = snapshot(table)
    last = table.upsert(batch([1, 2, 200], [5, 5, 5], 3))
    table.rollback()
    assert snapshot(table) == before == hudi_snapshot(path)
    assert not [f for f in last.files_written if (path / f).exists() and f.endswith(".parquet")]
    assert all((path / f).exists() == (version == 6) for f in last.files_written if ".log." in f)
    table.upsert(batch([2], [7], 4))
    before["k0002"] = batch([2], [7], 4).to_pylist()[0]
    assert snapshot(table) == before == hudi_snapshot(path)


@pytest.mark.spark
@pytest.mark.parametrize("version", VERSIONS)
def test_spark_upserts_and_deletes_on_a_mor_table_as_in_process(spark, tmp_path: Path, version: int) -> None:
    """The distributed write appends log files in tasks (one per file group): the same table as
    the in-process write of the same batches, read the same by Hudi's reader."""
    import shutil

    import upsertlake.spark as uls

    local = tmp_path / "local"
    table = mor_table(local, version, **{"hoodie.parquet.small.file.limit": 0})
    table.bulk_insert(batch(list(range(40)), [1] * 40, 1))
    shutil.copytree(local, tmp_path / "spark")
    distributed = tmp_path / "spark"
    updates = batch([*list(range(0, 40, 3)), 50, 51], [2] * 16, 2)
    deletes = batch([1, 4, 7], [0] * 3, 3)
    table.upsert(updates)
    table.delete(deletes)
    uls.upsert(spark.createDataFrame(updates.to_pandas()), str(distributed))
    uls.delete(spark.createDataFrame(deletes.to_pandas()), str(distributed))
    assert any(".log." in p.name for p in distributed.rglob("*"))
    assert [i.action.value for i in open_table(distributed).timeline()] == ["deltacommit"] * 3
    assert snapshot(open_table(distributed)) == snapshot(table) == hudi_snapshot(distributed)


@pytest.mark.spark
@pytest.mark.parametrize(("index", "small_batch_bytes"), [("SIMPLE", None), ("SIMPLE", 0), ("GLOBAL_SIMPLE", None),
                                                          ("GLOBAL_BLOOM", None)])
def test_spark_writes_find_only_keys_their_slices_hold(
    spark, tmp_path: Path, index: str, small_batch_bytes: int | None
) -> None:
    """Keys moved away and back, and deleted then written late, on Spark, where tasks tag (a small
    batch in one task with the in-process index, else the distributed lookup, whose tasks read a
    slice with log files merged; a global index always looks up so): a key deleted in its slice's
    logs and written again with a smaller ts reads as copy-on-write writes it; a global index
    moves a key away and back leaving one copy, and a key whose log raised its ts stays where it
    is; in both readers, before and after compaction."""
    import upsertlake.spark as uls

    options = {"hoodie.index.type": index, "hoodie.write.table.version": 8,
               **({} if small_batch_bytes is None else {"upsertlake.small.batch.bytes": small_batch_bytes})}
    writes = [("upsert", pa.concat_tables([row("a", 9, 1.0, "p1"), row("b", 1, 1.0, "p1"), row("c", 1, 1.0, "p1")])),
              ("delete", pa.table({"id": ["a"], "p": ["p1"]})),
              ("upsert", pa.concat_tables([row("a", 8, 2.0, "p1"), row("b", 5, 5.0, "p1"), row("c", 2, 2.0, "p0")])),
              ("upsert", pa.concat_tables([row("c", 3, 3.0, "p1"), row("b", 4, 4.0, "p0")]))]
    cow = create_table(tmp_path / "cow", "t", record_key="id", precombine_field="ts", partition_fields="p",
                       options={"hoodie.index.type": index})
    path = tmp_path / "mor"
    create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", table_type="MERGE_ON_READ",
                 options={"hoodie.write.table.version": 8})
    for method, data in writes:
        getattr(cow, method)(data)
        getattr(uls, method)(spark.createDataFrame(data.to_pandas()), str(path), **options)
    def rows(table: pa.Table) -> list[tuple]:
        return sorted(tuple(r.values()) for r in table.select(COLUMNS).to_pylist())

    expected = rows(open_table(tmp_path / "cow").read())
    moved = [("a", 8, 2.0, "p1"), ("b", 5, 5.0, "p1"), ("c", 3, 3.0, "p1")]  # one copy of each
    kept_apart = [("b", 4, 4.0, "p0"), ("c", 2, 2.0, "p0")]  # a partition's own key, without a global index
    assert expected == (moved if index.startswith("GLOBAL") else sorted(moved + kept_apart))
    assert rows(open_table(path).read()) == expected == rows(hudi_read(path))
    open_table(path).compact()
    assert rows(open_table(path).read(query_type="read_optimized")) == expected == rows(hudi_read(path))


def schedule_compaction(path: Path, version: int, groups: list[tuple[str, str]]) -> str:
    """A pending compaction plan (`.compaction.requested`, Hudi's Avro HoodieCompactionPlan)
    covering `groups`, written without running the compaction; returns its instant."""
    from upsertlake.services.compaction_plan import PLAN_SCHEMA, PLAN_VERSION, CompactionOperation
    from upsertlake.timeline import documents
    from upsertlake.timeline.instant_time import now_instant_time

    operations = [CompactionOperation(partition, file_id, "", None, ()).to_avro() for partition, file_id in groups]
    plan = {"operations": operations, "extraMetadata": {}, "version": PLAN_VERSION, "strategy": None,
            "preserveHoodieMetadata": True, "missingSchedulePartitions": []}
    instant = now_instant_time()
    (timeline_dir(path) / f"{instant}.compaction.requested").write_bytes(documents.encode(PLAN_SCHEMA, plan))
    return instant


@pytest.mark.parametrize("version", VERSIONS)
def test_appends_respect_a_pending_compaction_plan(tmp_path: Path, version: int) -> None:
    """Version 6 names the logs of a group under a pending compaction by the plan's instant (the
    slice the compaction starts); version 8 names them by the deltacommit either way."""
    path = tmp_path / "t"
    table = mor_table(path, version, partitioned=False)
    first = table.upsert(batch(list(range(6)), [1] * 6, 1))
    table.upsert(batch([1], [2], 2))
    file_id = first.files_written[0].split("_")[0]
    planned = schedule_compaction(path, version, [("", file_id)])
    later = table.upsert(batch([2], [3], 3))
    (name,) = [LogFileName.parse(Path(f).name) for f in later.files_written]
    assert (name.instant, name.version) == ((planned, 1) if version == 6 else (later.instant_time, 1))
    expected = {r["id"]: r for r in batch(list(range(6)), [1] * 6, 1).to_pylist()}
    expected.update({r["id"]: r for r in batch([1], [2], 2).to_pylist() + batch([2], [3], 3).to_pylist()})
    assert snapshot(table) == expected
    if version == 8:
        assert hudi_snapshot(path) == expected
    else:  # hudi-rs leaves out a version 6 slice started by a pending compaction until it completes
        assert hudi_snapshot(path)["k0002"]["ts"] == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_overwrites_on_a_mor_table_are_replacecommits(tmp_path: Path, version: int) -> None:
    """insert_overwrite and delete_partitions retire whole file groups, their log files with them."""
    path = tmp_path / "t"
    table = mor_table(path, version)
    table.upsert(batch(list(range(9)), [1] * 9, 1))
    table.upsert(batch([0, 1, 2], [2, 2, 2], 2))  # a log file in each partition
    table.insert_overwrite(batch([30, 33], [1, 1], 3))  # p0: only these two now
    table.delete_partitions(["p1"])
    actions = [i.action.value for i in table.timeline() if i.is_completed]
    assert actions == ["deltacommit", "deltacommit", "replacecommit", "replacecommit"]
    expected = {r["id"]: r for r in batch([30, 33], [1, 1], 3).to_pylist()}
    expected.update({r["id"]: r for r in batch([5, 8], [1, 1], 1).to_pylist() + batch([2], [2], 2).to_pylist()})
    assert snapshot(table) == expected == hudi_snapshot(path)


@pytest.mark.parametrize("index", ["INMEMORY", "SIMPLE", "BLOOM"])
def test_a_key_deleted_in_a_log_comes_back_in_another_file_group(tmp_path: Path, index: str) -> None:
    """Indexes read base files, where a key deleted by a log block stays; that copy is gone from
    its merged slice, so the key written again is an insert (every index alike), into a new file
    group: appended after the delete, a smaller ordering value than the base row's would let the
    base row win again. The next write of the key finds the new copy only (any index), and no
    reader sees the key twice, before or after compaction."""
    path = tmp_path / "t"
    table = mor_table(path, 6, partitioned=False, **{"hoodie.index.type": index, "hoodie.parquet.small.file.limit": 0})
    table.upsert(batch(list(range(5)), [1] * 5, 1))
    table.delete(batch([2], [0], 2))
    again = table.upsert(batch([2], [0], 3))
    assert again.num_updates == 0 and again.num_inserts == 1 and len(list(path.glob("*.parquet"))) == 2
    fresh = open_table(path, {"hoodie.index.type": "SIMPLE"})
    assert fresh.upsert(batch([2], [4], 4)).num_updates == 1
    assert len(list(path.glob("*.parquet"))) == 2
    assert snapshot(fresh)["k0002"]["ts"] == 4 == hudi_snapshot(path)["k0002"]["ts"]
    fresh.compact()
    compacted = snapshot(open_table(path), query_type="read_optimized")
    assert compacted["k0002"]["ts"] == 4 == hudi_snapshot(path)["k0002"]["ts"]


class CountingReads(Storage):
    """A table's storage on the local file system that counts the whole-file reads of each path."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads: dict[str, int] = {}

    def read_bytes(self, rel: str) -> bytes:
        self.reads[rel] = self.reads.get(rel, 0) + 1
        return super().read_bytes(rel)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stream_of_writes_reads_each_log_file_once_for_its_deletes(tmp_path: Path, version: int) -> None:
    """Tagging asks every slice with log files which keys its logs delete; what a log file says
    is kept by the table's storage, so a stream of upserts through one open table reads each log
    file once, however many writes follow it; a delete appended among them still counts (its key
    comes back in another file group), and a table opened anew reads the logs again."""
    from helpers import table_on

    path = tmp_path / "t"
    mor_table(path, version, partitioned=False, **{"hoodie.parquet.small.file.limit": 0})
    storage = CountingReads(path)
    table = table_on(storage)
    table.upsert(batch(list(range(20)), [1] * 20, 1))
    for n in range(2, 7):
        table.upsert(batch(list(range(0, 20, n)), [n] * len(range(0, 20, n)), n))
    logs = [str(p.relative_to(path)) for p in logs_of(path)]
    assert len(logs) == 5
    assert {log: storage.reads.get(log, 0) for log in logs} == {**{log: 1 for log in logs[:-1]}, logs[-1]: 0}
    table.delete(batch([3], [0], 9))
    again = table.upsert(batch([3, 4], [0, 10], 10))
    assert again.num_inserts == 1 and again.num_updates == 1  # k0003 deleted in a log: an insert elsewhere
    assert snapshot(table) == snapshot(open_table(path)) == hudi_snapshot(path)
    assert snapshot(table)["k0003"]["ts"] == 0 and snapshot(table)["k0004"]["ts"] == 10
    fresh = CountingReads(path)
    table_on(fresh).upsert(batch([5], [11], 11))
    assert all(fresh.reads.get(log) == 1 for log in logs)


@pytest.mark.parametrize("whose", ["pending", "committed"])
def test_a_v6_log_that_vanishes_while_read_is_left_out_only_when_no_commit_wrote_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whose: str
) -> None:
    """Version 6 names a log by its slice's base instant, so a read lists the logs of pending
    writes too (their blocks are skipped by instant). Such a file may be deleted while it is read
    (its write rolled back meanwhile, as a write done again after a conflict or a compaction is):
    the read goes on without it, nothing of it being visible. A committed log that vanishes still
    fails the read by name (the tag of a write beside a busy compactor failed 1 time in 3 before)."""
    from upsertlake.errors import MissingFileError
    from upsertlake.storage import storage as storage_module

    path = tmp_path / "t"
    table = mor_table(path, 6, partitioned=False)
    table.upsert(batch(list(range(5)), [1] * 5, 1))
    committed = table.upsert(batch([1], [2], 2)).files_written[0]
    expected = snapshot(open_table(path))
    client = open_table(path).write_client()
    instant = client.start_commit()
    pending = client.upsert(batch([2], [3], 3), instant).files_written[0]  # a log of the pending write
    gone = {"pending": pending, "committed": committed}[whose]
    real = storage_module.Storage.read_bytes

    def vanish_while_read(self, rel: str) -> bytes:
        if rel == gone:
            (path / rel).unlink()  # rolled back between the listing and the read
        return real(self, rel)

    monkeypatch.setattr(storage_module.Storage, "read_bytes", vanish_while_read)
    if whose == "pending":
        assert snapshot(open_table(path)) == expected
    else:
        with pytest.raises(MissingFileError, match=f"{gone.rpartition('/')[2]}.*was listed by this read but is gone"):
            open_table(path).read()
