"""Global indexes: what happens to a key that arrives with a new partition path.

Hudi merges the incoming record with the stored one first; if the incoming one wins the key
moves (a delete in the old partition, an insert in the new one) when `update.partition.path`
says so, else it is updated in place in its old partition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.enums import IndexType, MergeMode
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.layout.slice_keys import SliceKeys
from upsertlake.schema.columns import DELETE_FLAG, FORCE_FLAG, KEY, LOC_FILE_ID, LOC_PARTITION, LOOKUP_ROW, PARTITION
from upsertlake.schema.ordering import ordering_values
from upsertlake.timeline.operation import Operation
from upsertlake.util.arrow import constant


def route_global(
    records: pa.Table,
    locations: pa.Table,
    operation: Operation,
    cfg: Config,
    view: FileSystemView,
    ordering_fields: tuple[str, ...],
    slices: SliceKeys | None = None,
) -> tuple[pa.Table, pa.Table]:
    """A key found in another partition: delete it there and insert it in the new partition
    (`update.partition.path`), or update it in place in its old partition.

    As in Hudi, the incoming record is merged with the stored one first: under event-time ordering
    a stored record with the larger ordering value wins and stays where it is (the record is routed
    to it as an in-place update, which the merge then discards). On a merge-on-read table
    (`slices`) the stored record is the slice's merged one (a log may have updated it), as Hudi
    reads it (HoodieMergedReadHandle)."""

    def stored_wins(moved: pa.ChunkedArray) -> pa.Array:
        return _stored_wins(records, locations, moved, view, ordering_fields, slices)

    return route_moves(records, locations, operation, cfg, ordering_fields, stored_wins)


def route_moves(
    records: pa.Table,
    locations: pa.Table,
    operation: Operation,
    cfg: Config,
    ordering_fields: tuple[str, ...],
    stored_wins: Callable[[pa.ChunkedArray], pa.Array],
) -> tuple[pa.Table, pa.Table]:
    """`route_global` given how to learn, per moved record, whether the stored copy orders after
    it: the in-process engine reads the stored files, Spark joins the stored ordering values."""
    moved = pc.fill_null(pc.not_equal(locations.column(LOC_PARTITION), records.column(PARTITION)), False)
    if operation is Operation.DELETE:
        # Deletes go wherever the key lives.
        return _set(records, PARTITION, locations.column(LOC_PARTITION)), locations
    if not pc.any(moved).as_py():
        return records, locations
    if not _update_partition_path(cfg):
        stay = moved
    elif ordering_fields and cfg.get(opt.RECORD_MERGE_MODE) is MergeMode.EVENT_TIME:
        stay = stored_wins(moved)
    else:
        stay = None
    if stay is not None and pc.any(stay).as_py():
        in_place = pc.if_else(stay, locations.column(LOC_PARTITION), records.column(PARTITION))
        records = _set(records, PARTITION, in_place)
        moved = pc.and_(moved, pc.invert(stay))
        if not pc.any(moved).as_py():
            return records, locations
    old_home = records.filter(moved)
    old_home = _set(old_home, PARTITION, locations.column(LOC_PARTITION).filter(moved))
    old_home = _set(old_home, DELETE_FLAG, constant(True, old_home.num_rows, pa.bool_()))
    old_home = _set(old_home, FORCE_FLAG, constant(True, old_home.num_rows, pa.bool_()))
    no_location = pa.scalar(None, pa.string())
    new_locations = pa.table(
        {name: pc.if_else(moved, no_location, locations.column(name)) for name in locations.column_names}
    )
    return pa.concat_tables([records, old_home]), pa.concat_tables([new_locations, locations.filter(moved)])


def stored_orders_after(stored: pa.Array | pa.ChunkedArray, incoming: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per record: the stored ordering value is larger (a null incoming value loses to any)."""
    with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
        stored = stored.cast(incoming.type)
    larger = pc.fill_null(pc.greater(stored, incoming), False)
    larger = pc.or_(larger, pc.and_(pc.is_valid(stored), pc.is_null(incoming)))
    return np.asarray(larger.to_numpy(zero_copy_only=False), dtype=bool)


def _update_partition_path(cfg: Config) -> bool:
    """Does a key arriving with a new partition path move there? Each global index reads its own
    option, as in Hudi (GLOBAL_SIMPLE the simple one, GLOBAL_BLOOM the bloom one); our
    GLOBAL_INMEMORY has no Hudi option, so it moves only when neither option says no."""
    kind = cfg.get(opt.INDEX_TYPE).local
    simple, bloom = cfg.get(opt.SIMPLE_INDEX_UPDATE_PARTITION_PATH), cfg.get(opt.BLOOM_INDEX_UPDATE_PARTITION_PATH)
    if kind is IndexType.RECORD_INDEX:
        return cfg.get(opt.RECORD_INDEX_UPDATE_PARTITION_PATH)
    return {IndexType.SIMPLE: simple, IndexType.BLOOM: bloom}.get(kind, simple and bloom)


def _stored_wins(
    records: pa.Table, locations: pa.Table, moved: pa.ChunkedArray, view: FileSystemView, fields: tuple[str, ...],
    slices: SliceKeys | None,
) -> pa.Array:
    """Per record: is it a moved key whose stored record orders after it (event time)? Reads the
    key and ordering columns of only the file groups holding moved keys (merged with their logs
    when their slice has some)."""
    rows = np.flatnonzero(np.asarray(pc.fill_null(moved, False).to_numpy(zero_copy_only=False), dtype=bool))
    wins = np.zeros(records.num_rows, dtype=bool)
    if not all(f in records.column_names for f in fields) or not len(rows):
        return pa.array(wins)
    at = pa.array(rows)
    groups = locations.select([LOC_PARTITION, LOC_FILE_ID]).take(at).append_column(LOOKUP_ROW, at)
    latest = view.latest_by_group()
    incoming_all = ordering_values(records, fields)
    for group in groups.group_by([LOC_PARTITION, LOC_FILE_ID]).aggregate([(LOOKUP_ROW, "list")]).to_pylist():
        group_rows = group[f"{LOOKUP_ROW}_list"]  # Arrow names an aggregate column by its function
        sub = pa.array(group_rows, pa.int64())
        keys = records.column(KEY).take(sub)
        file_group = (group[LOC_PARTITION], group[LOC_FILE_ID])
        merged = slices.orderings(file_group, keys) if slices is not None else None
        bf = latest.get(file_group)
        if merged is not None:
            stored_file = merged
        elif bf is not None:
            parquet = view.storage.parquet_file(bf.path)
            known = all(f in parquet.schema_arrow.names for f in fields)
            stored_file = parquet.read(columns=[KEY, *fields]) if known else None
        else:
            stored_file = None
        if stored_file is None or not all(f in stored_file.column_names for f in fields):
            continue
        pos = pc.index_in(keys, value_set=pc.cast(stored_file.column(KEY), pa.string()))
        incoming = incoming_all.take(sub)
        stored = ordering_values(stored_file, fields).take(pos)
        wins[group_rows] = stored_orders_after(stored, incoming)
    return pa.array(wins)


def _set(data: pa.Table, name: str, column: pa.Array | pa.ChunkedArray) -> pa.Table:
    return data.set_column(data.schema.get_field_index(name), name, column)
