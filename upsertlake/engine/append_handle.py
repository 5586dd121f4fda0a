"""Appending one bucket's records to its file group's slice: a new log file (Hudi's
HoodieAppendHandle, for a merge-on-read table).

Updates go as one data block (Avro by default, parquet by option), deletes as one delete block;
nothing of the slice is read and no ordering is resolved here: readers merge the slice. Every
append is a new object (object stores cannot append): on table version 6 the next log version of
the slice (named by its base instant), on version 8 version 1 named by the deltacommit. A
concurrent writer may take the planned name first (version 6: the same slice, version and write
token); the append then rolls over to the next free version, as Hudi's log writer does.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.engine.bucket_writer import (
    BucketJob,
    WriteStatus,
    default_token,
    with_meta,
    with_meta_runs,
)
from upsertlake.errors import StorageError
from upsertlake.layout.file_system_view import BaseFile, FileSlice
from upsertlake.layout.markers import APPEND, marker_entry, write_markers
from upsertlake.layout.slice_reader import Merge
from upsertlake.logfile import LogFileName, append_blocks, avro_data_blocks, data_block, delete_block
from upsertlake.logfile.blocks import Block
from upsertlake.metadata.changes import NO_RECORDS, RecordsStats
from upsertlake.partitioner import Bucket
from upsertlake.schema.columns import (
    DELETE_FLAG,
    DELETED_KEY,
    DELETED_NATURAL,
    DELETED_ORDERING,
    DELETED_PARTITION,
    FORCE_FLAG,
    KEY,
    PARTITION,
    RECORD_KEY,
)
from upsertlake.storage import Storage
from upsertlake.timeline import column_stats
from upsertlake.timeline.commit_metadata import DeltaWriteStat


@dataclass(frozen=True)
class AppendTarget:
    """Where a bucket's log file goes: the name's instant and version, and the slice it extends."""

    log_instant: str  # v6: the slice's base instant (or a pending compaction's); v8: the deltacommit
    log_version: int
    base_file: str  # the slice's base file name; "" for a log-only file group
    base_instant: str  # the slice's base instant (the stat's prevCommit)


@dataclass(frozen=True)
class AppendJob(BucketJob):
    """A merge-on-read write's buckets: those in `appends` are appended as log files, the others
    (new file groups, small log-free slices taking inserts) written as copy-on-write buckets are.
    Picklable, as BucketJob: Spark tasks write their buckets with it."""

    appends: dict[int, AppendTarget] | None = None
    merged_slices: dict[int, FileSlice] | None = None  # buckets rewriting their slice read merged
    merge: Merge | None = None  # how those slices merge
    schema_json: str = ""  # the log blocks' writer schema (meta fields first)
    parquet_blocks: bool = False  # hoodie.logfile.data.block.format=parquet
    column_stats: bool = False  # report each log file's statistics (`WriteStatus.log_stats`): the table keeps them
    # The bucket index appends a new key to its bucket's group (Hudi: an index that finds keys in
    # log files takes inserts into logs): an append's keys are located there (`keep_keys`).
    inserts_in_logs: bool = False
    shared: SharedBlocks | None = field(default=None, compare=False)  # see for_batch

    def for_batch(self, records: pa.Table, rows: Mapping[int, np.ndarray], threads: int = 1) -> AppendJob:
        """With every bucket's records at hand (in process, or in the one Spark task that writes a
        small batch): the Avro data blocks of all appends are encoded in `threads` shares (each by
        the first append of its share to run) instead of one pass per file group, whose fixed
        costs (a few milliseconds each) outweighed the records' own."""
        if self.parquet_blocks or not self.appends:
            return self
        appends = {n: r for n, r in rows.items() if n in self.appends}
        return replace(self, shared=SharedBlocks(self, records, appends, threads))

    def merged_slice(self, number: int) -> tuple[FileSlice, Merge] | None:
        sl = (self.merged_slices or {}).get(number)
        return None if sl is None or self.merge is None else (sl, self.merge)

    def base_bytes(self, number: int) -> int:
        """An append reads no file: only its records weigh (the pool starts big buckets first)."""
        return 0 if number in (self.appends or {}) else super().base_bytes(number)

    def marker(self, number: int, write_token: str) -> str:
        """An append marks the log file it plans: its slice's next version."""
        target = (self.appends or {}).get(number)
        if target is None:
            return super().marker(number, write_token)
        bucket = self.buckets[number]
        name = LogFileName(bucket.file_id, target.log_instant, target.log_version, write_token).format()
        return marker_entry(bucket.partition_path, name, APPEND)

    def write(
        self,
        storage: Storage,
        number: int,
        records: pa.Table,
        base_file: BaseFile | None = None,
        attempt: int = 1,
        write_token: str | None = None,
    ) -> WriteStatus:
        target = (self.appends or {}).get(number)
        if target is None:
            return super().write(storage, number, records, base_file, attempt, write_token)
        return append_bucket(
            storage, self, self.buckets[number], target, records, write_token or default_token(number, attempt)
        )


MAX_ROLLOVERS = 100  # versions an append tries past the planned one before it gives up


def append_bucket(
    storage: Storage, job: AppendJob, bucket: Bucket, target: AppendTarget, records: pa.Table, write_token: str
) -> WriteStatus:
    """Write the bucket's records as one new log file of its slice; its status and delta stat."""
    upserts, removed = _split(records)
    blocks: list[Block | bytes] = []
    rows = None  # the data block's rows, as written (a shared block's too, when their statistics are asked)
    if upserts.num_rows and (job.shared is None or job.column_stats):
        rows = with_meta(upserts, job.instant_time, bucket.number, bucket.file_id, job.data_schema)
    if upserts.num_rows and job.shared is not None:
        blocks.append(job.shared.block(bucket.number))
    elif rows is not None:
        blocks.append(data_block(job.instant_time, rows, job.schema_json, parquet=job.parquet_blocks))
    if removed.num_rows:
        keys = _delete_keys(removed, job.ordering_fields)
        # a block either way: hudi-rs refuses a delete block that mixes the plain deletes'
        # IntWrapper(0) with ordering values of another wrapper (a key is in one of them only)
        natural = keys.column(DELETED_NATURAL)
        for part in (keys.filter(natural), keys.filter(pc.invert(natural))):
            if part.num_rows:
                blocks.append(delete_block(job.instant_time, part, job.schema_json))
    # No key summary: the conflict check reads an append's keys from its log file.
    data = append_blocks(blocks)
    version, name, path = _create_log(storage, job.instant_time, bucket, target, write_token, data)
    data_columns = [c for c in job.data_schema.names if c in upserts.schema.names]  # not the internal flags
    stat = DeltaWriteStat(
        fileId=bucket.file_id,
        path=path,
        partitionPath=bucket.partition_path,
        prevCommit=target.base_instant,
        numWrites=upserts.num_rows,
        numDeletes=removed.num_rows,
        numUpdateWrites=upserts.num_rows,
        numInserts=0,
        totalWriteBytes=len(data),
        fileSizeInBytes=len(data),
        logVersion=version,
        logOffset=0,
        baseFile=target.base_file,
        logFiles=(name,),
        column_stats=column_stats.of_table(upserts.select(data_columns)),
    )
    # A key deleted in a log stays in its base file, where the indexes that read base files find
    # it (the record index forgets it: `log_deleted_keys`); a key appended is located in this group
    # when the append may be its first record here (`inserts_in_logs`), else it is there already.
    none = pa.array([], pa.string())
    keys = removed.num_rows and job.keep_keys
    deleted = removed.column(RECORD_KEY).combine_chunks().cast(pa.string()) if keys else none
    located = upserts.column(KEY).combine_chunks().cast(pa.string()) if job.keep_keys and job.inserts_in_logs else none
    return WriteStatus(
        stat=stat,
        inserted_keys=located,
        deleted_keys=none,
        num_updates=upserts.num_rows,
        num_inserts=0,
        num_deletes=removed.num_rows,
        log_deleted_keys=deleted,
        log_stats=(RecordsStats.of(rows) if rows is not None else NO_RECORDS) if job.column_stats else None,
    )


def _create_log(
    storage: Storage, instant_time: str, bucket: Bucket, target: AppendTarget, write_token: str, data: bytes
) -> tuple[int, str, str]:
    """Create the log file under the planned version (marked by the caller), or the first free one
    after it, each marked before it is tried; (version, name, path). A marked name another writer
    took stays marked: a rollback of this write leaves that writer's file alone (markers._owned)."""
    for version in range(target.log_version, target.log_version + MAX_ROLLOVERS):
        name = LogFileName(bucket.file_id, target.log_instant, version, write_token).format()
        path = f"{bucket.partition_path}/{name}" if bucket.partition_path else name
        if version > target.log_version:
            write_markers(storage, instant_time, [marker_entry(bucket.partition_path, name, APPEND)])
        if storage.write_if_absent(path, data):
            return version, name, path
    raise StorageError(
        f"no free log file name in {storage.full_path(bucket.partition_path)} for file group {bucket.file_id}: "
        f"versions {target.log_version} to {target.log_version + MAX_ROLLOVERS - 1} are all taken"
    )


def _split(records: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A bucket's (upserts, deletes)."""
    deletes = np.asarray(records.column(DELETE_FLAG).to_numpy(zero_copy_only=False), dtype=bool)
    if not deletes.any():
        return records, records.slice(0, 0)
    return records.filter(pa.array(~deletes)), records.filter(pa.array(deletes))


class SharedBlocks:
    """The framed Avro data blocks of a write's appends, encoded in `shares` parts, each on first
    use (the appends run on a pool: the first of a share to ask encodes it, the others of that
    share wait for it). The appends are dealt to the shares in the order the pool starts them
    (most rows first), so the threads' first appends start different shares and encode at once.
    Where every bucket's records are at hand: in process, or in the one Spark task that writes a
    small batch."""

    def __init__(self, job: AppendJob, records: pa.Table, rows: Mapping[int, np.ndarray], shares: int = 1) -> None:
        self._job = job
        self._records = records
        started = sorted(rows, key=lambda n: (-len(rows[n]), n))
        count = max(1, min(shares, len(started)))
        self._share = {n: i % count for i, n in enumerate(started)}
        self._rows = [{n: rows[n] for n in started[i::count]} for i in range(count)]
        self._locks = [threading.Lock() for _ in range(count)]
        self._blocks: list[dict[int, bytes] | None] = [None] * count

    def block(self, number: int) -> bytes:
        share = self._share[number]
        with self._locks[share]:
            blocks = self._blocks[share]
            if blocks is None:
                blocks = self._blocks[share] = self._encode(self._rows[share])
        return blocks[number]

    def _encode(self, rows: Mapping[int, np.ndarray]) -> dict[int, bytes]:
        """One take of the share's rows, their deletes left out, meta columns added per run."""
        job = self._job
        numbers = sorted(rows)
        run = np.repeat(np.arange(len(numbers)), [len(rows[n]) for n in numbers])
        at = np.concatenate([rows[n] for n in numbers]) if numbers else np.zeros(0, np.int64)
        upserts = ~np.asarray(self._records.column(DELETE_FLAG).take(pa.array(at)).to_numpy(zero_copy_only=False), bool)
        at, run = at[upserts], run[upserts]
        counts = np.bincount(run, minlength=len(numbers))
        present = [i for i, c in enumerate(counts) if c]
        if not present:
            return {}
        chosen = [numbers[i] for i in present]
        run_ends = np.cumsum(counts[present]).tolist()
        records = self._records.take(pa.array(at))
        file_ids = [job.buckets[n].file_id for n in chosen]
        with_meta = with_meta_runs(records, job.instant_time, chosen, file_ids, run_ends, job.data_schema)
        return dict(zip(chosen, avro_data_blocks(job.instant_time, with_meta, job.schema_json, run_ends)))


def _delete_keys(removed: pa.Table, ordering_fields: tuple[str, ...]) -> pa.Table:
    """A delete block's keys: `delete()`'s records (forced) carry no ordering value (Hudi's
    IntWrapper(0): the delete wins); an upsert's `_hoodie_is_deleted` record carries its
    ordering value, and competes by it as Hudi's append handle writes it: one field's value (a
    null one is none), or several fields' as a struct of them in order (Hudi 1.1's
    ArrayComparable, written whatever nulls it holds)."""
    forced = np.asarray(removed.column(FORCE_FLAG).to_numpy(zero_copy_only=False), dtype=bool)
    keys = {
        DELETED_KEY: removed.column(KEY),
        DELETED_PARTITION: removed.column(PARTITION),
    }
    if ordering_fields and all(f in removed.column_names for f in ordering_fields) and not forced.all():
        if len(ordering_fields) == 1:
            values = removed.column(ordering_fields[0])
            natural = forced | np.asarray(values.is_null().to_numpy(zero_copy_only=False))
        else:
            values = pa.StructArray.from_arrays(
                [removed.column(f).combine_chunks() for f in ordering_fields], names=list(ordering_fields)
            )
            natural = forced
        keys[DELETED_ORDERING] = values
        keys[DELETED_NATURAL] = pa.array(natural)
    else:
        keys[DELETED_NATURAL] = pa.array(np.ones(removed.num_rows, dtype=bool))
    return pa.table(keys)
