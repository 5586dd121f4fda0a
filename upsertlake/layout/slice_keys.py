"""What a merge-on-read slice holds of stored keys once its log files are merged, for writers.

The indexes find keys in base files, but a log file may have deleted a key its base file still
holds, or changed its ordering value. Hudi tags a global index's records with the merged record
of their slice (HoodieIndexUtils.getExistingRecords, through HoodieMergedReadHandle): a key whose
merged record is a delete is not found. We do so under every index: a key deleted in a slice's
logs is an insert, which goes to another file group (under the bucket index, whose file group a
key cannot leave, its slice is rewritten), so that its new record never follows the delete in
one slice. There, readers would merge it wrongly: after delete() the slice's base record wins
again over a later record with a smaller ordering value (Hudi merges the log first, then the base
record with the log's winner), and a delete's ordering value beats a later record's smaller one,
although on copy-on-write the key was gone and the record is simply inserted.

Only slices with log files are read. First the keys their delete blocks and the data blocks whose
schema has `_hoodie_is_deleted` delete (a key no delete names is live, whatever else the logs
hold): what each log file says so is kept by the storage, keyed by the file's path and size (a
log file is never rewritten; an appended one grows), so a stream of writes reads each log file
once for this, not once per write; then, for the keys some delete names, the base file's key,
ordering and `_hoodie_is_deleted` columns and the log records of those keys, merged as readers
merge them (`merge_slice`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.layout.file_system_view import FileSlice, FileSystemView, LogFile
from upsertlake.layout.slice_reader import Merge, listed, log_file, log_files
from upsertlake.logfile import Block, CommandBlock, DataBlock, DeleteBlock, block_keys
from upsertlake.logfile.merge import merge_slice
from upsertlake.logfile.reader import read_logs
from upsertlake.schema.columns import DELETED_KEY, IS_DELETED, KEY, LOC_FILE_ID, LOC_PARTITION, LOOKUP_KEY
from upsertlake.storage import Storage
from upsertlake.util.arrays import group_rows

_NONE = pa.array([], pa.string())
LOG_DELETES_KEPT = 64 * 2**20  # bytes of deleted keys kept per storage (`LogDeletes`)


@dataclass(frozen=True)
class LogDeletes:
    """What one log file says of deletes: the keys each of its data and delete blocks deletes, by
    the block's instant, and the instants its command blocks roll back."""

    deleted: tuple[tuple[str, pa.Array], ...]
    rolled_back: frozenset[str]

    @classmethod
    def of(cls, blocks: list[Block]) -> LogDeletes:
        deleted = tuple((b.instant, block_keys([b])[1]) for b in blocks if isinstance(b, (DataBlock, DeleteBlock)))
        return cls(tuple(d for d in deleted if len(d[1])),
                   frozenset(b.target_instant for b in blocks if isinstance(b, CommandBlock)))

    @property
    def nbytes(self) -> int:
        return 64 + sum(int(keys.nbytes) for _, keys in self.deleted)


def log_deletes(storage: Storage, log: LogFile) -> LogDeletes | None:
    """What a log file says of deletes (None: gone, of a write never committed), read once per
    storage: only its delete blocks and the data blocks whose schema has `_hoodie_is_deleted` are
    decoded."""
    cache = storage.cache("log file deletes", LOG_DELETES_KEPT, lambda d: d.nbytes)
    key = (log.path, log.size)
    said = cache.get(key)
    if said is None:
        read = log_file(storage, log)
        if read is None:
            return None
        said = LogDeletes.of(read_logs([read], data_schemas=lambda schema: IS_DELETED in schema))
        cache.put(key, said)
    return said


def named_deletes(storage: Storage, sl: FileSlice, merge: Merge) -> pa.Array:
    """The keys the slice's live delete entries name: of instants the merge sees, not rolled back
    by a command block of the slice (`upsertlake.logfile.merge.live_blocks`)."""
    said = [d for d in (log_deletes(storage, log) for log in sl.logs) if d is not None]
    rolled_back = frozenset().union(*(d.rolled_back for d in said))
    named = [
        keys for d in said for instant, keys in d.deleted if instant in merge.instants and instant not in rolled_back
    ]
    return pa.concat_arrays(named) if named else _NONE


def deleted_keys(storage: Storage, sl: FileSlice, merge: Merge, keys: pa.Array) -> pa.Array:
    """Those of `keys` (distinct) that some delete in the slice's logs names and whose merged
    record is a delete: gone from the slice, whatever its base file holds."""
    if not sl.logs or not len(keys):
        return _NONE
    named = named_deletes(storage, sl, merge)
    if not len(named):
        return _NONE
    candidates = keys.filter(pc.is_in(keys, value_set=named))
    if not len(candidates):
        return _NONE
    live = _merged(storage, sl, merge, candidates, read_logs(log_files(storage, sl), merge.instants.__contains__))
    return candidates.filter(pc.invert(pc.is_in(candidates, value_set=live.column(KEY))))


def live_orderings(storage: Storage, sl: FileSlice, merge: Merge, keys: pa.Array) -> pa.Table:
    """(key, ordering value) of those of `keys` (distinct) live in the merged slice: the stored
    record a global index's moved record competes with."""
    blocks = read_logs(log_files(storage, sl), merge.instants.__contains__) if sl.logs else []
    return _merged(storage, sl, merge, keys, blocks)


def live_in_slice(
    storage: Storage, sl: FileSlice, merge: Merge, stored: pa.Table, key: str = KEY, ordering: Sequence[str] = ()
) -> pa.Table:
    """The rows of `stored` (column `key`: keys the slice's base file holds; `ordering`: the
    ordering fields among its columns, their stored values) that the merged slice still holds,
    with its ordering values (Spark's tagging reads a slice's base file keys in a task and passes
    them through here)."""
    keys = pc.cast(stored.column(key), pa.string())
    unique = pc.unique(keys)
    gone = deleted_keys(storage, sl, merge, unique)
    if len(gone):
        keep = pc.invert(pc.is_in(keys, value_set=gone))
        stored, keys = stored.filter(keep), keys.filter(keep)
    if not ordering or not sl.logs or not merge.ordering_fields:
        return stored
    merged = live_orderings(storage, sl, merge, unique)
    at = pc.index_in(keys, value_set=pc.cast(merged.column(KEY), pa.string()))
    for name in ordering:
        if name in merged.column_names:
            values = merged.column(name).take(at).cast(stored.schema.field(name).type)
            stored = stored.set_column(stored.schema.get_field_index(name), name, values)
    return stored


def _merged(storage: Storage, sl: FileSlice, merge: Merge, keys: pa.Array, blocks: list[Block]) -> pa.Table:
    """The slice's live records of `keys`, as (key, ordering value): the base file's and the
    logs' records of those keys only, their key, ordering and delete columns only, merged."""
    wanted = [KEY, *merge.ordering_fields, IS_DELETED]
    base = None
    if sl.base is not None:
        with listed(storage, sl.base.path, sl.base.instant_time):
            parquet = storage.parquet_file(sl.base.path)
            base = _only(parquet.read(columns=[c for c in wanted if c in parquet.schema_arrow.names]), keys)
    blocks = [_block_of(b, keys, wanted) for b in blocks]
    merged = merge_slice(base, blocks, KEY, merge.ordering_fields, merge.mode, merge.instants, ordered=False)
    if KEY not in merged.column_names:  # nothing but deletes
        return pa.table({KEY: _NONE})
    return merged.select([c for c in wanted if c != IS_DELETED and c in merged.column_names])


def _block_of(block: Block, keys: pa.Array, columns: list[str]) -> Block:
    """A block's entries of `keys` only (data blocks: only `columns`)."""
    if isinstance(block, DataBlock):
        records = block.records.select([c for c in columns if c in block.records.column_names])
        return replace(block, records=_only(records, keys))
    if isinstance(block, DeleteBlock):
        return replace(block, keys=block.keys.filter(pc.is_in(block.keys.column(DELETED_KEY), value_set=keys)))
    return block


def _only(records: pa.Table, keys: pa.Array) -> pa.Table:
    return records.filter(pc.is_in(pc.cast(records.column(KEY), pa.string()), value_set=keys))


@dataclass
class SliceKeys:
    """One write's look at the stored keys of its view's slices with log files (see the module
    doc): `live` is what an index takes to leave out the copies of keys that logs deleted."""

    view: FileSystemView
    merge: Merge
    _slices: dict[str, dict[tuple[str, str], FileSlice]] = field(default_factory=dict)

    def with_logs(self, partitions: list[str]) -> dict[tuple[str, str], FileSlice]:
        """The slices of `partitions` that have log files, by file group."""
        missing = [p for p in partitions if p not in self._slices]
        if missing:
            for p in missing:
                self._slices[p] = {}
            for sl in self.view.latest_file_slices(missing):
                if sl.logs:
                    self._slices[sl.partition_path][sl.file_group] = sl
        return {g: sl for p in partitions for g, sl in self._slices[p].items()}

    def live(self, located: pa.Table) -> np.ndarray:
        """Per stored location (columns key, loc_partition, loc_file_id): does the key live on in
        its file group's slice? A copy in a slice without log files does."""
        if not located.num_rows:
            return np.ones(0, dtype=bool)
        slices = self.with_logs(pc.unique(located.column(LOC_PARTITION)).to_pylist())
        return live_copies(self.view.storage, self.merge, located, slices)

    def orderings(self, group: tuple[str, str], keys: pa.Array) -> pa.Table | None:
        """(key, ordering value) of `keys` live in the group's merged slice; None when the slice
        has no log files (its base file's values stand)."""
        sl = self.with_logs([group[0]]).get(group)
        if sl is None:
            return None
        return live_orderings(self.view.storage, sl, self.merge, pc.unique(pc.cast(keys, pa.string())))


def live_copies(
    storage: Storage, merge: Merge, located: pa.Table, slices: Mapping[tuple[str, str], FileSlice]
) -> np.ndarray:
    """`SliceKeys.live` over the given slices with log files (by file group): which stored
    copies (columns key, loc_partition, loc_file_id) live on in their slices. Spark's tasks call
    it with the slices the driver listed."""
    alive = np.ones(located.num_rows, dtype=bool)
    rows = _rows_by_group(located, slices) if located.num_rows and slices else {}
    if not rows:
        return alive

    def dead(group: tuple[str, str]) -> np.ndarray:
        at = rows[group]
        keys = pc.cast(located.column(LOOKUP_KEY).take(pa.array(at)), pa.string())
        gone = deleted_keys(storage, slices[group], merge, pc.unique(keys))
        found = np.asarray(pc.is_in(keys, value_set=gone).to_numpy(zero_copy_only=False), dtype=bool)
        return cast(np.ndarray, at[found])

    groups = list(rows)
    if len(groups) == 1:
        found = [dead(groups[0])]
    else:
        with ThreadPoolExecutor(max_workers=min(storage.read_threads, len(groups))) as pool:
            found = list(pool.map(dead, groups))
    for at in found:
        alive[at] = False
    return alive


def _rows_by_group(located: pa.Table, slices: Mapping[tuple[str, str], FileSlice]) -> dict[tuple[str, str], np.ndarray]:
    """The rows of `located` in each of the file groups `slices` holds."""
    groups = list(slices)
    names = pc.binary_join_element_wise(located.column(LOC_PARTITION), located.column(LOC_FILE_ID), "\x00")
    code = pc.index_in(names, value_set=pa.array([f"{p}\x00{f}" for p, f in groups], pa.string()))
    codes = np.asarray(pc.fill_null(code, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    inside = np.flatnonzero(codes >= 0)
    order, bounds = group_rows(codes[inside], len(groups))
    return {g: inside[order[bounds[i] : bounds[i + 1]]] for i, g in enumerate(groups) if bounds[i + 1] > bounds[i]}
