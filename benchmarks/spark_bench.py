"""Spark benchmark: upserts on Spark local[2] in one warmed session, every peer warmed the same way.

Peers (benchmarks/peers.py), on the same data in the same session:
- upsertlake-spark: `upsertlake.spark.upsert`;
- upsertlake-spark-mor: the same on a merge-on-read table (updates appended as log files);
- spark-rewrite: plain PySpark, read the whole table, keep the newest row per key, write it all;
- spark-overwrite: plain PySpark, read only the days the batch touches and overwrite just those
  (spark.sql.sources.partitionOverwriteMode=dynamic): the best a user can do without a table format.

Workloads (benchmarks/workloads.py): `late` (D days; 95% updates in the newest H days, 5% inserts
on the newest day) and `uniform`. Each peer builds its table once (untimed); every run works on a
fresh copy of it (data files hard-linked), is verified (row count, sum of ts, sampled keys), and
the first runs of each peer (`--warmup`, 3 by default) are not counted: the JVM's JIT compilers
keep burning seconds of CPU per run for several runs, for every peer alike. Runs go round-robin over the peers, so
load from other jobs on the machine falls on all of them alike.

For every timed run the Spark event log gives the bytes of task results returned to the driver
and the time of each stage (`--profile` prints them for every timed run).

    python benchmarks/spark_bench.py --rows 2000000 --days 40 --workloads late uniform --repeat 3
    python benchmarks/spark_bench.py --rows 10000000 --days 40 --workloads late uniform --repeat 1
    python benchmarks/spark_bench.py --rows 10000000 --workloads uniform --index BLOOM \
        --peers upsertlake-spark spark-rewrite
    python benchmarks/spark_bench.py --rows 10000000 --workloads late --peers upsertlake-spark-mor spark-overwrite \
        spark-rewrite --hoodie hoodie.parquet.small.file.limit=0    # inserts to a new group: no slice rewritten
    python benchmarks/spark_bench.py --driver 1000000 5000000 --rows 5000000   # driver-side growth

`--driver N...`: one fresh process per batch size upserts N rows (uniform: half updates) with
upsertlake; it reports the bytes returned to the driver and the peak RSS of the Python process
during the write, which must not grow with N.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import pyarrow as pa
import pyarrow.parquet as pq
from peers import make_peer, spark_session, stop_spark
from runner import _files, _peak_rss_mb, _reset_peak_rss
from workloads import clear_base_cache, make_base, make_batch, verify

PEERS = ("upsertlake-spark", "upsertlake-spark-mor", "spark-rewrite", "spark-overwrite")
OURS = ("upsertlake-spark", "upsertlake-spark-mor")


def clone_tree(src: Path, dst: Path) -> None:
    """Copy a table: parquet data files are hard-linked (no peer rewrites a file in place), the
    rest (timeline, properties) is copied."""
    for dirpath, _, names in os.walk(src):
        target = dst / Path(dirpath).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for n in names:
            (os.link if n.endswith(".parquet") else shutil.copy2)(os.path.join(dirpath, n), target / n)


class EventLog:
    """The session's Spark event log, read from where the last call left off."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offset = 0

    def _file(self) -> Path:
        files = [f for f in self.folder.iterdir() if not f.name.startswith(".")]
        return max(files, key=lambda f: f.stat().st_mtime)

    def skip(self) -> None:
        self.offset = self._file().stat().st_size

    def since(self) -> dict[str, Any]:
        """Bytes of task results sent to the driver and each completed stage since the last call."""
        with self._file().open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        result_bytes, stages = 0, []
        for line in complete.splitlines():
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerTaskEnd":
                result_bytes += (event.get("Task Metrics") or {}).get("Result Size", 0)
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                took = (info.get("Completion Time", 0) - info.get("Submission Time", 0)) / 1000
                name = re.sub(r"/\S*/", "", info["Stage Name"])  # "toArrow at write.py:74", no local paths
                stages.append({"stage": name, "tasks": info["Number of Tasks"], "seconds": round(took, 3)})
        return {"result_bytes": result_bytes, "spark_stages": stages}


def session(events: Path) -> Any:
    events.mkdir(parents=True, exist_ok=True)
    return spark_session(
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.compress": "false",
            "spark.eventLog.dir": events.as_uri(),
        }
    )


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    log = EventLog(work / "events")
    session(work / "events")
    entries = []
    for workload in args.workloads:
        base = make_base(args.rows, args.days)
        batch, expected = make_batch(workload, args.rows, args.batch, days=args.days, hot_days=args.hot_days)
        ours = ({"hoodie.index.type": args.index} if args.index else {}) | dict(o.split("=", 1) for o in args.hoodie)
        peers = {name: make_peer(name, ours or None if name in OURS else None) for name in args.peers}
        for name, peer in peers.items():  # untimed builds, one seed table per peer
            peer.build(work / f"seed-{name}", base)
        del base
        clear_base_cache()
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in peers}
        for i in range(args.warmup + args.repeat):
            warm = i < args.warmup
            for name, peer in peers.items():
                table = work / f"run-{name}" / "table"
                shutil.rmtree(table.parent, ignore_errors=True)
                clone_tree(work / f"seed-{name}", table)
                log.skip()
                before = _files(table.parent)
                _reset_peak_rss()
                began = time.perf_counter()
                extra = peer.apply(table, batch, workload)
                seconds = time.perf_counter() - began
                peak = _peak_rss_mb()
                written = sum(size for f, (size, mt) in _files(table.parent).items() if before.get(f) != (size, mt))
                driver = log.since()
                count, ts_sum, found = peer.snapshot(table, list(expected.probes))
                errors = verify(expected, count, ts_sum, found)
                shown = f"{seconds:.2f}s, {driver['result_bytes']:,} result bytes" if not errors else f"WRONG {errors}"
                print(
                    f"  {workload:<8} {args.rows:>11,}+{args.batch:<9,} {name:<17} "
                    f"{'warm-up' if warm else f'run {i - args.warmup + 1}'}: {shown}",
                    flush=True,
                )
                if not warm and (errors or args.profile):
                    if extra.get("stages"):
                        print("      driver: " + ", ".join(f"{k} {v:.2f}s" for k, v in extra["stages"].items()))
                    for st in driver["spark_stages"]:
                        print(f"      {st['seconds']:7.2f}s {st['tasks']:4d} tasks  {st['stage']}")
                if not warm:
                    runs[name].append({"status": "WRONG" if errors else "ok", "errors": errors, "seconds": seconds,
                                       "bytes_written": written, "peak_rss_mb": peak, **driver, **extra})
        for name in peers:
            entries.append({"peer": name, "workload": workload, "rows": args.rows, "batch": args.batch,
                            "days": args.days, "runs": runs[name]})
        for name in peers:
            shutil.rmtree(work / f"seed-{name}", ignore_errors=True)
            shutil.rmtree(work / f"run-{name}", ignore_errors=True)
        summary = {n: statistics.median(r["seconds"] for r in runs[n]) for n in peers if runs[n]}
        print("  medians: " + ", ".join(f"{n} {s:.2f}s" for n, s in summary.items()), flush=True)
        for ours in (n for n in OURS if n in summary):
            print(
                f"  {ours}: "
                + ", ".join(f"{n} takes {s / summary[ours]:.2f}x its time" for n, s in summary.items() if n != ours),
                flush=True,
            )
    stop_spark()
    return {"peers": entries}


def driver_run(rows: int, batch_rows: int, days: int, work: Path) -> dict[str, Any]:
    """One upsert of `batch_rows` uniform rows in a fresh process: what reaches the driver."""
    import upsertlake

    log = EventLog(work / "events")
    spark = session(work / "events")
    base = make_base(rows, days)
    upsertlake.create_table(work / "t", name="bench", record_key="key", precombine_field="ts",
                            partition_fields=["part"]).bulk_insert(base)
    batch, expected = make_batch("uniform", rows, batch_rows, days=days)
    pq.write_table(batch, work / "batch.parquet")
    del base, batch
    clear_base_cache()
    gc.collect()
    pa.default_memory_pool().release_unused()
    spark.range(1).count()  # the session's first job, untimed
    log.skip()
    import upsertlake.spark as uls

    _reset_peak_rss()
    began = time.perf_counter()
    uls.upsert(spark.read.parquet(str(work / "batch.parquet")), str(work / "t"))
    seconds = time.perf_counter() - began
    peak = _peak_rss_mb()
    driver = log.since()
    stop_spark()
    t = upsertlake.open_table(work / "t").read(columns=["key", "ts", "fare"])
    import pyarrow.compute as pc

    found = t.filter(pc.is_in(t["key"], value_set=pa.array(list(expected.probes))))
    errors = verify(expected, t.num_rows, pc.sum(t["ts"]).as_py(), found)
    return {"rows": rows, "batch": batch_rows, "status": "WRONG" if errors else "ok", "errors": errors,
            "seconds": seconds, "peak_rss_mb": peak, "result_bytes": driver["result_bytes"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=40)
    ap.add_argument("--hot-days", type=int, default=2)
    ap.add_argument("--workloads", nargs="+", choices=("late", "uniform"), default=["late", "uniform"])
    ap.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per peer, after the warm-up runs")
    ap.add_argument(
        "--warmup", type=int, default=3, help="untimed runs per peer first (the JVM's JIT keeps compiling for several)"
    )
    ap.add_argument("--profile", action="store_true", help="print the Spark stages of every timed run")
    ap.add_argument(
        "--driver", nargs="+", type=int, metavar="BATCH_ROWS", help="driver-side series (fresh process each)"
    )
    ap.add_argument("--driver-run", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--index", help="upsertlake's hoodie.index.type (default: the table's, SIMPLE)")
    ap.add_argument("--hoodie", nargs="*", default=[], metavar="KEY=VALUE",
                    help="write options of the upsertlake peers, e.g. hoodie.parquet.small.file.limit=0")
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    try:
        if args.driver_run:
            print("RESULT " + json.dumps(driver_run(args.rows, args.driver_run, args.days, work)))
            return
        from harness import tree_commit

        doc: dict[str, Any] = {
            "size": f"spark-{args.rows / 1e6:g}M",
            "repeat": args.repeat,
            "timeout": 0,
            "cpus": os.cpu_count(),
            "tree": tree_commit(),
            "skipped": {},
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "session": f"one warmed Spark local[2] session; {args.warmup} untimed warm-up run(s) per peer",
            "upsertlake_index": args.index or "SIMPLE",
            "upsertlake_options": args.hoodie,
            "command": " ".join(["python", "benchmarks/spark_bench.py", *sys.argv[1:]]),
        }
        if args.driver:
            doc["driver"] = []
            for n in args.driver:
                cmd = [
                    sys.executable,
                    __file__,
                    "--driver-run",
                    str(n),
                    "--rows",
                    str(args.rows),
                    "--days",
                    str(args.days),
                ]
                out = subprocess.run(cmd, capture_output=True, text=True).stdout
                line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
                r = (
                    json.loads(line[7:])
                    if line
                    else {"rows": args.rows, "batch": n, "status": "error", "errors": ["no result"]}
                )
                print(f"  driver: {n:,}-row batch into {args.rows:,}: {r}", flush=True)
                doc["driver"].append(r)
        else:
            doc.update(bench(args, work))
        args.out.mkdir(parents=True, exist_ok=True)
        what = "driver" if args.driver else "peers"
        workloads = "" if args.driver else "-" + "-".join(args.workloads)
        label = "-" + args.label if args.label else ""
        name = f"results-spark-{what}-{args.rows / 1e6:g}M{workloads}{label}.json"
        (args.out / name).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.out / name}")
        from report import write_report

        write_report(args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
