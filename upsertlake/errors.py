"""The library's errors: one base class, one subclass per kind of failure the caller can act on."""

from __future__ import annotations


class UpsertlakeError(Exception):
    """Base class of every error upsertlake raises."""


class TableNotFoundError(UpsertlakeError):
    """The path holds no table (no readable `.hoodie/hoodie.properties`)."""


class TableExistsError(UpsertlakeError):
    """`create_table` found a table already at the path."""


class SchemaError(UpsertlakeError):
    """A batch does not fit the table: a missing, null or incompatible column."""


class ConfigError(UpsertlakeError):
    """An option key is unknown or its value is invalid."""


class InstantTimeError(ConfigError):
    """A time given to a read or a service (`as_of`, `begin`, `end`, an instant) is no time, or lies
    before the table's first instant (the message names it)."""


class BatchTooLargeError(ConfigError):
    """A batch has more rows than the path it was handed to merges in one process (the Spark data
    source's `.save()` and streaming sink); the message names the distributed path to take."""


class CorruptTableError(UpsertlakeError):
    """A file of the table cannot be parsed (commit metadata, properties, base file name)."""


class WriteConflictError(UpsertlakeError):
    """Another writer committed a change to the same file groups (or keys) first."""


class LockTimeoutError(UpsertlakeError):
    """The table lock could not be acquired in time."""


class UnsupportedTableError(UpsertlakeError):
    """The table uses a feature upsertlake does not write (yet), e.g. a time-based key generator."""


class CleanedInstantError(UpsertlakeError):
    """A read reaches an instant whose files the cleaner has deleted (outside the retained window)."""


class ServiceError(UpsertlakeError):
    """A table service cannot run as asked (nothing to roll back, no such savepoint, ...)."""


class FilterError(UpsertlakeError):
    """A read filter is malformed: not a (column, op, value) tuple, or an unknown operator."""


class PartitionNotFoundError(UpsertlakeError):
    """A partition the caller named (e.g. to `delete_partitions`) is not in the table."""


class UnsupportedSchemeError(UpsertlakeError):
    """A table path is a URI whose scheme upsertlake cannot store on (e.g. `hdfs://`)."""


class LockLostError(UpsertlakeError):
    """A writer's lease on the table lock expired or was taken over before it could commit."""


class StorageError(UpsertlakeError):
    """The store refused or failed a request: a missing bucket, bad credentials, access denied."""


class MergeOnReadError(UnsupportedTableError):
    """A merge-on-read table cannot answer the request as asked, since its base files alone are not
    its snapshot (updates and deletes wait in log files): the base files of slices with logs for an
    engine that would read them unmerged, an upgrade of its log names to version 8, a timeline with
    deltacommits read as copy-on-write."""


class UnsupportedLogBlockError(UnsupportedTableError):
    """A log file holds a block upsertlake does not read: a delete block of a version before 3
    (Java-serialized by old Hudi releases), a CDC block, an unknown block type or format version."""


class HFileError(CorruptTableError):
    """An HFile (a metadata-table base file, or the HFile an HFile log block holds) cannot be read:
    it is truncated, a magic is wrong, its trailer, an index or a block contradicts the file, or it
    uses what Hudi never writes (a codec other than NONE and GZ, MVCC timestamps, data block
    encoding). The message names the file and the part."""


class WriteInProgressError(UpsertlakeError):
    """Single-writer mode: another writer's write stayed in flight, alive, longer than a writer waits."""


class MissingFileError(UpsertlakeError):
    """A data file that a completed commit wrote, and that a read or write needs, is gone."""


class UpsertlakeWarning(UserWarning):
    """Base class of upsertlake's warnings: something given does nothing here, and the call goes on
    (storage_options on a local path)."""
