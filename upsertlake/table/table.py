"""The user-facing table: create or open one, write batches, read snapshots, travel in time.

Reading imports only what reading needs: the write engine and the table services are imported by
the methods that use them, so `open_table(p).scan().to_arrow()` loads none of them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import pyarrow as pa

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.enums import CleanPolicy
from upsertlake.config.table_config import (
    TableConfig,
)
from upsertlake.config.table_options import (
    TABLE_VERSION_KEY,
    check_against_table,
    table_layer,
    take_table_version,
    upgrade_before_writing,
)
from upsertlake.errors import (
    ConfigError,
    MergeOnReadError,
    ServiceError,
    UpsertlakeError,
)
from upsertlake.read.filters import Filters
from upsertlake.read.scan import Scan
from upsertlake.read.snapshot import INCREMENTAL, SNAPSHOT, incremental_scan, snapshot_scan, table_schema
from upsertlake.read.statistics import FileStatistics
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Instant
from upsertlake.timeline.instant_time import normalize_instant
from upsertlake.timeline.operation import Operation
from upsertlake.util.times import TimeLike

if TYPE_CHECKING:
    import pyarrow.dataset

    from upsertlake.concurrency.lock import TableLock
    from upsertlake.engine.write_client import WriteClient
    from upsertlake.engine.write_plan import Progress, WritePlan
    from upsertlake.engine.write_result import WriteResult
    from upsertlake.services.clean import CleanResult
    from upsertlake.services.cluster import ClusterResult
    from upsertlake.services.compaction import CompactionResult
    from upsertlake.services.key_groups import ByKeyGroup
    from upsertlake.services.stat_map import StatMap

log = logging.getLogger(__name__)


class Table:
    """An Apache Hudi table (copy-on-write or merge-on-read) at a path, with write options for
    this object's writes."""

    def __init__(
        self, storage: Storage, table_config: TableConfig, options: Mapping[str, object] | None = None
    ) -> None:
        table_config.check_readable()  # e.g. a table version this engine would misread: refused at open
        options, version = take_table_version(options)
        if version is not None:
            table_config.check_write_version(version, TABLE_VERSION_KEY)
        self.storage = storage
        self._table_config = table_config
        self.options = Config.resolve(options, table_properties=table_layer(table_config))
        self._upgrade_to = upgrade_before_writing(table_config, self.options)
        check_against_table(self.options, table_config)
        self._client: WriteClient | None = None

    @property
    def table_config(self) -> TableConfig:
        """The table's settings (hoodie.properties): as opened, then as its write client last read it."""
        return self._client.table_config if self._client is not None else self._table_config

    @property
    def path(self) -> str:
        return self.storage.base

    @property
    def name(self) -> str:
        return self.table_config.name

    def __repr__(self) -> str:
        return f"Table({self.name!r}, path={self.path!r})"

    # -- writes ------------------------------------------------------------------------------
    def write_client(self) -> WriteClient:
        """The write client with explicit instants (start_commit / upsert / commit), as Hudi's."""
        if self._client is None:
            from upsertlake.engine.write_client import WriteClient
            from upsertlake.services.write_guard import refuse_damaged_table

            refuse_damaged_table(self.storage, self.table_config)
            if self._upgrade_to is not None:  # as Hudi's writer: the table upgraded before the first write
                from upsertlake.concurrency.lock import make_lock
                from upsertlake.services.upgrade import upgrade

                upgrade(self.storage, make_lock(self.storage, self.options), self.options, self._upgrade_to)
                self._table_config, self._upgrade_to = TableConfig.load(self.storage), None
            self._client = WriteClient(self.storage, self.table_config, self.options)
        return self._client

    @property
    def _lock(self) -> TableLock:
        return self.write_client().context.lock

    def _drop_client(self) -> None:
        """A service changed what the client's index knows: the next write builds a new one."""
        self._table_config, self._client = self.table_config, None

    def upsert(
        self, data: object, options: Mapping[str, object] | None = None, progress: Progress | None = None,
        extra_metadata: Mapping[str, str] | None = None,
    ) -> WriteResult:
        return self._write(Operation.UPSERT, data, options, progress, extra_metadata)

    def insert(
        self, data: object, options: Mapping[str, object] | None = None, progress: Progress | None = None,
        extra_metadata: Mapping[str, str] | None = None,
    ) -> WriteResult:
        return self._write(Operation.INSERT, data, options, progress, extra_metadata)

    def bulk_insert(
        self, data: object, options: Mapping[str, object] | None = None, progress: Progress | None = None,
        extra_metadata: Mapping[str, str] | None = None,
    ) -> WriteResult:
        return self._write(Operation.BULK_INSERT, data, options, progress, extra_metadata)

    def delete(
        self, data: object, options: Mapping[str, object] | None = None, progress: Progress | None = None,
        extra_metadata: Mapping[str, str] | None = None,
    ) -> WriteResult:
        """Remove the keys in `data` whatever their ordering value; unknown keys count as nothing.
        Every write's `extra_metadata` goes into its commit's extraMetadata (a stream's batch id)."""
        return self._write(Operation.DELETE, data, options, progress, extra_metadata)

    def insert_overwrite(self, data: object, options: Mapping[str, object] | None = None) -> WriteResult:
        """Replace the partitions present in `data` with its records (a replacecommit)."""
        return self._write(Operation.INSERT_OVERWRITE, data, options)

    def insert_overwrite_table(self, data: object, options: Mapping[str, object] | None = None) -> WriteResult:
        """Replace the whole table with the records of `data` (a replacecommit)."""
        return self._write(Operation.INSERT_OVERWRITE_TABLE, data, options)

    def delete_partitions(self, partitions: Sequence[str]) -> WriteResult:
        """Drop whole partitions (Hudi's delete_partition, a replacecommit); files go at clean."""
        return self._write(Operation.DELETE_PARTITION, list(partitions), None)

    def plan(self, operation: str, data: object, options: Mapping[str, object] | None = None) -> WritePlan:
        """What a write would do (dedup, tagging, buckets), computed without writing anything; on
        an object store with the requests planning made, by kind (`store_requests`)."""
        before = self.storage.requests.snapshot()
        plan = self.write_client().plan(operation, data, dict(options) if options else None)
        return replace(plan, store_requests=self.storage.requests.since(before))

    def _write(
        self, operation: Operation, data: object, options: Mapping[str, object] | None,
        progress: Progress | None = None, extra_metadata: Mapping[str, str] | None = None,
    ) -> WriteResult:
        from upsertlake.engine.write_plan import stage

        before = self.storage.requests.snapshot()
        client = self.write_client()
        table_options = client.context.options
        # The call's options hold from the start (whether to keep the metadata table is decided
        # there) to the commit; the client keeps the table's for the next call.
        client.context = replace(client.context, options=client.context.resolve(dict(options) if options else None))
        try:
            instant = client.start_commit(operation, plan_on_start=True)  # the write follows at once
        except BaseException:
            client.context = replace(client.context, options=table_options)
            raise
        try:
            if operation.writes_records:
                result = client.write(operation, data, instant, dict(options) if options else None, progress)
            else:
                result = client.delete_partitions(cast("list[str]", data), instant)  # names of partitions
            with stage({}, "commit", progress):
                result = client.commit(instant, result, dict(extra_metadata) if extra_metadata else None)
        except BaseException:
            client.rollback(instant)
            raise
        finally:
            client.context = replace(client.context, options=table_options)
        with stage({}, "services", progress):  # inline compaction and clustering, clean, archival
            self._services_after_commit(client.context.options.with_overrides(options), timeline=result.timeline)
        # Object stores bill per request: the write's, services included (none locally).
        return replace(result, store_requests=self.storage.requests.since(before))

    def services_after_commit(
        self,
        options: Mapping[str, object] | None = None,
        map_groups: StatMap | None = None,
        by_key: ByKeyGroup | None = None,
    ) -> None:
        """What runs after every commit (a distributed writer calls it with its own `map_groups`
        and `by_key`, how a clustering moves keys in the record index)."""
        self._services_after_commit(self.options.with_overrides(options), map_groups, by_key=by_key)

    def _services_after_commit(
        self,
        cfg: Config,
        map_groups: StatMap | None = None,
        timeline: Timeline | None = None,
        by_key: ByKeyGroup | None = None,
    ) -> None:
        """Hudi's order after a commit: inline compaction (merge-on-read), inline clustering,
        automatic clean, archival; then, on an object store, the commit digest. The commit stands
        whatever happens here, so a failure is logged, not raised (raising would make callers retry
        a write that is already in the table). `timeline`: as the commit left it (else listed
        now): which services are due is decided on it; each one looks again under the lock."""
        from upsertlake.services.archive import archive, archive_due
        from upsertlake.services.clean import clean, clean_due
        from upsertlake.services.cluster import clustering_due
        from upsertlake.services.compaction_plan import compaction_due

        try:
            timeline = timeline or Timeline.load(self.storage)
            if self.table_config.is_merge_on_read and cfg.get(opt.COMPACT_INLINE) and compaction_due(timeline, cfg):
                # A distributed writer's `map_groups` runs the slices as its tasks; in process, threads.
                self._compact(cfg, map_groups, by_key)
                timeline = Timeline.load(self.storage)
            if cfg.get(opt.CLUSTERING_INLINE) and clustering_due(timeline, cfg):
                self._cluster(cfg, map_groups, by_key)
                timeline = Timeline.load(self.storage)
            if cfg.get(opt.CLEAN_AUTOMATIC) and clean_due(timeline, cfg):
                clean(self.storage, self._lock, cfg, by_key=by_key)
            if cfg.get(opt.ARCHIVE_AUTOMATIC) and archive_due(timeline, cfg):
                archive(self.storage, self._lock, cfg)
            timeline.refresh_digest()  # an instant archived meanwhile: its entry goes unused
        except ServiceError as exc:  # it cannot run now (another write is pending, ...): it says why
            log.warning("a table service after the commit did not run: %s; the commit stands", exc)
        except (UpsertlakeError, OSError):
            log.warning("a table service after the commit failed; the commit stands", exc_info=True)

    def compact(
        self,
        options: Mapping[str, object] | None = None,
        map_ops: StatMap | None = None,
        by_key: ByKeyGroup | None = None,
    ) -> CompactionResult:
        """Merge-on-read: fold the log files of every file slice that has some into new base files
        (schedule, execute, commit). A plan a dead compactor left inflight is rolled back and run
        first, as Hudi does; a result without instant says why there was nothing to compact.
        `upsertlake.spark.compact` passes a `map_ops` that merges each slice as a Spark task and a
        `by_key` that compacts the metadata table's record index as Spark tasks."""
        return self._compact(self.options.with_overrides(options), map_ops, by_key)

    def _compact(self, cfg: Config, map_ops: StatMap | None, by_key: ByKeyGroup | None = None) -> CompactionResult:
        from upsertlake.services.compaction import compact
        from upsertlake.services.key_groups import per_core

        return compact(self.storage, self._lock, self.table_config, cfg, map_ops or per_core.each, by_key)

    def archive(self, options: Mapping[str, object] | None = None) -> list[Instant]:
        """Move old completed instants to `.hoodie/archived/` (hoodie.keep.min/max.commits); time
        travel and incremental reads still reach them while their files exist."""
        from upsertlake.services.archive import archive

        return archive(self.storage, self._lock, self.options.with_overrides(options))

    def cluster(
        self,
        options: Mapping[str, object] | None = None,
        map_groups: StatMap | None = None,
        by_key: ByKeyGroup | None = None,
    ) -> ClusterResult:
        """Merge small file groups per partition into files near the target size (a replacecommit);
        on a merge-on-read table each slice is read merged with its log files. When no partition
        has two small groups to merge, a result without instant says why.
        `upsertlake.spark.cluster` passes a `map_groups` that writes each new group as a Spark task
        and a `by_key` that moves their keys in the record index as Spark tasks."""
        return self._cluster(self.options.with_overrides(options), map_groups, by_key)

    def _cluster(self, cfg: Config, map_groups: StatMap | None, by_key: ByKeyGroup | None = None) -> ClusterResult:
        from upsertlake.services.cluster import cluster, in_process

        result = cluster(self.storage, self._lock, self.table_config, cfg, map_groups or in_process, by_key)
        if result.clustered:
            self._drop_client()  # file groups moved: the index learns the new files
        return result

    # -- table services (upsertlake.services) --------------------------------------------------
    def clean(self, policy: str | CleanPolicy | None = None, retained: int | None = None) -> CleanResult:
        """Delete file versions no retained read needs (`policy`, default hoodie.cleaner.policy,
        and its count)."""
        from upsertlake.services.clean import clean

        cfg = self.options.with_overrides({opt.CLEANER_POLICY.key: policy})
        return clean(self.storage, self._lock, cfg, retained)

    def savepoint(self, instant: TimeLike | None = None, comment: str = "") -> Instant:
        """Pin a completed commit's snapshot (default: the latest) against cleaning, for restore."""
        from upsertlake.services.savepoint import savepoint

        return savepoint(self.storage, self._lock, self._instant(instant), comment)

    def restore(self, instant: TimeLike) -> Instant:
        """Roll back every instant after the savepoint `instant`: the table reads as of it again."""
        from upsertlake.services.restore import restore

        done = restore(self.storage, self._lock, self._instant(instant) or "", self.options)
        self._drop_client()  # its index may hold keys of the instants rolled back
        return done

    def rollback(self, instant: TimeLike | None = None) -> Instant:
        """Undo a failed write or the latest completed commit (default: the newest failed write,
        else the latest commit), or any pending instant whose writer is gone, as a `.rollback`.
        An inflight compaction goes back to its plan (requested), its files deleted, as Hudi's
        rollbackInflightCompaction does; the next `compact` runs it again."""
        from upsertlake.services.rollback import rollback, rollback_compaction

        when = self._instant(instant)
        compaction = next((i for i in Timeline.load(self.storage).pending_compactions() if i.time == when), None)
        if compaction is not None:
            return rollback_compaction(self.storage, self._lock, compaction, self.options)
        done = rollback(self.storage, self._lock, when, self.options)
        self._drop_client()
        return done

    # -- reads -------------------------------------------------------------------------------
    def _instant(self, value: TimeLike | None) -> str | None:
        """An instant time from a user's instant string or datetime, in the table's timeline zone
        (hoodie.table.timeline.timezone); a naive datetime is local time, as datetime.now() gives."""
        if value is None:
            return None
        return normalize_instant(value, self.table_config.timeline_timezone)

    def timeline(self) -> list[Instant]:
        """Every instant of the active timeline, oldest first (archived ones are not listed), as
        Hudi's timeline shows them: a completed compaction is its `commit` alone (the plan's
        requested and inflight files beside it are no pending instant)."""
        return Timeline.load(self.storage).shown()

    def schema(self, as_of: TimeLike | None = None) -> pa.Schema:
        """The data schema (without meta columns) as of an instant."""
        return table_schema(Timeline.load(self.storage), self.table_config, self._instant(as_of))

    def scan(
        self,
        columns: Sequence[str] | None = None,
        filters: Filters = None,
        as_of: TimeLike | None = None,
        query_type: str = "snapshot",
        begin: TimeLike | None = None,
        end: TimeLike | None = None,
    ) -> Scan:
        """A planned read (`upsertlake.read.scan.Scan`): `.to_arrow()`, `.to_batches()` (a stream in
        bounded memory), the Arrow PyCapsule stream for DuckDB and Polars, `.to_pandas()`,
        `.to_duckdb(name)`, `.to_polars()`, `.count()`, `.plan_files()`.

        `query_type`: "snapshot" (default) as of `as_of` (newest by default); "read_optimized", a
        merge-on-read table's base files alone, as Hudi's read-optimized query; "incremental"
        (or just `begin=`): the latest state of the records written by commits in (begin, end].
        `as_of`, `begin`, `end`: an instant time, a datetime or date (naive = local time), a pandas
        Timestamp or an ISO-8601 string (`upsertlake.util.times`). Partitions,
        files and row groups the `filters` rule out are skipped; the rows read are filtered exactly."""
        if begin is not None or query_type == INCREMENTAL:
            if begin is None or as_of is not None or query_type not in (SNAPSHOT, INCREMENTAL):
                raise ConfigError("an incremental scan takes begin= (and end=), not as_of= or another query type")
            timeline = Timeline.load(self.storage)
            since = self._instant(begin)
            assert since is not None
            plan = incremental_scan(timeline, self.table_config, since, self._instant(end), filters)
        elif end is not None:
            raise ConfigError("end= bounds an incremental scan: give begin= too")
        else:
            timeline = Timeline.load(self.storage)
            plan = snapshot_scan(timeline, self.table_config, self._instant(as_of), filters, query_type)
        return Scan(self.storage, plan, FileStatistics(timeline), columns)

    def read(
        self,
        columns: Sequence[str] | None = None,
        as_of: TimeLike | None = None,
        filters: Filters = None,
        query_type: str = "snapshot",
    ) -> pa.Table:
        """The snapshot as of an instant (default: newest): five `_hoodie_*` columns, then data
        (data only for a table that does not populate meta fields, as Hudi's readers return it).
        `as_of` is an instant time or any form of time `scan` takes: a naive one is local time (as
        `datetime.now()` gives it), converted like an aware one to the table's timeline zone.
        `query_type="read_optimized"` reads a merge-on-read table's base files alone, as Hudi's
        read-optimized query does (without the changes still in log files). The same as
        `scan(...).to_arrow()`."""
        return self.scan(columns, filters, as_of, query_type).to_arrow()

    def to_pyarrow_dataset(
        self, as_of: TimeLike | None = None, query_type: str = "snapshot"
    ) -> pyarrow.dataset.FileSystemDataset:
        """The snapshot's base files as a `pyarrow.dataset.Dataset` on the table's own file system
        (object stores included), each fragment's partition expression holding its columns'
        ranges and nulls, so pyarrow, DuckDB (`duckdb.arrow(dataset)`) and Polars
        (`polars.scan_pyarrow_dataset`) skip files and push filters down themselves. A
        merge-on-read snapshot with log files raises MergeOnReadError (read it with `scan()`);
        `query_type="read_optimized"` gives its base files alone."""
        from upsertlake.read.dataset import pyarrow_dataset  # pyarrow's datasets import pandas

        timeline = Timeline.load(self.storage)
        statistics = FileStatistics(timeline)
        plan = snapshot_scan(timeline, self.table_config, self._instant(as_of), None, query_type, statistics)
        return pyarrow_dataset(self.storage, plan, statistics)

    def files(self, as_of: TimeLike | None = None, filters: Filters = None) -> list[str]:
        """The absolute paths of the base files a snapshot reads (default: the newest), for
        engines that read parquet themselves (DuckDB, pandas, Polars): the table's folder also
        holds every older version of each file group, replaced groups and uncommitted files.
        `filters` prune partitions (and key ranges) as `read` does; filter the rows too."""
        scan = snapshot_scan(Timeline.load(self.storage), self.table_config, self._instant(as_of), filters)
        if scan.slices:
            raise MergeOnReadError(
                f"{len(scan.slices)} file group(s) of this merge-on-read snapshot have log files, whose "
                "changes parquet readers would miss: read it with `read()` (or list the base files of "
                "the read-optimized query, which leaves those changes out)"
            )
        return [self.storage.full_path(bf.path) for bf in scan.files]

    def read_incremental(
        self, begin: TimeLike, end: TimeLike | None = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The latest state of the records written by commits in (begin, end]: the same as
        `scan(columns, begin=begin, end=end).to_arrow()`."""
        return self.scan(columns, begin=begin, end=end).to_arrow()
