"""The simulator's checks: what must hold of a table after concurrent writers, some killed.

1. every acknowledged commit is on the timeline, nothing is left pending (but a compaction plan
   a killed compactor left, until the next compaction runs it), and no data file, log file or
   marker of an uncommitted write remains;
2. a write that failed with a conflict is not visible; a killed write is visible only if it was
   killed after its commit completed;
3. the snapshot equals the serial application of the committed batches in instant order under
   event-time ordering (the largest `ts` of each key wins; on a tie the later commit) (which
   also means every acknowledged record is there unless a later commit overwrote or deleted it),
   and no key appears twice; a delete counts only if its write found the key (its key summary says
   so): a delete of a key the write did not see is nothing, also when a concurrent commit inserted it;
4. Apache Hudi's reader (the `hudi` package, when installed) returns the same snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.concurrency.key_summary import key_hashes, read_summaries
from upsertlake.logfile import LogFileName, block_keys, is_log_path, read_blocks
from upsertlake.schema.columns import COMMIT_TIME, IS_DELETED
from upsertlake.storage import Storage
from upsertlake.table.open import open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Action, State
from upsertlake.timeline.operation import COMPACT_TYPE

COLUMNS = ["id", "ts", "v", "p"]
BATCH_KEY = "upsertlake.simulate.batch"  # extraMetadata: the journaled batch a commit wrote


def _lines(journal: Path, pattern: str) -> list[str]:
    return [line for f in sorted(journal.glob(pattern)) for line in f.read_text().splitlines() if line]


def check_table(table_path: str, journal: Path, compactions_pending: bool = False) -> dict[str, Any]:
    """The counts of the report and the list of violations; `compactions_pending`: compaction
    plans may still be pending (their files are then no strays)."""
    violations: list[str] = []
    table = open_table(table_path)
    timeline = Timeline.load(table.storage).instants  # archived instants too
    committed = {i.time for i in timeline if i.state is State.COMPLETED}
    # (a completed compaction keeps its requested and inflight files beside its commit)
    pending = {i.time for i in timeline if i.state is not State.COMPLETED} - committed
    plans = (
        {i.time for i in timeline if i.time in pending and i.action is Action.COMPACTION}
        if compactions_pending
        else set()
    )
    if pending - plans:
        violations.append(f"instants left pending after cleanup: {sorted(pending - plans)}")
    batches = {p.stem.removeprefix("batch-"): p for p in journal.glob("batch-*.parquet")}
    tl = Timeline.load(table.storage)
    # every completed write but compactions (which fold logs into base files, writing no batch)
    wrote = {
        i.time: meta.extra_metadata.get(BATCH_KEY)
        for i in tl.completed_writes() if (meta := tl.commit_metadata(i)).operation_type != COMPACT_TYPE
    }
    known = {t: batches[b] for t, b in wrote.items() if b in batches}
    acked = set(_lines(journal, "acked-*.txt"))
    simulated = set(known) - set(_lines(journal, "acked-seed.txt"))
    conflicted = set(_lines(journal, "conflicted-*.txt"))
    failed = _lines(journal, "failed-*.txt")
    violations += [f"acknowledged commit {t} is not on the timeline" for t in sorted(acked - committed)]
    violations += [f"write {b} failed with a conflict but is visible" for b in sorted(conflicted & set(wrote.values()))]
    unknown = set(wrote) - set(known)
    violations += [f"commit {t} was not written by any simulated writer" for t in sorted(unknown)]
    violations += [f"write failed unexpectedly: {line}" for line in failed]
    violations += _stray_files(Path(table_path), committed, plans)

    snapshot = table.read(columns=[COMMIT_TIME, *COLUMNS])
    expected = _serial_application([_effective(tl, t, known[t]) for t in sorted(known)])
    violations += _compare("snapshot", _rows(snapshot), _rows(expected))
    keys = snapshot.column("id")
    if pc.count_distinct(keys).as_py() != len(keys):
        violations.append(f"{len(keys) - pc.count_distinct(keys).as_py()} keys appear more than once")
    if plans and table.table_config.table_version < 8:  # hudi-rs leaves out the slices a pending plan starts
        hudi = "not compared: a compaction plan is pending (hudi-rs reads its slices only once it completes)"
    else:
        hudi = _hudi_agrees(table_path, snapshot, violations)
    return {
        "attempted": len(_lines(journal, "attempts-*.txt")),
        "committed": len(acked & simulated),
        "committed_unacknowledged": len(set(known) - acked),
        "conflicted": len(conflicted),
        "failed": len(failed),
        "records_committed": sum(pq.read_metadata(known[t]).num_rows for t in simulated),
        "final_rows": snapshot.num_rows,
        "hudi_reader": hudi,
        "violations": violations,
    }


def _stray_files(root: Path, committed: set[str], plans: set[str]) -> list[str]:
    """Base files and log files named by an instant that is neither completed nor a pending
    compaction plan (a log is named by its slice's base instant on version 6, by its
    deltacommit on version 8: either way a completed one), and markers but a plan's."""
    known = committed | plans
    data = [p for p in root.rglob("*") if ".hoodie" not in p.relative_to(root).parts and p.is_file()]
    stray = [
        str(p.relative_to(root)) for p in data if p.suffix == ".parquet" and p.stem.rsplit("_", 1)[-1] not in known
    ]
    stray += [str(p.relative_to(root)) for p in data if (log := LogFileName.parse(p.name)) and log.instant not in known]
    out = [f"data file of an uncommitted write left behind: {p}" for p in sorted(stray)[:5]]
    temp = root / ".hoodie" / ".temp"
    if temp.exists() and (left := sorted(p.name for p in temp.iterdir() if p.name not in plans)):
        out.append(f"markers left behind: {left}")
    return out


def _effective(timeline: Timeline, instant: str, batch_file: Path) -> pa.Table:
    """A committed batch without the deletes of keys its write did not find (they are nothing, as
    in Hudi, also when a concurrent commit inserted the key): those its key summaries lack, or
    for an append (which keeps no summary) its log blocks."""
    batch = pq.read_table(batch_file)
    inst = timeline.get(instant)
    assert inst is not None, f"{instant} is on the timeline"
    meta = timeline.commit_metadata(inst)
    deleted: dict[str, list[np.ndarray]] = {}
    summaries = read_summaries(timeline.storage, instant)
    for stat in meta.write_stats():
        if is_log_path(stat.path):
            found = key_hashes(_appended_deletes(timeline.storage, stat.path, instant))
        elif (summary := summaries.get((stat.partitionPath, stat.fileId))) is not None:
            found = summary.deleted
        else:
            continue
        deleted.setdefault(stat.partitionPath, []).append(found)
    found = np.zeros(batch.num_rows, dtype=bool)
    hashes = key_hashes(batch.column("id"))
    parts = np.asarray(batch.column("p").to_pylist(), dtype=object)
    for partition, arrays in deleted.items():
        found |= (parts == partition) & np.isin(hashes, np.concatenate(arrays))
    is_delete = np.asarray(batch.column(IS_DELETED).to_pylist(), dtype=bool)
    return batch.filter(pa.array(~is_delete | found))


def _appended_deletes(storage: Storage, path: str, instant: str) -> pa.Array:
    """The keys an append of `instant` deleted (an append writes only keys it found)."""
    return block_keys(read_blocks(storage.read_bytes(path), storage.full_path(path)), instant)[1]


def _serial_application(batches: list[pa.Table]) -> pa.Table:
    """Each key's record with the largest ordering value (`ts`; on a tie the later commit's) over
    the batches in commit order, deletes removed: what event-time ordering keeps in any serial
    order. (A write tagged after a concurrent commit can merge onto its newer records and lose to
    them without sharing a written key, so commit order alone does not decide.)"""
    if not batches:
        return pa.table({c: pa.array([], pa.string()) for c in COLUMNS})
    tables = [b.append_column("_seq", pa.array([i] * b.num_rows, pa.int64())) for i, b in enumerate(batches)]
    allrows = pa.concat_tables(tables).sort_by([("ts", "ascending"), ("_seq", "ascending")])
    allrows = allrows.append_column("_row", pa.array(range(allrows.num_rows), pa.int64()))
    last = allrows.group_by("id").aggregate([("_row", "max")]).column("_row_max")
    latest = allrows.take(last)
    return latest.filter(pc.invert(latest.column(IS_DELETED))).select(COLUMNS)


def _rows(data: pa.Table) -> pa.Table:
    return data.select(COLUMNS).sort_by([(c, "ascending") for c in COLUMNS])


def _compare(what: str, got: pa.Table, expected: pa.Table) -> list[str]:
    if got.equals(expected):
        return []
    got_rows = set(map(tuple, (r.values() for r in got.to_pylist())))
    want_rows = set(map(tuple, (r.values() for r in expected.to_pylist())))
    missing, extra = sorted(want_rows - got_rows)[:3], sorted(got_rows - want_rows)[:3]
    return [
        (f"{what} differs from the serial application of the committed writes: {got.num_rows} rows vs "
        f"{expected.num_rows} expected; e.g. missing {missing}, unexpected {extra}")
    ]


def _hudi_agrees(table_path: str, snapshot: pa.Table, violations: list[str]) -> str:
    try:
        from hudi import HudiReadOptions, HudiTableBuilder
    except ImportError:
        return "not installed (pip install hudi)"
    batches = HudiTableBuilder.from_base_uri(Path(table_path).resolve().as_uri()).build().read(HudiReadOptions())
    theirs = pa.Table.from_batches(batches).select(COLUMNS) if batches else snapshot.select(COLUMNS).slice(0, 0)
    problems = _compare("Apache Hudi's snapshot", _rows(theirs), _rows(snapshot))
    violations += problems
    return "disagrees" if problems else "agrees"
