"""Instants, instant times, timeline loading, state changes and commit metadata."""

from __future__ import annotations

import json
import multiprocessing as mp
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from upsertlake.concurrency.lock import FlockLockProvider, TableLock
from upsertlake.errors import CorruptTableError, InstantTimeError
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline, create_requested, delete_instant_files, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.instant_time import format_instant_time, next_instant_time, normalize_instant

times = st.from_regex(
    r"\A20[0-9]{2}(0[1-9]|1[0-2])(0[1-9]|1[0-9]|2[0-8])([01][0-9]|2[0-3])[0-5][0-9][0-5][0-9][0-9]{3}\Z"
)


@given(time=times, action=st.sampled_from(list(Action)), state=st.sampled_from(list(State)))
def test_instant_file_name_round_trip(time: str, action: Action, state: State) -> None:
    inst = Instant(time, action, state)
    assert Instant.from_file_name(inst.file_name()) == inst


@given(time=times, completion=times, action=st.sampled_from(list(Action)), state=st.sampled_from(list(State)),
       clustering=st.booleans())
def test_layout_2_file_name_round_trip(
    time: str, completion: str, action: Action, state: State, clustering: bool
) -> None:
    clustering = clustering and action is Action.REPLACE_COMMIT and state is not State.COMPLETED
    inst = Instant(time, action, state, completion if state is State.COMPLETED else None, clustering)
    back = Instant.from_file_name(inst.file_name(2), 2)
    assert (back, back.completion, back.clustering) == (inst, inst.completion, inst.clustering)


def test_layout_2_file_names_are_hudi_1x() -> None:
    done = Instant("20250713011316909", Action.COMMIT, State.COMPLETED, completion="20250713011317225")
    assert done.file_name(2) == "20250713011316909_20250713011317225.commit"
    assert done.with_state(State.INFLIGHT).file_name(2) == "20250713011316909.inflight"
    pending = Instant("20250713011316909", Action.REPLACE_COMMIT, State.REQUESTED, clustering=True)
    assert pending.file_name(2) == "20250713011316909.clustering.requested"
    assert pending.file_name(1) == "20250713011316909.replacecommit.requested"
    # a completed name without its completion time is not a layout 2 instant, nor the reverse
    assert Instant.from_file_name("20250713011316909.commit", 2) is None
    assert Instant.from_file_name("20250713011316909_20250713011317225.commit", 1) is None
    with pytest.raises(ValueError, match="no completion time"):
        Instant("20250713011316909", Action.COMMIT, State.COMPLETED).file_name(2)


def test_real_v8_commit_metadata_parses_and_our_avro_round_trips(hudi_table) -> None:
    tl = Timeline.load(Storage(hudi_table("v8_simplekeygen_nonhivestyle")))
    assert tl.layout.version == 2 and tl.layout.folder == ".hoodie/timeline"
    meta = tl.commit_metadata(tl.completed_writes()[-1])
    assert meta.operation_type == "UPSERT"
    assert sorted((s.partitionPath, s.numWrites, s.numUpdateWrites) for s in meta.write_stats()) == [
        ("10", 2, 1),
        ("30", 1, 0),
    ]
    from upsertlake.timeline.commit_metadata import json_to_avro

    again = CommitMetadata.from_bytes(json_to_avro(meta.to_json_bytes(), replace=False))
    assert again == meta


def test_instant_file_names_are_hudis() -> None:
    assert (
        Instant("20240418172802262", Action.COMMIT, State.REQUESTED).file_name() == "20240418172802262.commit.requested"
    )
    assert Instant("20240418172802262", Action.COMMIT, State.INFLIGHT).file_name() == "20240418172802262.inflight"
    assert Instant("20240418172802262", Action.COMMIT, State.COMPLETED).file_name() == "20240418172802262.commit"
    assert (
        Instant("20240707001303088", Action.REPLACE_COMMIT, State.INFLIGHT).file_name()
        == "20240707001303088.replacecommit.inflight"
    )
    assert Instant.from_file_name("hoodie.properties") is None
    assert Instant.from_file_name("20240418172802262.commit.inflight") is None


def test_instant_time_forms() -> None:
    assert format_instant_time(datetime(2024, 4, 18, 17, 28, 2, 262999, tzinfo=timezone.utc)) == "20240418172802262"
    assert normalize_instant("20240418172802") == "20240418172802999"
    assert normalize_instant("20240418172802262") == "20240418172802262"
    assert normalize_instant(datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)) == "20240102030405000"
    naive = datetime(2024, 1, 2, 3, 4, 5)  # local time, as datetime.now() gives it
    assert normalize_instant(naive, "LOCAL") == "20240102030405000"
    assert normalize_instant(naive, "UTC") == format_instant_time(naive.astimezone(timezone.utc))
    assert next_instant_time("20991231235959999") == "21000101000000000"
    assert normalize_instant("2024-01-02T03:04:05Z") == "20240102030405999"  # ISO to the second: the whole second
    # tests/timeline/test_time_forms.py: every form
    with pytest.raises(InstantTimeError, match="'2024-13-01' is not a time"):
        normalize_instant("2024-13-01")


def test_real_timeline_loads_most_advanced_state(hudi_table) -> None:
    root = hudi_table("v6_simplekeygen_nonhivestyle_overwritetable")
    tl = Timeline.load(Storage(root))
    assert [(i.time, i.action, i.state) for i in tl.instants] == [
        ("20240707001301554", Action.COMMIT, State.COMPLETED),
        ("20240707001302376", Action.COMMIT, State.COMPLETED),
        ("20240707001303088", Action.REPLACE_COMMIT, State.COMPLETED),
    ]
    meta = tl.commit_metadata(tl.instants[-1])
    assert meta.operation_type == "INSERT_OVERWRITE_TABLE"
    assert sorted(meta.partition_to_replace_file_ids) == ["10", "20", "30"]
    assert [s.path for s in meta.write_stats()] == [
        "30/ebcb261d-62d3-4895-90ec-5b3c9622dff4-0_0-111-154_20240707001303088.parquet"
    ]


def test_state_changes_never_overwrite(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    storage.makedirs(".hoodie")
    req = create_requested(storage, Action.COMMIT)
    inflight = transition(storage, req, State.INFLIGHT, b"{}")
    done = transition(storage, inflight, State.COMPLETED, b"{}")
    assert Timeline.load(storage).instants == (done,)
    with pytest.raises(CorruptTableError, match="already exists"):
        transition(storage, inflight, State.COMPLETED, b"{}")
    delete_instant_files(storage, done)
    assert Timeline.load(storage).instants == ()


def _request_times(base: str, n: int, out: mp.Queue) -> None:
    storage = Storage(base)
    lock = TableLock(FlockLockProvider(storage), 60000)
    times = []
    for _ in range(n):
        with lock.hold():
            times.append(create_requested(storage, Action.COMMIT).time)
    out.put(times)


def test_instant_times_unique_and_increasing_across_processes(tmp_path: Path) -> None:
    Storage(tmp_path).makedirs(".hoodie")
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_request_times, args=(str(tmp_path), 25, out)) for _ in range(4)]
    for p in procs:
        p.start()
    per_process = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    every = [t for times in per_process for t in times]
    assert len(set(every)) == 100
    for times in per_process:
        assert times == sorted(times) and len(set(times)) == 25
    assert len(Timeline.load(Storage(tmp_path)).instants) == 100


def test_commit_metadata_round_trip_and_corruption() -> None:
    stat = WriteStat(fileId="f-0", path="p/f-0_0-1-0_1.parquet", partitionPath="p", numWrites=3, numInserts=3)
    meta = CommitMetadata({"p": [stat]}, "UPSERT", {"schema": "{}"})
    doc = json.loads(meta.to_json_bytes())
    assert doc["partitionToWriteStats"]["p"][0]["fileId"] == "f-0"
    assert doc["operationType"] == "UPSERT" and doc["compacted"] is False
    assert CommitMetadata.from_bytes(meta.to_json_bytes()) == meta
    assert meta.file_groups() == {("p", "f-0")}
    with pytest.raises(CorruptTableError, match=r"bad.commit"):
        CommitMetadata.from_bytes(b"{not json", source="bad.commit")


def test_a_completed_compaction_is_its_commit_alone(tmp_path: Path, table_version: int, capsys) -> None:
    """Its `.compaction.requested`/`.inflight` stay beside the `commit` (as on Hudi's timeline), but
    `Table.timeline()` and `upsertlake timeline` list no pending instant for it, so whatever counts
    pending instants counts none; a plan not yet run is listed, requested."""
    import pyarrow as pa

    from upsertlake import create_table
    from upsertlake.services.compaction_plan import schedule

    from helpers import cli_in_process

    t = create_table(tmp_path / "t", "t", "uuid", "ts", table_type="MERGE_ON_READ")
    t.upsert(pa.table({"uuid": ["a", "b"], "ts": [1, 1]}))
    t.upsert(pa.table({"uuid": ["a"], "ts": [2]}))
    done = t.compact().instant_time
    t.upsert(pa.table({"uuid": ["b"], "ts": [3]}))
    storage = Storage(tmp_path / "t")
    listed = Timeline.load(storage)
    assert {i.state for i in listed.instants if i.time == done} == {State.INFLIGHT, State.COMPLETED}  # the files stay
    expected = [(Action.DELTA_COMMIT, State.COMPLETED)] * 2 + [
        (Action.COMMIT, State.COMPLETED), (Action.DELTA_COMMIT, State.COMPLETED),
    ]  # fmt: skip
    assert [(i.action, i.state) for i in t.timeline()] == expected
    assert t.timeline()[2].time == done
    code, out, _ = cli_in_process(capsys, "timeline", tmp_path / "t", "--json")
    assert code == 0
    assert [(r["instant"], r["action"], r["state"]) for r in json.loads(out)] == [
        (i.time, i.action.value, i.state.value) for i in t.timeline()
    ]
    plan = schedule(storage, t.write_client().context.lock, t.table_config, t.options)  # a plan not yet run is pending
    assert plan is not None
    assert [(i.time, i.action, i.state) for i in t.timeline()][-1] == (plan.time, Action.COMPACTION, State.REQUESTED)


ARCHIVE_SOON = {
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.archive.automatic": "false",
    "hoodie.clean.automatic": "false",
}


def test_a_process_sees_what_another_process_archived(tmp_path: Path) -> None:
    """A process lists `.hoodie/archived/` again only once an instant left the active timeline:
    after another process's archival, this one's reads still reach every instant (a listing kept
    too long would lose the archived ones, their commits and so their files)."""
    import subprocess
    import sys

    import pyarrow as pa

    from upsertlake import create_table

    t = create_table(tmp_path / "t", "t", "uuid", "ts", options=ARCHIVE_SOON)
    times = [t.upsert(pa.table({"uuid": [f"k{i}"], "ts": [i]})).instant_time for i in range(6)]
    seen = {time: sorted(t.read(columns=["uuid"], as_of=time).column(0).to_pylist()) for time in times}
    assert Timeline.load(Storage(tmp_path / "t")).archived == {}
    code = (
        f"from upsertlake import open_table; "
        f"print(len(open_table({str(tmp_path / 't')!r}, options={ARCHIVE_SOON!r}).archive()))"
    )
    archived = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(archived) == 4
    assert sorted(i.time for i in Timeline.load(Storage(tmp_path / "t")).archived) == times[:4]
    assert {time: sorted(t.read(columns=["uuid"], as_of=time).column(0).to_pylist()) for time in times} == seen
    assert len(t.upsert(pa.table({"uuid": ["k9"], "ts": [9]})).files_written) == 1
