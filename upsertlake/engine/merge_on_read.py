"""The merge-on-read write stage: Hudi's SparkUpsertDeltaCommitPartitioner and
BaseSparkDeltaCommitActionExecutor.

Updates and deletes of a file group are appended to its current slice as one new log file
(`append_handle`); inserts go to new file groups, or to small slices without log files; a small
slice that takes inserts is rewritten copy-on-write within the deltacommit, as Hudi's
handleUpdate does for its small file ids (`slice_routing` decides which). The tagging before and
the commit after are copy-on-write's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields

from upsertlake.concurrency.conflict import CommitCheck, Conflict, describe_groups
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.table_config import TableConfig
from upsertlake.engine.append_handle import AppendJob, AppendTarget
from upsertlake.engine.bucket_writer import BucketJob
from upsertlake.engine.slice_routing import append_slices, pending_compactions
from upsertlake.engine.tag import slice_merge
from upsertlake.layout.file_system_view import FileSlice, FileSystemView
from upsertlake.logfile import is_log_path
from upsertlake.logfile.avro_records import with_meta_fields
from upsertlake.partitioner import Bucket, SmallFile
from upsertlake.schema import arrow_to_avro, avro_schema_json
from upsertlake.services.metadata_table import keeps_column_stats
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import WriteStat
from upsertlake.timeline.instant import Instant

PARQUET_BLOCKS = "parquet"  # hoodie.logfile.data.block.format


def append_job(
    job: BucketJob, table_config: TableConfig, small_files: Iterable[SmallFile], view: FileSystemView, cfg: Config,
    rewrites: frozenset[tuple[str, str]] = frozenset(),
) -> AppendJob:
    """The write's job with its appends: the UPDATE buckets `append_slices` routes to a new log
    file of their group's current slice (all but those of the `small_files` taking inserts); the
    slices of `rewrites` are read merged for their buckets' rewrite (`slice_routing.rewritten_slices`)."""
    timeline = view.timeline
    slices = append_slices(job.buckets, small_files, view, rewrites)
    merged = {}
    if rewrites:
        current = {s.file_group: s for s in view.latest_file_slices(sorted({p for p, _ in rewrites}))}
        merged = {b.number: current[g] for b in job.buckets if (g := (b.partition_path, b.file_id)) in rewrites}
    compacting = pending_compactions(timeline) if table_config.table_version < 8 else {}
    versions: dict[tuple[str, str, str], int] = {}
    for log in view.all_log_files():
        k = (log.partition_path, log.name.file_id, log.name.instant)
        versions[k] = max(versions.get(k, 0), log.name.version)
    appends = {
        b.number: _target(b, slices[b.number], job.instant_time, table_config.table_version,
                          compacting.get((b.partition_path, b.file_id)), versions)
        for b in job.buckets if b.number in slices
    }
    schema_json = (
        avro_schema_json(with_meta_fields(arrow_to_avro(job.data_schema, table_config.name))) if appends else ""
    )
    return AppendJob(
        **{f.name: getattr(job, f.name) for f in fields(job)},
        appends=appends,
        merged_slices=merged,
        merge=slice_merge(table_config, view) if merged else None,
        schema_json=schema_json,
        parquet_blocks=cfg.get(opt.LOGFILE_DATA_BLOCK_FORMAT) == PARQUET_BLOCKS,
        column_stats=keeps_column_stats(table_config),
        inserts_in_logs=cfg.bucket_index,
    )


def _target(
    bucket: Bucket, sl: FileSlice, instant_time: str, table_version: int, compaction: str | None,
    versions: Mapping[tuple[str, str, str], int],
) -> AppendTarget:
    """The log file name's instant and version for an append to `sl` (`versions`: the highest log
    version on storage per (partition, fileId, name instant), failed writes' included)."""
    base_instant = sl.base.instant_time if sl.base is not None else min(log.name.instant for log in sl.logs)
    if table_version >= 8:
        log_instant = instant_time
    else:  # the slice's base instant; a pending compaction older than it starts the next slice
        log_instant = max(compaction or base_instant, base_instant)
    version = 1 if table_version >= 8 else versions.get((bucket.partition_path, bucket.file_id, log_instant), 0) + 1
    return AppendTarget(log_instant, version, sl.base.name if sl.base is not None else "", base_instant)


def settle_stale(
    timeline: Timeline, check: CommitCheck, own_stats: Sequence[WriteStat], table_version: int
) -> CommitCheck:
    """A merge-on-read write's file groups that a concurrent commit also wrote, without a record
    in common. Two appends stand side by side (each is its own log file of the slice), and so
    does, on table version 8, an append beside a new base file (a log joins the slice its
    deltacommit completed in). Any other pair is a conflict: on version 6 an append named by
    the old slice would fall out of the new one, and a base file rewritten here would leave out
    the other write's log records."""
    own = {(s.partitionPath, s.fileId): is_log_path(s.path) for s in own_stats}
    clash: dict[tuple[str, str], Instant] = {}
    for group, inst in check.stale.items():
        theirs = [s for s in timeline.commit_metadata(inst).write_stats() if (s.partitionPath, s.fileId) == group]
        if own.get(group) and (all(is_log_path(s.path) for s in theirs) or table_version >= 8):
            continue
        clash[group] = inst
    if not clash:
        return CommitCheck(None, {})
    first = max(clash.values())
    why = f"both wrote file group(s) {describe_groups(set(clash))} of this merge-on-read table"
    return CommitCheck(Conflict(first, why))
