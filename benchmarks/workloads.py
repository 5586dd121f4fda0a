"""Workload data: one base table and one batch per workload, generated with Arrow/numpy (no per-row
Python), plus what a correct engine must hold afterwards so every peer run can be verified.

Keys are `k` + zero-padded id; ids grow with time, so partition `p` (`days` day-like partitions, 20
unless a run says otherwise) holds a contiguous id range and the newest partitions hold the largest
ids — which is what "skewed" and "late" mean.

`late` is the late-arriving workload shared by the harness and `spark_bench.py`: D day partitions;
the batch is 95% updates of records in the newest H days and 5% inserts on the newest day.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PARTITIONS = 20
WORKLOADS = ("uniform", "skewed", "late", "insert", "delete")
SIZES = {"small": (100_000, 10_000), "medium": (1_000_000, 100_000), "large": (10_000_000, 1_000_000)}
LATE_HOT_DAYS = 2
LATE_INSERT_SHARE = 0.05


def keys_of(ids: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise("k", pc.utf8_lpad(pc.cast(pa.array(ids), pa.string()), 10, "0"), "")


def partition_of(ids: np.ndarray, rows: int, days: int = PARTITIONS) -> pa.Array:
    """Day partition of each id: contiguous id ranges, ids past the table's end on the newest day."""
    part = np.minimum(ids * days // max(rows, 1), days - 1)
    return pc.utf8_lpad(pc.cast(pa.array(part), pa.string()), 2, "0").cast(pa.string())


def first_id_of_day(day: int, rows: int, days: int) -> int:
    """The smallest id that `partition_of` puts on `day`."""
    return -(-day * rows // days)


def make_rows(ids: np.ndarray, rows: int, ts: int, rng: np.random.Generator, days: int = PARTITIONS) -> pa.Table:
    """Rows for `ids` (12 columns like a trip table); `fare` is random so each version is distinct."""
    n = len(ids)
    return pa.table(
        {
            "key": keys_of(ids),
            "ts": pa.array(np.full(n, ts, dtype=np.int64)),
            "part": partition_of(ids, rows, days),
            "fare": pa.array(rng.random(n) * 100),
            "tip": pa.array(rng.random(n) * 10),
            "rider": pc.binary_join_element_wise("rider-", pc.cast(pa.array(ids % 5000), pa.string()), ""),
            "driver": pc.binary_join_element_wise("driver-", pc.cast(pa.array(ids % 3000), pa.string()), ""),
            "distance_km": pa.array(rng.random(n).astype(np.float32) * 30),
            "passengers": pa.array(rng.integers(1, 6, n, dtype=np.int32)),
            "paid": pa.array(rng.random(n) < 0.9),
            "begin_lat": pa.array(rng.random(n) * 180 - 90),
            "begin_lon": pa.array(rng.random(n) * 360 - 180),
        }
    )


@dataclass(frozen=True)
class Expected:
    """What the table must hold after the write: row count, the sum of `ts` over every row (base rows
    carry 0, winning batch rows 2, losing duplicates 1: it counts exactly the rows holding the new
    version) and (ts, fare) of sampled keys; a key mapped to None must be absent."""

    rows: int
    ts_sum: int
    probes: dict[str, tuple[int, float] | None]


def _update_ids(workload: str, rows: int, n: int, rng: np.random.Generator, days: int) -> np.ndarray:
    if workload == "uniform":
        return rng.choice(rows, n, replace=False)
    # skewed: 90% of updates hit the newest 10% of partitions (the last 2 of 20).
    hot_start = rows - rows * max(days // 10, 1) // days
    n_hot = min(n * 9 // 10, rows - hot_start)
    hot = hot_start + rng.choice(rows - hot_start, n_hot, replace=False)
    cold = rng.choice(hot_start, n - n_hot, replace=False)
    return np.concatenate([hot, cold])


def make_batch(
    workload: str, rows: int, batch: int, seed: int = 7, days: int = PARTITIONS, hot_days: int = LATE_HOT_DAYS
) -> tuple[pa.Table, Expected]:
    """The batch for a workload against `make_base(rows, days)` and the state it must leave.

    uniform/skewed: half updates, half inserts, plus 5% in-batch duplicates with an older ts that
    must lose. late: 95% updates of records in the newest `hot_days` days, 5% inserts on the newest
    day. insert: only new keys. delete: 1% of the table's keys (`batch` is ignored)."""
    rng = np.random.default_rng(seed)
    probe = np.random.default_rng(seed + 1)
    if workload == "late":
        return _late_batch(rows, batch, days, hot_days, rng, probe)
    if workload == "delete":
        gone = rng.choice(rows, max(rows // 100, 1), replace=False)
        kept = np.setdiff1d(probe.choice(rows, 200, replace=False), gone)
        table = pa.table(
            {
                "key": keys_of(gone),
                "ts": pa.array(np.full(len(gone), 2, np.int64)),
                "part": partition_of(gone, rows, days),
            }
        )
        probes = {k: None for k in keys_of(gone[:200]).to_pylist()}
        probes.update(_untouched(kept, rows, days))
        return table, Expected(rows - len(gone), 0, probes)
    n_updates = 0 if workload == "insert" else batch // 2
    n_dups = 0 if workload == "insert" else batch // 20
    n_inserts = batch - n_updates - n_dups
    updates = make_rows(_update_ids(workload, rows, n_updates, rng, days), rows, 2, rng, days) if n_updates else None
    inserts = make_rows(np.arange(rows, rows + n_inserts), rows, 2, rng, days)
    parts = [inserts]
    if updates is not None:
        dups = make_rows(
            rng.choice(
                pc.cast(pc.utf8_slice_codeunits(updates["key"], 1), pa.int64()).to_numpy(), n_dups, replace=False
            ),
            rows,
            1,
            rng,
            days,
        )
        parts = [updates, inserts, dups]
    table = pa.concat_tables(parts)
    probes: dict[str, tuple[int, float] | None] = {}
    for part in parts[:2]:
        sample = part.take(pa.array(probe.choice(part.num_rows, min(200, part.num_rows), replace=False)))
        probes.update(zip(sample["key"].to_pylist(), zip(sample["ts"].to_pylist(), sample["fare"].to_pylist())))
    touched = set(probes)
    untouched = [i for i in probe.choice(rows, 300, replace=False) if keys_of(np.array([i]))[0].as_py() not in touched]
    if updates is not None:
        upd = set(updates["key"].to_pylist())
        untouched = [i for i in untouched if keys_of(np.array([i]))[0].as_py() not in upd]
    probes.update(_untouched(np.array(untouched[:200], dtype=np.int64), rows, days))
    return table, Expected(rows + n_inserts, 2 * (n_updates + n_inserts), probes)


def _late_batch(
    rows: int, batch: int, days: int, hot_days: int, rng: np.random.Generator, probe: np.random.Generator
) -> tuple[pa.Table, Expected]:
    """Late-arriving data: updates spread over the newest `hot_days` days, inserts on the newest."""
    n_inserts = round(batch * LATE_INSERT_SHARE)
    n_updates = batch - n_inserts
    hot_start = first_id_of_day(days - hot_days, rows, days)
    if n_updates > rows - hot_start:
        raise ValueError(
            f"{n_updates:,} updates do not fit the {rows - hot_start:,} rows of the newest {hot_days} days"
        )
    updated = hot_start + rng.choice(rows - hot_start, n_updates, replace=False)
    inserted = np.arange(rows, rows + n_inserts)
    table = pa.concat_tables([make_rows(updated, rows, 2, rng, days), make_rows(inserted, rows, 2, rng, days)])
    picks = [probe.choice(n_updates, min(200, n_updates), replace=False),
             n_updates + probe.choice(n_inserts, min(200, n_inserts), replace=False)]
    sample = table.take(pa.array(np.concatenate(picks)))
    probes: dict[str, tuple[int, float] | None] = dict(
        zip(sample["key"].to_pylist(), zip(sample["ts"].to_pylist(), sample["fare"].to_pylist()))
    )
    # Untouched keys, half of them in the hot days (they share files with the updated ones).
    candidates = np.concatenate([probe.choice(rows, 200), hot_start + probe.choice(rows - hot_start, 200)])
    probes.update(_untouched(np.setdiff1d(candidates, updated), rows, days))
    return table, Expected(rows + n_inserts, 2 * batch, probes)


def _untouched(ids: np.ndarray, rows: int, days: int = PARTITIONS) -> dict[str, tuple[int, float] | None]:
    """Untouched keys keep the base version: regenerate the base and look their fares up."""
    base = make_base(rows, days)
    picked = base.take(pa.array(ids))
    return dict(zip(picked["key"].to_pylist(), zip(picked["ts"].to_pylist(), picked["fare"].to_pylist())))


_BASE_CACHE: dict[tuple[int, int], pa.Table] = {}


def make_base(rows: int, days: int = PARTITIONS) -> pa.Table:
    """The initial table (ts 0), deterministic for a given size and number of days."""
    if (rows, days) not in _BASE_CACHE:
        _BASE_CACHE.clear()
        _BASE_CACHE[rows, days] = make_rows(np.arange(rows), rows, 0, np.random.default_rng(1), days)
    return _BASE_CACHE[rows, days]


def clear_base_cache() -> None:
    """Drop the cached base table (so it does not count in a write's memory)."""
    _BASE_CACHE.clear()


def dedup_latest(batch: pa.Table) -> pa.Table:
    """One row per key, the largest ts winning: what MERGE / ON CONFLICT / iceberg upsert require."""
    order = pc.sort_indices(batch, [("key", "ascending"), ("ts", "descending")])
    s = batch.take(order)
    keys = s["key"].combine_chunks()
    if len(keys) < 2:
        return s
    first = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))
    return s.filter(pa.concat_arrays([pa.array([True]), first]))


def verify(expected: Expected, count: int, ts_sum: int, found: pa.Table) -> list[str]:
    """Mismatches between the table a peer left and `expected`; `found` holds key, ts, fare of the
    probed keys that exist."""
    errors = []
    if count != expected.rows:
        errors.append(f"row count {count} != {expected.rows}")
    if ts_sum != expected.ts_sum:
        errors.append(f"sum of ts {ts_sum} != {expected.ts_sum}")
    got = {k: (t, f) for k, t, f in zip(found["key"].to_pylist(), found["ts"].to_pylist(), found["fare"].to_pylist())}
    for key, want in expected.probes.items():
        have = got.get(key)
        if have != want:
            errors.append(f"key {key}: {have} != {want}")
    return errors[:5]
