"""What a snapshot's files hold, without reading their data: each base file's rows and column
statistics, and each log file's, as the commit that wrote the file recorded them (no request:
the commit documents are read with the timeline), else, for base files, from their footers
(one request per file on an object store: files other writers wrote).

A recorded entry counts only for the very file its commit wrote: the write stat's path and size
must be the listed file's (a log file another writer appended to has grown since)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from upsertlake.errors import CorruptTableError
from upsertlake.layout.file_system_view import BaseFile, LogFile
from upsertlake.layout.slice_reader import listed
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.column_stats import FileColumnStats, of_parquet
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

    def of_log(self, log: LogFile) -> FileColumnStats | None:
        """The column statistics recorded for a log file, or None (not recorded, or it grew since)."""
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
        return stats if size == log.size else None

    def of_bases(self, files: Sequence[BaseFile]) -> dict[str, FileColumnStats]:
        """Each file's column statistics, by path: recorded, else (at once) from its footer."""
        out = {}
        unknown = []
        for bf in files:
            stats = self.recorded(bf) or self._footers.get(bf.path)
            if stats is not None:
                out[bf.path] = stats
            else:
                unknown.append(bf)
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
            return of_parquet(self.storage.parquet_file(bf.path).metadata)
