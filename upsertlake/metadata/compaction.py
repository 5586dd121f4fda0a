"""Compacting and cleaning the metadata table (docs/DESIGN.md §11).

Compaction folds each file group's log files into a new HFile base file once enough deltacommits
completed since the last one (hoodie.metadata.compact.max.delta.commits), as Hudi's metadata
writer does, inside a data instant's commit. Its instant time stays below every pending data
instant whose metadata deltacommit completed (HoodieBackedTableMetadataWriter.compactIfNecessary),
and it folds only the log files completed before that time: those of a pending data instant stay
after the new base file, to count once their instant completes or to be rolled back.

Cleaning keeps each file group's two newest slices (a reader that listed the metadata table just
before a compaction still finds its files) and deletes the older ones.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.logfile.names import LogFileName, log_instant
from upsertlake.metadata.partitions import RECORD_INDEX, SOLO_COMMIT_TIMESTAMP
from upsertlake.metadata.records import decode, encode, writer_schema
from upsertlake.metadata.table import BASE_EXTENSION, MetadataSlice, MetadataTable
from upsertlake.metadata.writer import (
    Changes,
    base_file_name,
    discard_deltacommit,
    write_base_entries,
    write_base_file,
)
from upsertlake.schema.columns import FILE_NAME
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.instant_time import format_instant_time, next_instant_time, parse_instant_time
from upsertlake.timeline.operation import COMPACT_TYPE

PLAN_SCHEMA = "HoodieCompactionPlan"
SLICES_KEPT = 2
# Runs a file group's compaction on each slice where the record index's work runs (on Spark: a
# task each, so that the driver never holds the index's keys); in this process by default.
Each = Callable[[Callable[[MetadataSlice], WriteStat], list[MetadataSlice]], list[WriteStat]]


def _one_after_another(fn: Callable[[MetadataSlice], WriteStat], slices: list[MetadataSlice]) -> list[WriteStat]:
    return [fn(sl) for sl in slices]


def deltacommits_since_compaction(table: MetadataTable) -> int:
    """Completed deltacommits after the last completed compaction (or since the start)."""
    done = [i for i in table.timeline.instants if i.is_completed]
    last = max((i.time for i in done if i.action is Action.COMMIT), default="")
    return sum(1 for i in done if i.action is Action.DELTA_COMMIT and i.time > last)


def compaction_time(table: MetadataTable, data: Timeline) -> str | None:
    """The instant of the next compaction: below every pending data instant whose metadata
    deltacommit completed, else after everything on both timelines; None when that time would
    not be after the newest base file (nothing could be folded)."""
    completed = {i.time for i in table.timeline.instants if i.is_completed and i.action is Action.DELTA_COMMIT}
    done = {i.time for i in data.instants if i.is_completed}  # a completed compaction keeps its .compaction files
    pending = sorted(i.time for i in data.instants if i.time not in done and i.time in completed)
    zone = data.layout.zone
    if pending:
        time = format_instant_time(parse_instant_time(pending[0], zone) - timedelta(milliseconds=1), zone)
    else:
        time = next_instant_time(max(filter(None, [table.timeline.last_time(), data.last_time()])), zone)
    newest_base = max(
        (i.time for i in table.timeline.instants if i.is_completed and i.action is Action.COMMIT), default=""
    )
    if time <= newest_base or table.timeline.get(time) is not None:
        return None
    return time


def folded(timeline: Timeline, deltacommit: Instant) -> bool:
    """Whether a completed compaction folded the completed `deltacommit`'s log files into base
    files: `compact` folds those completed before its instant time, so a compaction planned at a
    later time than the deltacommit's, but before it completed, did not."""
    return any(
        i.time > deltacommit.completed_at for i in timeline.filter([Action.COMMIT], [State.COMPLETED])
    )


def discard_failed_compactions(storage: Storage, timeline: Timeline) -> list[str]:
    """Remove from the metadata table at `storage` (its `timeline`) the compactions a killed
    writer left pending (planned, never completed) with the base files they wrote, as Hudi's
    metadata writer rolls back a failed compaction: readers ignore them, but left behind they
    would stay forever (no clean or trim takes a pending instant). Call under the data table's
    lock: no other writer compacts meanwhile. Returns their instant times."""
    done = {i.time for i in timeline.instants if i.is_completed}
    failed = sorted({i.time for i in timeline.instants if i.action is Action.COMPACTION and i.time not in done})
    for time in failed:
        discard_deltacommit(storage, time, Action.COMPACTION)
    return failed


def compact(table: MetadataTable, time: str, table_version: int, each: Each = _one_after_another) -> Instant:
    """Fold every file group's base file and the log files completed before `time` into a new
    base file `<fileId>_<token>_<time>.hfile`; the compaction instant goes requested, inflight,
    then completes as a commit. The record index's file groups are compacted by `each`, as
    stored entries (`MetadataTable.stored_entries`); the other partitions' (their size grows with
    the data table's files, not its records) here, record by record."""
    storage, layout = table.storage, table.timeline.layout
    completion = {i.time: i.completed_at for i in table.timeline.instants if i.is_completed}
    work: list[tuple[MetadataSlice, MetadataSlice]] = []
    for partition in table.partitions:
        for sl in table.slices(partition):
            logs = tuple(p for p in sl.logs if completion[log_instant(p)] < time)
            work.append((sl, MetadataSlice(sl.partition, sl.file_id, sl.base, logs)))
    plan = {
        "operations": [_operation(folded) for _, folded in work],
        "extraMetadata": None,
        "version": 2,
        "strategy": None,
        "preserveHoodieMetadata": False,
        "missingSchedulePartitions": None,
    }
    requested = Instant(time, Action.COMPACTION, State.REQUESTED)
    storage.write_if_absent(layout.path(requested), documents.encode(PLAN_SCHEMA, plan))
    inflight = transition(storage, requested, State.INFLIGHT, b"", layout)
    schema = writer_schema(table_version)
    records = [folded for _, folded in work if folded.partition != RECORD_INDEX]
    keys = [folded for _, folded in work if folded.partition == RECORD_INDEX]
    stats = [_write_base(table, sl, time, schema) for sl in records]
    stats += each(partial(_write_record_index_base, table, time, schema), keys) if keys else []
    by_partition: dict[str, list[WriteStat]] = {}
    for s in stats:
        by_partition.setdefault(s.partitionPath, []).append(s)
    metadata = CommitMetadata(by_partition, COMPACT_TYPE, {"schema": schema}, compacted=True)
    done = Instant(inflight.time, Action.COMMIT, State.INFLIGHT)
    return transition(storage, done, State.COMPLETED, metadata.to_json_bytes(), layout, Timeline.load(storage, layout))


def _operation(sl: MetadataSlice) -> dict[str, Any]:
    base = sl.base.rpartition("/")[2] if sl.base else None
    return {
        "baseInstantTime": base[: -len(BASE_EXTENSION)].rpartition("_")[2] if base else "",
        "deltaFilePaths": [p.rpartition("/")[2] for p in sl.logs],
        "dataFilePath": base,
        "fileId": sl.file_id,
        "partitionPath": sl.partition,
        "metrics": {},
        "bootstrapFilePath": None,
    }


def _write_base(table: MetadataTable, sl: MetadataSlice, time: str, schema: str) -> WriteStat:
    records = table.read_all(sl)
    path, size, n = write_base_file(
        table.storage, sl.partition, sl.file_id, time, Changes(upserts=list(records.values())), schema
    )
    return _compacted(sl, time, path, size, n)


def _write_record_index_base(table: MetadataTable, time: str, schema: str, sl: MetadataSlice) -> WriteStat:
    """A record-index file group's new base file from its stored entries: each distinct datum
    (a file group's location: a few per file group of the data table) decoded once, named by
    the new file and encoded under `schema`."""
    entries, schemas = table.stored_entries(sl)
    name = base_file_name(sl.file_id, time)
    values = _renamed(entries.column("value"), entries.column("schema"), schemas, schema, name)
    kept = pa.table({"key": entries.column("key"), "value": values})
    del entries, values  # the stored datums: only the renamed ones are written
    path, size, n = write_base_entries(table.storage, sl.partition, name, kept, schema)
    return _compacted(sl, time, path, size, n)


def _renamed(values: pa.ChunkedArray, at: pa.ChunkedArray, schemas: list[str], schema: str, name: str) -> pa.Array:
    """The datums `values` (each under `schemas[at]`) as records of the base file `name`: under
    `schema`, their file name field `name`; equal datums are decoded and encoded once."""
    if len(schemas) == 1:  # the usual case: every datum under one schema
        encoded = pc.dictionary_encode(values).combine_chunks()
        return _named(encoded.dictionary, schemas[0], schema, name).take(encoded.indices)
    order = np.empty(len(values), np.int64)
    done = 0
    parts = []
    of_value = at.to_numpy()
    for n, source in enumerate(schemas):
        mine = np.flatnonzero(of_value == n)
        if not len(mine):
            continue
        theirs = pc.dictionary_encode(values.take(pa.array(mine))).combine_chunks()
        parts.append(_named(theirs.dictionary, source, schema, name).take(theirs.indices))
        order[done:done + len(mine)] = mine
        done += len(mine)
    if not parts:  # no entry is live
        return pa.array([], pa.large_binary())
    gathered = pa.chunked_array(parts).combine_chunks()
    return gathered.take(pa.array(np.argsort(order, kind="stable")))


def _named(datums: pa.Array, source: str, schema: str, name: str) -> pa.Array:
    """Distinct datums under `source` as records of the base file `name`, encoded under `schema`."""
    records = decode(datums.to_pylist(), [""] * len(datums), source, name)
    return pa.array(encode([{**r, FILE_NAME: name} for r in records], schema), pa.large_binary())


def _compacted(sl: MetadataSlice, time: str, path: str, size: int, n: int) -> WriteStat:
    return WriteStat(
        fileId=sl.file_id,
        path=path,
        partitionPath=sl.partition,
        prevCommit=time,
        numWrites=n,
        numInserts=n,
        totalWriteBytes=size,
        fileSizeInBytes=size,
        totalLogFilesCompacted=len(sl.logs),
    )


def trim_timeline(table: MetadataTable) -> list[str]:
    """Remove the instants no file of the metadata table names any more (their log files were
    cleaned), older than every instant a file still names: the metadata table's timeline stays as
    long as its kept slices, not as long as its history (Hudi archives them; nothing reads them).
    Initializations stay (readers check the table was initialized)."""
    storage, layout = table.storage, table.timeline.layout
    named: set[str] = set()
    for partition in table.partitions:
        for entry in storage.list(partition):
            if entry.name.endswith(BASE_EXTENSION):
                named.add(entry.name[: -len(BASE_EXTENSION)].rpartition("_")[2])
            elif (log := LogFileName.parse(entry.name)) is not None:
                named.add(log.instant)
    if not named:
        return []
    oldest = min(named)
    doomed = [
        i
        for i in table.timeline.instants
        if i.is_completed
        and i.time < oldest
        and i.time not in named
        and not i.time.startswith(SOLO_COMMIT_TIMESTAMP)
        and i.action in (Action.DELTA_COMMIT, Action.COMMIT)
    ]
    files: dict[str, list[tuple[bool, str]]] = {}
    for entry in storage.list(layout.folder):
        if (inst := layout.parse(entry.name)) is not None:
            files.setdefault(inst.time, []).append((inst.is_completed, entry.path))
        elif entry.name.startswith(".") and entry.name.endswith(".tmp"):  # write_if_absent's, its writer died
            files.setdefault(entry.name[1:].partition(".")[0].partition("_")[0], []).append((False, entry.path))
    for inst in doomed:
        # Pending files first (a compaction's plan too), the completed one last, as the data
        # table's archival deletes: a crash midway leaves the instant completed, trimmed next time,
        # never a pending one no rollback or trim would take.
        for _, path in sorted(files.get(inst.time, [])):
            storage.delete(path)
    return [i.time for i in doomed]


def clean(table: MetadataTable) -> list[str]:
    """Delete the file slices older than each file group's two newest base files; returns the
    paths deleted."""
    storage = table.storage
    completed = {i.time: i.completed_at for i in table.timeline.instants if i.is_completed}
    deleted = []
    for partition in table.partitions:
        bases: dict[str, list[tuple[str, str]]] = {}
        logs: dict[str, list[tuple[str, str]]] = {}
        for entry in storage.list(partition):
            if entry.name.endswith(BASE_EXTENSION):
                file_id, _, rest = entry.name[: -len(BASE_EXTENSION)].partition("_")
                instant = rest.rpartition("_")[2]
                if instant in completed:
                    bases.setdefault(file_id, []).append((instant, entry.path))
            elif (log := LogFileName.parse(entry.name)) is not None and log.instant in completed:
                logs.setdefault(log.file_id, []).append((completed[log.instant], entry.path))
        for file_id, versions in bases.items():
            versions.sort()
            if len(versions) <= SLICES_KEPT:
                continue
            keep_from = versions[-SLICES_KEPT][0]
            doomed = [p for instant, p in versions if instant < keep_from]
            doomed += [p for done, p in logs.get(file_id, []) if done < keep_from]
            for path in doomed:
                storage.delete(path)
            deleted += doomed
    return deleted
