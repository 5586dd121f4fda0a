"""Clustering (small-file compaction): per partition, bin-pack file groups below the small file
limit into new file groups near the target size, committed as one `replacecommit` that replaces
the old groups (Hudi's size-based plan strategy with one output group per input group).

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

import pyarrow as pa

from upsertlake.concurrency.conflict import check_commit, pending_clustering
from upsertlake.concurrency.heartbeat import Heartbeat
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig
from upsertlake.layout.file_writer import (
    file_writer_config,
    full_schema,
    marker_path,
    write_base_file,
)
from upsertlake.errors import SchemaError, WriteConflictError
from upsertlake.schema import avro_to_arrow, conform
from upsertlake.services.metadata_table import drop_metadata_table
from upsertlake.timeline import documents
from upsertlake.storage import Storage
from upsertlake.layout.file_system_view import BaseFile, FileSystemView, base_file_name
from upsertlake.timeline.active import Timeline, create_requested, transition
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action, State
from upsertlake.layout.markers import marker_folder, rollback_pending

log = logging.getLogger(__name__)

PLAN_SCHEMA = "HoodieRequestedReplaceMetadata"
STRATEGY_CLASS = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
OPERATION = "CLUSTER"


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


# Runs a function over the groups of a plan: in process by default, as Spark tasks on Spark.
GroupMap = Callable[[Callable[[tuple[int, list[BaseFile]]], WriteStat], list[tuple[int, list[BaseFile]]]], list[WriteStat]]


def in_process(fn: Callable[[tuple[int, list[BaseFile]]], WriteStat], groups: list) -> list[WriteStat]:
    return [fn(g) for g in groups]


def cluster(
    storage: Storage, lock: TableLock, table_config: TableConfig, cfg: Config, map_groups: GroupMap = in_process
) -> ClusterResult:
    """Plan, write and commit one clustering; a result without instant, saying why, when no
    partition has two small groups to merge. `map_groups` writes the new file groups (one task
    per group on Spark)."""
    with lock.hold():
        drop_metadata_table(storage, TableConfig.load(storage))  # readers must not list a stale one
        timeline = Timeline.load(storage)
        groups = plan_groups(timeline, cfg)
        if not groups:
            return ClusterResult(None, {}, (), nothing_to_cluster(timeline, cfg))
        schema_json = timeline.latest_schema() or table_config.create_schema
        sort_columns = [c.strip() for c in cfg.get(opt.CLUSTERING_SORT_COLUMNS).split(",") if c.strip()]
        requested = create_requested(
            storage, Action.REPLACE_COMMIT, documents.encode(PLAN_SCHEMA, _plan_doc(storage, groups, sort_columns)), clustering=True
        )
        # Writers leave a pending clustering alone while its heartbeat beats (engine.instants).
        heartbeat = Heartbeat(
            storage, requested.time, cfg.get(opt.HEARTBEAT_INTERVAL_MS), cfg.get(opt.HEARTBEAT_TOLERABLE_MISSES)
        ).start()
        completed_at_start = {i.time for i in Timeline.load(storage).completed_writes()}
    try:
        inflight = transition(storage, requested, State.INFLIGHT)
        if not schema_json:
            raise SchemaError("the table has no schema to cluster with")
        data_schema = avro_to_arrow(schema_json)
        write = partial(_write_group, storage, instant_time=inflight.time, data_schema=data_schema,
                        sort_columns=sort_columns, cfg=cfg)
        stats = map_groups(write, list(enumerate(groups)))
        replaced: dict[str, list[str]] = defaultdict(list)
        for group in groups:
            for bf in group:
                replaced[bf.partition_path].append(bf.file_id)
        by_partition: dict[str, list[WriteStat]] = defaultdict(list)
        for s in stats:
            by_partition[s.partitionPath].append(s)
        metadata = CommitMetadata(dict(by_partition), OPERATION, {"schema": schema_json}, dict(replaced))
        with lock.hold():
            # Every record it moves is in the groups it retires: a write on any of them conflicts.
            conflict = check_commit(
                Timeline.load(storage), frozenset(completed_at_start), inflight.time, (),
                metadata.file_groups(), global_keys=False,
            ).conflict
            if conflict is not None:
                raise WriteConflictError(
                    f"clustering {inflight.time} conflicts with {conflict.describe()}; the clustering was "
                    "rolled back, no record was lost"
                )
            transition(storage, inflight, State.COMPLETED, metadata.to_json_bytes())
    except BaseException:
        with lock.hold():
            current = Timeline.load(storage).get(requested.time, Action.REPLACE_COMMIT)
            if current is not None and not current.is_completed:
                rollback_pending(storage, current)
        raise
    finally:
        heartbeat.stop()
    storage.delete_dir(marker_folder(inflight.time))
    log.info("clustered %d file groups into %d (%s)", sum(map(len, groups)), len(groups), inflight.time)
    return ClusterResult(inflight.time, dict(replaced), tuple(s.path for s in stats))


def small_file_limit(cfg: Config) -> int:
    """The size below which a file group is small: what clustering merges and what `stats`
    counts as small (hoodie.clustering.plan.strategy.small.file.limit, Hudi's 300 MiB). The
    writer's hoodie.parquet.small.file.limit is another setting: files inserts are packed into."""
    return cfg.get(opt.CLUSTERING_SMALL_FILE_LIMIT)


def plan_groups(timeline: Timeline, cfg: Config) -> list[list[BaseFile]]:
    """Per partition, small file groups bin-packed (first fit, largest first) toward the target
    size; bins of one group are dropped (nothing would merge)."""
    limit = small_file_limit(cfg)
    target = cfg.get(opt.CLUSTERING_TARGET_FILE_MAX_BYTES)
    busy = pending_clustering(timeline)
    view = FileSystemView(timeline)
    out: list[list[BaseFile]] = []
    for partition in view.partitions():
        small = [
            bf for bf in view.latest_base_files([partition])
            if bf.size < limit and bf.file_id not in busy.get(partition, ())
        ]
        bins: list[list[BaseFile]] = []
        sizes: list[int] = []
        for bf in sorted(small, key=lambda b: (-b.size, b.file_id)):
            k = next((i for i, s in enumerate(sizes) if s + bf.size <= target), None)
            if k is None:
                bins.append([bf])
                sizes.append(bf.size)
            else:
                bins[k].append(bf)
                sizes[k] += bf.size
        out.extend(b for b in bins if len(b) > 1)
    return out


def nothing_to_cluster(timeline: Timeline, cfg: Config) -> str:
    """Why `plan_groups` found nothing: no file groups, groups already being clustered, or no
    partition with two small groups that fit together under the target size."""
    view = FileSystemView(timeline)
    latest = view.latest_base_files()
    if not latest:
        return "the table has no file groups"
    limit = small_file_limit(cfg)
    busy = pending_clustering(timeline)
    small: dict[str, int] = {}
    for bf in latest:
        if bf.size < limit and bf.file_id not in busy.get(bf.partition_path, ()):
            small[bf.partition_path] = small.get(bf.partition_path, 0) + 1
    pending = f"; {sum(map(len, busy.values()))} file group(s) are in a pending clustering" if busy else ""
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
    """Inline clustering runs once hoodie.clustering.inline.max.commits commits followed the last one."""
    since = ""
    for inst in reversed(timeline.filter([Action.REPLACE_COMMIT], [State.COMPLETED])):
        if timeline.commit_metadata(inst).operation_type == OPERATION:
            since = inst.time
            break
    commits = [w for w in timeline.completed_writes() if w.time > since and w.action is Action.COMMIT]
    return len(commits) >= cfg.get(opt.CLUSTERING_INLINE_MAX_COMMITS)


def _write_group(
    storage: Storage,
    numbered: tuple[int, list[BaseFile]],
    *,
    instant_time: str,
    data_schema: pa.Schema,
    sort_columns: list[str],
    cfg: Config,
) -> WriteStat:
    """Write one planned group's rows as one new file group (the write token carries `n`)."""
    n, group = numbered
    schema = full_schema(data_schema)
    rows = pa.concat_tables([conform(storage.read_parquet(bf.path), schema) for bf in group])
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
    storage.write_if_absent(marker_path(instant_time, partition, name, "CREATE"), b"")
    size = write_base_file(storage, path, rows, file_writer_config(cfg))
    return WriteStat(
        fileId=file_id, path=path, partitionPath=partition, numWrites=rows.num_rows,
        numInserts=rows.num_rows, totalWriteBytes=size, fileSizeInBytes=size,
    )


def _plan_doc(storage: Storage, groups: list[list[BaseFile]], sort_columns: list[str]) -> dict:
    input_groups = [
        {
            "slices": [
                {"dataFilePath": storage.full_path(bf.path), "deltaFilePaths": [], "fileId": bf.file_id,
                 "partitionPath": bf.partition_path, "bootstrapFilePath": "", "version": 1}
                for bf in group
            ],
            "metrics": {"TOTAL_IO_MB": sum(bf.size for bf in group) / 2**20, "TOTAL_LOG_FILES": 0.0},
            "numOutputFileGroups": 1,
            "version": 1,
        }
        for group in groups
    ]
    params = {"hoodie.clustering.plan.strategy.sort.columns": ",".join(sort_columns)} if sort_columns else {}
    strategy = {"strategyClassName": STRATEGY_CLASS, "strategyParams": params, "version": 1}
    plan = {"inputGroups": input_groups, "strategy": strategy, "extraMetadata": {}, "version": 1}
    return {"operationType": OPERATION, "clusteringPlan": plan, "extraMetadata": {}, "version": 1}
