"""Hunts for silent wrong answers around table services: after clean, archival, clustering,
savepoint and restore, a read as of any instant returns exactly the snapshot that instant had,
or refuses (CleanedInstantError); it never returns partial or other data.

The ground truth is each snapshot as read right after its commit, before any service ran."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake
from upsertlake import CleanedInstantError
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, State

COLUMNS = ["_hoodie_commit_time", "_hoodie_record_key", "_hoodie_file_name", "id", "ts", "v"]
NO_AUTO = {
    "hoodie.clean.automatic": "false",
    "hoodie.archive.automatic": "false",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
}


def batch(keys: range | list[int], ts: int, city: str = "sf") -> pa.Table:
    keys = list(keys)
    return pa.table({"id": [f"k{k:03d}" for k in keys], "ts": [ts] * len(keys), "city": [city] * len(keys),
                     "v": [f"{city}-{ts}-{k}" for k in keys]})  # fmt: skip


def rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.select(COLUMNS).to_pylist())


def build(path: Path) -> tuple[upsertlake.Table, dict[str, list[tuple]]]:
    """A table through upserts, inserts, a clustering and an overwrite; every snapshot recorded."""
    t = upsertlake.create_table(
        path, "t", record_key="id", precombine_field="ts", partition_fields="city", options=NO_AUTO
    )
    seen: dict[str, list[tuple]] = {}

    def note(instant: str | None) -> str:
        assert instant is not None
        seen[instant] = rows(t.read())
        return instant

    note(t.upsert(pa.concat_tables([batch(range(10), 1), batch(range(10, 20), 1, "nyc")])).instant_time)
    for ts in range(2, 5):
        note(t.upsert(batch(range(ts, ts + 4), ts)).instant_time)
    note(t.bulk_insert(batch(range(30, 33), 1, "nyc")).instant_time)  # a second nyc file group
    note(t.cluster().instant_time)  # nyc's two groups become one
    note(t.upsert(batch(range(10, 13), 5, "nyc")).instant_time)
    note(t.insert_overwrite(batch(range(40, 42), 6, "la")).instant_time)
    note(t.upsert(batch([0, 1], 7)).instant_time)
    return t, seen


def check_every_instant(t: upsertlake.Table, seen: dict[str, list[tuple]]) -> list[str]:
    """Every recorded instant reads exactly as it did, or is refused; returns the refused ones."""
    refused = []
    for instant, expected in seen.items():
        try:
            got = rows(t.read(as_of=instant))
        except CleanedInstantError:
            refused.append(instant)
            continue
        assert got == expected, f"as of {instant}"
    return refused


@pytest.mark.parametrize("policy", ["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS"])
def test_clean_then_time_travel_is_exact_or_refused(tmp_path: Path, policy: str, table_version: int) -> None:
    t, seen = build(tmp_path / "t")
    result = t.clean(policy, 2 if policy == "KEEP_LATEST_COMMITS" else 1)
    assert result.files_deleted  # something was cleaned, so some instants must be refused
    refused = check_every_instant(t, seen)
    assert refused and refused == sorted(refused) and refused == list(seen)[: len(refused)]
    assert rows(t.read()) == list(seen.values())[-1]
    t.archive()
    assert check_every_instant(t, seen) == refused


def test_savepoint_survives_clean_and_archival(tmp_path: Path, table_version: int) -> None:
    t, seen = build(tmp_path / "t")
    times = list(seen)
    sp = t.savepoint(times[2]).time  # before the clustering and the overwrite
    t.clean("KEEP_LATEST_COMMITS", 1)
    t.clean("KEEP_LATEST_FILE_VERSIONS", 1)
    assert rows(t.read(as_of=sp)) == seen[sp]
    for ts in range(8, 12):  # enough commits to archive past the savepoint's neighbours
        instant = t.upsert(batch([2, 3], ts)).instant_time
        seen[instant] = rows(t.read())
    t.clean("KEEP_LATEST_COMMITS", 1)
    archived = t.archive()
    assert archived and all(i.time < sp for i in archived)  # never past the savepoint
    assert rows(t.read(as_of=sp)) == seen[sp]
    refused = check_every_instant(t, seen)
    assert sp not in refused and times[-1] in refused
    t.restore(sp)
    assert rows(t.read()) == seen[sp]


def test_restore_after_clustering_gives_exactly_the_savepoint(tmp_path: Path, table_version: int) -> None:
    t, seen = build(tmp_path / "t")
    times = list(seen)
    before_clustering = times[4]
    t.savepoint(before_clustering)
    t.clean("KEEP_LATEST_COMMITS", 1)  # the nyc groups the clustering replaced are cleaned
    t.restore(before_clustering)
    assert rows(t.read()) == seen[before_clustering]
    assert not [i for i in t.timeline() if i.action is Action.REPLACE_COMMIT]  # clustering and overwrite undone
    # The next writes build on the restored snapshot, and inserts pack into its files again.
    t.upsert(batch(range(10, 12), 9, "nyc"))
    got = {r["id"]: r["v"] for r in t.read(columns=["id", "v"], filters=[("city", "=", "nyc")]).to_pylist()}
    expected = {r[3]: r[5] for r in seen[before_clustering] if r[3] >= "k010" and r[3] < "k040"}
    expected.update({"k010": "nyc-9-10", "k011": "nyc-9-11"})
    assert got == expected


CRASHING_CLEAN = textwrap.dedent(
    """
    import os, sys
    import upsertlake
    from upsertlake.storage import Storage

    deletes = 0
    real_delete = Storage.delete

    def delete(self, rel):
        global deletes
        real_delete(self, rel)
        if rel.endswith(".parquet"):
            deletes += 1
            if deletes == 2:
                os._exit(9)  # killed midway: the clean stays inflight, two files gone

    Storage.delete = delete
    upsertlake.open_table(sys.argv[1]).clean("KEEP_LATEST_COMMITS", 1)
    """
)


def test_a_clean_killed_midway_makes_time_travel_refuse_not_answer_partially(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t, seen = build(path)
    proc = subprocess.run([sys.executable, "-c", CRASHING_CLEAN, str(path)], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    assert [i.state for i in t.timeline() if i.action is Action.CLEAN] == [State.INFLIGHT]
    refused = check_every_instant(t, seen)
    assert refused == list(seen)[:-1]
    assert rows(t.read()) == list(seen.values())[-1]
    # the newest files the range wrote are all there: Hudi's incremental query reads them
    first = next(iter(seen))
    later = [r for r in t.read().to_pylist() if r["_hoodie_commit_time"] > first]
    assert sorted(t.read_incremental(begin=first).to_pylist(), key=str) == sorted(later, key=str)
    previous, latest = [i.time for i in t.timeline() if i.action in WRITE_ACTIONS and i.is_completed][-2:]
    with pytest.raises(CleanedInstantError) as refused:
        t.rollback()  # would expose a snapshot whose files the clean already deleted
    assert str(refused.value).startswith(
        f"commit {latest} cannot be rolled back: that would make the snapshot of commit {previous} the latest, "
        "and a clean deleted some of its files (the earliest whole snapshot is "), refused.value
    assert str(refused.value).endswith("); restore to a savepoint instead")
    # The next clean finishes the killed one first (as Hudi does); answers stay exact or refused.
    t.clean("KEEP_LATEST_COMMITS", 1)
    assert next(i.state for i in t.timeline() if i.action is Action.CLEAN) is State.COMPLETED
    assert check_every_instant(t, seen) == list(seen)[:-1]
    t.archive()  # no clean is left pending to hold archival back
    assert check_every_instant(t, seen) == list(seen)[:-1]
