"""The simulator's checks: what must hold of a table after concurrent writers, some killed.

1. every acknowledged commit is on the timeline, nothing is left pending, and no data file or
   marker of an uncommitted write remains;
2. a write that failed with a conflict is not visible; a killed write is visible only if it was
   killed after its commit completed;
3. the snapshot equals the serial application of the committed batches in instant order (which
   also means every acknowledged record is there unless a later commit overwrote or deleted it),
   and no key appears twice; a delete counts only if its write found the key (its key summary says
   so): a delete of a key the write did not see is nothing, also when a concurrent commit inserted it;
4. Apache Hudi's reader (the `hudi` package, when installed) returns the same snapshot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.concurrency.key_summary import key_hashes, read_summary
from upsertlake.table.table import open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import State

COLUMNS = ["id", "ts", "v", "p"]
BATCH_KEY = "upsertlake.simulate.batch"  # extraMetadata: the journaled batch a commit wrote


def _lines(journal: Path, pattern: str) -> list[str]:
    return [line for f in sorted(journal.glob(pattern)) for line in f.read_text().splitlines() if line]


def check_table(table_path: str, journal: Path) -> dict[str, object]:
    """The counts of the report and the list of violations."""
    violations: list[str] = []
    table = open_table(table_path)
    timeline = Timeline.load(table.storage).instants  # archived instants too
    pending = [i.time for i in timeline if i.state is not State.COMPLETED]
    if pending:
        violations.append(f"instants left pending after cleanup: {pending}")
    committed = {i.time for i in timeline if i.state is State.COMPLETED}
    batches = {p.stem.removeprefix("batch-"): p for p in journal.glob("batch-*.parquet")}
    tl = Timeline.load(table.storage)
    wrote = {i.time: tl.commit_metadata(i).extra_metadata.get(BATCH_KEY) for i in tl.completed_writes()}
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
    violations += _stray_files(Path(table_path), committed)

    snapshot = table.read(columns=["_hoodie_commit_time", *COLUMNS])
    expected = _serial_application([_effective(tl, t, known[t]) for t in sorted(known)])
    violations += _compare("snapshot", _rows(snapshot), _rows(expected))
    keys = snapshot.column("id")
    if pc.count_distinct(keys).as_py() != len(keys):
        violations.append(f"{len(keys) - pc.count_distinct(keys).as_py()} keys appear more than once")
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


def _stray_files(root: Path, committed: set[str]) -> list[str]:
    stray = [str(p.relative_to(root)) for p in root.rglob("*.parquet") if p.stem.rsplit("_", 1)[-1] not in committed]
    out = [f"data file of an uncommitted write left behind: {p}" for p in sorted(stray)[:5]]
    temp = root / ".hoodie" / ".temp"
    if temp.exists() and any(temp.iterdir()):
        out.append(f"markers left behind: {sorted(p.name for p in temp.iterdir())}")
    return out


def _effective(timeline: Timeline, instant: str, batch_file: Path) -> pa.Table:
    """A committed batch without the deletes of keys its write did not find (they are nothing, as
    in Hudi, also when a concurrent commit inserted the key): those its key summaries lack."""
    batch = pq.read_table(batch_file)
    meta = timeline.commit_metadata(timeline.get(instant))
    deleted: dict[str, list[np.ndarray]] = {}
    for stat in meta.write_stats():
        summary = read_summary(timeline.storage, instant, stat.partitionPath, stat.fileId)
        if summary is not None:
            deleted.setdefault(stat.partitionPath, []).append(summary.deleted)
    found = np.zeros(batch.num_rows, dtype=bool)
    hashes = key_hashes(batch.column("id"))
    parts = np.asarray(batch.column("p").to_pylist(), dtype=object)
    for partition, arrays in deleted.items():
        found |= (parts == partition) & np.isin(hashes, np.concatenate(arrays))
    is_delete = np.asarray(batch.column("_hoodie_is_deleted").to_pylist(), dtype=bool)
    return batch.filter(pa.array(~is_delete | found))


def _serial_application(batches: list[pa.Table]) -> pa.Table:
    """The last record of each key over the batches in commit order, deletes removed."""
    if not batches:
        return pa.table({c: pa.array([], pa.string()) for c in COLUMNS})
    tables = [b.append_column("_seq", pa.array([i] * b.num_rows, pa.int64())) for i, b in enumerate(batches)]
    allrows = pa.concat_tables(tables)
    allrows = allrows.append_column("_row", pa.array(range(allrows.num_rows), pa.int64()))
    last = allrows.group_by("id").aggregate([("_row", "max")]).column("_row_max")
    latest = allrows.take(last)
    return latest.filter(pc.invert(latest.column("_hoodie_is_deleted"))).select(COLUMNS)


def _rows(table: pa.Table) -> pa.Table:
    return table.select(COLUMNS).sort_by([(c, "ascending") for c in COLUMNS])


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
