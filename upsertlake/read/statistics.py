"""What a snapshot's files hold, without reading their data: each base file's rows and column
statistics, and each log file's, as the commit that wrote the file recorded them (no request:
the commit documents are read with the timeline), else as Hudi's metadata table records them
(`column_stats`: a few requests for all files), else, for base files, from their footers (one
request per file on an object store: files other writers wrote). Partitions' statistics come
from the metadata table's `partition_stats`.

A recorded entry counts only for the very file its commit wrote: the write stat's path and size
must be the listed file's (a log file another writer appended to has grown since)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

import pyarrow as pa

from upsertlake.errors import CorruptTableError
from upsertlake.layout.base_files import LanceFile, open_base_file
from upsertlake.layout.file_system_view import BaseFile, LogFile
from upsertlake.layout.slice_reader import listed
from upsertlake.metadata import MetadataTable
from upsertlake.metadata.listing import open_trusted
from upsertlake.metadata.partitions import COLUMN_STATS, PARTITION_STATS
from upsertlake.metadata.stats import file_stats
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.column_stats import META_PREFIX, FileColumnStats, of_parquet
from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
from upsertlake.timeline.instant import Action


class FileStatistics:
    """Statistics of the files a plan of `timeline` reads; a base file's are those its commit
    recorded (the completed write at the file's instant time), a log file's those of the
    deltacommit whose write stats name it."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.storage: Storage = timeline.storage
        self._by_time = {i.time: i for i in timeline.completed_writes()}
        self._metadata: dict[str, CommitMetadata | None] = {}
        self._written: dict[str, dict[str, WriteStat]] = {}
        self._logs: dict[str, tuple[int, FileColumnStats]] | None = None
        self._footers: dict[str, FileColumnStats] = {}
        self._from_metadata: dict[str, FileColumnStats | None] = {}

    @cached_property
    def metadata(self) -> MetadataTable | None:
        """The metadata table, when readers may trust it."""
        return open_trusted(self.timeline)

    def _commit(self, time: str) -> CommitMetadata | None:
        if time not in self._metadata:
            inst = self._by_time.get(time)
            try:
                self._metadata[time] = self.timeline.commit_metadata(inst) if inst is not None else None
            except CorruptTableError:
                self._metadata[time] = None
        return self._metadata[time]

    def write_stat(self, bf: BaseFile) -> WriteStat | None:
        """The write stat of the commit that wrote `bf`, when it names this very file (its size too)."""
        written = self._written.get(bf.instant_time)
        if written is None:
            meta = self._commit(bf.instant_time)
            written = self._written[bf.instant_time] = {s.path: s for s in meta.write_stats()} if meta else {}
        stat = written.get(bf.path)
        return stat if stat is not None and stat.fileSizeInBytes == bf.size else None

    def recorded(self, bf: BaseFile) -> FileColumnStats | None:
        """The column statistics `bf`'s commit recorded for it, or None."""
        meta = None if self.write_stat(bf) is None else self._commit(bf.instant_time)
        return None if meta is None else meta.column_stats.get(bf.path)

    def of_log(self, log: LogFile, schema: pa.Schema | None = None) -> FileColumnStats | None:
        """The column statistics recorded for a log file, or None (not recorded, or it grew since);
        with `schema`, the metadata table's when the commit recorded none."""
        if self._logs is None:
            self._logs = {}
            for inst in self._by_time.values():
                if inst.action is not Action.DELTA_COMMIT:
                    continue
                meta = self._commit(inst.time)
                if meta is None or not meta.column_stats:
                    continue
                for s in meta.write_stats():
                    if s.path in meta.column_stats:
                        self._logs[s.path] = (s.fileSizeInBytes, meta.column_stats[s.path])
        size, stats = self._logs.get(log.path, (-1, None))
        if size == log.size:
            return stats
        if schema is not None and log.committed:
            return self.from_metadata([(log.partition_path, log.path)], schema).get(log.path)
        return None

    def from_metadata(self, files: Sequence[tuple[str, str]], schema: pa.Schema) -> dict[str, FileColumnStats]:
        """The metadata table's `column_stats` of (partition, path) files, by path (those it has)."""
        wanted = [(p, path) for p, path in files if path not in self._from_metadata]
        table = self.metadata
        if wanted and table is not None and COLUMN_STATS in table.partitions:
            columns = [f.name for f in schema if not f.name.startswith(META_PREFIX)]
            found = table.column_stats([(p, path.rpartition("/")[2]) for p, path in wanted], columns)
            for p, path in wanted:
                self._from_metadata[path] = file_stats(found.get((p, path.rpartition("/")[2]), {}), schema)
        return {path: stats for _, path in files if (stats := self._from_metadata.get(path)) is not None}

    def of_partitions(self, partitions: Sequence[str], schema: pa.Schema) -> dict[str, FileColumnStats]:
        """The metadata table's `partition_stats` of each partition it has them for."""
        table = self.metadata
        if table is None or PARTITION_STATS not in table.partitions or not partitions:
            return {}
        columns = [f.name for f in schema if not f.name.startswith(META_PREFIX)]
        found = table.partition_stats(columns)
        return {p: stats for p in partitions if (stats := file_stats(found.get(p, {}), schema)) is not None}

    def of_bases(self, files: Sequence[BaseFile], schema: pa.Schema | None = None) -> dict[str, FileColumnStats]:
        """Each file's column statistics, by path: recorded, else (with `schema`) the metadata
        table's, else (at once) from its footer."""
        out = {}
        unknown = []
        for bf in files:
            stats = self.recorded(bf) or self._footers.get(bf.path)
            if stats is not None:
                out[bf.path] = stats
            else:
                unknown.append(bf)
        if unknown and schema is not None:
            out.update(self.from_metadata([(bf.partition_path, bf.path) for bf in unknown], schema))
            unknown = [bf for bf in unknown if bf.path not in out]
        if unknown:
            with ThreadPoolExecutor(max_workers=min(self.storage.read_threads, len(unknown))) as pool:
                for bf, stats in zip(unknown, pool.map(self._footer, unknown)):
                    out[bf.path] = self._footers[bf.path] = stats
        return out

    def rows(self, files: Sequence[BaseFile]) -> dict[str, int]:
        """The rows of each file, by path: from write stats, else (at once) from footers."""
        out = {}
        unknown = []
        for bf in files:
            stat = self.write_stat(bf)
            if stat is not None:
                out[bf.path] = stat.numWrites
            else:
                unknown.append(bf)
        out.update({path: stats.rows for path, stats in self.of_bases(unknown).items()})
        return out

    def _footer(self, bf: BaseFile) -> FileColumnStats:
        with listed(self.storage, bf.path, bf.instant_time):
            opened = open_base_file(self.storage, bf.path)
            if isinstance(opened, LanceFile):  # no statistics: its rows only, every column unknown
                return FileColumnStats(opened.metadata.num_rows)
            return of_parquet(opened.metadata)
