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

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from upsertlake.storage import Storage
from upsertlake.table.file_system_view import BaseFile, FileSystemView
from upsertlake.util.arrow import constant, row_numbers

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

    A key stored twice (duplicates made by plain inserts) takes its first location.
    """
    batch = pa.table({"key": keys, "partition": partitions, "_row": row_numbers(len(keys))})
    if not is_global:
        located = located.append_column("partition", located.column("loc_partition"))
        on = ["key", "partition"]
    else:
        on = ["key"]
    joined = batch.join(located, keys=on, join_type="left outer", use_threads=True)
    if joined.num_rows != batch.num_rows:  # some key is stored in several file groups
        joined = joined.append_column("_j", row_numbers(joined.num_rows))
        firsts = joined.group_by("_row", use_threads=False).aggregate([("_j", "min")])
        joined = joined.take(firsts.column("_j_min"))
    joined = joined.sort_by("_row")
    return pa.table({f.name: joined.column(f.name) for f in LOCATION_SCHEMA}, schema=LOCATION_SCHEMA)
