"""Clustering benchmark: a table built from 200 small upserts (each inserting new keys and updating
a few recent ones, small-file packing off, as a stream of micro-batches leaves it), before and after
clustering: base files, snapshot read time, and the time of the next upsert.

    python benchmarks/cluster_bench.py [--upserts 200] [--rows 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import upsertlake

PARTS = 4
OPTS = {"hoodie.parquet.small.file.limit": 0, "hoodie.clean.automatic": False}


def batch(first: int, n: int, ts: int, rng: np.random.Generator) -> pa.Table:
    new = np.arange(first, first + n)
    recent = np.arange(max(0, first - 5 * n), first)  # late data for the last few batches
    old = rng.choice(recent, n // 10, replace=False) if len(recent) else np.array([], dtype=np.int64)
    ids = np.concatenate([new, old])
    return pa.table({
        "id": pa.array([f"{i:09d}" for i in ids]),
        "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
        "p": pa.array([f"p{i % PARTS}" for i in ids]),
        "fare": pa.array(rng.random(len(ids)) * 100),
        "note": pa.array([f"trip {i}" for i in ids]),
    })


def measure(path: Path, next_batch: pa.Table, repeat: int) -> tuple[int, float, float]:
    files = len(upsertlake.open_table(path).read(columns=["_hoodie_file_name"]).column(0).unique())
    reads = []
    for _ in range(repeat):
        started = time.perf_counter()
        upsertlake.open_table(path).read()
        reads.append(time.perf_counter() - started)
    upserts = []
    for _ in range(repeat):
        copy = Path(tempfile.mkdtemp()) / "t"
        shutil.copytree(path, copy)
        started = time.perf_counter()
        upsertlake.open_table(copy, OPTS).upsert(next_batch)
        upserts.append(time.perf_counter() - started)
        shutil.rmtree(copy.parent)
    return files, statistics.median(reads), statistics.median(upserts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upserts", type=int, default=200)
    parser.add_argument("--rows", type=int, default=2000, help="new keys per upsert")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    path = Path(tempfile.mkdtemp()) / "t"
    t = upsertlake.create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=OPTS)
    started = time.perf_counter()
    for i in range(args.upserts):
        t.upsert(batch(i * args.rows, args.rows, i + 1, rng))
    print(
        f"built: {args.upserts} upserts of {args.rows} new keys (+10% updates) in {time.perf_counter() - started:.1f} s"
    )
    next_batch = batch(args.upserts * args.rows, args.rows, args.upserts + 1, rng)
    before = measure(path, next_batch, args.repeat)
    started = time.perf_counter()
    result = upsertlake.open_table(path, OPTS).cluster()
    took = time.perf_counter() - started
    after = measure(path, next_batch, args.repeat)
    assert result.clustered, result.reason
    print(f"clustering: {took:.2f} s, {sum(len(v) for v in result.replaced.values())} file groups -> "
          f"{len(result.files_written)}")
    print(f"{'':8}{'files':>8}{'snapshot read s':>18}{'next upsert s':>16}")
    for name, (files, read, upsert) in (("before", before), ("after", after)):
        print(f"{name:8}{files:>8}{read:>18.3f}{upsert:>16.3f}")
    print(f"read {before[1] / after[1]:.1f}x faster, next upsert {before[2] / after[2]:.1f}x faster after clustering")
    shutil.rmtree(path.parent)


if __name__ == "__main__":
    main()
