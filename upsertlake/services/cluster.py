"""Clustering (small-file compaction): per partition, bin-pack file groups below the small file
limit into new file groups near the target size, committed as one `replacecommit` that replaces
the old groups (Hudi's size-based plan strategy with one output group per input group).

On a merge-on-read table the plan covers file slices: a slice with log files is read merged
(`read_slice`, as a snapshot read) and its records written to the new base file, so the old
group's logs are never read again and go at clean with it. As Hudi's plan strategy, a slice is
sized by its base file (log-only slices are eligible and count as a full file,
hoodie.parquet.max.file.size), and groups in a pending compaction are left out.

Rows keep their commit time and seqno; only `_hoodie_file_name` changes. The plan is the
`.replacecommit.requested` document (HoodieRequestedReplaceMetadata); while it is pending its file
groups take no small-file inserts. A write that completed meanwhile on a planned file group wins:
the clustering is rolled back and raises WriteConflictError, so no record is ever lost.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa

from upsertlake.concurrency.conflict import check_commit, pending_clustering
from upsertlake.concurrency.heartbeat import HeartbeatPolicy
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config, option_list
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import SchemaError, UnsupportedTableError, WriteConflictError
from upsertlake.layout.file_system_view import FileSlice, FileSystemView, base_file_name
from upsertlake.layout.file_writer import (
    file_writer_config,
    write_base_file,
)
from upsertlake.layout.markers import marker_entry, marker_folder, start_markers, write_markers
from upsertlake.layout.slice_reader import Merge, read_slice
from upsertlake.schema import avro_to_arrow, conform, full_schema
from upsertlake.services import metadata_table
from upsertlake.services.compaction_plan import compaction_file_groups
from upsertlake.services.key_groups import ByKeyGroup
from upsertlake.services.rollback import discard_pending
from upsertlake.services.stat_map import StatMap, T
from upsertlake.storage import Storage
from upsertlake.timeline import column_stats, documents
from upsertlake.timeline.active import Timeline, create_requested, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.operation import CLUSTER_TYPE

log = logging.getLogger(__name__)

PLAN_SCHEMA = "HoodieRequestedReplaceMetadata"
STRATEGY_CLASS = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"


@dataclass(frozen=True)
class ClusterResult:
    """What a clustering did: the replacecommit, the groups replaced and the files written; or,
    when there was nothing to merge, no instant and the `reason` why."""

    instant_time: str | None
    replaced: dict[str, list[str]]
    files_written: tuple[str, ...]
    reason: str = ""

    @property
    def clustered(self) -> bool:
        return self.instant_time is not None

    def to_dict(self) -> dict[str, object]:
        return {
            "instant_time": self.instant_time,
            "clustered": self.clustered,
            "replaced": self.replaced,
            "files_written": list(self.files_written),
            "reason": self.reason,
        }


def in_process(fn: Callable[[T], WriteStat], groups: list[T], /) -> list[WriteStat]:
    """The groups one after another, in this process (each writer uses Arrow's threads)."""
    return [fn(g) for g in groups]


def cluster(
    storage: Storage,
    lock: TableLock,
    table_config: TableConfig,
    cfg: Config,
    map_groups: StatMap = in_process,
    by_key: ByKeyGroup | None = None,
) -> ClusterResult:
    """Plan, write and commit one clustering; a result without instant, saying why, when no
    partition has two small groups to merge. `map_groups` writes the new file groups (one task
    per group on Spark); `by_key` moves their keys in the record index (Spark tasks on Spark)."""
    _check_clusterable(table_config, cfg)
    with lock.hold():
        metadata_table.prepare(storage, TableConfig.load(storage), cfg, by_key)
        timeline = Timeline.load(storage)
        groups = plan_groups(timeline, cfg)
        if not groups:
            return ClusterResult(None, {}, (), nothing_to_cluster(timeline, cfg))
        schema_json = timeline.latest_schema() or table_config.create_schema
        sort_columns = option_list(cfg.get(opt.CLUSTERING_SORT_COLUMNS))
        requested = create_requested(
            storage,
            Action.REPLACE_COMMIT,
            documents.encode(PLAN_SCHEMA, _plan_doc(storage, groups, sort_columns, cfg)),
            clustering=True,
        )
        # Writers leave a pending clustering alone while its heartbeat beats (engine.instants).
        heartbeat = HeartbeatPolicy.of(cfg).start(storage, requested.time)
        completed_at_start = {i.time for i in Timeline.load(storage).completed_writes()}
    try:
        inflight = transition(storage, requested, State.INFLIGHT)
        start_markers(storage, inflight.time)
        if not schema_json:
            raise SchemaError("the table has no schema to cluster with")
        data_schema = avro_to_arrow(schema_json)
        # The blocks of the writes completed when the plan was made: a write completing later on
        # a planned group conflicts below, so none of its records can be missed.
        merge = Merge(table_config.ordering_fields, table_config.merge_mode, frozenset(completed_at_start))
        write = partial(_write_group, storage, instant_time=inflight.time, data_schema=data_schema,
                        sort_columns=sort_columns, merge=merge, cfg=cfg)
        stats = map_groups(write, list(enumerate(groups)))
        metadata = _commit_metadata(groups, stats, schema_json)
        with lock.hold():
            _commit(storage, inflight, metadata, frozenset(completed_at_start), cfg, by_key)
    except BaseException:
        with lock.hold():
            current = Timeline.load(storage).get(requested.time, Action.REPLACE_COMMIT)
            if current is not None and not current.is_completed:
                discard_pending(storage, current)
        raise
    finally:
        heartbeat.stop()
    storage.delete_dir(marker_folder(inflight.time))
    log.info("clustered %d file groups into %d (%s)", sum(map(len, groups)), len(groups), inflight.time)
    return ClusterResult(inflight.time, metadata.partition_to_replace_file_ids or {}, tuple(s.path for s in stats))


def _check_clusterable(table_config: TableConfig, cfg: Config) -> None:
    """Refuse, naming why, the tables a clustering would damage."""
    if cfg.bucket_index:
        raise UnsupportedTableError(
            "clustering a table written with hoodie.index.type=BUCKET is not supported: it would merge buckets' "
            "file groups into groups no bucket names (Hudi's simple bucket index does not cluster either)"
        )
    if table_config.is_merge_on_read and not table_config.populate_meta_fields:
        raise UnsupportedTableError(
            "clustering merge-on-read tables without meta fields (hoodie.populate.meta.fields=false) is not "
            "supported: their log records are merged by _hoodie_record_key"
        )


def _commit_metadata(groups: list[list[FileSlice]], stats: list[WriteStat], schema_json: str) -> CommitMetadata:
    """The replacecommit of a clustering: the new file groups' write stats and the groups they
    replace, by partition."""
    replaced: dict[str, list[str]] = defaultdict(list)
    for group in groups:
        for sl in group:
            replaced[sl.partition_path].append(sl.file_id)
    by_partition: dict[str, list[WriteStat]] = defaultdict(list)
    for s in stats:
        by_partition[s.partitionPath].append(s)
    extra = {"schema": schema_json, **column_stats.commit_entries(stats)}
    return CommitMetadata(dict(by_partition), CLUSTER_TYPE, extra, dict(replaced))


def _commit(
    storage: Storage, inflight: Instant, metadata: CommitMetadata, completed_at_start: frozenset[str], cfg: Config,
    by_key: ByKeyGroup | None,
) -> None:
    """Under the lock: complete the clustering unless a write completed since it was planned
    touched a group it retires (WriteConflictError), its metadata deltacommit first."""
    # Every record it moves is in the groups it retires: a write on any of them conflicts.
    conflict = check_commit(
        Timeline.load(storage), completed_at_start, inflight.time, (), metadata.file_groups(), global_keys=False,
    ).conflict
    if conflict is not None:
        raise WriteConflictError(
            f"clustering {inflight.time} conflicts with {conflict.describe()}; the clustering was "
            "rolled back, no record was lost"
        )
    # the metadata table's deltacommit before the data instant
    metadata_table.sync(storage, TableConfig.load(storage), inflight.time, metadata, options=cfg, by_key=by_key)
    transition(storage, inflight, State.COMPLETED, metadata.to_json_bytes())


def small_file_limit(cfg: Config) -> int:
    """The size below which a file group is small: what clustering merges and what `stats`
    counts as small (hoodie.clustering.plan.strategy.small.file.limit, Hudi's 300 MiB). The
    writer's hoodie.parquet.small.file.limit is another setting: files inserts are packed into."""
    return cfg.get(opt.CLUSTERING_SMALL_FILE_LIMIT)


def plan_groups(timeline: Timeline, cfg: Config) -> list[list[FileSlice]]:
    """Per partition, the eligible slices bin-packed (first fit, largest first) toward the target
    size; bins of one slice are dropped (nothing would merge)."""
    target = cfg.get(opt.CLUSTERING_TARGET_FILE_MAX_BYTES)
    out: list[list[FileSlice]] = []
    for small in eligible_slices(timeline, cfg).values():
        bins: list[list[FileSlice]] = []
        sizes: list[int] = []
        for sl, size in sorted(small, key=lambda s: (-s[1], s[0].file_id)):
            k = next((i for i, total in enumerate(sizes) if total + size <= target), None)
            if k is None:
                bins.append([sl])
                sizes.append(size)
            else:
                bins[k].append(sl)
                sizes[k] += size
        out.extend(b for b in bins if len(b) > 1)
    return out


def eligible_slices(timeline: Timeline, cfg: Config) -> dict[str, list[tuple[FileSlice, int]]]:
    """Per partition, the slices a plan may take with the size it packs them by (Hudi's
    SparkSizeBasedClusteringPlanStrategy): base file below the small file limit (a log-only slice
    has none: eligible, sized as a full file), in no pending clustering or compaction."""
    limit = small_file_limit(cfg)
    full = cfg.get(opt.PARQUET_MAX_FILE_SIZE)
    busy = _busy_groups(timeline)
    out: dict[str, list[tuple[FileSlice, int]]] = {}
    for sl in FileSystemView(timeline).latest_file_slices():
        base = sl.base.size if sl.base is not None else 0
        if base < limit and sl.file_group not in busy:
            out.setdefault(sl.partition_path, []).append((sl, base if sl.base is not None else full))
    return out


def _busy_groups(timeline: Timeline) -> set[tuple[str, str]]:
    """File groups a pending clustering or compaction plan holds: a new plan leaves them alone."""
    clustering = {(p, f) for p, ids in pending_clustering(timeline).items() for f in ids}
    return clustering | compaction_file_groups(timeline)


def nothing_to_cluster(timeline: Timeline, cfg: Config) -> str:
    """Why `plan_groups` found nothing: no file groups, groups held by pending plans, or no
    partition with two small groups that fit together under the target size."""
    view = FileSystemView(timeline)
    latest = view.latest_file_slices()
    if not latest:
        return "the table has no file groups"
    limit = small_file_limit(cfg)
    small = {p: len(s) for p, s in eligible_slices(timeline, cfg).items()}
    clustering = sum(map(len, pending_clustering(timeline).values()))
    compacting = len(compaction_file_groups(timeline))
    pending = f"; {clustering} file group(s) are in a pending clustering" if clustering else ""
    pending += f"; {compacting} file group(s) are in a pending compaction" if compacting else ""
    if any(n > 1 for n in small.values()):
        target = cfg.get(opt.CLUSTERING_TARGET_FILE_MAX_BYTES)
        return (
            f"no two small file groups of a partition fit together under "
            f"{opt.CLUSTERING_TARGET_FILE_MAX_BYTES.key}={target}{pending}"
        )
    return (
        f"no partition has two file groups below {opt.CLUSTERING_SMALL_FILE_LIMIT.key}={limit} bytes "
        f"({sum(small.values())} small of {len(latest)} file groups in {len(view.partitions())} "
        f"partition(s)){pending}"
    )


def clustering_due(timeline: Timeline, cfg: Config) -> bool:
    """Inline clustering runs once hoodie.clustering.inline.max.commits commits (deltacommits on a
    merge-on-read table, as Hudi's commits timeline counts them) followed the last one."""
    since = ""
    for inst in reversed(timeline.filter([Action.REPLACE_COMMIT], [State.COMPLETED])):
        if timeline.commit_metadata(inst).operation_type == CLUSTER_TYPE:
            since = inst.time
            break
    commits = [
        w for w in timeline.completed_writes() if w.time > since and w.action in (Action.COMMIT, Action.DELTA_COMMIT)
    ]
    return len(commits) >= cfg.get(opt.CLUSTERING_INLINE_MAX_COMMITS)


def _write_group(
    storage: Storage,
    numbered: tuple[int, list[FileSlice]],
    *,
    instant_time: str,
    data_schema: pa.Schema,
    sort_columns: list[str],
    merge: Merge,
    cfg: Config,
) -> WriteStat:
    """Write one planned group's rows as one new file group (the write token carries `n`): a
    slice's base file as it is, or its records merged with its log files."""
    n, group = numbered
    schema = full_schema(data_schema)
    rows = pa.concat_tables(
        [
            read_slice(storage, sl, merge, schema)
            if sl.logs or sl.base is None
            else conform(storage.read_parquet(sl.base.path), schema)
            for sl in group
        ]
    )
    missing = [c for c in sort_columns if c not in schema.names]
    if missing:
        raise SchemaError(f"clustering sort column(s) {missing} are not in the table {schema.names}")
    if sort_columns:
        rows = rows.sort_by([(c, "ascending") for c in sort_columns])
    partition = group[0].partition_path
    file_id = f"{uuid.uuid4()}-0"
    name = base_file_name(file_id, f"{n}-1-0", instant_time)
    path = f"{partition}/{name}" if partition else name
    rows = rows.set_column(4, schema.field(4), pa.array([name] * rows.num_rows, pa.string()))
    write_markers(storage, instant_time, [marker_entry(partition, name, "CREATE")])
    size, stats = write_base_file(storage, path, rows, file_writer_config(cfg))
    return WriteStat(
        fileId=file_id,
        path=path,
        partitionPath=partition,
        numWrites=rows.num_rows,
        numInserts=rows.num_rows,
        totalWriteBytes=size,
        fileSizeInBytes=size,
        column_stats=stats,
    )


def _plan_doc(storage: Storage, groups: list[list[FileSlice]], sort_columns: list[str], cfg: Config) -> dict[str, Any]:
    input_groups = [
        {
            "slices": [
                {
                    "dataFilePath": storage.full_path(sl.base.path) if sl.base is not None else "",
                    "deltaFilePaths": [storage.full_path(lf.path) for lf in sl.logs],
                    "fileId": sl.file_id,
                    "partitionPath": sl.partition_path,
                    "bootstrapFilePath": "",
                    "version": 1,
                }
                for sl in group
            ],
            "metrics": _metrics(group, cfg.get(opt.PARQUET_MAX_FILE_SIZE)),
            "numOutputFileGroups": 1,
            "version": 1,
        }
        for group in groups
    ]
    params = {"hoodie.clustering.plan.strategy.sort.columns": ",".join(sort_columns)} if sort_columns else {}
    strategy = {"strategyClassName": STRATEGY_CLASS, "strategyParams": params, "version": 1}
    plan = {"inputGroups": input_groups, "strategy": strategy, "extraMetadata": {}, "version": 1}
    return {"operationType": CLUSTER_TYPE, "clusteringPlan": plan, "extraMetadata": {}, "version": 1}


def _metrics(group: list[FileSlice], default_base_size: int) -> dict[str, float]:
    """A clustering group's metrics as Hudi's FileSliceMetricUtils counts them: read = base files
    and logs, write = the base files (a full file for a log-only slice), in MiB."""
    log_bytes = sum(lf.size for sl in group for lf in sl.logs)
    base_bytes = sum(sl.base.size for sl in group if sl.base is not None)
    write = sum(sl.base.size if sl.base is not None and sl.base.size > 0 else default_base_size for sl in group)
    read_mb, write_mb = (base_bytes + log_bytes) // 2**20, write // 2**20  # FSUtils.getSizeInMB
    return {
        "TOTAL_LOG_FILES": float(sum(len(sl.logs) for sl in group)),
        "TOTAL_LOG_FILES_SIZE": float(log_bytes),
        "TOTAL_IO_READ_MB": float(read_mb),
        "TOTAL_IO_WRITE_MB": float(write_mb),
        "TOTAL_IO_MB": float(read_mb + write_mb),
    }
