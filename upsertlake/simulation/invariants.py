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
4. Apache Hudi's reader (the `hudi` package, when installed) returns the same snapshot;
5. where the table keeps a metadata table (`metadata_violations`): it is trusted, its `files`
   partition lists exactly storage's files of completed writes (none of a failed write, none
   missing), every `column_stats` record names such a file and agrees with its footer, and the
   record index maps every key of the snapshot to the file group its row is in, and no other key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.concurrency.key_summary import key_hashes, read_summaries
from upsertlake.errors import CorruptTableError, MissingFileError
from upsertlake.layout.file_system_view import Listing, list_partitions_and_files, sort_listing
from upsertlake.layout.markers import marker_folder
from upsertlake.logfile import LogFileName, block_keys, is_log_path, read_blocks
from upsertlake.metadata import MetadataTable
from upsertlake.metadata.changes import footer_stats
from upsertlake.metadata.listing import listed_files
from upsertlake.metadata.partitions import COLUMN_STATS, RECORD_INDEX
from upsertlake.metadata.stats import bound
from upsertlake.metadata.table import INIT_INSTANT
from upsertlake.schema.columns import COMMIT_TIME, FILE_NAME, IS_DELETED, PARTITION_PATH, RECORD_KEY
from upsertlake.storage import Storage
from upsertlake.table.open import open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Action, State
from upsertlake.timeline.layouts import METAFOLDER
from upsertlake.timeline.operation import COMPACT_TYPE

COLUMNS = ["id", "ts", "v", "p"]
UNREADABLE = (CorruptTableError, MissingFileError)  # a table the checker reports, not a crash
BATCH_KEY = "upsertlake.simulate.batch"  # extraMetadata: the journaled batch a commit wrote


def _lines(journal: Path, pattern: str) -> list[str]:
    return [line for f in sorted(journal.glob(pattern)) for line in f.read_text().splitlines() if line]


def check_table(table_at: str | Storage, journal: Path, compactions_pending: bool = False) -> dict[str, Any]:
    """The counts of the report and the list of violations of the table at a local path (or a
    storage: an object store's); `compactions_pending`: compaction plans may still be pending
    (their files are then no strays)."""
    violations: list[str] = []
    storage = table_at if isinstance(table_at, Storage) else Storage(table_at)
    table = open_table(storage.base, storage_options=storage.options)
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
    violations += _stray_files(storage, committed, plans)

    try:
        snapshot = table.read(columns=[COMMIT_TIME, *COLUMNS])
        unreadable = None
    except UNREADABLE as e:
        violations.append(f"the snapshot cannot be read: {e}")
        snapshot, unreadable = pa.table({c: pa.array([], pa.string()) for c in COLUMNS}), str(e)
    expected = _serial_application([_effective(tl, t, known[t]) for t in sorted(known)])
    violations += _compare("snapshot", _rows(snapshot), _rows(expected))
    keys = snapshot.column("id")
    if pc.count_distinct(keys).as_py() != len(keys):
        violations.append(f"{len(keys) - pc.count_distinct(keys).as_py()} keys appear more than once")
    mdt = MetadataTable.open(Timeline.load(table.storage))
    problems = metadata_violations(table.storage)
    if mdt is not None:
        problems += _rebuilt(mdt, tl, _lines(journal, "acked-seed.txt"))
    violations += [f"metadata table: {v}" for v in problems]
    if unreadable:
        hudi = "not compared: the snapshot cannot be read"
    elif plans and table.table_config.table_version < 8:  # hudi-rs leaves out the slices a pending plan starts
        hudi = "not compared: a compaction plan is pending (hudi-rs reads its slices only once it completes)"
    else:
        hudi = _hudi_agrees(storage, snapshot, violations)
    return {
        "attempted": len(_lines(journal, "attempts-*.txt")),
        "committed": len(acked & simulated),
        "committed_unacknowledged": len(set(known) - acked),
        "conflicted": len(conflicted),
        "failed": len(failed),
        "records_committed": sum(pq.read_metadata(known[t]).num_rows for t in simulated),
        "final_rows": snapshot.num_rows,
        "hudi_reader": hudi,
        "metadata_table": ("inconsistent" if problems else "consistent") if mdt is not None else "not kept",
        "violations": violations,
    }


def _stray_files(storage: Storage, committed: set[str], plans: set[str]) -> list[str]:
    """Base files and log files named by an instant that is neither completed nor a pending
    compaction plan (a log is named by its slice's base instant on version 6, by its
    deltacommit on version 8: either way a completed one), and markers but a plan's."""
    known = committed | plans
    data = [e for e in storage.list_outside(METAFOLDER) if not e.is_dir]
    stray = [e.path for e in data if e.name.endswith(".parquet") and e.name[:-8].rsplit("_", 1)[-1] not in known]
    stray += [e.path for e in data if (log := LogFileName.parse(e.name)) and log.instant not in known]
    out = [f"data file of an uncommitted write left behind: {p}" for p in sorted(stray)[:5]]
    temp = {e.path.split("/")[2] for e in storage.list(marker_folder("").rstrip("/"), recursive=True)}
    if left := sorted(temp - plans):
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


def _hudi_agrees(storage: Storage, snapshot: pa.Table, violations: list[str]) -> str:
    try:
        from hudi import HudiReadOptions, HudiTableBuilder
    except ImportError:
        return "not installed (pip install hudi)"
    if not storage.location.is_local:
        return "not compared on an object store"
    batches = HudiTableBuilder.from_base_uri(Path(storage.base).resolve().as_uri()).build().read(HudiReadOptions())
    theirs = pa.Table.from_batches(batches).select(COLUMNS) if batches else snapshot.select(COLUMNS).slice(0, 0)
    problems = _compare("Apache Hudi's snapshot", _rows(theirs), _rows(snapshot))
    violations += problems
    return "disagrees" if problems else "agrees"


def committed_files(timeline: Timeline, listing: Listing) -> set[tuple[str, int]]:
    """(path, size) of the listed base and log files that completed writes wrote."""
    done = {i.time for i in timeline.completed_writes()}
    return ({(f.path, f.size) for f in listing.base_files if f.instant_time in done}
            | {(f.path, f.size) for f in listing.log_files if f.name.instant in done})


def metadata_violations(storage: Storage) -> list[str]:
    """What the metadata table of the table at `storage` says that the table does not: [] when
    the table keeps none (hoodie.properties lists no `files` partition) or it agrees."""
    timeline = Timeline.load(storage)
    if MetadataTable.open(timeline) is None:
        return []
    listed = listed_files(timeline)
    if listed is None:
        return ["the metadata table is listed in hoodie.properties but readers cannot trust it"]
    listing, on_storage = sort_listing(listed[1], None, listed[0]), list_partitions_and_files(storage)
    files = {(f.path, f.size) for f in listing.base_files + listing.log_files}
    committed = committed_files(timeline, on_storage)
    # (a rolled-back write leaves the folder of a partition it created, empty: as Hudi's rollback does)
    holding = {p.rpartition("/")[0] for p, _ in committed}
    out = [f"the metadata table lists partition {p!r}, which storage lacks"
           for p in sorted(set(listing.partitions) - set(on_storage.partitions))]
    out += [f"the metadata table misses partition {p!r} of completed writes"
            for p in sorted(holding - set(listing.partitions))]
    out += [f"the metadata table lists {p} ({n} bytes), no file of a completed write"
            for p, n in sorted(files - committed)]
    out += [f"the metadata table misses {p} ({n} bytes) of a completed write" for p, n in sorted(committed - files)]
    table = MetadataTable.open(timeline)
    assert table is not None
    finished = {i.time for i in timeline.instants if i.is_completed}
    pending = {i.time for i in timeline.instants if not i.is_completed} - finished
    done = {i.time for i in table.timeline.instants if i.is_completed}  # (a compaction completes as a commit)
    out += [
        f"its {i.action.value} {i.time} is left pending (no pending data instant of its time)"
        for i in table.timeline.instants
        if not i.is_completed and i.time not in done and i.time not in pending
    ]
    if COLUMN_STATS in table.partitions:
        out += _column_stats_violations(storage, table, on_storage, {p for p, _ in committed})
    if RECORD_INDEX in table.partitions:
        out += _record_index_violations(storage, table)
    return out


def _rebuilt(mdt: MetadataTable, data: Timeline, seed: list[str]) -> list[str]:
    """The seed's write built the metadata table: one initialized after the seed committed was
    dropped and built again (a writer found it stale), which kills must never cost."""
    init = mdt.timeline.get(INIT_INSTANT, Action.DELTA_COMMIT)
    first = data.get(seed[0]) if seed else None
    if init is None or first is None or not init.is_completed or not first.is_completed:
        return []
    if init.completed_at > first.completed_at:
        return [f"it was built again at {init.completed_at}, after the seed's commit {first.time} (a writer found it "
                "stale)"]
    return []


def _column_stats_violations(
    storage: Storage, table: MetadataTable, listing: Listing, committed: set[str]
) -> list[str]:
    """Every column_stats record names a committed file; a base file's agree with its footer."""
    names = {p.rpartition("/")[2]: p for p in committed}
    recorded: dict[str, dict[str, Any]] = {}
    for record in table.scan(COLUMN_STATS).values():
        stats = record["ColumnStatsMetadata"]
        if stats is not None and not stats["isDeleted"]:
            recorded.setdefault(stats["fileName"], {})[stats["columnName"]] = stats
    out = [f"column_stats of {name}, no file of a completed write" for name in sorted(recorded.keys() - names.keys())]
    for bf in listing.base_files:
        if bf.path not in committed or bf.name not in recorded:
            continue
        footer = storage.parquet_file(bf.path).metadata
        types = footer.schema.to_arrow_schema()
        for column, stats in sorted(recorded[bf.name].items()):
            want = footer_stats(footer, [column])
            if want is None:
                out.append(f"column_stats of {bf.path} record {column}, which its footer cannot describe")
                continue
            got = (stats["valueCount"], stats["nullCount"], bound(stats, "minValue", types.field(column).type),
                   bound(stats, "maxValue", types.field(column).type))
            if got != (want[0].values, want[0].nulls, want[0].low, want[0].high):
                out.append(f"column_stats of {bf.path}, column {column}: {got}, its footer says "
                           f"{(want[0].values, want[0].nulls, want[0].low, want[0].high)}")
    return out


def _record_index_violations(storage: Storage, table: MetadataTable) -> list[str]:
    """The record index maps each key of the snapshot to its row's file group, and knows no other key."""
    try:
        data = open_table(storage.base, storage_options=storage.options).read(
            columns=[RECORD_KEY, PARTITION_PATH, FILE_NAME]
        )
    except UNREADABLE as e:
        return [f"the record index is not checked: the snapshot cannot be read ({e})"]
    stored = {
        k: (p, n.lstrip(".").split("_")[0])
        for k, p, n in zip(*(data.column(c).to_pylist() for c in (RECORD_KEY, PARTITION_PATH, FILE_NAME)))
    }
    located = table.record_locations(stored)
    wrong = sorted(k for k in stored if located.get(k) != stored[k])
    out = [f"the record index puts {len(wrong)} key(s) elsewhere than their rows, e.g. {k}: {located.get(k)} "
           f"for {stored[k]}" for k in wrong[:1]]
    extra = sorted(table.scan(RECORD_INDEX).keys() - stored.keys())
    out += [f"the record index holds {len(extra)} key(s) the snapshot lacks, e.g. {extra[0]}"] if extra else []
    return out
