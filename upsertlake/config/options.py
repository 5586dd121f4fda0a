"""The declarations of the write options upsertlake implements: the typed registry.

Every option is declared once, as an `Option` constant carrying Hudi's key, type and default, so
the writer reads typed values (`config.get(PARQUET_MAX_FILE_SIZE)`) instead of parsing strings at
each use. Keys and defaults follow Apache Hudi 0.15 (`HoodieWriteConfig`, `HoodieStorageConfig`,
`HoodieCompactionConfig`, `HoodieIndexConfig`, `HoodieLockConfig`, `KeyGeneratorOptions`,
`DataSourceWriteOptions`); each doc says where upsertlake deliberately differs.

Only the declarations live here (import the module: `from upsertlake.config import options as opt;
cfg.get(opt.INDEX_TYPE)`). The `Option` type is `upsertlake.config.option`; resolving layers of
options into a `Config`, with their keys validated, is `upsertlake.config.resolved`; which keys are
Apache Hudi's is `upsertlake.config.known_keys`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from upsertlake.config.enums import CleanPolicy, ConcurrencyMode, IndexType, MergeMode, TableType
from upsertlake.config.option import Option, T

__all__ = [
    "BLOOM_FILTER_TYPE",
    "BLOOM_FPP",
    "BLOOM_INDEX_UPDATE_PARTITION_PATH",
    "BLOOM_MAX_ENTRIES",
    "BLOOM_NUM_ENTRIES",
    "BLOOM_PRUNE_BY_RANGES",
    "BUCKET_INDEX_ENGINE",
    "BUCKET_INDEX_HASH_FIELD",
    "BUCKET_INDEX_NUM_BUCKETS",
    "BULK_INSERT_SORT_MODE",
    "CLEANER_COMMITS_RETAINED",
    "CLEANER_FILE_VERSIONS_RETAINED",
    "CLEANER_HOURS_RETAINED",
    "CLEANER_POLICY",
    "CLEAN_AUTOMATIC",
    "CLEAN_MAX_COMMITS",
    "COMBINE_BEFORE_DELETE",
    "COMBINE_BEFORE_INSERT",
    "COMBINE_BEFORE_UPSERT",
    "COMPACTION_LOGFILE_SIZE_THRESHOLD",
    "COMPACTION_STRATEGY",
    "COMPACTION_TARGET_IO",
    "COMPACT_INLINE",
    "COMPACT_INLINE_MAX_DELTA_COMMITS",
    "COMPACT_INLINE_MAX_DELTA_SECONDS",
    "COMPACT_INLINE_TRIGGER_STRATEGY",
    "COPY_ON_WRITE_AUTO_SPLIT",
    "COPY_ON_WRITE_INSERT_SPLIT_SIZE",
    "DATABASE_NAME",
    "HEARTBEAT_INTERVAL_MS",
    "HEARTBEAT_TOLERABLE_MISSES",
    "HIVE_STYLE_PARTITIONING",
    "INDEX_TYPE",
    "KEYGEN_CLASS",
    "LOCK_EXPIRE_MINUTES",
    "LOCK_FILESYSTEM_PATH",
    "LOCK_PROVIDER",
    "LOCK_STORAGE_HEARTBEAT_POLL_SECS",
    "LOCK_STORAGE_VALIDITY_SECS",
    "LOCK_WAIT_TIME_MS",
    "LOGFILE_DATA_BLOCK_FORMAT",
    "METADATA_COMPACT_MAX_DELTA_COMMITS",
    "METADATA_ENABLE",
    "METADATA_RECORD_INDEX_ENABLE",
    "OPERATION",
    "OPTIONS",
    "PARQUET_BLOCK_SIZE",
    "PARQUET_COMPRESSION",
    "PARQUET_MAX_FILE_SIZE",
    "PARQUET_SMALL_FILE_LIMIT",
    "PARTITIONPATH_FIELD",
    "PARTITIONPATH_URLENCODE",
    "PRECOMBINE_FIELD",
    "RECORDKEY_FIELD",
    "RECORD_INDEX_UPDATE_PARTITION_PATH",
    "RECORD_MERGE_MODE",
    "RECORD_SIZE_ESTIMATE",
    "RECORD_SIZE_ESTIMATION_THRESHOLD",
    "SIMPLE_INDEX_UPDATE_PARTITION_PATH",
    "STREAMING_CHECKPOINT_IDENTIFIER",
    "TABLE_NAME",
    "TABLE_TYPE",
    "WRITE_AUTO_UPGRADE",
    "WRITE_CONCURRENCY_MODE",
    "WRITE_PARALLELISM",
    "WRITE_SET_NULL_FOR_MISSING_COLUMNS",
    "WRITE_TABLE_VERSION",
]

_REGISTRY: list[Option[Any]] = []


def _option(
    key: str,
    type_: type,
    default: T,
    doc: str,
    choices: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive: bool = False,
) -> Option[T]:
    option: Option[T] = Option(key, type_, default, doc, choices, aliases, minimum, maximum, exclusive)
    _REGISTRY.append(option)
    return option


# --- file sizing and parquet (HoodieStorageConfig, HoodieCompactionConfig) ----------------------

PARQUET_MAX_FILE_SIZE: Option[int] = _option(
    "hoodie.parquet.max.file.size", int, 125829120,
    "Target size in bytes of a base file; a bucket is cut when this many bytes of records are "
    "estimated to fit (Hudi default 120 MiB).", minimum=1)
PARQUET_SMALL_FILE_LIMIT: Option[int] = _option(
    "hoodie.parquet.small.file.limit", int, 104857600,
    "Base files below this size in bytes are small files that inserts are routed into until they "
    "reach the max file size; 0 turns bin-packing off (Hudi default 100 MiB).", minimum=0)
PARQUET_BLOCK_SIZE: Option[int] = _option(
    "hoodie.parquet.block.size", int, 4 * 2**20,
    "Parquet row group size in bytes, of the rows in memory. Deliberate deviation: upsertlake "
    "defaults to 4 MiB, Hudi to 120 MiB (one row group per file): pyarrow skips row groups, not "
    "pages, so a narrow range decodes whole row groups; at 4 MiB a 1% range of a 4M-row table "
    "decodes a few percent of it, for about 4% more write time (the README's measurements).", minimum=1)
PARQUET_COMPRESSION: Option[str] = _option(
    "hoodie.parquet.compression.codec", str, "snappy",
    "Parquet compression codec. Deliberate deviation: upsertlake defaults to snappy, "
    "Hudi 0.15 to gzip, because snappy writes several times faster in pyarrow; set gzip to "
    "produce files byte-for-byte closer to Hudi's.",
    choices=("gzip", "snappy", "zstd", "lz4", "uncompressed"))
COPY_ON_WRITE_INSERT_SPLIT_SIZE: Option[int] = _option(
    "hoodie.copyonwrite.insert.split.size", int, 500000,
    "Number of inserts per new file group when auto split is off.", minimum=1)
COPY_ON_WRITE_AUTO_SPLIT: Option[bool] = _option(
    "hoodie.copyonwrite.insert.auto.split", bool, True,
    "Derive the inserts per new file group from the max file size and the average record size.")
RECORD_SIZE_ESTIMATE: Option[int] = _option(
    "hoodie.copyonwrite.record.size.estimate", int, 1024,
    "Average record size in bytes assumed until a previous commit lets it be measured.", minimum=1)
RECORD_SIZE_ESTIMATION_THRESHOLD: Option[float] = _option(
    "hoodie.record.size.estimation.threshold", float, 1.0,
    "A commit is used to measure the average record size only if it wrote more than "
    "threshold x small file limit bytes.", minimum=0)

# --- index (HoodieIndexConfig, HoodieStorageConfig) ---------------------------------------------

INDEX_TYPE: Option[IndexType] = _option(
    "hoodie.index.type", IndexType, IndexType.SIMPLE,
    "How incoming keys are located in existing file groups. Hudi 0.15 has no static default and "
    "picks SIMPLE for Spark writers, which upsertlake follows. GLOBAL_INMEMORY is an upsertlake "
    "extension (Hudi has no such type): the in-memory index matched across partitions. BUCKET: "
    "Hudi's simple bucket index (a key's file group is its hash's bucket; no file is read to tag; "
    "in process and on Spark). RECORD_INDEX: Hudi's record index, a global index that looks each key "
    "up in the metadata table's record_index partition (built when missing; table version 8 or 9).")
BUCKET_INDEX_NUM_BUCKETS: Option[int] = _option(
    "hoodie.bucket.index.num.buckets", int, 256,
    "BUCKET index: file groups (buckets) per partition. Fixed for a table's life: a key's bucket "
    "is its hash modulo this number.", minimum=1)
BUCKET_INDEX_HASH_FIELD: Option[str] = _option(
    "hoodie.bucket.index.hash.field", str, "",
    "BUCKET index: the record key fields whose values are hashed (comma-separated); empty: the "
    "whole record key.")
BUCKET_INDEX_ENGINE: Option[str] = _option(
    "hoodie.index.bucket.engine", str, "SIMPLE",
    "BUCKET index engine: SIMPLE (a fixed number of buckets). Hudi's CONSISTENT_HASHING, which "
    "splits and merges buckets, is not supported.",
    choices=("SIMPLE",))
BLOOM_NUM_ENTRIES: Option[int] = _option(
    "hoodie.index.bloom.num_entries", int, 60000,
    "Number of keys the bloom filter in each base file footer is sized for.", minimum=1)
BLOOM_FPP: Option[float] = _option(
    "hoodie.index.bloom.fpp", float, 1e-9,
    "Target false positive probability of the bloom filter at num_entries keys.", minimum=0, maximum=1, exclusive=True)
BLOOM_FILTER_TYPE: Option[str] = _option(
    "hoodie.bloom.index.filter.type", str, "DYNAMIC_V0",
    "Bloom filter written to base file footers: SIMPLE (fixed size) or DYNAMIC_V0 (grows up to "
    "the dynamic max entries).",
    choices=("SIMPLE", "DYNAMIC_V0"))
BLOOM_MAX_ENTRIES: Option[int] = _option(
    "hoodie.bloom.index.filter.dynamic.max.entries", int, 100000,
    "Upper bound on the keys a DYNAMIC_V0 bloom filter grows to.", minimum=1)
BLOOM_PRUNE_BY_RANGES: Option[bool] = _option(
    "hoodie.bloom.index.prune.by.ranges", bool, True,
    "Skip base files whose min/max record key range cannot contain the key.")
SIMPLE_INDEX_UPDATE_PARTITION_PATH: Option[bool] = _option(
    "hoodie.simple.index.update.partition.path", bool, True,
    "GLOBAL_SIMPLE: a record arriving with a new partition path is deleted from the old "
    "partition and inserted into the new one (else it is updated in place).")
BLOOM_INDEX_UPDATE_PARTITION_PATH: Option[bool] = _option(
    "hoodie.bloom.index.update.partition.path", bool, True,
    "GLOBAL_BLOOM: same as the simple index option, for the bloom index.")
RECORD_INDEX_UPDATE_PARTITION_PATH: Option[bool] = _option(
    "hoodie.record.index.update.partition.path", bool, False,
    "RECORD_INDEX: same as the simple index option, for the record index (Hudi's default: false, "
    "the record is updated in its old partition).")

# --- merging and write operation (HoodieWriteConfig, DataSourceWriteOptions) ---------------------

RECORD_MERGE_MODE: Option[MergeMode] = _option(
    "hoodie.record.merge.mode", MergeMode, MergeMode.EVENT_TIME,
    "How an update merges with the stored record: EVENT_TIME_ORDERING keeps the record with the "
    "larger precombine value, COMMIT_TIME_ORDERING the latest written. Hudi 1.0 key (table config; "
    "its write-side twin hoodie.write.record.merge.mode is accepted as an alias); Hudi 0.15 "
    "expresses this through the payload class instead. CUSTOM is not supported.",
    aliases=("hoodie.write.record.merge.mode",))
BULK_INSERT_SORT_MODE: Option[str] = _option(
    "hoodie.bulkinsert.sort.mode", str, "NONE",
    "How bulk_insert orders records before writing them into files.",
    choices=("NONE", "GLOBAL_SORT", "PARTITION_SORT", "PARTITION_PATH_REPARTITION",
             "PARTITION_PATH_REPARTITION_AND_SORT"))
COMBINE_BEFORE_INSERT: Option[bool] = _option(
    "hoodie.combine.before.insert", bool, False,
    "De-duplicate records with the same key within an insert/bulk_insert batch.")
COMBINE_BEFORE_UPSERT: Option[bool] = _option(
    "hoodie.combine.before.upsert", bool, True,
    "De-duplicate records with the same key within an upsert batch (precombine).")
COMBINE_BEFORE_DELETE: Option[bool] = _option(
    "hoodie.combine.before.delete", bool, True,
    "De-duplicate keys within a delete batch.")
WRITE_SET_NULL_FOR_MISSING_COLUMNS: Option[bool] = _option(
    "hoodie.write.set.null.for.missing.columns", bool, False,
    "Fill table columns missing from the batch (nullable ones) with nulls instead of failing.")
WRITE_TABLE_VERSION: Option[int] = _option(
    "hoodie.write.table.version", int, 6,
    "Table version a new table is created at: 6 (timeline layout 1, read by Hudi 0.14+ and 1.x), "
    "8 (layout 2, Hudi 1.0's default, read by Hudi 1.x) or 9 (Hudi 1.1's default, read by Hudi "
    "1.1). Deviation: Hudi 1.1 defaults to 9; upsertlake to 6, which every Hudi reader reads "
    "(README, Table versions). On an existing table at a lower version a write upgrades it first, "
    "as Hudi's writer does (unless hoodie.write.auto.upgrade=false: then it writes at the table's "
    "version); a lower version than the table's is an error.")
WRITE_AUTO_UPGRADE: Option[bool] = _option(
    "hoodie.write.auto.upgrade", bool, True,
    "Whether a write whose hoodie.write.table.version is above the table's upgrades the table first "
    "(as Hudi 1.x's writer); false writes at the table's version, as Hudi does.")
OPERATION: Option[str] = _option(
    "hoodie.datasource.write.operation", str, "upsert",
    "Write operation of a datasource-style write; upsertlake implements these four.",
    choices=("upsert", "insert", "bulk_insert", "delete"))
WRITE_PARALLELISM: Option[int] = _option(
    "hoodie.upsert.shuffle.parallelism", int, 0,
    "Hudi: parallelism of the upsert shuffle, 0 = derived by the engine. upsertlake: number of "
    "worker threads writing files, 0 = one per CPU core.", minimum=0)

STREAMING_CHECKPOINT_IDENTIFIER: Option[str] = _option(
    "hoodie.datasource.write.streaming.checkpoint.identifier", str, "default_single_writer",
    "The stream a streaming write belongs to (DataSourceWriteOptions): each commit records its batch "
    "id under this identifier, and a batch whose id is at most the last one committed under it is "
    "skipped. Hudi's default for a single writer; under optimistic concurrency each stream must "
    "name its own.")

# --- concurrency (HoodieWriteConfig, HoodieLockConfig) ------------------------------------------

WRITE_CONCURRENCY_MODE: Option[ConcurrencyMode] = _option(
    "hoodie.write.concurrency.mode", ConcurrencyMode, ConcurrencyMode.SINGLE_WRITER,
    "SINGLE_WRITER assumes one writer; OPTIMISTIC_CONCURRENCY_CONTROL checks for conflicting "
    "commits under the table lock before committing.")
LOCK_PROVIDER: Option[str] = _option(
    "hoodie.write.lock.provider", str, "upsertlake.concurrency.lock.FlockLockProvider",
    "Lock provider class: Hudi's org.apache.hudi.client.transaction.lock.StorageBasedLockProvider "
    "(the default on object stores), FileSystemBasedLockProvider or InProcessLockProvider, "
    "upsertlake.concurrency.lock.FlockLockProvider, or the dotted path of "
    "your own class. Deviation: Hudi 0.15 defaults to ZookeeperBasedLockProvider; ours is an flock "
    "the kernel releases when its holder dies, so a crash never leaves a stale lock.",
)
LOCK_FILESYSTEM_PATH: Option[str] = _option(
    "hoodie.write.lock.filesystem.path", str, "",
    "Folder of FileSystemBasedLockProvider's lock file (default: the table's .hoodie folder).")
LOCK_WAIT_TIME_MS: Option[int] = _option(
    "hoodie.write.lock.wait_time_ms", int, 60000,
    "How long in milliseconds a writer waits for the table lock before failing.", minimum=0)
LOCK_EXPIRE_MINUTES: Option[int] = _option(
    "hoodie.write.lock.filesystem.expire", int, 0,
    "FileSystemBasedLockProvider: a lock older than this many minutes is stale and taken over; "
    "0 = only when its holder is a dead process on this host (Hudi: never).", minimum=0)
LOCK_STORAGE_VALIDITY_SECS: Option[int] = _option(
    "hoodie.write.lock.storage.validity.timeout.secs", int, 300,
    "StorageBasedLockProvider: seconds a lease is valid without renewal (at least 10, and at least "
    "10 times the heartbeat interval).", minimum=1)
LOCK_STORAGE_HEARTBEAT_POLL_SECS: Option[int] = _option(
    "hoodie.write.lock.storage.heartbeat.poll.secs", int, 30,
    "StorageBasedLockProvider: seconds between renewals of a held lease (at least 1).", minimum=1)
HEARTBEAT_INTERVAL_MS: Option[int] = _option(
    "hoodie.client.heartbeat.interval_in_ms", int, 60000,
    "Interval in milliseconds at which an in-flight writer refreshes its heartbeat file.", minimum=1)
HEARTBEAT_TOLERABLE_MISSES: Option[int] = _option(
    "hoodie.client.heartbeat.tolerable.misses", int, 2,
    "Missed heartbeats after which an in-flight write is considered failed.", minimum=1)

NUM_RETRIES_ON_CONFLICT: Option[int] = _option(
    "hoodie.write.num.retries.on.conflict.failures", int, 0,
    "Times a write that conflicts on a record is tagged and merged again against the new table state "
    "(with backoff) before WriteConflictError; safe under event-time ordering (docs/concepts/concurrency.md).",
    minimum=0)

# --- keys and table identity (KeyGeneratorOptions, HoodieWriteConfig, HoodieTableConfig) ---------

PARTITIONPATH_URLENCODE: Option[bool] = _option(
    "hoodie.datasource.write.partitionpath.urlencode", bool, False,
    "URL-encode partition path values (e.g. '/' in a date string).")
HIVE_STYLE_PARTITIONING: Option[bool] = _option(
    "hoodie.datasource.write.hive_style_partitioning", bool, False,
    "Name partition folders field=value instead of value.")
KEYGEN_CLASS: Option[str] = _option(
    "hoodie.datasource.write.keygenerator.class", str, "",
    "Key generator class. Empty = derived from the key and partition fields (simple, complex or "
    "non-partitioned), where the Spark datasource defaults to SimpleKeyGenerator.")
RECORDKEY_FIELD: Option[str] = _option(
    "hoodie.datasource.write.recordkey.field", str, "",
    "Comma-separated record key field(s). Hudi has no default.")
PRECOMBINE_FIELD: Option[str] = _option(
    "hoodie.datasource.write.precombine.field", str, "",
    "Field whose larger value wins between records with the same key, or several (comma-separated, "
    "compared in order: the next decides a tie). Empty = none. Deviation: Hudi 0.15 defaults to 'ts' "
    "(1.x has no default). Hudi 1.1's hoodie.table.ordering.fields names the same fields; the table's "
    "value up to version 8, hoodie.table.precombine.field, is the table's own.",
    aliases=("hoodie.table.ordering.fields",))
PARTITIONPATH_FIELD: Option[str] = _option(
    "hoodie.datasource.write.partitionpath.field", str, "",
    "Comma-separated partition path field(s); empty = non-partitioned table.")
TABLE_NAME: Option[str] = _option(
    "hoodie.table.name", str, "",
    "Table name, written to hoodie.properties. Hudi has no default.")
TABLE_TYPE: Option[TableType] = _option(
    "hoodie.table.type", TableType, TableType.COPY_ON_WRITE,
    "Table type, set when the table is created: COPY_ON_WRITE rewrites a file group's base file on "
    "every update; MERGE_ON_READ appends updates and deletes to log files that readers merge (every "
    "write is a deltacommit; compaction folds them into new base files).",
    aliases=("hoodie.datasource.write.table.type",))
LOGFILE_DATA_BLOCK_FORMAT: Option[str] = _option(
    "hoodie.logfile.data.block.format", str, "avro",
    "Format of the data blocks a merge-on-read write appends to log files: avro (Hudi's default) or "
    "parquet (the block holds a whole parquet file). hfile blocks are not written.",
    choices=("avro", "parquet"))
DATABASE_NAME: Option[str] = _option(
    "hoodie.database.name", str, "default",
    "Database name of the table. Deviation: Hudi leaves it unset by default; upsertlake uses "
    "'default', as catalogs do.")

# --- table services (HoodieCleanConfig) ------------------------------------------------------------

CLEANER_POLICY: Option[CleanPolicy] = _option(
    "hoodie.cleaner.policy", CleanPolicy, CleanPolicy.KEEP_LATEST_COMMITS,
    "What the cleaner keeps: the file versions the last N commits read (KEEP_LATEST_COMMITS), the "
    "latest N versions of each file group (KEEP_LATEST_FILE_VERSIONS), or the versions the "
    "commits of the last N hours read (KEEP_LATEST_BY_HOURS). Savepointed files are always kept.",
    aliases=("hoodie.clean.policy",))
CLEANER_COMMITS_RETAINED: Option[int] = _option(
    "hoodie.cleaner.commits.retained", int, 10,
    "KEEP_LATEST_COMMITS: number of latest commits whose snapshots stay readable.",
    aliases=("hoodie.clean.commits.retained",), minimum=1)
CLEANER_FILE_VERSIONS_RETAINED: Option[int] = _option(
    "hoodie.cleaner.fileversions.retained", int, 3,
    "KEEP_LATEST_FILE_VERSIONS: number of versions kept per file group.",
    aliases=("hoodie.clean.fileversions.retained",), minimum=1)
CLEANER_HOURS_RETAINED: Option[int] = _option(
    "hoodie.cleaner.hours.retained", int, 24,
    "KEEP_LATEST_BY_HOURS: the snapshots of commits of the last this many hours stay readable.",
    aliases=("hoodie.clean.hours.retained",), minimum=1)
METADATA_ENABLE: Option[bool] = _option(
    "hoodie.metadata.enable", bool, True,
    "Keep Apache Hudi's metadata table (.hoodie/metadata) on table versions 8 and 9: every write "
    "and service updates it in the same instant, as Hudi's writers do. Given explicitly as true, a "
    "table without one gets one (files and column_stats, partition_stats when partitioned, "
    "record_index when asked); by default an existing one is kept and none is created "
    "(**deviation**: Hudi creates one; keeping it costs a small upsert 1.3x locally and 2-4x on an "
    "object store, benchmarks/metadata_bench.py). false: it is deleted at the next write, as Hudi "
    "does for such a writer. Table version 6's (Hudi 0.x) is deleted either way.")
METADATA_RECORD_INDEX_ENABLE: Option[bool] = _option(
    "hoodie.metadata.record.index.enable", bool, False,
    "Create the metadata table's record_index partition (every record key and its file group) when "
    "the table has none; one that exists is kept whatever this says. hoodie.index.type=RECORD_INDEX "
    "needs it.")
METADATA_COMPACT_MAX_DELTA_COMMITS: Option[int] = _option(
    "hoodie.metadata.compact.max.delta.commits", int, 10,
    "The metadata table is compacted (its log files folded into new HFile base files) once this many "
    "deltacommits completed since its last compaction, as Hudi's default.", minimum=1)
CLEAN_AUTOMATIC: Option[bool] = _option(
    "hoodie.clean.automatic", bool, True,
    "Clean after each commit when due (see hoodie.clean.max.commits) and there is something to delete.")
CLEAN_MAX_COMMITS: Option[int] = _option(
    "hoodie.clean.max.commits", int, 1,
    "An automatic clean is attempted once this many commits completed since the last clean.", minimum=1)
KEEP_MIN_COMMITS: Option[int] = _option(
    "hoodie.keep.min.commits", int, 20,
    "The archiver leaves at least this many commits on the active timeline.", minimum=1)
KEEP_MAX_COMMITS: Option[int] = _option(
    "hoodie.keep.max.commits", int, 30,
    "The archiver runs once the active timeline holds more than this many commits.", minimum=1)
COMMITS_ARCHIVAL_BATCH: Option[int] = _option(
    "hoodie.commits.archival.batch", int, 10,
    "Table version 6: archived timeline entries per block of an archive log file.", minimum=1)
ARCHIVE_MERGE_ENABLE: Option[bool] = _option(
    "hoodie.archive.merge.enable", bool, True,
    "Table version 6: merge small archive log files (Hudi's option, off by default there; on here, "
    "as no storage upsertlake writes can append to one, so each archival adds a file).")
ARCHIVE_MERGE_FILES_BATCH: Option[int] = _option(
    "hoodie.archive.merge.files.batch.size", int, 10,
    "Table version 6: this many small archive log files are merged into one.", minimum=2)
ARCHIVE_MERGE_SMALL_FILE_LIMIT: Option[int] = _option(
    "hoodie.archive.merge.small.file.limit.bytes", int, 20 * 1024 * 1024,
    "Table version 6: archive log files up to this size are merged.", minimum=0)
TIMELINE_COMPACTION_BATCH: Option[int] = _option(
    "hoodie.timeline.compaction.batch.size", int, 10,
    "Table versions 8, 9: once a layer of the LSM archived timeline holds this many files, its oldest are "
    "merged into one.", minimum=2)
ARCHIVE_AUTOMATIC: Option[bool] = _option(
    "hoodie.archive.automatic", bool, True,
    "Archive after each commit (after the automatic clean) when the active timeline is over the max.")
CLUSTERING_SMALL_FILE_LIMIT: Option[int] = _option(
    "hoodie.clustering.plan.strategy.small.file.limit", int, 314572800,
    "Clustering rewrites file groups whose base file is below this size in bytes (Hudi default 300 MiB).", minimum=0)
CLUSTERING_TARGET_FILE_MAX_BYTES: Option[int] = _option(
    "hoodie.clustering.plan.strategy.target.file.max.bytes", int, 1073741824,
    "Clustering bin-packs small file groups into new ones of at most this size (Hudi default 1 GiB).", minimum=1)
CLUSTERING_SORT_COLUMNS: Option[str] = _option(
    "hoodie.clustering.plan.strategy.sort.columns", str, "",
    "Comma-separated columns the rows of each clustered file are sorted by; empty = keep their order.")
CLUSTERING_INLINE: Option[bool] = _option(
    "hoodie.clustering.inline", bool, False,
    "Cluster after every hoodie.clustering.inline.max.commits commits, before the automatic clean.")
CLUSTERING_INLINE_MAX_COMMITS: Option[int] = _option(
    "hoodie.clustering.inline.max.commits", int, 4,
    "Commits since the last clustering after which inline clustering runs.", minimum=1)
COMPACT_INLINE: Option[bool] = _option(
    "hoodie.compact.inline", bool, False,
    "Merge-on-read: schedule and run a compaction after a deltacommit once "
    "hoodie.compact.inline.max.delta.commits deltacommits completed since the last compaction.")
COMPACT_INLINE_MAX_DELTA_COMMITS: Option[int] = _option(
    "hoodie.compact.inline.max.delta.commits", int, 5,
    "Deltacommits since the last compaction after which inline compaction runs.", minimum=1)
COMPACT_INLINE_MAX_DELTA_SECONDS: Option[int] = _option(
    "hoodie.compact.inline.max.delta.seconds", int, 3600,
    "Seconds since the last compaction (or the first deltacommit, before any) after which the "
    "time-based trigger strategies compact.", minimum=0)
COMPACT_INLINE_TRIGGER_STRATEGY: Option[str] = _option(
    "hoodie.compact.inline.trigger.strategy", str, "NUM_COMMITS",
    "When inline compaction is due, as Hudi decides it: NUM_COMMITS (max.delta.commits "
    "deltacommits since the last compaction), NUM_COMMITS_AFTER_LAST_REQUEST (since the last "
    "compaction plan, pending ones included), TIME_ELAPSED (max.delta.seconds), NUM_OR_TIME, NUM_AND_TIME.",
    choices=("NUM_COMMITS", "NUM_COMMITS_AFTER_LAST_REQUEST", "TIME_ELAPSED", "NUM_OR_TIME", "NUM_AND_TIME"))
COMPACTION_STRATEGY: Option[str] = _option(
    "hoodie.compaction.strategy", str,
    "org.apache.hudi.table.action.compact.strategy.LogFileSizeBasedCompactionStrategy",
    "Which file slices a compaction plans: LogFileSizeBasedCompactionStrategy (Hudi's default: slices "
    "whose log files reach hoodie.compaction.logfile.size.threshold, largest logs first, bounded by "
    "hoodie.compaction.target.io) or UnBoundedCompactionStrategy (every slice with log files); "
    "other strategies are refused.")
COMPACTION_TARGET_IO: Option[int] = _option(
    "hoodie.compaction.target.io", int, 512000,
    "LogFileSizeBasedCompactionStrategy: the MB a compaction reads and writes at most (Hudi's bound).", minimum=0)
COMPACTION_LOGFILE_SIZE_THRESHOLD: Option[int] = _option(
    "hoodie.compaction.logfile.size.threshold", int, 0,
    "LogFileSizeBasedCompactionStrategy: slices whose log files total fewer bytes are left for later.", minimum=0)

OPTIONS: Mapping[str, Option[Any]] = MappingProxyType(
    {key: option for option in _REGISTRY for key in (option.key, *option.aliases)}
)
"""Every registered option, by its key and by each alias."""
