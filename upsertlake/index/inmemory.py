"""The in-memory hash index: built from the table once per process, then kept up to date by writes.

Keys are held as xxhash64 values in one sorted numpy array, with the file group of each key in a
parallel array, so a batch is tagged with one `searchsorted`; a hash match is confirmed against
the stored key text (64-bit collisions are rare, not impossible). The state is shared by every
table object of the process that points at the same path, and it is rebuilt whenever the
timeline shows a completed write it has not applied (another process wrote, or an instant was
rolled back).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from upsertlake.index.base import (
    LOCATION_SCHEMA,
    Index,
    IndexUpdate,
    LiveCopies,
    join_locations,
    live_only,
    read_file_keys,
)
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.schema.columns import (
    LOC_FILE_ID,
    LOC_INSTANT,
    LOC_PARTITION,
    LOOKUP_KEY,
    LOOKUP_ROW,
    UPDATE_FILE_ID,
    UPDATE_PARTITION,
)


def hash_keys(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """xxhash64 of each key's UTF-8 bytes (one C call per key: there is no batch API)."""
    digest = xxhash.xxh64_intdigest
    # xxhash >= 4 hashes bytes only (str must be encoded first)
    return np.fromiter((digest(k.encode()) for k in keys.to_pylist()), dtype=np.uint64, count=len(keys))


@dataclass
class _State:
    applied: frozenset[str]
    hashes: np.ndarray  # uint64, sorted
    groups: np.ndarray  # int32 index into `file_groups`, aligned with hashes
    keys: pa.Array  # the lookup key text, aligned with hashes
    file_groups: list[tuple[str, str]]

    def group_id(self, file_group: tuple[str, str]) -> int:
        try:
            return self.file_groups.index(file_group)
        except ValueError:
            self.file_groups.append(file_group)
            return len(self.file_groups) - 1


def _group_ids(partitions: pa.ChunkedArray, file_ids: pa.ChunkedArray) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The distinct (partition, fileId) pairs and, per row, the index of its pair."""
    joined = pc.binary_join_element_wise(partitions, file_ids, "\x00")
    encoded = pc.dictionary_encode(joined)
    encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
    pairs = [tuple(v.split("\x00", 1)) for v in encoded.dictionary.to_pylist()]
    return pairs, np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int32)


# One state per table path (and global or not) for the whole process, as Hudi's
# HoodieInMemoryHashIndex keeps its map in a static field: every writer of the table in this process
# shares it, whichever table object or storage it writes through
# (docs/how-to/choose-index-and-table-type.md: "built once per process").
_STATES: dict[tuple[str, bool], _State] = {}
_LOCK = threading.Lock()


class InMemoryIndex(Index):
    def __init__(self, is_global: bool = False) -> None:
        super().__init__(is_global)
        self._stats: dict[str, int] = {}

    @property
    def reads_all_partitions(self) -> bool:
        return True  # it keeps, and checks, the keys of the whole table

    @property
    def learns_writes(self) -> bool:
        return True

    def _lookup_keys(self, keys: pa.Array, partitions: pa.Array) -> pa.Array:
        if self.is_global:
            return keys
        return pc.binary_join_element_wise(partitions, keys, "\x00")

    def _state(self, view: FileSystemView) -> tuple[_State, int]:
        """The current state, and the number of files read to (re)build it (0 when it was current)."""
        current = frozenset(i.time for i in view.visible_instants)
        slot = (view.storage.base, self.is_global)
        state = _STATES.get(slot)
        if state is None or state.applied != current:
            state = self._build(view, current)
            _STATES[slot] = state
            return state, len(view.latest_base_files())
        return state, 0

    def _build(self, view: FileSystemView, applied: frozenset[str]) -> _State:
        stored = read_file_keys(view.storage, view.latest_base_files())
        file_groups, groups = _group_ids(stored.column(LOC_PARTITION), stored.column(LOC_FILE_ID))
        keys = self._lookup_keys(stored.column(LOOKUP_KEY), stored.column(LOC_PARTITION))
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        hashes = hash_keys(keys)
        order = np.argsort(hashes, kind="stable")
        self._stats["keys_loaded"] = stored.num_rows
        return _State(applied, hashes[order], groups[order], keys.take(pa.array(order)), file_groups)

    def tag(
        self, keys: pa.Array, partitions: pa.Array, view: FileSystemView, unique: bool = False,
        live: LiveCopies | None = None,
    ) -> pa.Table:
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        partitions = partitions.combine_chunks() if isinstance(partitions, pa.ChunkedArray) else partitions
        with _LOCK:
            state, files_read = self._state(view)
            lookup = self._lookup_keys(keys, partitions)
            hashes = hash_keys(lookup)
            lo = np.searchsorted(state.hashes, hashes, side="left")
            hi = np.searchsorted(state.hashes, hashes, side="right")
            single = hi - lo == 1
            found = single.copy()
            if found.any():
                at = np.flatnonzero(found)
                same = pc.equal(state.keys.take(pa.array(lo[at])), lookup.take(pa.array(at)))
                found[at] = np.asarray(pc.fill_null(same, False).to_numpy(zero_copy_only=False), dtype=bool)
            at_lo = state.groups[np.minimum(lo, len(state.groups) - 1)] if len(state.groups) else 0
            groups = np.where(found, at_lo, 0)
            fgs = state.file_groups or [("", "")]
            group_partitions = pa.array([fg[0] for fg in fgs], pa.string())
            group_ids = pa.array([fg[1] for fg in fgs], pa.string())
            if live is not None and found.any():  # a single copy a log deleted is not found
                at = np.flatnonzero(found)
                of = pa.array(groups[at])
                copies = pa.table({LOOKUP_KEY: keys.take(pa.array(at)), LOC_PARTITION: group_partitions.take(of),
                                   LOC_FILE_ID: group_ids.take(of)})
                found[at] = live(copies)
            several = np.flatnonzero(hi - lo > 1)
            if len(several):  # a stored duplicate (or a 64-bit hash collision): rank the copies
                picked = self._pick(state, keys, partitions, lookup, several, lo, hi, live)
                found[several] = picked >= 0
                groups[several] = np.maximum(picked, 0)
            latest = {bf.file_group: bf.instant_time for bf in view.latest_base_files()}
            take = pa.array(groups, mask=~found)
            columns = {
                LOC_PARTITION: group_partitions.take(take),
                LOC_FILE_ID: group_ids.take(take),
                LOC_INSTANT: pa.array([latest.get(fg) for fg in fgs], pa.string()).take(take),
            }
        self._stats = {"files_opened": files_read, "keys_matched": int(found.sum())}
        return pa.table(columns, schema=LOCATION_SCHEMA)

    def _pick(
        self, state: _State, keys: pa.Array, partitions: pa.Array, lookup: pa.Array,
        rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, live: LiveCopies | None,
    ) -> np.ndarray:
        """The group id (-1: none) of each of `rows`, whose hash matches several stored entries,
        chosen among the live entries holding the very key by the rule of `join_locations`."""
        counts = hi[rows] - lo[rows]
        owner = np.repeat(np.arange(len(rows)), counts)  # index into `rows` of each candidate
        entry = np.repeat(lo[rows], counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        same = pc.equal(state.keys.take(pa.array(entry)), lookup.take(pa.array(rows[owner])))
        keep = np.asarray(pc.fill_null(same, False).to_numpy(zero_copy_only=False), dtype=bool)
        owner, entry = owner[keep], entry[keep]
        fgs = state.file_groups
        group_of_entry = state.groups[entry]
        candidates = pa.table(
            {
                LOOKUP_KEY: keys.take(pa.array(rows[owner])),
                LOC_PARTITION: pa.array([fgs[g][0] for g in group_of_entry], pa.string()),
                LOC_FILE_ID: pa.array([fgs[g][1] for g in group_of_entry], pa.string()),
                LOC_INSTANT: pa.array(group_of_entry.astype(str), pa.string()),  # carries the group id
                LOOKUP_ROW: owner,
            }
        )
        candidates = live_only(candidates, live)
        chosen = join_locations(keys.take(pa.array(rows)), partitions.take(pa.array(rows)), candidates, self.is_global)
        ids = chosen.column(LOC_INSTANT).to_pylist()
        return np.array([-1 if g is None else int(g) for g in ids], dtype=np.int64)

    def update(self, change: IndexUpdate, view: FileSystemView) -> None:
        """Apply a committed write: drop deleted keys, add inserted ones, mark the instant applied."""
        with _LOCK:
            slot = (view.storage.base, self.is_global)
            state = _STATES.get(slot)
            if state is None:
                return
            expected = frozenset(i.time for i in view.visible_instants if i.time != change.instant_time)
            if state.applied != expected:
                del _STATES[slot]  # it missed another write: rebuild on next use
                return
            keep = np.ones(len(state.hashes), dtype=bool)
            if change.deleted.num_rows:
                gone = self._lookup_keys(change.deleted.column(LOOKUP_KEY), change.deleted.column(UPDATE_PARTITION))
                gone = gone.combine_chunks() if isinstance(gone, pa.ChunkedArray) else gone
                candidates = np.isin(state.hashes, hash_keys(gone))
                if candidates.any():
                    # Only the copy in the file group the key was deleted from: a duplicate of the
                    # key in another file group (or partition, when global) is still stored.
                    where = {fg: i for i, fg in enumerate(state.file_groups)}
                    deleted = change.deleted
                    pairs = zip(
                        deleted.column(UPDATE_PARTITION).to_pylist(), deleted.column(UPDATE_FILE_ID).to_pylist()
                    )
                    deleted_groups = [where.get(fg, -1) for fg in pairs]
                    idx = np.flatnonzero(candidates)
                    stored = pc.binary_join_element_wise(
                        pa.array(state.groups[idx].astype(str)), state.keys.take(pa.array(idx)), "\x00"
                    )
                    wanted = pc.binary_join_element_wise(pa.array(np.array(deleted_groups).astype(str)), gone, "\x00")
                    hit = pc.is_in(stored, value_set=wanted)
                    keep[idx[np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)]] = False
            ins = change.inserted
            new_keys = self._lookup_keys(ins.column(LOOKUP_KEY), ins.column(UPDATE_PARTITION))
            new_keys = new_keys.combine_chunks() if isinstance(new_keys, pa.ChunkedArray) else new_keys
            local_groups, local_ids = _group_ids(ins.column(UPDATE_PARTITION), ins.column(UPDATE_FILE_ID))
            to_state = np.array([state.group_id(fg) for fg in local_groups] or [0], dtype=np.int32)
            new_groups = to_state[local_ids]
            hashes = np.concatenate([state.hashes[keep], hash_keys(new_keys)])
            groups = np.concatenate([state.groups[keep], new_groups])
            keys = pa.concat_arrays([state.keys.filter(pa.array(keep)), new_keys.cast(pa.string())])
            order = np.argsort(hashes, kind="stable")
            state.hashes, state.groups, state.keys = hashes[order], groups[order], keys.take(pa.array(order))
            state.applied = state.applied | {change.instant_time}

    def stats(self) -> dict[str, int]:
        return dict(self._stats)
