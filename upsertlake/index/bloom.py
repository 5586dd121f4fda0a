"""The bloom index: prune candidate files by footer key ranges, then by their bloom filters, then
confirm the candidates by reading the keys of only those files.

It wins when keys are ordered (time-based ids), so most files' key ranges exclude most keys.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.index.base import (
    Index,
    LiveCopies,
    join_locations,
    live_only,
    lookup_plan,
    read_file_keys,
)
from upsertlake.layout.file_system_view import BaseFile, FileSystemView
from upsertlake.layout.footer import read_footer


class BloomIndex(Index):
    def __init__(self, is_global: bool = False, prune_by_ranges: bool = True) -> None:
        super().__init__(is_global)
        self.prune_by_ranges = prune_by_ranges
        self._stats: dict[str, int] = {}

    def tag(
        self, keys: pa.Array, partitions: pa.Array, view: FileSystemView, unique: bool = False,
        live: LiveCopies | None = None,
    ) -> pa.Table:
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        partitions = partitions.combine_chunks() if isinstance(partitions, pa.ChunkedArray) else partitions
        files, wanted = lookup_plan(keys, partitions, view, self.is_global)
        candidates: list[tuple[BaseFile, pa.Array, np.ndarray]] = []
        bloom_checks = 0
        for bf in files:
            subset, rows = wanted(bf)
            footer = read_footer(view.storage, bf)
            if self.prune_by_ranges and footer.min_key is not None and footer.max_key is not None:
                in_range = pc.and_(
                    pc.greater_equal(subset, footer.min_key), pc.less_equal(subset, footer.max_key)
                )
                keep = np.asarray(in_range.to_numpy(zero_copy_only=False), dtype=bool)
                subset, rows = subset.filter(pa.array(keep)), rows[keep]
            if len(subset) and footer.bloom is not None:
                bloom_checks += len(subset)
                keep = np.asarray(footer.bloom.might_contain(subset), dtype=bool)
                subset, rows = subset.filter(pa.array(keep)), rows[keep]
            if len(subset):
                candidates.append((bf, subset, rows))
        probes = {bf.path: (subset, rows) for bf, subset, rows in candidates}
        located = read_file_keys(view.storage, [bf for bf, _, _ in candidates], wanted=lambda bf: probes[bf.path])
        located = live_only(located, live)
        self._stats = {
            "files_considered": len(files),
            "files_opened": len(candidates),
            "bloom_checks": bloom_checks,
            "candidate_keys": sum(len(c) for _, c, _ in candidates),
            "keys_matched": located.num_rows,
        }
        return join_locations(keys, partitions, located, self.is_global, unique)

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

