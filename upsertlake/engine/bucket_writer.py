"""Writing one bucket: a new file group (INSERT) or a new version of an existing one (UPDATE).

An UPDATE bucket merges the old version with the bucket's records: updates replace rows, deletes
drop them, inserts packed into a small file are appended, and every other row is carried over
unchanged (keeping its commit time and seqno; only `_hoodie_file_name` changes). All of it is
column-wise: the rows to replace are one `is_in` mask over the old keys.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.concurrency.key_summary import KeySummary, write_summaries
from upsertlake.config.enums import MergeMode
from upsertlake.layout.file_system_view import BaseFile, FileSlice, base_file_name
from upsertlake.layout.file_writer import (
    DICTIONARY_SAMPLE,
    FileWriterConfig,
    dictionary_pages,
    write_base_file,
)
from upsertlake.layout.footer import resumed_bloom, resumed_key_range
from upsertlake.layout.markers import marker_entry, write_markers
from upsertlake.layout.slice_reader import Merge, read_slice
from upsertlake.metadata.changes import RecordsStats
from upsertlake.partitioner import Bucket
from upsertlake.schema import conform, full_schema
from upsertlake.schema.columns import (
    COMMIT_SEQNO,
    COMMIT_TIME,
    DELETE_FLAG,
    FILE_NAME,
    FORCE_FLAG,
    KEY,
    PARTITION,
    PARTITION_PATH,
    RECORD_KEY,
)
from upsertlake.schema.ordering import ordering_values
from upsertlake.services.key_groups import STAGED_KEYS
from upsertlake.storage import Storage
from upsertlake.timeline.commit_metadata import WriteStat
from upsertlake.util.arrow import constant


@dataclass(frozen=True)
class BucketTask:
    """One bucket to write: its records (data columns + key, partition, delete flag) and old file."""

    bucket: Bucket
    records: pa.Table
    base_file: BaseFile | None
    instant_time: str
    data_schema: pa.Schema
    ordering_fields: tuple[str, ...]
    merge_mode: MergeMode  # how a record merges with the stored row of its key
    append_records: bool  # inserts: every stored row stays, every record is added (duplicates allowed)
    write_token: str
    merged_slice: tuple[FileSlice, Merge] | None = None  # a merge-on-read slice: its merged records are the old file


@dataclass(frozen=True)
class BucketJob:
    """What every bucket of one write shares. Picklable: Spark ships it to the executors, which
    write their buckets exactly as the in-process pool does."""

    instant_time: str
    buckets: tuple[Bucket, ...]
    base_files: dict[int, BaseFile]  # bucket number -> the file an UPDATE bucket rewrites
    data_schema: pa.Schema
    ordering_fields: tuple[str, ...]
    merge_mode: MergeMode
    append_records: bool  # as BucketTask's
    file_config: FileWriterConfig
    keep_keys: bool = True  # return the inserted and deleted keys (an in-memory index learns them)

    def for_batch(self, records: pa.Table, rows: Mapping[int, np.ndarray], threads: int = 1) -> BucketJob:
        """The job for writing a batch's buckets in process (`rows`: bucket number -> its rows
        of `records`) on `threads` threads; a merge-on-read job shares work across buckets here."""
        return self

    def merged_slice(self, number: int) -> tuple[FileSlice, Merge] | None:
        """The merge-on-read slice bucket `number` rewrites read merged (with how it merges), if any."""
        return None

    def base_bytes(self, number: int) -> int:
        """The size of the file bucket `number` reads and rewrites (0: a new file group)."""
        base = self.base_files.get(number)
        return base.size if base is not None else 0

    def marker(self, number: int, write_token: str) -> str:
        """The marker of the file bucket `number` writes under `write_token` (see `write`): the
        caller marks the files of all its buckets at once before writing them."""
        bucket = self.buckets[number]
        merge = self.base_files.get(number) is not None
        name = base_file_name(bucket.file_id, write_token, self.instant_time)
        return marker_entry(bucket.partition_path, name, "MERGE" if merge else "CREATE")

    def write(
        self,
        storage: Storage,
        number: int,
        records: pa.Table,
        base_file: BaseFile | None = None,
        attempt: int = 1,
        write_token: str | None = None,
    ) -> WriteStatus:
        """Write bucket `number` with its records (data columns + key, partition, delete flag),
        its file marked beforehand by the caller (`marker`). A re-merge passes the group's newer
        `base_file` and a higher `attempt` (a new write token); Spark passes each task attempt's
        own `write_token`. The key summary comes back in the status, for the caller to store
        with its other buckets' (`write_summaries`)."""
        task = BucketTask(
            bucket=self.buckets[number],
            records=records,
            base_file=base_file or self.base_files.get(number),
            instant_time=self.instant_time,
            data_schema=self.data_schema,
            ordering_fields=self.ordering_fields,
            merge_mode=self.merge_mode,
            append_records=self.append_records,
            write_token=write_token or default_token(number, attempt),
            merged_slice=self.merged_slice(number),
        )
        status = write_bucket(storage, task, self.file_config)
        if self.keep_keys:
            return status
        none = pa.array([], pa.string())
        return replace(status, inserted_keys=none, deleted_keys=none, log_deleted_keys=none)


def default_token(number: int, attempt: int) -> str:
    """The write token of bucket `number` written in process (Spark's are its task attempts')."""
    return f"{number}-{attempt}-0"


@dataclass(frozen=True)
class WriteStatus:
    """The result of writing one bucket: its write stat and the key changes for the index (empty
    unless an in-memory index learns them: on Spark nothing per record goes back to the driver)."""

    stat: WriteStat
    inserted_keys: pa.Array
    deleted_keys: pa.Array
    num_updates: int
    num_inserts: int
    num_deletes: int
    summary: KeySummary | None = None  # the keys it wrote, for the conflict check (an append: none)
    # Keys a log file's delete block deleted: the record index forgets them (Hudi's does), while
    # the indexes that read base files still find them there (`deleted_keys` leaves them out).
    log_deleted_keys: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    staged_keys: str | None = None  # on Spark: the file its task staged its key arrays in (`stage_keys`)
    # An append's log file statistics for the metadata table (`AppendJob.column_stats`): computed
    # by the task that wrote it, so the commit (on Spark, the driver) never reads the file back.
    log_stats: RecordsStats | None = None


def mark_buckets(storage: Storage, job: BucketJob, tokens: Mapping[int, str]) -> None:
    """Mark the files of the buckets about to be written (bucket number -> write token) with one
    object, before any of them is written."""
    write_markers(storage, job.instant_time, [job.marker(n, token) for n, token in sorted(tokens.items())])


def store_summaries(storage: Storage, instant_time: str, statuses: Sequence[WriteStatus]) -> list[WriteStatus]:
    """Store the written buckets' key summaries with one object (before the commit); the statuses
    come back without them (on Spark they go to the driver, which holds nothing per record)."""
    groups = {(s.stat.partitionPath, s.stat.fileId): s.summary for s in statuses if s.summary is not None}
    write_summaries(storage, instant_time, groups)
    return [replace(s, summary=None) for s in statuses]


def stage_keys(storage: Storage, folder: str, statuses: Sequence[WriteStatus]) -> list[WriteStatus]:
    """Stage the key changes of the buckets a Spark task wrote (for the record index) as one Arrow
    file in `folder` (one per task attempt), rows of KEY_CHANGES and the data file written; the
    statuses come back without key arrays, naming the file: nothing per record goes to the driver."""
    if not any(len(s.inserted_keys) or len(s.deleted_keys) or len(s.log_deleted_keys) for s in statuses):
        return [_keyless(s, None) for s in statuses]
    parts = []
    for s in statuses:
        for keys, inserted in ((s.inserted_keys, True), (s.deleted_keys, False), (s.log_deleted_keys, False)):
            n = len(keys)
            if n:
                where = [constant(s.stat.partitionPath, n), constant(s.stat.fileId, n)]
                flag, file = constant(inserted, n, pa.bool_()), constant(s.stat.path, n)
                parts.append(pa.table([keys.cast(pa.string()), *where, flag, file], schema=STAGED_KEYS))
    path = f"{folder}/{uuid.uuid4().hex}.arrow"
    with storage.open_output(path) as sink, pa.ipc.new_file(sink, STAGED_KEYS) as staged:
        staged.write_table(pa.concat_tables(parts))
    return [_keyless(s, path) for s in statuses]


def _keyless(status: WriteStatus, staged: str | None) -> WriteStatus:
    none = pa.array([], pa.string())
    return replace(status, inserted_keys=none, deleted_keys=none, log_deleted_keys=none, staged_keys=staged)


def write_bucket(storage: Storage, task: BucketTask, file_config: FileWriterConfig) -> WriteStatus:
    bucket = task.bucket
    name = base_file_name(bucket.file_id, task.write_token, task.instant_time)
    path = f"{bucket.partition_path}/{name}" if bucket.partition_path else name
    schema = full_schema(task.data_schema)
    if task.merged_slice is not None:
        old_footer: dict[bytes, bytes] = {}
        old, old_dictionary = read_slice(storage, *task.merged_slice, schema), None
    else:
        old, old_footer, old_dictionary = _read_old(storage, task.base_file, schema)
    records = task.records
    in_keys = records.column(KEY)
    is_delete = records.column(DELETE_FLAG)

    n_in, n_old = records.num_rows, old.num_rows
    deletes = np.asarray(is_delete.to_numpy(zero_copy_only=False), dtype=bool)
    exists = np.zeros(n_in, dtype=bool)
    applied = np.ones(n_in, dtype=bool)
    old_rows = matched = np.zeros(0, dtype=np.int64)
    copy_wins = np.zeros(0, dtype=bool)  # per matched stored row: the incoming record replaces it
    all_copies = np.zeros(n_in, dtype=bool)  # the record replaced every stored copy of its key
    if not task.append_records and n_old:
        # Probe the old keys against a hash of the bucket's (fewer) records.
        hit = np.asarray(pc.fill_null(pc.index_in(old.column(KEY), value_set=in_keys), -1).to_numpy(), dtype=np.int64)
        old_rows = np.flatnonzero(hit >= 0)
        matched = hit[old_rows]
        exists[matched] = True
        # Each stored copy of a key (plain inserts make duplicates) merges with the record on its
        # own, as Hudi's merge handle does.
        needed = [*task.ordering_fields, FORCE_FLAG]
        per_copy = replace(task, records=records.select(needed).take(pa.array(matched)))
        copy_wins = _incoming_wins(per_copy, old, pa.array(old_rows), np.ones(len(matched), dtype=bool))
        wins = np.bincount(matched[copy_wins], minlength=n_in)
        applied = ~exists | (wins > 0)
        all_copies = exists & (wins == np.bincount(matched, minlength=n_in))
    replaced = exists & applied
    write_new = applied & ~deletes

    new_rows = with_meta(records.filter(pa.array(write_new)), task.instant_time, bucket.number, name, task.data_schema)
    out, kept_all_old = _merged_order(old, new_rows, name, old_rows, matched, copy_wins, write_new, exists)
    inserted = ~exists & write_new
    inserted_keys = in_keys.filter(pa.array(inserted))
    bloom = resumed_bloom(old_footer, n_old, inserted_keys, file_config) if kept_all_old else None
    key_range = resumed_key_range(old_footer, inserted_keys) if kept_all_old else None

    summary = KeySummary.of(
        pc.filter(in_keys, pa.array(replaced & ~deletes)),
        pc.filter(in_keys, pa.array(replaced & deletes)),
        inserted_keys,
    )
    size, stats = write_base_file(storage, path, out, file_config, bloom, key_range, old_dictionary)

    deleted = all_copies & deletes  # keys gone from the file group, for the index
    num_updates = int((replaced & ~deletes).sum())
    num_deletes = int((replaced & deletes).sum())
    num_inserts = int(inserted.sum())
    stat = WriteStat(
        fileId=bucket.file_id,
        path=path,
        partitionPath=bucket.partition_path,
        prevCommit=task.base_file.instant_time if task.base_file else "null",
        numWrites=out.num_rows,
        numDeletes=num_deletes,
        numUpdateWrites=num_updates,
        numInserts=num_inserts,
        totalWriteBytes=size,
        fileSizeInBytes=size,
        column_stats=stats,
    )
    return WriteStatus(
        stat=stat,
        inserted_keys=inserted_keys,
        deleted_keys=pc.filter(in_keys, pa.array(deleted)),
        num_updates=num_updates,
        num_inserts=num_inserts,
        num_deletes=num_deletes,
        summary=summary,
    )


def _merged_order(
    old: pa.Table,
    new_rows: pa.Table,
    name: str,
    old_rows: np.ndarray,
    matched: np.ndarray,
    copy_wins: np.ndarray,
    write_new: np.ndarray,
    exists: np.ndarray,
) -> tuple[pa.Table, bool]:
    """The new file version in Hudi's merge order: old rows in place (an updated row takes the
    place of each stored copy it wins against; deleted rows drop out), inserts last; and whether
    every old row kept its place (then the file's keys are the old ones plus the inserts)."""
    n_old = old.num_rows
    if n_old == 0:
        return new_rows, False
    file_name = old.schema.field(4).with_name(FILE_NAME)
    names = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n_old, np.int32)), pa.array([name]))
    old = old.set_column(4, file_name, names.cast(file_name.type))  # no copy of the name per row
    new_rows = new_rows.cast(old.schema)  # dictionary columns stay dictionaries
    new_pos = np.cumsum(write_new) - 1  # row of each record within new_rows
    source = np.arange(n_old, dtype=np.int64)
    keep = np.ones(n_old, dtype=bool)
    replaced = copy_wins
    keep[old_rows[replaced]] = False
    in_place = replaced & write_new[matched]
    keep[old_rows[in_place]] = True
    source[old_rows[in_place]] = n_old + new_pos[matched[in_place]]
    inserts = n_old + new_pos[np.flatnonzero(write_new & ~exists)]
    order = np.concatenate([source[keep], inserts])
    if len(order) == n_old and np.array_equal(order, np.arange(n_old)):
        return old, True
    # Take straight from the two chunks: combining them first copies everything once more.
    return pa.concat_tables([old, new_rows]).take(pa.array(order)), bool(keep.all())


def _read_old(
    storage: Storage, base_file: BaseFile | None, schema: pa.Schema
) -> tuple[pa.Table, dict[bytes, bytes], frozenset[str] | None]:
    """The old file version made to `schema`; its footer when we wrote it (Hudi's own writers'
    footers are not reused: some tables carry filters that miss their keys); and, when we wrote
    it with every column of `schema`, the columns it dictionary-encodes, so that the new version
    keeps that choice instead of sampling the rows again (`column_encodings`)."""
    if base_file is None:
        return schema.empty_table(), {}, None
    parquet = storage.parquet_file(base_file.path)
    ours = parquet.metadata.created_by.startswith("parquet-cpp")
    dictionary = dictionary_pages(parquet.metadata)
    stored = parquet.schema_arrow
    # Strings (but the record key, probed by hash) read as dictionaries: no decoding, cheap
    # takes, and the writer keeps them.
    encoded = [
        f.name
        for f in schema
        if f.name in dictionary and f.name != KEY and f.type == pa.string()
        and stored.field(f.name).type == pa.string()
    ]
    if encoded:
        parquet = storage.parquet_file(base_file.path, metadata=parquet.metadata, read_dictionary=encoded)
        as_dictionary = pa.dictionary(pa.int32(), pa.string())
        schema = pa.schema([f.with_type(as_dictionary) if f.name in encoded else f for f in schema])
    # A version of fewer rows than one sample was judged on too few to keep the choice.
    sampled = parquet.metadata.num_rows >= DICTIONARY_SAMPLE
    complete = all(stored.get_field_index(n) >= 0 for n in schema.names)
    kept = frozenset(dictionary) if ours and sampled and complete else None
    return conform(parquet.read(), schema), (parquet.metadata.metadata or {}) if ours else {}, kept


def _incoming_wins(task: BucketTask, old: pa.Table, stored_row: pa.Array, exists: np.ndarray) -> np.ndarray:
    """Per record: does it replace the stored row? Records flagged FORCE (deletes made by
    `delete()`, partition moves) always do; a null ordering value loses to any value."""
    n = task.records.num_rows
    fields = task.ordering_fields
    if task.merge_mode is MergeMode.COMMIT_TIME or not fields or not exists.any():
        return np.ones(n, dtype=bool)
    stored = ordering_values(old.select(list(fields)).take(stored_row), fields)
    incoming = ordering_values(task.records, fields)
    stored_larger = pc.fill_null(pc.greater(stored, incoming), False)
    stored_larger = pc.or_(stored_larger, pc.and_(pc.is_valid(stored), pc.is_null(incoming)))
    forced = np.asarray(task.records.column(FORCE_FLAG).to_numpy(zero_copy_only=False), dtype=bool)
    loses = exists & np.asarray(stored_larger.to_numpy(zero_copy_only=False), dtype=bool) & ~forced
    return cast(np.ndarray, ~loses)


def with_meta(
    records: pa.Table, instant_time: str, bucket_number: int, file_name: str, data_schema: pa.Schema
) -> pa.Table:
    """The rows of a new file: the meta columns of `instant_time`'s bucket, then the data columns."""
    return with_meta_runs(records, instant_time, [bucket_number], [file_name], [records.num_rows], data_schema)


def with_meta_runs(
    records: pa.Table,
    instant_time: str,
    bucket_numbers: Sequence[int],
    file_names: Sequence[str],
    run_ends: Sequence[int],
    data_schema: pa.Schema,
) -> pa.Table:
    """`with_meta` of each run of rows, records[run_ends[i-1]:run_ends[i]] being bucket
    bucket_numbers[i]'s, written to file_names[i], in one pass."""
    n = records.num_rows
    ends = np.asarray(run_ends, np.int64)
    lengths = np.diff(ends, prepend=0)
    run = np.repeat(np.arange(len(ends)), lengths)
    within = np.arange(n, dtype=np.int64) - np.repeat(ends - lengths, lengths)  # the row's number in its run
    if len(ends) == 1:
        prefix, names = constant(f"{instant_time}_{bucket_numbers[0]}_", n), constant(file_names[0], n)
    else:
        at = pa.array(run)
        prefix = pa.array([f"{instant_time}_{b}_" for b in bucket_numbers], pa.string()).take(at)
        names = pa.array(list(file_names), pa.string()).take(at)
    meta = {
        COMMIT_TIME: constant(instant_time, n),
        COMMIT_SEQNO: pc.binary_join_element_wise(prefix, pc.cast(pa.array(within), pa.string()), ""),
        RECORD_KEY: records.column(KEY),
        PARTITION_PATH: records.column(PARTITION),
        FILE_NAME: names,
    }
    data = {f.name: records.column(f.name) for f in data_schema}
    return pa.table({**meta, **data}).cast(full_schema(data_schema))
