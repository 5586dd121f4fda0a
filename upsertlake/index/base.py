"""The index interface: find where each incoming record lives now, and learn from each write.

`tag` returns one location row per input key — the (partition, fileId, instant) of the file
group holding that key, or nulls for a new key — so every index is interchangeable and the
tests can require that all of them tag identically.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.storage import Storage
from upsertlake.table.file_system_view import BaseFile, FileSystemView
from upsertlake.util.arrow import constant

LOCATION_SCHEMA = pa.schema(
    [("loc_partition", pa.string()), ("loc_file_id", pa.string()), ("loc_instant", pa.string())]
)
KEY_COLUMN = "_hoodie_record_key"


@dataclass(frozen=True)
class IndexUpdate:
    """What a committed write changed, for indexes that keep state between writes."""

    instant_time: str
    inserted: pa.Table  # columns: key, partition, file_id
    deleted: pa.Table  # columns: key, partition


class Index(ABC):
    """Tags records with their current file group."""

    def __init__(self, is_global: bool) -> None:
        self.is_global = is_global

    def requires_tagging(self, operation: str) -> bool:
        """Insert-only operations skip the lookup, as in Hudi."""
        return operation not in ("insert", "bulk_insert", "insert_overwrite", "insert_overwrite_table")

    @abstractmethod
    def tag(self, keys: pa.Array, partitions: pa.Array, view: FileSystemView) -> pa.Table:
        """One row per key with LOCATION_SCHEMA columns (nulls where the key is new)."""

    def update(self, change: IndexUpdate, view: FileSystemView) -> None:  # noqa: B027 - optional hook
        """Learn a committed write; stateless indexes read the table instead and need nothing."""

    def stats(self) -> dict[str, int]:
        """Counters of the last `tag` (files considered, opened, ...), for explain and benchmarks."""
        return {}


def candidate_partitions(partitions: pa.Array, view: FileSystemView, is_global: bool) -> list[str]:
    """The partitions whose files may hold the batch's keys."""
    if is_global:
        return view.partitions()
    present = set(pc.unique(partitions).to_pylist())
    return [p for p in view.partitions() if p in present]


def read_file_keys(storage: Storage, files: Sequence[BaseFile], threads: int = 2) -> pa.Table:
    """The record keys stored in `files`, with each key's location (partition, fileId, instant)."""

    def one(bf: BaseFile) -> pa.Table:
        keys = pq.read_table(storage.full_path(bf.path), columns=[KEY_COLUMN]).column(0)
        n = len(keys)
        return pa.table(
            {
                "key": pc.cast(keys, pa.string()),
                "loc_partition": constant(bf.partition_path, n),
                "loc_file_id": constant(bf.file_id, n),
                "loc_instant": constant(bf.instant_time, n),
            }
        )

    empty = pa.table({"key": pa.array([], pa.string()), **{f.name: pa.array([], f.type) for f in LOCATION_SCHEMA}})
    if not files:
        return empty
    with ThreadPoolExecutor(max_workers=threads) as pool:
        tables = list(pool.map(one, files))
    return pa.concat_tables([empty, *tables])


def join_locations(
    keys: pa.Array, partitions: pa.Array, located: pa.Table, is_global: bool
) -> pa.Table:
    """Left-join the batch's keys to stored key locations; one output row per input key, in order.

    The hash table is built on the (small) batch and probed with the (large) stored keys, which
    is several times faster than the other way round. A key stored twice (duplicates made by
    plain inserts) takes its first location.
    """
    n = len(keys)
    probe, value_set = located.column("key"), keys
    if not is_global and pc.count_distinct(keys).as_py() != n:
        # one key in two partitions of the batch: match on (partition, key) instead
        probe = pc.binary_join_element_wise(located.column("loc_partition"), probe, "\x00")
        value_set = pc.binary_join_element_wise(partitions, keys, "\x00")
    hit = np.asarray(pc.fill_null(pc.index_in(probe, value_set=value_set), -1).to_numpy(), dtype=np.int64)
    stored_rows = np.flatnonzero(hit >= 0)
    batch_rows = hit[stored_rows]
    if not is_global and len(stored_rows):
        same = pc.equal(
            located.column("loc_partition").take(pa.array(stored_rows)), pc.take(partitions, pa.array(batch_rows))
        )
        keep = np.asarray(pc.fill_null(same, False).to_numpy(zero_copy_only=False), dtype=bool)
        stored_rows, batch_rows = stored_rows[keep], batch_rows[keep]
    first_batch, first_at = np.unique(batch_rows, return_index=True)
    source = np.zeros(n, dtype=np.int64)
    source[first_batch] = stored_rows[first_at]
    found = np.zeros(n, dtype=bool)
    found[first_batch] = True
    take = pa.array(source, mask=~found)
    return pa.table({f.name: located.column(f.name).take(take) for f in LOCATION_SCHEMA}, schema=LOCATION_SCHEMA)
