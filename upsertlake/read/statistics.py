"""What a snapshot's files hold, without reading their data: each base file's rows, from the
write stats of the commit that wrote it (no request: the commit documents are read with the
timeline), else from its footer (one request per file on an object store: files whose commit
is unknown here, e.g. archived before this process listed it)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from upsertlake.errors import CorruptTableError
from upsertlake.layout.file_system_view import BaseFile
from upsertlake.layout.slice_reader import listed
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import WriteStat


class FileStatistics:
    """Statistics of the files a plan of `timeline` reads; a file's are those its commit recorded
    (the completed write at the file's instant time)."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.storage: Storage = timeline.storage
        self._by_time = {i.time: i for i in timeline.completed_writes()}
        self._stats: dict[str, dict[str, WriteStat]] = {}

    def write_stat(self, bf: BaseFile) -> WriteStat | None:
        """The write stat of the commit that wrote `bf`, when it names this very file (its size too)."""
        inst = self._by_time.get(bf.instant_time)
        if inst is None:
            return None
        stats = self._stats.get(inst.time)
        if stats is None:
            try:
                stats = {s.path: s for s in self.timeline.commit_metadata(inst).write_stats()}
            except CorruptTableError:
                stats = {}
            self._stats[inst.time] = stats
        stat = stats.get(bf.path)
        return stat if stat is not None and stat.fileSizeInBytes == bf.size else None

    def rows(self, files: list[BaseFile]) -> dict[str, int]:
        """The rows of each file, by path: from write stats, else (at once) from footers."""
        out: dict[str, int] = {}
        unknown = []
        for bf in files:
            stat = self.write_stat(bf)
            if stat is not None:
                out[bf.path] = stat.numWrites
            else:
                unknown.append(bf)
        if unknown:
            with ThreadPoolExecutor(max_workers=min(self.storage.read_threads, len(unknown))) as pool:
                for bf, n in zip(unknown, pool.map(self._footer_rows, unknown)):
                    out[bf.path] = n
        return out

    def _footer_rows(self, bf: BaseFile) -> int:
        with listed(self.storage, bf.path, bf.instant_time):
            return self.storage.parquet_file(bf.path).metadata.num_rows
