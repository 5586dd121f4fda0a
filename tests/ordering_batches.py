"""Two batches ordered by several fields (ts, then seq on a tie) and what each key ends as: the
same decisions asked of us (tests/table/test_table_version_9.py) and of Apache Hudi 1.1
(tests/hudi/test_table_version_9.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from upsertlake import open_table


def ordered_batch(rows: list[tuple[str, int, int, str]]) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "ts": pa.array([r[1] for r in rows], pa.int64()),
                     "seq": pa.array([r[2] for r in rows], pa.int32()), "p": [r[3] for r in rows]})


# (id, ts, seq, partition): what each key ends as after FIRST then SECOND, compared by (ts, seq)
FIRST = [("a", 1, 5, "x"), ("b", 1, 5, "x"), ("c", 2, 0, "x"), ("d", 1, 1, "y"),
         ("e", 1, 1, "x"), ("e", 1, 3, "x"), ("e", 1, 2, "x")]  # e: the largest seq of a ts tie wins
SECOND = [("a", 1, 6, "x"),  # same ts, larger seq: wins
          ("b", 1, 4, "x"),  # same ts, smaller seq: loses
          ("c", 1, 9, "x"),  # smaller ts, however large its seq: loses
          ("d", 2, 0, "x"),  # larger ts: moves from y to x under a global index (another key otherwise)
          ("f", 0, 0, "y"), ("f", 0, 1, "y")]


def expected(global_index: bool) -> list[tuple]:
    """(id, partition, ts, seq) of every row after FIRST and SECOND."""
    kept = [("a", "x", 1, 6), ("b", "x", 1, 5), ("c", "x", 2, 0), ("d", "x", 2, 0), ("e", "x", 1, 3), ("f", "y", 0, 1)]
    return sorted(kept + ([] if global_index else [("d", "y", 1, 1)]))


# a third batch into partition y, after the second went to log files on a merge-on-read table
THIRD = [("a", 1, 5, "y"),  # under a global index: loses to the (1, 6) the log holds, stays in x
         ("d", 2, 1, "y")]  # beats (2, 0): moves back to y under a global index


def after_third(global_index: bool) -> list[tuple]:
    """(id, partition, ts, seq) of every row after FIRST, SECOND and THIRD."""
    if global_index:
        return sorted([("a", "x", 1, 6), ("b", "x", 1, 5), ("c", "x", 2, 0), ("d", "y", 2, 1), ("e", "x", 1, 3),
                       ("f", "y", 0, 1)])
    replaced = [r for r in expected(False) if r != ("d", "y", 1, 1)]
    return sorted([*replaced, ("a", "y", 1, 5), ("d", "y", 2, 1)])


def stored(path: Path) -> list[tuple]:
    return sorted((r["id"], r["p"], r["ts"], r["seq"]) for r in open_table(path).read().to_pylist())
