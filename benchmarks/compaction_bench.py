"""Merge-on-read after several deltacommits: its snapshot read against the read of the same table
compacted (at most 2x), and its compaction against the copy-on-write upsert that rewrites
the same files (at most 1.25x).

The tables are written through the real write path: 1M rows bulk-inserted (20 partitions, one
file group each), then `--commits` (5) uniform upserts of `--batch` (100K) rows each: half
updates of keys drawn uniformly from the base rows (so every base file group gets a log file per
deltacommit), half inserts of new keys (new file groups of the newest day). The copy-on-write
twin takes the same first `--commits - 1` upserts; its timed upsert is the last batch, which
rewrites the same 20 base file groups the compaction rewrites (at the same sizes).

Each timed figure is a fresh process on a fresh copy of the tables; per repeat the phases run in
turn (CoW upsert, MOR read with logs, compaction, MOR read compacted), so load falls on all alike;
the first `--warmup` repeat is not counted. Every run's row count and sum of `ts` are checked.

    python benchmarks/compaction_bench.py [--rows 1000000] [--batch 100000] [--commits 5] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import PARTITIONS, make_rows

OPTS = {"hoodie.parquet.small.file.limit": 0, "hoodie.clean.automatic": False, "hoodie.archive.automatic": False}


def batches(rows: int, batch: int, commits: int) -> list[pa.Table]:
    """The upserts: commit c (ts c + 1) updates batch/2 uniformly drawn base keys and inserts
    batch/2 new keys."""
    rng = np.random.default_rng(7)
    half = batch // 2
    out = []
    for c in range(commits):
        updated = rng.choice(rows, half, replace=False)
        inserted = np.arange(rows + c * (batch - half), rows + (c + 1) * (batch - half))
        out.append(make_rows(np.concatenate([updated, inserted]), rows, c + 1, rng, PARTITIONS))
    return out


def expected(rows: int, ups: list[pa.Table]) -> tuple[int, int]:
    """(row count, sum of ts) after the upserts: the last version of each key wins."""
    keys = pa.concat_arrays([u["key"].combine_chunks() for u in ups])
    ts = pa.concat_arrays([u["ts"].combine_chunks() for u in ups])
    latest = pa.table({"key": keys, "ts": ts}).group_by("key").aggregate([("ts", "max")])
    inserted = sum(u.num_rows // 2 for u in ups)  # the second half of each batch is new keys
    return rows + inserted, pc.sum(latest["ts_max"]).as_py()


def build(folder: Path, rows: int, batch: int, commits: int) -> tuple[Path, Path, Path, tuple[int, int]]:
    """(the copy-on-write table after commits - 1 upserts, the merge-on-read table after all of
    them, the last batch as parquet, the expected (rows, sum of ts) of the merge-on-read table)."""
    import upsertlake

    base = make_rows(np.arange(rows), rows, 0, np.random.default_rng(1), PARTITIONS)
    ups = batches(rows, batch, commits)
    tables = {}
    for kind in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        path = folder / kind.lower()
        t = upsertlake.create_table(path, name="bench", record_key="key", precombine_field="ts",
                                    partition_fields=["part"], table_type=kind)
        t.bulk_insert(base, OPTS)
        for u in ups if kind == "MERGE_ON_READ" else ups[:-1]:
            t.upsert(u, OPTS)
        tables[kind] = path
    last = folder / "last.parquet"
    pq.write_table(ups[-1], last)
    return tables["COPY_ON_WRITE"], tables["MERGE_ON_READ"], last, expected(rows, ups)


PHASES = {"cow": "cow upsert", "read": "mor snapshot read (logs)", "compact": "compaction",
          "read-compacted": "mor snapshot read (compacted)"}


def timed(phase: str, path: Path, batch: Path, want: tuple[int, int], py_spy: Path | None = None) -> float:
    """One run of `phase` in a fresh process, checked against `want` (rows, sum of ts) after the
    timed part; its seconds. `py_spy`: record the process's stacks (collapsed) into that file."""
    code = f"""
import sys, time, pyarrow.compute as pc, pyarrow.parquet as pq, upsertlake
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from preload import import_upsertlake
import_upsertlake()  # every phase's modules loaded before its timed call, alike
t = upsertlake.open_table({str(path)!r})
batch = pq.read_table({str(batch)!r})
start = time.perf_counter()
if {phase!r} == "cow":
    t.upsert(batch, {OPTS!r})
elif {phase!r} == "compact":
    r = t.compact()
    assert r.operations == {PARTITIONS}, r
else:
    read = t.read()
took = time.perf_counter() - start
if {phase!r} in ("cow", "compact"):
    read = upsertlake.open_table({str(path)!r}).read(columns=["ts"])
got = (read.num_rows, pc.sum(read["ts"]).as_py())
assert got == {want!r}, f"{{got}} != {want!r}"
print(took)
"""
    cmd = [sys.executable, "-c", code]
    if py_spy is not None:
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate", "500",
               "--nonblocking", "--output", str(py_spy), "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{phase} failed: {out.stderr.strip().splitlines()[-1:]}")
    return float(next(ln for ln in reversed(out.stdout.splitlines()) if ln.strip() and ln[0].isdigit()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--commits", type=int, default=5, help="deltacommits before the read and the compaction")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="repeats run first and not counted")
    parser.add_argument(
        "--py-spy", type=Path, help="after the timed runs, profile one run of each phase into this folder"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cow, mor, batch, want = build(root / "built", args.rows, args.batch, args.commits)
        logs = sum(1 for _, _, names in os.walk(mor) for n in names if ".log." in n)
        print(f"built: {args.rows:,} rows + {args.commits} upserts of {args.batch:,}; {logs} log files; "
              f"expect {want[0]:,} rows", flush=True)
        times: dict[str, list[float]] = {label: [] for label in PHASES.values()}

        def round_of(i: int, py_spy: Path | None = None) -> dict[str, float]:
            run = root / f"run{i}"
            shutil.copytree(cow, run / "cow")
            shutil.copytree(mor, run / "mor")
            took = {}
            for phase, label in PHASES.items():
                table = run / ("cow" if phase == "cow" else "mor")
                out = None if py_spy is None else py_spy / f"{phase}.txt"
                took[label] = timed(phase.removesuffix("-compacted"), table, batch, want, out)
            shutil.rmtree(run)
            return took

        for i in range(args.warmup + args.repeat):
            took = round_of(i)
            print(f"{'warm-up' if i < args.warmup else f'run {i - args.warmup + 1}'}: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in took.items()), flush=True)
            if i >= args.warmup:
                for k, v in took.items():
                    times[k].append(v)
        if args.py_spy:
            args.py_spy.mkdir(parents=True, exist_ok=True)
            round_of(-1, args.py_spy)
            print(f"py-spy stacks in {args.py_spy}")
    if not args.repeat:  # profiling only
        return
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:32s} median {med[k]:.3f} s  (min {min(v):.3f}, max {max(v):.3f})")
    print(f"compaction / CoW upsert = {med['compaction'] / med['cow upsert']:.2f} (goal <= 1.25); "
          f"snapshot read with logs / compacted = "
          f"{med['mor snapshot read (logs)'] / med['mor snapshot read (compacted)']:.2f} (goal <= 2)")


if __name__ == "__main__":
    main()
