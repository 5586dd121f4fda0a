"""`ByKeyGroup`: how the record index's key changes reach the file groups that hold them: read
from their sources, gathered by the record-index file group each key hashes to
(`metadata.keys.file_group_index`, Hudi's hash), and written by one call per file group. In
process by default (`in_process`); on Spark the sources are read by tasks, the rows shuffled by
file group and each group written by its own task (`upsertlake.spark.record_index.by_key_group_on`),
so that the driver holds nothing per record: only the sources (files, slices) and write stats.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol, TypeAlias, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.layout.file_system_view import FileSlice
from upsertlake.layout.slice_keys import deleted_keys
from upsertlake.layout.slice_reader import Merge
from upsertlake.logfile import block_keys
from upsertlake.logfile.reader import read_logs
from upsertlake.metadata.keys import file_group_index
from upsertlake.schema.columns import LOOKUP_KEY, RECORD_KEY, UPDATE_FILE_ID, UPDATE_PARTITION
from upsertlake.storage import Storage
from upsertlake.timeline.commit_metadata import WriteStat

S = TypeVar("S")
R = TypeVar("R")
INSERTED = "inserted"  # a key change's flag: located at (partition, file_id), else deleted from there
KEY_CHANGES = pa.schema(
    [(LOOKUP_KEY, pa.string()), (UPDATE_PARTITION, pa.string()), (UPDATE_FILE_ID, pa.string()), (INSERTED, pa.bool_())]
)
STAGED_FILE = "file"  # a staged key change's data file (`engine.bucket_writer.stage_keys`)
STAGED_KEYS = KEY_CHANGES.append(pa.field(STAGED_FILE, pa.string()))
THREADS = 8

Groups = int | Callable[[int], int]  # the file groups, or how many for the number of rows read (an initialization)
GroupWrite = Callable[[int, pa.Table], list[WriteStat]]  # (file group, its rows) -> the stats of what it wrote


class ByKeyGroup(Protocol):
    def __call__(
        self, sources: list[S], read: Callable[[S], pa.Table], groups: Groups, write: GroupWrite, every: bool, /
    ) -> list[WriteStat]:
        """Read each source into KEY_CHANGES rows, gather them by the file group (of `groups`)
        their key hashes to, and `write` each file group that has rows (`every`: each file
        group, with or without); the write stats of all."""
        ...

    def each(self, fn: Callable[[S], R], items: list[S], /) -> list[R]:
        """`fn` of each item, where the file groups are written: work whose input grows with the
        records (a record-index file group's compaction, a log file's statistics at an
        initialization), whose results (write stats, statistics) do not."""
        ...


class InProcess:
    """`ByKeyGroup` in this process: sources read and groups written on a pool of `threads`."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def __call__(
        self, sources: list[S], read: Callable[[S], pa.Table], groups: Groups, write: GroupWrite, every: bool, /
    ) -> list[WriteStat]:
        rows = pa.concat_tables([KEY_CHANGES.empty_table(), *self.each(lambda s: read(s).cast(KEY_CHANGES), sources)])
        count = groups(rows.num_rows) if callable(groups) else groups
        of_row = file_group_index(rows.column(LOOKUP_KEY), count)
        order = np.argsort(of_row, kind="stable")
        bounds = np.searchsorted(of_row[order], np.arange(count + 1))
        parts = {g: rows.take(order[lo:hi]) for g, (lo, hi) in enumerate(pairwise(bounds)) if every or hi > lo}
        return [s for stats in self.each(lambda g: write(g, parts[g]), sorted(parts)) for s in stats]

    def each(self, fn: Callable[[S], R], items: list[S], /) -> list[R]:
        with ThreadPoolExecutor(max_workers=max(1, min(self.threads, len(items)))) as pool:
            return list(pool.map(fn, items))


in_process = InProcess(THREADS)
# Work that holds a whole file group of the record index (its compaction: about 350 bytes an entry
# in flight, 5M entries a group at 50M keys): a thread per core, not THREADS, bounds the memory.
per_core = InProcess(os.cpu_count() or 1)


# -- where key changes come from ------------------------------------------------------------------
@dataclass(frozen=True)
class StagedKeys:
    """A Spark write task's staged key changes (`engine.bucket_writer.stage_keys`): the rows of the
    data files in `files` count (a re-merge staged the buckets it wrote again anew)."""

    path: str
    files: frozenset[str]


@dataclass(frozen=True)
class WrittenKeys:
    """A base file a clustering wrote: each of its keys is located in its file group."""

    path: str
    partition: str
    file_id: str


@dataclass(frozen=True)
class RetiredKeys:
    """The latest slice of a file group a replacecommit retires: each key it holds is deleted."""

    slice: FileSlice


@dataclass(frozen=True)
class LiveKeys:
    """A latest slice at the record index's initialization: each live key is located in it."""

    slice: FileSlice
    merge: Merge


KeySource: TypeAlias = pa.Table | StagedKeys | WrittenKeys | RetiredKeys | LiveKeys  # a table: changes in memory


def read_keys(storage: Storage, source: KeySource) -> pa.Table:
    """The KEY_CHANGES rows of one source, read from the data table at `storage`."""
    if isinstance(source, pa.Table):
        return source.cast(KEY_CHANGES)
    if isinstance(source, StagedKeys):
        with storage.open_input(source.path) as f:
            staged = pa.ipc.open_file(f).read_all()
        files = pa.array(sorted(source.files), pa.string())
        return staged.filter(pc.is_in(staged.column(STAGED_FILE), value_set=files)).select(KEY_CHANGES.names)
    if isinstance(source, WrittenKeys):
        keys = storage.read_parquet(source.path, [RECORD_KEY]).column(0)
        return located(keys, source.partition, source.file_id, True)
    sl = source.slice
    held = slice_keys(storage, sl)
    if isinstance(source, RetiredKeys):
        return located(held, sl.partition_path, sl.file_id, False)
    gone = deleted_keys(storage, sl, source.merge, held) if sl.logs else pa.array([], pa.string())
    return located(held.filter(pc.invert(pc.is_in(held, value_set=gone))), sl.partition_path, sl.file_id, True)


def located(keys: pa.Array | pa.ChunkedArray, partition: str, file_id: str, inserted: bool) -> pa.Table:
    """KEY_CHANGES rows: each of `keys` located in (`partition`, `file_id`), or deleted from there."""
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    n = len(keys)
    return pa.table(
        [
            keys.cast(pa.string()),
            pa.repeat(pa.scalar(partition, pa.string()), n),
            pa.repeat(pa.scalar(file_id, pa.string()), n),
            pa.repeat(pa.scalar(inserted, pa.bool_()), n),
        ],
        schema=KEY_CHANGES,
    )


def slice_keys(storage: Storage, sl: FileSlice) -> pa.Array:
    """Every key a slice's files hold (its base file's and its log records'): a superset of its
    live keys, enough to delete them all from the record index."""
    parts = [pa.array([], pa.string())]
    if sl.base is not None:
        parts.append(storage.read_parquet(sl.base.path, [RECORD_KEY]).column(0).combine_chunks().cast(pa.string()))
    if sl.logs:
        blocks = read_logs([(storage.read_bytes(log.path), log.path) for log in sl.logs])
        upserted, removed = block_keys(blocks)
        parts += [upserted, removed]
    return pc.unique(pa.concat_arrays(parts))
