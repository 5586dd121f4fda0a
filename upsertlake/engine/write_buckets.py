"""Steps 6-7 of a write: the job every bucket's writer takes, and the buckets written in process
on a thread pool, each by its job: a new version of its file group with the old version's
records merged in (copy-on-write, Hudi's HoodieMergeHandle) or a log file appended to its slice
(merge-on-read, `append_handle`). Spark's tasks write their buckets through the same `write_rows`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import partial

import numpy as np
import pyarrow as pa

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.enums import MergeMode
from upsertlake.engine.bucket_writer import BucketJob, WriteStatus, default_token, mark_buckets, store_summaries
from upsertlake.engine.pending import Rewrite
from upsertlake.engine.write_plan import Progress, WritePlan
from upsertlake.layout.file_system_view import PARTITION_METAFILE, FileSystemView
from upsertlake.layout.file_writer import file_writer_config
from upsertlake.partitioner import Bucket, BucketType
from upsertlake.storage import Storage
from upsertlake.timeline.operation import Operation
from upsertlake.util.arrays import group_rows


def merge_mode(operation: Operation, cfg: Config) -> MergeMode:
    """How a bucket's records merge onto the stored rows of their keys: a delete removes whatever
    it finds, the others merge by the table's hoodie.record.merge.mode (inserts, which append,
    merge with none)."""
    if operation is Operation.DELETE:
        return MergeMode.COMMIT_TIME
    return cfg.get(opt.RECORD_MERGE_MODE)


# -- 6-7. write ----------------------------------------------------------------------------
def bucket_job(
    storage: Storage,
    instant_time: str,
    operation: Operation,
    cfg: Config,
    view: FileSystemView,
    buckets: list[Bucket],
    data_schema: pa.Schema,
    ordering_fields: tuple[str, ...],
    keep_keys: bool,
) -> BucketJob:
    """What every bucket's writer needs (picklable, for Spark executors); the partition metafiles
    of the buckets' partitions are written first."""
    write_partition_metadata(storage, {b.partition_path for b in buckets}, instant_time, view.all_partitions())
    updated = sorted({b.partition_path for b in buckets if b.type is BucketType.UPDATE})
    latest = view.latest_by_group(updated)
    return BucketJob(
        instant_time=instant_time,
        buckets=tuple(buckets),
        base_files={
            b.number: latest[(b.partition_path, b.file_id)]
            for b in buckets
            if b.type is BucketType.UPDATE and (b.partition_path, b.file_id) in latest
        },
        data_schema=data_schema,
        ordering_fields=ordering_fields,
        merge_mode=merge_mode(operation, cfg),
        append_records=operation.appends,
        file_config=file_writer_config(cfg),
        keep_keys=keep_keys,
    )


def write_buckets(
    storage: Storage,
    plan: WritePlan,
    job: BucketJob,
    progress: Progress | None,
    attempt: int,
) -> tuple[list[WriteStatus], Rewrite]:
    """Step 7 in process: each bucket's records, in their prepared order, on a pool of the
    write's hoodie.write.parallelism threads (0: one per CPU). Returns their statuses and the
    `Rewrite` that writes buckets again from the records kept here, on as many threads, for a
    re-merge."""
    tagged = plan.tagged
    assert tagged is not None, "an in-process plan holds its records"
    rows = bucket_rows(tagged.assignment, len(job.buckets))
    threads = plan.cfg.get(opt.WRITE_PARALLELISM) or os.cpu_count() or 1
    rewrite = partial(_rewrite_kept, storage, threads, tagged.records, rows)
    job = job.for_batch(tagged.records, rows, threads)
    return write_rows(storage, job, tagged.records, rows, threads, attempt, progress=progress), rewrite


def bucket_rows(assignment: np.ndarray, buckets: int) -> dict[int, np.ndarray]:
    """The rows of each bucket that gets records, in their order in the batch."""
    order, bounds = group_rows(np.asarray(assignment, dtype=np.int64), buckets)
    return {n: order[bounds[n] : bounds[n + 1]] for n in range(buckets) if bounds[n + 1] > bounds[n]}


def write_rows(
    storage: Storage,
    job: BucketJob,
    records: pa.Table,
    rows: Mapping[int, np.ndarray],
    threads: int,
    attempt: int = 1,
    write_token: str | None = None,
    progress: Progress | None = None,
) -> list[WriteStatus]:
    """Each bucket's `rows` of `records` written on a pool of `threads` (0: one per CPU), in
    process and in the one Spark task that writes a small batch; statuses in bucket order."""
    threads = threads or os.cpu_count() or 1
    # Largest first (the file to rewrite plus the records' bytes): no big bucket starts last
    # while the other threads sit idle.
    record_bytes = records.nbytes // max(1, records.num_rows)

    def work(number: int) -> int:
        return int(job.base_bytes(number) + len(rows[number]) * record_bytes)

    tokens = {number: write_token or default_token(number, attempt) for number in rows}
    mark_buckets(storage, job, tokens)
    # On an object store a thread goes on to its next bucket while the last file uploads.
    with storage.uploading() as uploading, ThreadPoolExecutor(max_workers=max(1, min(threads, len(rows) or 1))) as pool:
        write = partial(_write_one, uploading, job, records, rows, attempt, tokens)
        futures = {number: pool.submit(write, number) for number in sorted(rows, key=work, reverse=True)}
        if progress is not None:
            for done, _ in enumerate(as_completed(futures.values()), 1):
                progress.advanced("write", done)
        statuses = [futures[number].result() for number in sorted(rows)]
        return store_summaries(storage, job.instant_time, statuses)  # while the last files upload


def _rewrite_kept(
    storage: Storage, threads: int, records: pa.Table, rows: Mapping[int, np.ndarray], job: BucketJob,
    numbers: Collection[int] | None, attempt: int,
) -> list[WriteStatus]:
    """The in-process `Rewrite`: the buckets' kept records written again on a thread pool."""
    chosen = rows if numbers is None else {n: rows[n] for n in numbers}
    return write_rows(storage, job, records, chosen, threads, attempt)


def _write_one(
    storage: Storage, job: BucketJob, records: pa.Table, rows: Mapping[int, np.ndarray], attempt: int,
    tokens: Mapping[int, str], number: int,
) -> WriteStatus:
    """Bucket `number`, its rows taken from the batch on the writing thread."""
    return job.write(storage, number, records.take(pa.array(rows[number])), None, attempt, tokens[number])


def write_partition_metadata(
    storage: Storage, partitions: set[str], instant_time: str, listed: Collection[str] = ()
) -> None:
    """Hudi's `.hoodie_partition_metadata` in each partition that lacks one (readers list a folder
    as a partition only with it). `listed`: partitions a listing just found with theirs; a
    conditional create leaves an existing one as it is."""
    for p in partitions - set(listed):
        path = f"{p}/{PARTITION_METAFILE}" if p else PARTITION_METAFILE
        depth = len(p.split("/")) if p else 0
        body = f"#partition metadata\ncommitTime={instant_time}\npartitionDepth={depth}\n"
        storage.write_if_absent(path, body.encode())


def buckets_used(assignment: np.ndarray) -> int:
    """How many buckets get records (bucket numbers are small and non-negative: a bincount, not
    NumPy 2's hash-based unique, which costs a hash pass over every record)."""
    return int(np.count_nonzero(np.bincount(np.asarray(assignment, dtype=np.int64))))
