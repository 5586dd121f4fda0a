"""Average record size: how many records fit in a file, learned from what earlier commits wrote.

Hudi's rule (AverageRecordSizeUtils.averageBytesPerRecord): walk the completed instants newest
first; the first whose total bytes written exceed `estimation_threshold × small_file_limit` and
whose record count is positive gives `ceil(bytes / records)`; otherwise the configured estimate.
Small commits are skipped because a file's fixed overhead (footer, bloom filter) dominates them.

Which instants take part differs between releases, so the caller chooses them:
- Hudi 0.14 reads completed `commit` instants only (HUDI-4980: clustering rewrites records into
  better-compressed files, so its bytes per record understated new input and oversized buckets);
- Hudi 0.15 (HUDI-7429) reads `commit` and `replacecommit` (and, for merge-on-read, the base files
  of `deltacommit`s, which copy-on-write never has).
An instant whose metadata cannot be read is skipped by 0.15; 0.14 gives up and uses the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

ESTIMATE_ACTIONS_0_14 = frozenset({"commit"})
ESTIMATE_ACTIONS_0_15 = frozenset({"commit", "replacecommit"})


def average_record_size(
    commits_newest_first: Iterable[tuple[int, int]],
    default_estimate: int = 1024,
    estimation_threshold: float = 1.0,
    small_file_limit: int = 104857600,
) -> int:
    """Bytes per record for sizing buckets; each item is (total bytes written, total records written).

    The iterable is consumed lazily and only up to the first qualifying commit, so a caller can
    read commit files on demand. Arithmetic follows Java's: the threshold is truncated to a long,
    the division is done in doubles.
    """
    threshold = int(estimation_threshold * small_file_limit)
    for total_bytes, total_records in commits_newest_first:
        if total_bytes > threshold and total_records > 0:
            return math.ceil(float(total_bytes) / float(total_records))
    return default_estimate
