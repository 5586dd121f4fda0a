"""Appending one bucket's records to its file group's slice: a new log file (Hudi's
HoodieAppendHandle, for a merge-on-read table).

Updates go as one data block (Avro by default, parquet by option), deletes as one delete block;
nothing of the slice is read and no ordering is resolved here: readers merge the slice. Every
append is a new object (object stores cannot append): on table version 6 the next log version of
the slice (named by its base instant), on version 8 version 1 named by the deltacommit.

The in-process pool hands a thread many appends at once (`AppendJob.write_group`): their Avro
records are encoded in one pass, so the cost per file group is its file writes, not a pass of
the encoder (about a millisecond each, 20 ms of a 1M-row upsert's 0.2 s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from upsertlake.engine.bucket_writer import DELETE_FLAG, FORCE_FLAG, KEY, PARTITION, BucketJob, WriteStatus, with_meta
from upsertlake.errors import StorageError
from upsertlake.layout.file_writer import marker_path
from upsertlake.layout.markers import APPEND
from upsertlake.logfile import LogFileName, avro_data_blocks, data_block, delete_block, encode_block
from upsertlake.partitioner import Bucket
from upsertlake.storage import Storage
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
    schema_json: str = ""  # the log blocks' writer schema (meta fields first)
    parquet_blocks: bool = False  # hoodie.logfile.data.block.format=parquet

    def base_bytes(self, number: int) -> int:
        """An append reads no file: only its records weigh (the pool starts big buckets first)."""
        return 0 if number in (self.appends or {}) else super().base_bytes(number)

    def write(
        self,
        storage: Storage,
        number: int,
        records: pa.Table,
        base_file: object = None,
        attempt: int = 1,
        write_token: str | None = None,
    ) -> WriteStatus:
        target = (self.appends or {}).get(number)
        if target is None:
            return super().write(storage, number, records, base_file, attempt, write_token)
        return append_buckets(storage, self, [(number, records, write_token or f"{number}-{attempt}-0")])[0]

    def write_together(self, records: Mapping[int, int], threads: int) -> list[list[int]]:
        """The appends in up to `threads` groups of about equal records (each encoded in one
        pass), the other buckets one each (`records`: bucket number -> its records)."""
        appends = self.appends or {}
        alone = [[n] for n in records if n not in appends]
        mine = sorted((n for n in records if n in appends), key=lambda n: -records[n])
        groups: list[list[int]] = [[] for _ in range(min(threads, len(mine)))]
        loads = [0] * len(groups)
        for n in mine:  # the largest first, each to the least loaded group
            i = loads.index(min(loads))
            groups[i].append(n)
            loads[i] += records[n]
        return alone + groups

    def write_group(
        self, storage: Storage, numbers: Sequence[int], records: Mapping[int, pa.Table], attempt: int = 1
    ) -> list[WriteStatus]:
        if not all(n in (self.appends or {}) for n in numbers):
            return super().write_group(storage, numbers, records, attempt)
        return append_buckets(storage, self, [(n, records[n], f"{n}-{attempt}-0") for n in numbers])


def append_buckets(
    storage: Storage, job: AppendJob, items: Sequence[tuple[int, pa.Table, str]]
) -> list[WriteStatus]:
    """Write each (bucket number, records, write token) as one new log file of its slice, the
    Avro records of all of them encoded in one pass; their statuses and delta stats."""
    split = [_split_deletes(records) for _, records, _ in items]
    data = _data_blocks(job, [(job.buckets[n], upserts) for (n, _, _), (upserts, _) in zip(items, split)])
    return [
        _append(storage, job, job.buckets[n], token, upserts, removed, block)
        for (n, _, token), (upserts, removed), block in zip(items, split, data)
    ]


def _split_deletes(records: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(the records to upsert, the deletes)."""
    deletes = np.asarray(records.column(DELETE_FLAG).to_numpy(zero_copy_only=False), dtype=bool)
    if not deletes.any():
        return records, records.slice(0, 0)
    return records.filter(pa.array(~deletes)), records.filter(pa.array(deletes))


def _data_blocks(job: AppendJob, upserts: Sequence[tuple[Bucket, pa.Table]]) -> list[bytes]:
    """The framed data block of each bucket's upserts (b"" for none)."""
    rows = [with_meta(u, job.instant_time, b.number, b.file_id, job.data_schema) for b, u in upserts if u.num_rows]
    if job.parquet_blocks:
        framed = iter([encode_block(data_block(job.instant_time, r, job.schema_json, parquet=True)) for r in rows])
    else:
        ends = np.cumsum([r.num_rows for r in rows]).tolist()
        framed = iter(avro_data_blocks(job.instant_time, pa.concat_tables(rows), job.schema_json, ends) if rows else [])
    return [next(framed) if u.num_rows else b"" for _, u in upserts]


def _append(
    storage: Storage, job: AppendJob, bucket: Bucket, write_token: str, upserts: pa.Table, removed: pa.Table,
    data_block_bytes: bytes,
) -> WriteStatus:
    """Write one bucket's log file: its data block, then a delete block for its deletes."""
    target = (job.appends or {})[bucket.number]
    name = LogFileName(bucket.file_id, target.log_instant, target.log_version, write_token).format()
    path = f"{bucket.partition_path}/{name}" if bucket.partition_path else name
    data = data_block_bytes
    if removed.num_rows:
        keys = _delete_keys(removed, job.precombine_field)
        data += encode_block(delete_block(job.instant_time, keys, job.schema_json))
    # No key summary: the conflict check reads an append's keys from its log file.
    storage.write_if_absent(marker_path(job.instant_time, bucket.partition_path, name, APPEND), b"")
    if not storage.write_if_absent(path, data):
        raise StorageError(f"log file {storage.full_path(path)} exists already: another write took its name")
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
        logVersion=target.log_version,
        logOffset=0,
        baseFile=target.base_file,
        logFiles=(name,),
    )
    # The index learns nothing: a key deleted in a log stays in its base file, where the indexes
    # (none of which reads logs) find it, so a later write of it appends to the same group.
    none = pa.array([], pa.string())
    return WriteStatus(
        stat=stat,
        inserted_keys=none,
        deleted_keys=none,
        num_updates=upserts.num_rows,
        num_inserts=0,
        num_deletes=removed.num_rows,
    )


def _delete_keys(removed: pa.Table, precombine_field: str | None) -> pa.Table:
    """A delete block's keys: `delete()`'s records (forced) carry no ordering value (Hudi's
    IntWrapper(0): the delete wins); an upsert's `_hoodie_is_deleted` record carries its
    precombine value, and competes by it as Hudi's append handle writes it."""
    forced = np.asarray(removed.column(FORCE_FLAG).to_numpy(zero_copy_only=False), dtype=bool)
    keys = {
        "record_key": removed.column(KEY),
        "partition_path": removed.column(PARTITION),
    }
    if precombine_field and precombine_field in removed.column_names and not forced.all():
        values = removed.column(precombine_field)
        keys["ordering_value"] = values
        keys["natural_order"] = pa.array(forced | np.asarray(values.is_null().to_numpy(zero_copy_only=False)))
    else:
        keys["natural_order"] = pa.array(np.ones(removed.num_rows, dtype=bool))
    return pa.table(keys)
