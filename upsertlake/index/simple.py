"""The simple index (Hudi's Spark default since 0.14): join the batch with the stored keys.

It reads only the key column of the latest base files of the partitions the batch touches (all
partitions when global) and does one vectorised hash join: hard to beat when updates are spread
over many files.
"""

from __future__ import annotations

import pyarrow as pa

from upsertlake.index.base import (
    Index,
    LiveCopies,
    join_locations,
    live_only,
    lookup_plan,
    read_file_keys,
)
from upsertlake.layout.file_system_view import FileSystemView


class SimpleIndex(Index):
    def __init__(self, is_global: bool = False) -> None:
        super().__init__(is_global)
        self._stats: dict[str, int] = {}

    def tag(
        self, keys: pa.Array, partitions: pa.Array, view: FileSystemView, unique: bool = False,
        live: LiveCopies | None = None,
    ) -> pa.Table:
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        partitions = partitions.combine_chunks() if isinstance(partitions, pa.ChunkedArray) else partitions
        files, wanted = lookup_plan(keys, partitions, view, self.is_global)
        located = live_only(read_file_keys(view.storage, files, wanted=wanted), live)
        self._stats = {"files_considered": len(files), "files_opened": len(files), "keys_matched": located.num_rows}
        return join_locations(keys, partitions, located, self.is_global, unique)

    def stats(self) -> dict[str, int]:
        return dict(self._stats)
