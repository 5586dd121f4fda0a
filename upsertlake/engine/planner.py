"""Steps 2-5 of a write, before any file is written: prepare (validate, key, deduplicate), tag,
profile, partition. What the in-process write executes, what `explain` reports, and what a Spark
write computes from counts (its executors prepare and tag the records)."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.table_options import check_against_table
from upsertlake.engine.bucketing import assign_buckets, upsert_partitioner
from upsertlake.engine.bulk_insert import bulk_insert_sort
from upsertlake.engine.context import WriteContext
from upsertlake.engine.prepare import PreparedBatch, PrepareSpec
from upsertlake.engine.slice_routing import rewritten_slices
from upsertlake.engine.tag import log_default_partition, slice_merge, table_index, tag
from upsertlake.engine.write_plan import Progress, Tagged, WritePlan, stage, view_scope
from upsertlake.index import BucketIndex
from upsertlake.index.base import Index
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.layout.keygen import stored_key_spelling
from upsertlake.partitioner import BucketPartitioner, UpsertPartitioner, WorkloadProfile
from upsertlake.schema import avro_to_arrow
from upsertlake.schema.columns import KEY, LOC_FILE_ID, LOC_INSTANT, PARTITION
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.operation import Operation


def prepare_spec(ctx: WriteContext, operation: Operation, cfg: Config, timeline: Timeline) -> PrepareSpec:
    """How step 2 (validate, key and deduplicate a batch) runs for this table and these options
    (Spark runs it on its executors), with the table's schema as of `timeline`."""
    check_against_table(cfg, ctx.table_config)
    schema_json = timeline.latest_schema() or ctx.table_config.create_schema
    return PrepareSpec(
        table_config=stored_key_spelling(ctx.storage, timeline, ctx.table_config),
        table_schema=avro_to_arrow(schema_json) if schema_json else None,
        operation=operation,
        combine=cfg.get(operation.combine_option),
        dedup_by_key_only=cfg.global_index,
        allow_missing_columns=cfg.get(opt.WRITE_SET_NULL_FOR_MISSING_COLUMNS),
    )


def plan_batch(
    ctx: WriteContext, index: Index, operation: Operation, batch: PreparedBatch, cfg: Config, timeline: Timeline,
    progress: Progress | None = None, stages: dict[str, float] | None = None,
) -> WritePlan:
    """Steps 3-5 on a prepared batch, against `timeline`: tag, profile, partition. The batch's
    records need only the key, partition and delete-flag columns, except under a global index,
    which routes whole records."""
    stages = {} if stages is None else stages
    log_default_partition(ctx.table_config, batch)
    view = FileSystemView(timeline, partitions=view_scope(operation, index, batch.partitions))
    with stage(stages, "tag", progress):
        merge = slice_merge(ctx.table_config, view)
        records, locations = tag(batch, index, view, operation, cfg, ctx.table_config.ordering_fields, merge)
        rewrites: frozenset[tuple[str, str]] = frozenset()
        if merge is not None and isinstance(index, BucketIndex):
            rewrites = rewritten_slices(records, locations, view, merge)
    with stage(stages, "profile", progress):
        if operation.sized_by_batch:
            records, locations = bulk_insert_sort(records, locations, cfg.get(opt.BULK_INSERT_SORT_MODE))
        file_ids = locations.column(LOC_FILE_ID)
        profile = WorkloadProfile.build(
            records.column(PARTITION), file_ids, operation.type_name, instant_times=locations.column(LOC_INSTANT)
        )
        chosen: UpsertPartitioner | BucketPartitioner | None
        if isinstance(index, BucketIndex):
            chosen, assignment = BucketPartitioner.for_records(
                profile, records.column(PARTITION), records.column(KEY), file_ids, index.hash_fields, index.num_buckets
            )
            buckets = chosen.buckets
        else:
            buckets, assignment, chosen = assign_buckets(
                profile, records, file_ids, view, operation, cfg, batch.data_schema, ctx.table_config.is_merge_on_read
            )
    return WritePlan(
        operation, cfg, view, profile, buckets, batch.data_schema, chosen,
        Tagged(batch, records, locations, assignment), stages, merge_on_read=ctx.table_config.is_merge_on_read,
        rewrites=rewrites,
    )


def plan_profile(
    ctx: WriteContext, operation: Operation, cfg: Config, view: FileSystemView, profile: WorkloadProfile,
    data_schema: pa.Schema, stages: dict[str, float] | None = None, new_buckets: Iterable[tuple[str, int]] = (),
    rewrites: frozenset[tuple[str, str]] = frozenset(),
) -> WritePlan:
    """The plan of a write whose records stay elsewhere (Spark's executors), from its workload
    profile: Hudi's partitioner, whose small state the tasks assign their records with. Under the
    bucket index, `new_buckets` are the (partition, bucket) pairs of the untagged records and
    `rewrites` the merge-on-read slices rewritten merged (`slice_routing.rewritten_slices`)."""
    index = table_index(cfg, ctx.table_config)
    if isinstance(index, BucketIndex):
        chosen: UpsertPartitioner | BucketPartitioner = BucketPartitioner(
            profile, new_buckets, index.hash_fields, index.num_buckets
        )
    else:
        chosen = upsert_partitioner(profile, view, operation, cfg, ctx.table_config.is_merge_on_read)
    return WritePlan(
        operation, cfg, view, profile, chosen.buckets, data_schema, chosen, None, stages or {},
        merge_on_read=ctx.table_config.is_merge_on_read, rewrites=rewrites,
    )
