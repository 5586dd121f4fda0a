"""Step 3 of a write: tag each record with the file group that holds its key (or none: an insert).

Its own module because every action tags alike (Hudi's HoodieWriteHelper.tag) before its own
partitioner decides where the records go. On a merge-on-read table a key counts as stored in a
slice only while the slice's merged records hold it (`upsertlake.layout.slice_keys`).
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config import Config, option_list
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig
from upsertlake.engine.global_routing import route_global
from upsertlake.engine.prepare import PreparedBatch
from upsertlake.errors import ConfigError
from upsertlake.index import check_bucket_index_fields, make_index
from upsertlake.index.base import Index
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.layout.keygen import DEFAULT_PARTITION
from upsertlake.layout.slice_keys import SliceKeys
from upsertlake.layout.slice_reader import Merge
from upsertlake.schema.columns import DELETE_FLAG, KEY, LOC_FILE_ID, LOC_INSTANT, LOC_PARTITION, PARTITION
from upsertlake.timeline.operation import Operation
from upsertlake.util.arrow import constant

log = logging.getLogger(__name__)


def table_index(cfg: Config, table_config: TableConfig) -> Index:
    """The index `hoodie.index.type` names for this table: a BUCKET index hashes the record key
    fields unless `hoodie.bucket.index.hash.field` names some of them."""
    named = option_list(cfg.get(opt.BUCKET_INDEX_HASH_FIELD))
    key_fields = list(table_config.record_key_fields)
    if cfg.bucket_index:
        check_bucket_index_fields(named, key_fields)
        if cfg.get(opt.CLUSTERING_INLINE):
            raise ConfigError(f"{opt.CLUSTERING_INLINE.key}=true cannot go with hoodie.index.type=BUCKET: "
                              "clustering would merge buckets' file groups into groups no bucket names")
    return make_index(cfg.get(opt.INDEX_TYPE), cfg.get(opt.BUCKET_INDEX_NUM_BUCKETS), named or key_fields)


def slice_merge(table_config: TableConfig, view: FileSystemView) -> Merge | None:
    """How readers merge the slices `view` sees (None on a copy-on-write table): what a write's
    tagging must take a slice's keys to be."""
    if not table_config.is_merge_on_read:
        return None
    visible = frozenset(i.time for i in view.visible_instants)
    return Merge(table_config.ordering_fields, table_config.merge_mode, visible)


def tag(
    batch: PreparedBatch,
    index: Index,
    view: FileSystemView,
    operation: Operation,
    cfg: Config,
    ordering_fields: tuple[str, ...],
    merge: Merge | None = None,
) -> tuple[pa.Table, pa.Table]:
    """The batch's records that are written, and beside them their locations (`loc_partition`,
    `loc_file_id`, `loc_instant`: null for an insert). A delete of a key that is not stored is
    dropped; a global index routes records whose partition changed. `merge`: how the slices of a
    merge-on-read table merge (`slice_merge`): a key their logs deleted is not stored there."""
    records = batch.records
    if not index.requires_tagging(operation) or records.num_rows == 0:
        empty = constant(None, records.num_rows)
        return records, pa.table({LOC_PARTITION: empty, LOC_FILE_ID: empty, LOC_INSTANT: empty})
    unique = batch.distinct.unique_for(index.is_global)
    slices = SliceKeys(view, merge) if merge is not None else None
    live = slices.live if slices is not None else None
    locations = index.tag(records.column(KEY), records.column(PARTITION), view, unique, live)
    if index.is_global:
        records, locations = route_global(records, locations, operation, cfg, view, ordering_fields, slices)
    # A delete of a key that is not stored is nothing.
    keep = pc.invert(pc.and_(records.column(DELETE_FLAG), pc.is_null(locations.column(LOC_FILE_ID))))
    if not pc.all(keep).as_py():
        records, locations = records.filter(keep), locations.filter(keep)
    return records, locations


def log_default_partition(table_config: TableConfig, batch: PreparedBatch) -> None:
    """Hudi writes records with a null or empty partition value to __HIVE_DEFAULT_PARTITION__;
    so do we, but say so once per write (here, on the driver, also for Spark writes)."""
    if not table_config.partition_fields or batch.records.num_rows == 0:
        return
    count = pc.sum(pc.match_substring(batch.partitions, DEFAULT_PARTITION)).as_py() or 0
    if count:
        fields = ", ".join(table_config.partition_fields)
        log.warning(
            "%d record(s) have a null or empty partition value (%s): they go to partition %s",
            count, fields, DEFAULT_PARTITION,
        )
