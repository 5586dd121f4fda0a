"""What one write did: the result every action's write stage builds and the commit completes.

Its own module because every action (copy-on-write, overwrite, and merge-on-read next) builds one
from its bucket statuses, and the commit and the re-merge update it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import replace as _replace
from typing import Any

import pyarrow as pa

from upsertlake.engine.bucket_writer import WriteStatus
from upsertlake.index.base import IndexUpdate
from upsertlake.metadata.changes import RecordsStats
from upsertlake.schema.columns import LOOKUP_KEY, UPDATE_FILE_ID, UPDATE_PARTITION
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import WriteStat
from upsertlake.timeline.operation import Operation
from upsertlake.util.arrow import constant


@dataclass(frozen=True)
class WriteResult:
    """What one write did. Uncommitted until `WriteClient.commit` returns it with `committed`."""

    instant_time: str
    operation: Operation
    num_inserts: int
    num_updates: int
    num_deletes: int
    files_written: tuple[str, ...]
    stage_seconds: dict[str, float]
    write_stats: tuple[WriteStat, ...] = field(default=(), repr=False)
    data_schema: pa.Schema | None = field(default=None, repr=False)
    committed: bool = False
    index_update: IndexUpdate | None = field(default=None, repr=False)
    log_stats: dict[str, RecordsStats] = field(default_factory=dict, repr=False)  # by log file written
    global_keys: bool = False  # keys are unique across partitions (a global index tagged them)
    replaced: dict[str, list[str]] | None = None  # partition -> file ids an overwrite retires
    remerges: int = 0  # times the commit merged file groups again onto a concurrent commit's versions
    retries: int = 0  # times the commit tagged and wrote the batch again after a conflict on a record
    overtaken: int = 0  # times it did so because a compaction overtook it (engine.overtaken)
    store_requests: dict[str, int] = field(default_factory=dict)  # object store requests by kind (Table's writes)
    # The timeline as the commit left it (listed under the lock, with the commit): the services
    # after the commit start from it rather than list it again. None when it changed since.
    timeline: Timeline | None = field(default=None, repr=False, compare=False)


def with_statuses(result: WriteResult, statuses: list[WriteStatus]) -> WriteResult:
    """`result` with the counts, files and stats of these bucket statuses."""
    stats = tuple(s.stat for s in statuses)
    return _replace(
        result,
        num_inserts=sum(s.num_inserts for s in statuses),
        num_updates=sum(s.num_updates for s in statuses),
        num_deletes=sum(s.num_deletes for s in statuses),
        files_written=tuple(s.path for s in stats),
        write_stats=stats,
        index_update=_index_update(result.instant_time, statuses, stats),
        log_stats={s.stat.path: s.log_stats for s in statuses if s.log_stats is not None},
    )


def _index_update(instant_time: str, statuses: list[WriteStatus], stats: tuple[WriteStat, ...]) -> IndexUpdate:
    ins_keys, ins_parts, ins_ids, del_keys, del_parts, del_ids = [], [], [], [], [], []
    log_keys, log_parts, log_ids = [], [], []
    staged: dict[str, set[str]] = {}
    for status in statuses:
        if status.staged_keys is not None:
            staged.setdefault(status.staged_keys, set()).add(status.stat.path)
        n_log = len(status.log_deleted_keys)
        log_keys.append(status.log_deleted_keys)
        log_parts.append(constant(status.stat.partitionPath, n_log))
        log_ids.append(constant(status.stat.fileId, n_log))
        n_ins, n_del = len(status.inserted_keys), len(status.deleted_keys)
        ins_keys.append(status.inserted_keys)
        ins_parts.append(constant(status.stat.partitionPath, n_ins))
        ins_ids.append(constant(status.stat.fileId, n_ins))
        del_keys.append(status.deleted_keys)
        del_parts.append(constant(status.stat.partitionPath, n_del))
        del_ids.append(constant(status.stat.fileId, n_del))
    empty = pa.array([], pa.string())

    def cat(arrays: list[Any]) -> pa.Array:
        return pa.concat_arrays([empty, *[a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]])

    return IndexUpdate(
        instant_time,
        inserted=pa.table({LOOKUP_KEY: cat(ins_keys), UPDATE_PARTITION: cat(ins_parts), UPDATE_FILE_ID: cat(ins_ids)}),
        deleted=pa.table({LOOKUP_KEY: cat(del_keys), UPDATE_PARTITION: cat(del_parts), UPDATE_FILE_ID: cat(del_ids)}),
        deleted_in_logs=pa.table(
            {LOOKUP_KEY: cat(log_keys), UPDATE_PARTITION: cat(log_parts), UPDATE_FILE_ID: cat(log_ids)}
        ),
        staged={path: frozenset(files) for path, files in staged.items()},
    )
