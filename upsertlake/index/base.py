"""The index interface: find where each incoming record lives now, and learn from each write.

`tag` returns one location row per input key — the (partition, fileId, instant) of the file
group holding that key, or nulls for a new key — so every index is interchangeable and the
tests can require that all of them tag identically.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.layout.file_system_view import BaseFile, FileSystemView
from upsertlake.schema.columns import LOC_FILE_ID, LOC_INSTANT, LOC_PARTITION, LOOKUP_KEY, LOOKUP_ROW, RECORD_KEY
from upsertlake.storage import Storage
from upsertlake.timeline.operation import Operation
from upsertlake.util.arrays import group_rows, sorted_unique
from upsertlake.util.arrow import constant

LOCATION_SCHEMA = pa.schema(
    [(LOC_PARTITION, pa.string()), (LOC_FILE_ID, pa.string()), (LOC_INSTANT, pa.string())]
)

LiveCopies = Callable[[pa.Table], np.ndarray]
"""Which stored copies of keys (rows of columns key, loc_partition, loc_file_id) live on: on a
merge-on-read table a log file may have deleted a key its base file still holds
(`upsertlake.layout.slice_keys.SliceKeys.live`)."""


@dataclass(frozen=True)
class IndexUpdate:
    """What a committed write changed, for indexes that keep state between writes."""

    instant_time: str
    inserted: pa.Table  # columns: key, partition, file_id
    deleted: pa.Table  # columns: key, partition, file_id
    deleted_in_logs: pa.Table | None = None  # the same columns: keys a log file's delete block deleted
    # A Spark write's further changes, kept off the driver: files its write tasks staged on the
    # table's storage (`engine.bucket_writer.stage_keys`) -> the data files whose rows count (a
    # re-merge wrote some buckets again, from files staged anew).
    staged: Mapping[str, frozenset[str]] = field(default_factory=dict)


class Index(ABC):
    """Tags records with their current file group."""

    def __init__(self, is_global: bool) -> None:
        self.is_global = is_global

    @property
    def learns_writes(self) -> bool:
        """Whether `update` learns anything (an index that keeps state between writes)."""
        return False

    @property
    def reads_all_partitions(self) -> bool:
        """Whether tagging reads every partition's files (a global index), not the batch's only."""
        return self.is_global

    def requires_tagging(self, operation: Operation) -> bool:
        """Insert-only operations skip the lookup, as in Hudi."""
        return operation.looks_up

    @abstractmethod
    def tag(
        self, keys: pa.Array, partitions: pa.Array, view: FileSystemView, unique: bool = False,
        live: LiveCopies | None = None,
    ) -> pa.Table:
        """One row per key with LOCATION_SCHEMA columns (nulls where the key is new). `unique`:
        no key is in the batch twice (within a partition, for an index that is not global).
        `live`: which stored copies count (the others are not found)."""

    def update(self, change: IndexUpdate, view: FileSystemView) -> None:  # noqa: B027 - a no-op by default
        """Learn a committed write; stateless indexes read the table instead and need nothing."""

    def stats(self) -> dict[str, int]:
        """Counters of the last `tag` (files considered, opened, ...), for explain and benchmarks."""
        return {}


Wanted = Callable[[BaseFile], tuple[pa.Array, np.ndarray]]  # a file's keys to look up, and their batch rows


def lookup_plan(
    keys: pa.Array, partitions: pa.Array, view: FileSystemView, is_global: bool
) -> tuple[list[BaseFile], Wanted]:
    """The latest base files that may hold the batch's keys, and for each file the keys to look
    up in it with their batch rows: every key (global), else its partition's."""
    if is_global:
        every = (keys, np.arange(len(keys), dtype=np.int64))
        return view.latest_base_files(view.partitions()), lambda bf: every
    rows = rows_by_partition(partitions)
    subsets: dict[str, tuple[pa.Array, np.ndarray]] = {}

    def wanted(bf: BaseFile) -> tuple[pa.Array, np.ndarray]:
        # Taken in the reading threads, once per partition (a race takes it twice, harmlessly).
        if bf.partition_path not in subsets:
            at = rows[bf.partition_path]
            subsets[bf.partition_path] = (keys.take(pa.array(at)), at)
        return subsets[bf.partition_path]

    return view.latest_base_files([p for p in view.partitions() if p in rows]), wanted


def read_file_keys(
    storage: Storage,
    files: Sequence[BaseFile],
    wanted: Wanted | None = None,
) -> pa.Table:
    """The record keys stored in `files`, with each key's location (partition, fileId, instant).

    With `wanted`, only the keys of each file that `wanted(file)` holds (its keys, and the batch
    row of each), and with each the batch row holding it (`row`; the first, if several do): the
    lookup in the reading threads both filters what the join sees (a batch updates few of the
    keys a file stores) and finds each key's row, so the join hashes no key again.
    """

    def one(bf: BaseFile) -> pa.Table:
        keys = storage.read_parquet(bf.path, columns=[RECORD_KEY]).column(0)
        keys = pc.cast(keys, pa.string())
        rows = {}
        if wanted is not None:
            want, want_rows = wanted(bf)
            at = np.asarray(
                pc.fill_null(pc.index_in(keys, value_set=want), -1).to_numpy(zero_copy_only=False), np.int64
            )
            hits = np.flatnonzero(at >= 0)
            keys = keys.take(pa.array(hits))
            rows = {LOOKUP_ROW: want_rows[at[hits]]}
        n = len(keys)
        return pa.table(
            {
                LOOKUP_KEY: keys,
                LOC_PARTITION: constant(bf.partition_path, n),
                LOC_FILE_ID: constant(bf.file_id, n),
                LOC_INSTANT: constant(bf.instant_time, n),
                **rows,
            }
        )

    empty = pa.table({LOOKUP_KEY: pa.array([], pa.string()), **{f.name: pa.array([], f.type) for f in LOCATION_SCHEMA}})
    if wanted is not None:
        empty = empty.append_column(LOOKUP_ROW, pa.array([], pa.int64()))
    if not files:
        return empty
    with ThreadPoolExecutor(max_workers=min(storage.read_threads, len(files))) as pool:
        tables = list(pool.map(one, files))
    return pa.concat_tables([empty, *tables])


def live_only(located: pa.Table, live: LiveCopies | None) -> pa.Table:
    """The stored copies `live` keeps (all of them without it)."""
    if live is None or not located.num_rows:
        return located
    keep = live(located)
    return located if keep.all() else located.filter(pa.array(keep))


def rows_by_partition(partitions: pa.Array) -> dict[str, np.ndarray]:
    """The batch's rows of each partition path (in batch order), with one pass instead of a scan
    per file: the paths are hashed to small codes and the codes sorted (not the strings)."""
    encoded = pc.dictionary_encode(partitions, null_encoding="encode")
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    order, bounds = group_rows(codes, len(encoded.dictionary))
    paths, starts, ends = encoded.dictionary.to_pylist(), bounds[:-1].tolist(), bounds[1:].tolist()
    return {p: order[lo:hi] for p, lo, hi in zip(paths, starts, ends)}


def join_locations(
    keys: pa.Array, partitions: pa.Array, located: pa.Table, is_global: bool, unique: bool = False
) -> pa.Table:
    """Left-join the batch's keys to stored key locations; one output row per input key, in order
    (a key repeated in the batch is tagged on every row).

    `located` holds the stored keys the batch holds, each with `row`, the batch row of its key
    (see read_file_keys). When the batch's keys are `unique` (in their partition, unless global)
    that row is the only one to tag; otherwise the batch's keys are numbered by one hash pass and
    every row of a stored key's number is tagged. A key stored more than once (duplicates made by
    plain inserts) takes, so that every index tags alike, the location in the record's own
    partition if there is one (a non-global index looks nowhere else), then the smallest
    (partition, fileId).
    """
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    partitions = partitions.combine_chunks() if isinstance(partitions, pa.ChunkedArray) else partitions
    n = len(keys)
    rows = np.asarray(located.column(LOOKUP_ROW).to_numpy(), dtype=np.int64)
    if unique:
        batch_key, stored_key, num_keys = np.arange(n, dtype=np.int64), rows, n
    else:
        batch_key = np.asarray(pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        stored_key, num_keys = batch_key[rows], int(batch_key.max()) + 1 if n else 0
    stored_rows = np.arange(len(rows), dtype=np.int64)
    if len(stored_rows) and np.bincount(stored_key, minlength=num_keys).max() == 1:
        # Each key stored once: a row's location is its key's, if in the right partition.
        by_key = np.full(num_keys, -1, dtype=np.int64)
        by_key[stored_key] = stored_rows
        source = by_key[batch_key] if n else np.zeros(0, dtype=np.int64)
        found = source >= 0
        if not is_global and found.any():
            at = np.flatnonzero(found)
            same = pc.equal(located.column(LOC_PARTITION).take(pa.array(source[at])), partitions.take(pa.array(at)))
            found[at] = np.asarray(pc.fill_null(same, False).to_numpy(zero_copy_only=False), dtype=bool)
    elif len(stored_rows):
        source, found = _pick_locations(batch_key, partitions, stored_rows, stored_key, located, is_global)
    else:
        source, found = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    take = pa.array(np.where(found, source, 0), mask=~found)
    return pa.table({f.name: located.column(f.name).take(take) for f in LOCATION_SCHEMA}, schema=LOCATION_SCHEMA)


def _pick_locations(
    batch_key: np.ndarray,
    partitions: pa.Array,
    stored_rows: np.ndarray,
    stored_key: np.ndarray,
    located: pa.Table,
    is_global: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(stored row, found) per batch row when some key is stored several times: every (row,
    stored copy) pair of the same key, ranked by own partition first, then (partition, fileId)."""
    n = len(batch_key)
    pairs = pa.table({"k": batch_key, LOOKUP_ROW: np.arange(n, dtype=np.int64)}).join(
        pa.table({"k": stored_key, "src": stored_rows}), keys="k", join_type="inner", use_threads=False
    )
    src = pairs.column("src").combine_chunks()
    loc_partition = located.column(LOC_PARTITION).take(src)
    own_partition = partitions.take(pairs.column(LOOKUP_ROW).combine_chunks())
    elsewhere = pc.fill_null(pc.not_equal(loc_partition, own_partition), True)
    ranked = pa.table(
        {
            LOOKUP_ROW: pairs.column(LOOKUP_ROW),
            "elsewhere": pc.cast(elsewhere, pa.int8()),
            "p": loc_partition,
            "f": located.column(LOC_FILE_ID).take(src),
            "src": src,
        }
    )
    if not is_global:
        ranked = ranked.filter(pc.equal(ranked.column("elsewhere"), 0))
    rows = ranked.column(LOOKUP_ROW).to_numpy()
    if len(sorted_unique(rows)) == len(rows):  # e.g. non-global, the key's other copies elsewhere
        first = np.arange(len(rows))
    else:
        order = [(LOOKUP_ROW, "ascending"), ("elsewhere", "ascending"), ("p", "ascending"), ("f", "ascending")]
        ranked = ranked.sort_by(order)
        rows = ranked.column(LOOKUP_ROW).to_numpy()
        first = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    source, found = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    source[rows[first]] = ranked.column("src").to_numpy()[first]
    found[rows[first]] = True
    return source, found
