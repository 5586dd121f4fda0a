"""Upsert benchmark: a 1,000,000-row table (10 partitions, 12 columns), then a 100,000-row batch
(half updates spread over the table, half inserts, 5% in-batch duplicates).

Prints upsertlake's per-stage seconds and, measured in the same run on the same data, delta-rs
MERGE (when `deltalake` is installed), with the ratio. Each figure is the median of --repeat runs,
every run on a fresh copy of the table.

    python benchmarks/upsert_bench.py [--rows 1000000] [--batch 100000] [--repeat 3]
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
import pyarrow.compute as pc

import upsertlake

CITIES = [f"city_{i:02d}" for i in range(10)]


def make_rows(start: int, n: int, rng: np.random.Generator, ts: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "uuid": pa.array([f"{i:012d}-{(i * 2654435761) % 2**32:08x}" for i in ids]),
            "ts": pa.array(np.full(n, ts, dtype=np.int64)),
            "city": pa.array(np.array(CITIES)[ids % len(CITIES)]),
            "rider": pa.array([f"rider-{i % 5000}" for i in ids]),
            "driver": pa.array([f"driver-{i % 3000}" for i in ids]),
            "fare": pa.array(rng.random(n) * 100),
            "tip": pa.array(rng.random(n) * 10),
            "distance_km": pa.array(rng.random(n).astype(np.float32) * 30),
            "passengers": pa.array(rng.integers(1, 6, n, dtype=np.int32)),
            "paid": pa.array(rng.random(n) < 0.9),
            "begin_lat": pa.array(rng.random(n) * 180 - 90),
            "begin_lon": pa.array(rng.random(n) * 360 - 180),
        }
    )


def make_batch(rows: int, batch: int, rng: np.random.Generator) -> pa.Table:
    """Half updates of keys spread over the whole table, half new keys, 5% in-batch duplicates."""
    n_updates = batch // 2
    n_dups = batch // 20
    n_inserts = batch - n_updates - n_dups
    picked = np.sort(rng.choice(rows, n_updates, replace=False))
    updates = make_rows(0, rows, rng, ts=0).take(pa.array(picked))
    updates = updates.set_column(1, "ts", pa.array(np.full(n_updates, 2, dtype=np.int64)))
    updates = updates.set_column(5, "fare", pc.add(updates.column("fare"), 1.0))
    inserts = make_rows(rows, n_inserts, rng, ts=2)
    dups = updates.take(pa.array(rng.choice(n_updates, n_dups, replace=False)))
    dups = dups.set_column(1, "ts", pa.array(np.full(n_dups, 1, dtype=np.int64)))  # older: must lose
    return pa.concat_tables([updates, inserts, dups])


def build_table(path: Path, base: pa.Table) -> None:
    t = upsertlake.create_table(path, name="bench", record_key="uuid", precombine_field="ts", partition_fields=["city"])
    t.bulk_insert(base)


def run_upsertlake(template: Path, batch: pa.Table, work: Path, index: str) -> tuple[float, dict[str, float]]:
    target = work / "ul"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(template, target)
    table = upsertlake.open_table(target, options={"hoodie.index.type": index})
    start = time.perf_counter()
    result = table.upsert(batch)
    return time.perf_counter() - start, result.stage_seconds


def build_delta(path: Path, base: pa.Table) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(path), base, partition_by=["city"])


def run_delta(template: Path, batch: pa.Table, work: Path) -> float:
    from deltalake import DeltaTable

    target = work / "delta"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(template, target)
    start = time.perf_counter()
    # MERGE needs one source row per key: dedup by key keeping the largest ts (part of the timed work).
    order = pc.sort_indices(batch, [("uuid", "ascending"), ("ts", "descending")])
    sorted_batch = batch.take(order)
    keys = sorted_batch.column("uuid")
    first = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))
    keep = pa.concat_arrays([pa.array([True]), pc.fill_null(first, True).combine_chunks()])
    source = sorted_batch.filter(keep)
    dt = DeltaTable(str(target))
    (
        dt.merge(source, predicate="t.uuid = s.uuid AND t.city = s.city", source_alias="s", target_alias="t")
        .when_matched_update_all(predicate="s.ts >= t.ts")
        .when_not_matched_insert_all()
        .execute()
    )
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--index", default="SIMPLE", help="hoodie.index.type for the upsert")
    ap.add_argument("--no-delta", action="store_true", help="skip the delta-rs peer")
    args = ap.parse_args()

    rng = np.random.default_rng(42)
    base = make_rows(0, args.rows, rng, ts=0)
    batch = make_batch(args.rows, args.batch, rng)
    with tempfile.TemporaryDirectory(prefix="upsert-bench-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        build_table(work / "ul_template", base)
        print(f"table: {args.rows:,} rows in {len(CITIES)} partitions, built in {time.perf_counter() - t0:.2f}s (bulk_insert)")
        print(f"batch: {batch.num_rows:,} rows (updates {args.batch // 2:,}, inserts, {args.batch // 20:,} in-batch duplicates)")
        ours, stages = [], []
        for _ in range(args.repeat):
            seconds, st = run_upsertlake(work / "ul_template", batch, work, args.index)
            ours.append(seconds)
            stages.append(st)
        ul = statistics.median(ours)
        print(f"\nupsertlake upsert ({args.index} index): median {ul:.3f}s  (runs: {', '.join(f'{s:.3f}' for s in ours)})")
        for stage in stages[0]:
            print(f"  {stage:<8} {statistics.median(s[stage] for s in stages):.3f}s")
        if args.no_delta:
            return
        try:
            build_delta(work / "delta_template", base)
        except ImportError:
            print("\ndelta-rs: skipped (pip install deltalake to compare)")
            return
        theirs = [run_delta(work / "delta_template", batch, work) for _ in range(args.repeat)]
        dl = statistics.median(theirs)
        print(f"\ndelta-rs MERGE: median {dl:.3f}s  (runs: {', '.join(f'{s:.3f}' for s in theirs)})")
        print(f"ratio upsertlake / delta-rs: {ul / dl:.2f}")


if __name__ == "__main__":
    main()
